"""Fault injection: links and files in the way of what a run, a store or a tool writes, and what the
commands name when they refuse them.

Each ends as test_faults_input's rows do: exit code 1, one line on stderr naming the file or flag and
what was expected, no traceback, and no file outside the command's own written to.
"""

import pytest
from support import run_repro
from test_faults_input import CONFIG, _calibration, _write


pytestmark = pytest.mark.fault


def _pecan_run(ctx_dir, out):
    return ["pecan", "run", "--config", str(CONFIG), "--experiment", "Getting_started", "--mode", "short",
            "--calibration", _write(ctx_dir / "cal.json", _calibration("resnet")), "--out", str(out)]


def test_a_run_directory_whose_traces_link_elsewhere_is_refused(tmp_path, monkeypatch, capsys):
    """`repro pecan run --out DIR` where DIR/traces is a symbolic link to another directory: the run's
    trace was moved through it, replacing the file of that name there (exit 0)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "Getting_started-short.json").write_text("mine\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "traces").symlink_to("../elsewhere")
    code, out, err = run_repro(_pecan_run(tmp_path, "run"), capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: run directory run: run/traces is a symbolic link; expected the traces/ directory "
                   "a run writes (or nothing): move it, or name another run directory\n")
    assert (tmp_path / "elsewhere" / "Getting_started-short.json").read_text() == "mine\n"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["traces"]


@pytest.mark.parametrize("key", ["base_path", "profile_output_directory"])
def test_a_tool_config_path_with_a_nul_byte_is_named(key, tmp_path, monkeypatch, capsys):
    """A .carml_config.yml whose micro18 path holds a NUL byte ("\\0x", YAML's escape): `trims-tools
    download assets` ended in a ValueError traceback (embedded null byte) from the directory it made."""
    from repro.trims.originals import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CARML_CONFIG_FILE", raising=False)
    (tmp_path / ".carml_config.yml").write_text(f'micro18:\n  {key}: "\\0x"\n')
    code, out, err = run_repro(["download", "assets"], capsys, main=main)
    assert (code, out) == (1, "")
    assert err == (f"trims-tools: error: {tmp_path}/.carml_config.yml: micro18.{key}: expected a path (a string "
                   "without NUL bytes), got '\\x00x'\n")


@pytest.mark.parametrize("key,yaml_text", [
    ("trace_store", 'trace_store: "a\\0b"'),
    ("trims.base_path", 'trims: {base_path: "a\\0b"}'),
    ("trims.asset_store", 'trims: {asset_store: "gs://b\\0c"}'),
], ids=["trace-store", "base-path", "asset-store"])
def test_a_configured_path_with_a_nul_byte_is_named(key, yaml_text, tmp_path, monkeypatch, capsys):
    """`repro config check` (and the workflow) with a path key holding a NUL byte: trace_store ended in a
    ValueError traceback (embedded null byte) while resolving it; the others passed the check."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml_text + "\n")
    code, out, err = run_repro(["config", "check", "--base", CONFIG, "c.yaml"], capsys)
    value = "'gs://b\\x00c'" if key == "trims.asset_store" else "'a\\x00b'"
    assert (code, out) == (1, "")
    assert err == f"repro: error: {CONFIG} + c.yaml: {key}: {value} holds a NUL byte; expected a path\n"


def _nul_settings(tmp_path):
    return '{"backend": "local", "trace_store": "a\\u0000b", "pecan": {"engine": "model"}}'


def _nul_state(tmp_path):
    (tmp_path / "state.json").write_text('{"backend": "local", "trace_store": "a\\u0000b"}\n')
    return "state.json"


def _nul_receipt(tmp_path):
    (tmp_path / "upload.json").write_text('{"store": "a\\u0000b", "objects": [{"key": "traces/e/m/t.json", '
                                          '"sha256": "00"}]}\n')
    return "upload.json"


@pytest.mark.parametrize("argv,message", [
    (lambda p: ["cluster", "start", "--settings", _nul_settings(p), "--state", "s.json"],
     "--settings: trace_store: 'a\\x00b' holds a NUL byte; expected a path"),
    (lambda p: ["trims", "store", "start", "--settings", '{"base_path": "a\\u0000b", "server": {"memory_mb": 50, '
                '"eviction": "lru", "device": "cpu"}}', "--state", "s.json"],
     "--settings: base_path: 'a\\x00b' holds a NUL byte; expected a path"),
    (lambda p: ["cluster", "status", "--state", _nul_state(p)],
     "state.json: trace_store: expected a directory or gs://bucket/prefix, got 'a\\x00b'; run cluster start again"),
    (lambda p: ["trace", "download", _nul_receipt(p), "-o", "out"],
     "upload.json: store: expected the directory or gs://bucket/prefix the run uploaded to, got 'a\\x00b'"),
], ids=["cluster-start-settings", "trims-store-settings", "cluster-state", "upload-receipt"])
def test_a_path_with_a_nul_byte_in_settings_or_a_state_is_named(argv, message, tmp_path, monkeypatch, capsys):
    """A trace store or base path holding a NUL byte ("\\u0000" in JSON) in --settings, a cluster state or
    a run's upload receipt: each ended in a ValueError traceback (embedded null byte)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(argv(tmp_path), capsys)
    assert (code, out, err) == (1, "", f"repro: error: {message}\n")
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("files", [None, ["/dev/zero"] * 2, ["../elsewhere.jpg"] * 2],
                         ids=["no-files", "device", "outside"])
def test_a_data_set_manifest_that_is_not_this_data_sets_is_refused(files, tf, tmp_path):
    """The tf.data engine's data set, <data>/resnet-2-seed0/manifest.json, where it lists no files or
    files that are not the images beside it: it was used as it was, a KeyError traceback where it
    lacked a key, and /dev/zero (or a FIFO) read whole by every element, filling the memory (hanging)."""
    import json

    from repro.errors import ReproError
    from repro.pecan.tfdata import ops

    good = ops.write_data("resnet", 2, tmp_path)
    manifest = tmp_path / "resnet-2-seed0" / "manifest.json"
    manifest.write_text(json.dumps({} if files is None else {**good, "files": files}))
    with pytest.raises(ReproError) as raised:
        ops.write_data("resnet", 2, tmp_path)
    directory = tmp_path.resolve() / "resnet-2-seed0"
    assert str(raised.value) == (f"{manifest}: not the manifest of 2 images of pipeline 'resnet' (seed 0), each a "
                                 f"file in {directory} with its checksum; remove {directory} to write the data set anew")


def test_a_linked_store_log_does_not_take_the_stores_output(tmp_path, monkeypatch, capsys):
    """`repro trims store start --state DIR/state.json` where DIR/trims-server.log, the store's log, is a
    symbolic link: the store and its watchdog appended their output to the file it named (anywhere)."""
    import json

    from repro.trims import service

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "trims-server.log").symlink_to("../notes.txt")
    settings = {"base_path": "models", "server": {"eviction": "lru", "memory_mb": 50, "device": "cpu"}}
    try:
        code, out, err = run_repro(["trims", "store", "start", "--settings", json.dumps(settings),
                                    "--state", "state/state.json"], capsys)
    finally:
        stopped = service.stop(tmp_path)  # started before: stopped here
    assert (code, out, stopped) == (1, "", False)
    assert err == ("repro: error: state/trims-server.log: is a symbolic link; expected a regular file or a new path "
                   "to write the output to\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / "state" / "state.json").exists()


def test_a_linked_remote_worker_log_does_not_empty_the_file_it_names(tmp_path, capsys):
    """`python -m repro.pecan.tfdata.remote start --dir D ...`, what the accelerator host runs over ssh on
    a worker host, where D/worker-N.log is a symbolic link: the log was opened for writing through it,
    emptying the file it named, and the worker started."""
    from repro.pecan.tfdata.remote import main

    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "worker-0.log").symlink_to("../notes.txt")
    code = main(["start", "--dir", str(tmp_path / "d"), "--dispatcher", "localhost:1", "--host", "localhost",
                 "--threads", "1", "--slot", "0", "--number", "0"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == (f"error: {tmp_path}/d/worker-0.log: is a symbolic link; expected a regular file or a new path to "
                   "write the output to\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
