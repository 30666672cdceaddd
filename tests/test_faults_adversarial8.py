"""Fault injection: hostile inputs, state files and environments given to repro's and trims-tools'
commands, each found by trying them as a careless or hostile user would.

Each ends in one line naming the file, key or flag and what was expected, a non-zero exit, nothing
outside the command's own files written to or deleted, and no unbounded read, wait or process signalled.
"""

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from support import BIN, REPO, path_env, run_forked, run_repro
from test_faults_input import _calibration


pytestmark = pytest.mark.fault


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
@pytest.mark.parametrize("content, said", [
    ([], "expected a JSON object (a service account or user credentials JSON file), got an array"),
    (None, "expected a JSON object (a service account or user credentials JSON file), got null"),
    ({"type": "impersonated_service_account", "source_credentials": [],
      "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/x:generateAccessToken"},
     "impersonated_service_account: source_credentials: expected a JSON object (the credentials that impersonate), "
     "got an array"),
    ({"type": "impersonated_service_account"},
     "impersonated_service_account: source_credentials: expected a JSON object (the credentials that impersonate), "
     "got nothing"),
    ({"type": "impersonated_service_account", "source_credentials": {"type": "authorized_user", "client_id": "a",
                                                                      "client_secret": "b", "refresh_token": "c"}},
     "impersonated_service_account: service_account_impersonation_url: expected a string (the URL that makes its "
     "tokens), got nothing"),
    ({"type": "external_account", "audience": "a", "token_url": "https://sts.googleapis.com/v1/token",
      "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "credential_source": {"file": "t", "format": "x"}},
     "external_account: credential_source.format: expected a JSON object (how the subject token is read), got a "
     "string"),
    ({"type": "external_account", "audience": "a", "token_url": "https://sts.googleapis.com/v1/token",
      "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "credential_source": "file"},
     "external_account: credential_source: expected a JSON object (where the subject token comes from), got a "
     "string"),
])
def test_credential_files_of_another_shape_are_named(content, said, tmp_path):
    """GOOGLE_APPLICATION_CREDENTIALS naming a JSON array, null, or an impersonated or external account
    whose source_credentials or credential_source is not an object (or, impersonating, is not there):
    `repro doctor --profile P` and `repro trace download` (a gs:// store) ended in an AttributeError
    traceback from google-auth, then in its text; the key is named instead."""
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text("default-storage-provider: gcs\n")
    (tmp_path / "upload.json").write_text('{"store": "gs://bucket/x", "objects": [{"key": "a/t.json", "sha256": "0"}]}')
    (tmp_path / "key.json").write_text(json.dumps(content))
    env = {"GOOGLE_APPLICATION_CREDENTIALS": "key.json", "STORAGE_EMULATOR_HOST": ""}
    code, out, err = run_forked(["doctor", "--profile", "profile"], tmp_path, timeout=60, env=env)
    assert (code, out, err) == (1, "", f"repro: error: profile/config.yaml: GOOGLE_APPLICATION_CREDENTIALS key.json: "
                                       f"{said}\n")
    code, out, err = run_forked(["trace", "download", "upload.json", "-o", "traces"], tmp_path, timeout=60, env=env)
    assert (code, out, err) == (1, "", f"repro: error: GOOGLE_APPLICATION_CREDENTIALS key.json: {said}\n")
    assert not (tmp_path / "traces").exists()


class _SftpLike:
    """What the ssh backend's fetch uses of a fabric connection, over a local directory standing for the
    accelerator host: get opens the local path it is given and writes to it, as paramiko's does."""

    def __init__(self, remote):
        self.remote = remote

    def sftp(self):
        return self

    def listdir(self, path):
        return sorted(p.name for p in Path(path).iterdir())

    def get(self, remote, local):
        with open(local, "wb") as out:  # paramiko: the local file first, then the remote one
            out.write(Path(remote).read_bytes())


def test_the_ssh_backend_fetches_no_run_file_through_a_symbolic_link(tmp_path):
    """`repro cluster run` on the ssh backend (by hand, --run-dir D) where D/run.log and D/metrics.json
    are symbolic links to files of the user's: the run's log and metrics were written through them,
    over those files (paramiko's get opens the path it is given); the local backend replaces the links."""
    from repro.backends.ssh import _fetch
    from repro.errors import ReproError

    remote = tmp_path / "remote"
    (remote / "traces").mkdir(parents=True)
    for name in ("run.log", "metrics.json", "traces/t.json"):
        (remote / name).write_text("the run's\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("run.log", "metrics.json"):
        (tmp_path / f"user-{name}").write_text("the user's\n")
        (run_dir / name).symlink_to(tmp_path / f"user-{name}")
    with pytest.raises(ReproError, match=f"^{run_dir / 'run.log'}: is a symbolic link; expected a regular file"):
        _fetch(_SftpLike(remote), remote, run_dir)
    with pytest.raises(ReproError, match="is a symbolic link"):
        _fetch(_SftpLike(remote), remote, run_dir, optional=True)  # after a failed run: its log alone
    assert [(tmp_path / f"user-{name}").read_text() for name in ("run.log", "metrics.json")] == ["the user's\n"] * 2
    for name in ("run.log", "metrics.json"):
        (run_dir / name).unlink()
    _fetch(_SftpLike(remote), remote, run_dir)
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == [
        "metrics.json", "run.log", "traces", "traces/t.json"]
    (remote / "metrics.json").unlink()
    with pytest.raises(ReproError, match="metrics.json missing on the accelerator host after the run"):
        _fetch(_SftpLike(remote), remote, tmp_path / "second")
    assert not (tmp_path / "second" / "metrics.json").exists()


def _ssh_state(directory, known_hosts, key_file):
    """An ssh backend's cluster state whose one host answers nowhere (port 1 of loopback)."""
    host = {"name": "accel", "address": "127.0.0.1", "port": 1, "user": "u", "key_file": str(key_file)}
    ssh = {"known_hosts": str(known_hosts), "connect_timeout_s": 5, "accept_new_host_keys": False,
           "hosts": {"accelerator": host}, "start_commands": {}, "stop_commands": {}, "checks": [],
           "run": {"python": "python3", "remote_dir": "/tmp/repro-runs", "env": {"EPOCHS": "{epochs}"},
                   "command": "{python} -m repro.cli pecan run --settings {settings} --experiment {experiment} "
                              "--mode {mode} --calibration {calibration} --out {out} --backend ssh"}}
    (directory / "state.json").write_text(json.dumps({"backend": "ssh", "ssh": ssh, "trace_store": "store"}))


@pytest.mark.skipif(importlib.util.find_spec("fabric") is None, reason="needs the ssh extra")
@pytest.mark.parametrize("kind", ["known_hosts-zero", "known_hosts-fifo", "key_file-zero", "key_file-sparse"])
def test_ssh_files_paramiko_reads_whole_are_bounded_and_named(kind, tmp_path):
    """ssh.known_hosts or a host's key_file (in a config, or the cluster state cluster start wrote) that is
    /dev/zero, a FIFO or a sparse file of gigabytes: `repro cluster status` (and every ssh connection)
    filled the memory until a MemoryError traceback, or waited forever on the FIFO, as paramiko read it
    whole (known_hosts before connecting, the key file once the host answered). Now refused before
    connecting, naming the file."""
    what, form = kind.split("-")
    path = {"zero": "/dev/zero", "fifo": tmp_path / "fifo", "sparse": tmp_path / "sparse"}[form]
    if form == "fifo":
        os.mkfifo(path)
    if form == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(2 << 30)
    (tmp_path / "key").write_text("not a key\n")
    (tmp_path / "known_hosts").write_text("")
    _ssh_state(tmp_path, path if what == "known_hosts" else tmp_path / "known_hosts",
               path if what == "key_file" else tmp_path / "key")
    code, out, err = run_forked(["cluster", "status", "--state", "state.json"], tmp_path, timeout=60, growth=512 << 20)
    said = {"zero": "is a character device; expected a regular file", "fifo": "is a FIFO; expected a regular file",
            "sparse": "larger than 1 MiB; expected a private key file"}[form]
    named = f"ssh.known_hosts {path}" if what == "known_hosts" else f"accel (u@127.0.0.1:1): key_file {path}"
    assert (code, err) == (1, "repro: error: cluster status: 1 check(s) FAILED: accel (u@127.0.0.1:1) reachable\n")
    assert out.startswith(f"[FAILED] accel (u@127.0.0.1:1) reachable: {named}: {said}")


@pytest.mark.skipif(importlib.util.find_spec("fabric") is None, reason="needs the ssh extra")
@pytest.mark.parametrize("key, value, said", [
    (("run", "env"), {"X": "{0}"}, "ssh.run.env.X: unknown placeholder {0} in '{0}'; expected some of {autoorder}, "
                                   "{epochs}, {experiment}, {local_workers}, {mode}"),
    (("run", "env"), "x", "ssh.run.env: 'x' is not of type 'object'"),
    (("run", "command"), 5, "ssh.run.command: 5 is not of type 'string'"),
    (("hosts", "accelerator"), [], "ssh.hosts.accelerator: [] is not of type 'object'"),
])
def test_an_ssh_cluster_state_is_checked_as_its_config_was(config, key, value, said, tmp_path):
    """`repro cluster run --state S` where S, the ssh backend's state that cluster start wrote, was edited
    by hand (a run command or environment value that is no string or names an unknown placeholder, an
    accelerator that is a list): an IndexError or AttributeError traceback, once the run was prepared."""
    from repro.rulesettings import run_settings

    _ssh_state(tmp_path, tmp_path / "known_hosts", tmp_path / "key")
    state = json.loads((tmp_path / "state.json").read_text())
    state["ssh"][key[0]] = {**state["ssh"].get(key[0], {}), key[1]: value}
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "calibration.json").write_text("{}")
    settings = json.dumps(run_settings(config, "Getting_started", "short"))
    code, out, err = run_forked(["cluster", "run", "--state", "state.json", "--settings", settings, "--experiment",
                                 "Getting_started", "--mode", "short", "--calibration", "calibration.json",
                                 "--run-dir", "run", "--receipt", "run/upload.json"], tmp_path, timeout=60)
    assert (code, out, err) == (1, "", f"repro: error: state.json: {said}; run cluster start again\n")
    assert not (tmp_path / "run").exists()


def test_a_store_start_that_cannot_make_its_model_directory_stops_no_running_store(tmp_path, monkeypatch, capsys):
    """`repro trims store start` (or `trims store status`, from a state file edited by hand) with settings
    whose base_path is /dev/null or lies under a file, while this directory's store runs: the running
    store was stopped (its settings differ), then the start failed making the directory, and no store ran."""
    from repro.processes import matches
    from repro.trims import service

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    settings = {"base_path": "models", "server": {"eviction": "lru", "memory_mb": 50, "device": "cpu"}}
    try:
        code, _, _ = run_repro(["trims", "store", "start", "--settings", json.dumps(settings), "--state", "st.json"],
                               capsys)
        running = json.loads((tmp_path / "st.json").read_text())["process"]
        assert code == 0 and matches(running)
        for base in ("/dev/null", "st.json/models"):
            code, out, err = run_repro(["trims", "store", "start", "--settings", json.dumps({**settings, "base_path": base}),
                                        "--state", "other.json"], capsys)
            blocker = base.split("/models")[0]
            assert (code, out, err) == (1, "", f"repro: error: --settings base_path {base}: {blocker} is not a directory; "
                                               "expected a directory of models\n")
            assert matches(running)
    finally:
        assert service.stop(tmp_path)
    assert not (tmp_path / "other.json").exists()


@pytest.mark.parametrize("title", ["$\\frac{$", "$" + "{" * 500 + "x" + "}" * 500 + "$", "$$"])
def test_a_title_or_caption_with_dollar_signs_is_drawn_as_given(title, tmp_path, monkeypatch, capsys):
    """`repro pecan plot -t 1 2 3 -m '$\\frac{$'` (and `pecan figure` with a calibration whose CPU model,
    drawn in the caption, holds `$$`): matplotlib read the text between dollar signs as a mathtext
    formula, and its parser ended in a ValueError or RecursionError traceback."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["pecan", "plot", "-t", "1", "2", "3", "-m", title, "-o", "fig"], capsys)
    assert (code, out, err) == (0, "fig.pdf, fig.png: collocated, Cachew, Pecan\n", "")
    from repro.plots import plot_costs

    columns = {"mode": "collocated", "repeats": "1"}
    for name, value in (("tpu_cost", "1"), ("worker_cost", "0"), ("total_cost", "1")):
        columns.update({name: value, f"{name}_mean": value, f"{name}_ci_low": value, f"{name}_ci_high": value})
    (tmp_path / "table.csv").write_text(",".join(columns) + "\n" + ",".join(columns.values()) + "\n")
    plot_costs(tmp_path / "table.csv", [tmp_path / "cap.png"], "t", f"measured on {title}",
               {"width_in": 5, "height_in": 3.6, "dpi": 50, "font_size": 9})
    assert (tmp_path / "cap.png").stat().st_size > 0


@pytest.mark.parametrize("command, name, content", [
    (["trace", "combine", "t.json"], "combined.json", "[1, 2, 3]\n"),
    (["trace", "combine", "t.json"], "combined.json", '{"traceEvents": [{"ph": "X", "name": "mine", "ts": 0, "dur": 1}]}'),
    (["trace", "summarize", "t.json"], "summary.json", '[{"note": "mine"}]\n'),
    (["trace", "summarize", "t.json"], "summary.json", '{"traces": ["mine"]}\n'),
    (["trace", "summarize", "--each-directory", "."], "summary.json", '[{"note": "mine"}]\n'),
])
def test_a_default_output_replaces_only_what_such_a_run_wrote(command, name, content, tmp_path, monkeypatch, capsys):
    """`repro trace combine t.json` (and `trims-tools trace combine`) without -o, where ./combined.json is a
    JSON array or a Chrome trace of the user's, and `repro trace summarize` where summary.json is a JSON
    list of objects or an object with a 'traces' list: the file was taken for an earlier run's output
    and replaced."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}')
    (tmp_path / name).write_text(content)
    code, out, err = run_repro(command, capsys)
    what = "a combined trace" if name == "combined.json" else "a trace summary"
    assert (code, out, err) == (1, "", f"repro: error: -o/--output {name}: holds a file that is not {what}; name the "
                                       "output with -o\n")
    assert (tmp_path / name).read_text() == content
    (tmp_path / name).unlink()
    for _ in range(2):  # what it wrote is its own: replaced by the next run
        code, out, err = run_repro(command, capsys)
        assert (code, err) == (0, "")


@pytest.mark.parametrize("command, basename", [
    (["pecan", "plot", "-t", "1", "2", "3"], "plots/ResNet50_v2-8"),
    (["pecan", "plot", "-e", "autoorder", "--table", "t.csv"], "plots/AutoOrder_Cost"),
])
@pytest.mark.parametrize("kind", ["pdf", "png"])
def test_the_plots_default_output_replaces_only_a_figure_it_drew(command, basename, kind, tmp_path, monkeypatch,
                                                                  capsys):
    """`repro pecan plot -t 1 2 3` without -o, where plots/ResNet50_v2-8.pdf (or .png) is the user's own
    figure: it was drawn over, as fig8.py does."""
    from repro.pecan.comparisons import COLUMNS, OPTIONS

    monkeypatch.chdir(tmp_path)
    rows = [",".join(["ResNet50_v2-8", "local", mode] + ["1"] * (len(COLUMNS) - 3)) for mode in OPTIONS["autoorder"]["modes"]]
    (tmp_path / "t.csv").write_text("\n".join([",".join(COLUMNS), *rows, ""]))
    (tmp_path / "plots").mkdir()
    mine = tmp_path / f"{basename}.{kind}"
    mine.write_bytes(b"\x89PNG my own figure" if kind == "png" else b"%PDF-1.4 my thesis figure")
    code, out, err = run_repro(command, capsys)
    assert (code, out, err) == (1, "", f"repro: error: -o/--out_file {basename}.{kind}: holds a file that is not a "
                                       "figure this command drew; name the output with -o\n")
    assert mine.read_bytes().endswith(b"figure")
    mine.unlink()
    for _ in range(2):  # what it drew is its own: replaced by the next run
        code, out, err = run_repro(command, capsys)
        assert (code, err) == (0, "")
        assert (tmp_path / f"{basename}.pdf").stat().st_size > 1000


@pytest.mark.parametrize("closed", [">&-", "<&- >&- 2>&-"])
def test_a_command_run_with_its_standard_streams_closed_writes_its_output_file_and_no_traceback(closed, tmp_path):
    """`repro pecan costs LOG >&-` (standard output closed by the shell): TypeError traceback from the
    CSV writer handed sys.stdout, None. With -o, a file opened while descriptor 1 was closed took its
    number, so output meant for standard output could land in it."""
    import subprocess

    log = REPO / "tests" / "fixtures" / "pecan-logs" / "resnet_colloc.log"
    for out in ([], ["-o", str(tmp_path / "costs.csv")]):
        command = " ".join([str(BIN / "repro"), "pecan", "costs", "--model", "resnet", str(log), *out, closed])
        done = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, env=path_env(),
                              timeout=60)
        assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "costs.csv").read_text().splitlines()[0].startswith("experiment,model,tpu_cost")


@pytest.fixture(scope="module")
def oversized_traces(tmp_path_factory):
    """Traces of 200 MiB, over the reader's whole-file size: one whose single event is that large, one
    whose metadata beside the event list is."""
    directory = tmp_path_factory.mktemp("oversized")
    big = b"x" * (200 << 20)
    event = directory / "event.json"
    event.write_bytes(b'[{"name": "' + big + b'", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]')
    metadata = directory / "metadata.json"
    metadata.write_bytes(b'{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1}], '
                         b'"otherData": {"note": "' + big + b'"}}')
    # as orjson writes it (no spaces): its event list is found without decoding the metadata
    compact = directory / "compact.json"
    compact.write_bytes(b'{"traceEvents":[{"name":"a","ph":"X","ts":0,"dur":1,"pid":1,"tid":1}],"otherData":{"note":"'
                        + big[: 70 << 20] + b'"}}')
    return {"event": (event, "holds an event, or a space between events, larger than 64 MiB"),
            "metadata": (metadata, "its keys beside 'traceEvents' are larger than 64 MiB"),
            "compact metadata": (compact, "its keys beside 'traceEvents' are larger than 64 MiB")}


@pytest.mark.large
@pytest.mark.parametrize("part", ["event", "metadata", "compact metadata"])
@pytest.mark.parametrize("command", [["trace", "validate"], ["trace", "summarize", "-o", "s.json"],
                                     ["trace", "combine", "-o", "c.json"]], ids=["validate", "summarize", "combine"])
def test_an_event_or_metadata_of_hundreds_of_megabytes_is_refused_naming_the_trace(command, part, oversized_traces,
                                                                                     tmp_path):
    """A trace whose one event's name is 512 MiB: MemoryError traceback from the chunk reader's copy
    of its slice under a 2 GB address space. Metadata of 70 MiB written as orjson writes it passed,
    and was copied into the output."""
    path, reason = oversized_traces[part]
    code, out, err = run_forked([*command[:2], path, *command[2:]], tmp_path, timeout=120, growth=768 << 20)
    assert code == 1 and "Traceback" not in err and f"{path}: {reason}" in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.large
@pytest.mark.parametrize("command", [["trace", "summarize", "-o", "s.json"], ["trace", "combine", "-o", "c.json"]],
                         ids=["summarize", "combine"])
def test_the_metadata_copied_from_many_traces_is_bounded_as_one_traces(command, tmp_path):
    """Forty traces of 60 MiB metadata each, each within the bound: `trace combine` took 3 GB and was
    killed, and wrote a combined trace whose metadata no reader takes."""
    traces = []
    for index in range(2):
        traces.append(tmp_path / f"t{index}.json")
        traces[-1].write_bytes(b'{"traceEvents":[{"name":"a","ph":"X","ts":0,"dur":1,"pid":1,"tid":1}],'
                               b'"otherData":{"note":"' + b"xy"[index:index + 1] * (40 << 20) + b'"}}')
    # room for both traces read whole (orjson crashes, rather than raise, where it runs out of memory)
    code, out, err = run_forked([*command[:2], *map(str, traces), *command[2:]], tmp_path, timeout=120,
                                growth=1536 << 20)
    what = "the combined trace's metadata" if command[1] == "combine" else "the summary's copy of the traces' otherData"
    assert (code, err) == (1, f"repro: error: {traces[1]}: its metadata, with that of the traces before it, makes "
                              f"{what} larger than 64 MiB; expected traces whose metadata (displayTimeUnit, "
                              "otherData) is kilobytes\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t0.json", "t1.json"]


@pytest.mark.parametrize("shape", [b"{},", b"[],", b"1.5,", b'"ab",', b'{"k": [0]},'])
def test_parsed_size_bounds_the_memory_a_json_file_takes_parsed(shape):
    import tracemalloc

    from repro.fsutil import parsed_size

    data = b"[" + shape * 100000 + shape.rstrip(b",") + b"]"
    tracemalloc.start()
    value = json.loads(data)
    taken = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del value
    assert taken <= parsed_size(data) <= 5 * taken


@pytest.mark.large
@pytest.mark.parametrize("command", [
    ["pecan", "estimate", "--calibration", "objects.json", "--config", REPO / "config" / "config.yaml"],
    ["cluster", "status", "--state", "objects.json"],
    ["trims", "store", "status", "--state", "objects.json", "--expect", "0", "-o", "x.json"],
    ["trace", "download", "-o", "d", "objects.json"],
], ids=["calibration", "cluster-state", "store-state", "receipt"])
def test_a_json_input_of_millions_of_empty_objects_is_refused_before_it_is_parsed(command, tmp_path):
    """A 250 MiB JSON file (under the 256 MiB read limit) of 87 million `{}`: MemoryError traceback
    under a 2 GB address space. Here 20 million (60 MB; 1.4 GB parsed) under 512 MiB."""
    (tmp_path / "objects.json").write_bytes(b"[" + b"{}," * (20 << 20) + b"{}]")
    code, out, err = run_forked(command, tmp_path, timeout=120, growth=512 << 20)
    assert code == 1 and re.match(r"repro: error: (--calibration )?objects.json: holds more values than 512 MiB of "
                                  r"memory holds parsed \(expected [^\n]*\n\Z", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["objects.json"]


@pytest.mark.large
@pytest.mark.parametrize("command", [["trace", "validate"], ["trace", "summarize", "-o", "s.json"]])
def test_a_trace_under_the_whole_file_size_of_millions_of_empty_events_is_read_in_chunks(command, tmp_path):
    """60 MB of `{},` (under the 64 MiB the reader parses in one piece): 20 million dictionaries at
    once, MemoryError (a SystemError from orjson) under a 1 GB address space."""
    (tmp_path / "t.json").write_bytes(b"[" + b"{}," * (20 << 20) + b"{}]")
    code, out, err = run_forked([*command[:2], "t.json", *command[2:]], tmp_path, timeout=120, growth=1 << 30)
    assert code == 1 and "Traceback" not in err and "t.json: event 0: event has no 'ph' (phase)" in out + err


@pytest.mark.parametrize("place, value, said", [
    (("modes", "short", "epochs"), 10**9, r"pecan\.experiments\.Getting_started\.modes: mode 'short' runs 1251000000000 "
                                          r"steps, 20850000000 policy windows \(pecan\.cluster\.decision_steps\); "
                                          r"expected at most 100000"),
    (("models", "resnet", "steps_per_epoch"), 10**9, r"pecan\.experiments\.Getting_started\.modes: mode 'short' runs "),
    (("cluster", "network_gbps"), 1e-300, r"--settings: pecan\.cluster\.network_gbps: 1e-300 is less than the minimum "
                                          r"of 0\.001"),
    (("accelerators", "v2-8", "max_batches_per_s", "resnet"), 1e-300,
     r"--settings: pecan\.accelerators\.v2-8\.max_batches_per_s\.resnet: 1e-300 is less than the minimum of 0\.001"),
])
def test_run_settings_given_by_hand_are_bounded_as_a_config_file_is(config, place, value, said, tmp_path):
    """`repro cluster run --settings S` (the run settings the workflow writes, edited): epochs or
    steps_per_epoch of 10^9 ran past 60 s or ended in a MemoryError (a config file with them is refused
    at its check); a network or accelerator rate of 1e-300 gave a ZeroDivisionError or OverflowError."""
    from repro.rulesettings import run_settings

    settings = run_settings(config, "Getting_started", "short")
    node = settings["pecan"]
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = value
    (tmp_path / "store").mkdir()
    (tmp_path / "state.json").write_text(json.dumps({"backend": "local", "trace_store": str(tmp_path / "store")}))
    (tmp_path / "calibration.json").write_text(_calibration("resnet"))
    code, out, err = run_forked(["cluster", "run", "--state", "state.json", "--settings", json.dumps(settings),
                                 "--experiment", "Getting_started", "--mode", "short", "--calibration",
                                 "calibration.json", "--run-dir", "run",
                                 "--receipt", "run/upload.json"], tmp_path, timeout=60, growth=2 << 30)
    assert code == 1 and re.match(rf"repro: error: {said}", err), err
    assert not (tmp_path / "run").exists()


def _figure_command(tmp_path, reference=None, **mean_of):
    """`repro pecan figure` over a cost table of collocated, Cachew and Pecan, each mode's TPU cost 1 in
    [0.9, 1.1] (its workers' 0.5, its total 1.5, each within 10%) but where `mean_of` gives a mode's TPU
    mean ('dup': that mode twice; 'no mode column': the table's mode column named otherwise)."""
    from repro.pecan.costtable import SPREAD_OF, write_table

    rows = []
    for mode in ("collocated", "cachew", "pecan"):
        row = {"mode": mode, "repeats": 3, "workload": "ResNet50_v2-8", "preset": "local"}
        for column in SPREAD_OF:
            mean = {"worker_cost": 0.5, "total_cost": 1.5}.get(column, 1.0)
            row.update({f"{column}_mean": mean, f"{column}_ci_low": 0.9 * mean, f"{column}_ci_high": 1.1 * mean})
        if mean_of.get(mode) == "dup":
            rows.append(dict(row))
        elif mode in mean_of:
            row["tpu_cost_mean"] = mean_of[mode]
        rows.append(row)
    if "no mode column" in mean_of.values():
        rows = [{("kind" if key == "mode" else key): value for key, value in row.items()} for row in rows]
    write_table(rows, tmp_path / "table.csv", columns=list(rows[0]))
    (tmp_path / "calibration.json").write_text(_calibration("resnet"))
    settings = {"experiment": "ResNet50_v2-8", "engine_caption": None, "reference": reference,
                "modes": ["collocated", "cachew", "pecan"], "backend": "local", "preset": "local",
                "style": {"width_in": 5.0, "height_in": 3.6, "dpi": 50, "font_size": 9, "show_reference": True}}
    return ["pecan", "figure", "fig8_ResNet50_v2-8", "--table", "table.csv", "--calibration", "calibration.json",
            "--settings", json.dumps(settings), "--output", "f.pdf", "f.png", "--verdicts", "v.csv"]


@pytest.mark.parametrize("edit, said", [
    ({"cachew": 1e300}, r"table\.csv: mode 'cachew': tpu_cost \[1e\+300, 0\.9, 1\.1\] \(mean, interval\); expected "
                        r"non-negative dollars, at most 1e\+09"),
    ({"pecan": "dup"}, r"table\.csv: two rows for mode 'pecan'; expected one row per mode"),
    ({"reference": "nosuch"}, r"--settings: reference: unknown reference 'nosuch'; expected one of \["),
    ({"collocated": "no mode column"}, r"table\.csv: no 'mode' column; expected a cost table"),
])
def test_a_figure_from_a_hand_edited_table_or_settings_is_refused_naming_what(edit, said, tmp_path):
    """`repro pecan figure` over a cost table whose mean is 1e300 (a TypeError traceback from
    matplotlib's layout), that lists a mode twice (both drawn, both scored), or with settings naming a
    reference that does not exist ('0 of 0 reference values', exit 0)."""
    command = _figure_command(tmp_path, **edit)
    code, out, err = run_forked(command, tmp_path, timeout=120)
    assert code == 1 and re.fullmatch(rf"repro: error: {said}.*\n", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json", "table.csv"]


def test_a_figure_whose_mean_lies_outside_its_interval_is_refused(tmp_path):
    """A hand-edited table, mean 5 in [0.9, 1.1]: the whisker's negative length was a ValueError
    traceback from matplotlib; then it was drawn, under a caption of a t-interval, which holds its mean."""
    code, out, err = run_forked(_figure_command(tmp_path, collocated=5.0), tmp_path, timeout=120)
    assert (code, err) == (1, "repro: error: table.csv: mode 'collocated': tpu_cost mean 5 outside its "
                              "interval [0.9, 1.1]; expected the mean inside its 95% t-interval\n")
    assert not (tmp_path / "f.pdf").exists()


def test_a_figure_whose_total_is_not_its_parts_is_refused(tmp_path):
    """A total_cost_mean of 100 beside TPU and worker costs of 1 and 0.5 was drawn and judged."""
    import csv

    from repro.pecan.costtable import write_table

    command = _figure_command(tmp_path)
    rows = [{**row, "total_cost_mean": "100", "total_cost_ci_high": "101"} if row["mode"] == "cachew" else row
            for row in csv.DictReader((tmp_path / "table.csv").open())]
    write_table(rows, tmp_path / "table.csv", columns=list(rows[0]))
    code, out, err = run_forked(command, tmp_path, timeout=120)
    assert (code, err) == (1, "repro: error: table.csv: mode 'cachew': total_cost_mean 100, but "
                              "tpu_cost_mean + worker_cost_mean is 1.5; expected the total of the two\n")
    assert not (tmp_path / "f.pdf").exists()


@pytest.mark.parametrize("key, value, said", [
    (("hosts", "accelerator", "address"), "", r"ssh\.hosts\.accelerator\.address: '' does not match"),
    (("hosts", "accelerator", "address"), "host;rm -rf x", r"ssh\.hosts\.accelerator\.address: 'host;rm -rf x' does not"),
    (("hosts", "accelerator", "user"), "a b", r"ssh\.hosts\.accelerator\.user: 'a b' does not match"),
    (("run", "remote_dir"), "/", r"ssh\.run\.remote_dir: '/' does not match"),
    (("run", "remote_dir"), "runs", r"ssh\.run\.remote_dir: 'runs' does not match"),
    # the tf.data service's directories on the hosts, and its python, as the runs' remote_dir is checked
    (("tfdata", "state_dir"), "", r"ssh\.tfdata\.state_dir: '' does not match"),
    (("tfdata", "state_dir"), "/", r"ssh\.tfdata\.state_dir: '/' does not match"),
    (("tfdata", "worker_dir"), "relative/dir", r"ssh\.tfdata\.worker_dir: 'relative/dir' does not match"),
    (("tfdata", "worker_dir"), "/tmp/x\x00y", r"ssh\.tfdata\.worker_dir: '/tmp/x\\x00y' does not match"),
    (("tfdata", "python"), "", r"ssh\.tfdata\.python: '' does not match"),
    (("start_commands",), {"acelerator": ["true"]}, r"ssh\.start_commands: 'acelerator' is not one of \['control', "),
    (("checks",), [{"name": "x", "role": "worker", "command": "true"}], r"ssh\.checks\.0\.role: 'worker' is not one of"),
])
def test_an_ssh_section_that_names_no_host_user_role_or_absolute_directory_is_refused_at_check(key, value, said,
                                                                                                 tmp_path, capsys):
    """`repro config check` passed an accelerator address of '' (a TypeError traceback at cluster
    start) or 'host;rm -rf x', a remote_dir of '/' or a relative one, and a role with a typo (its
    commands and checks silently never ran)."""
    example = yaml.safe_load((REPO / "config" / "examples" / "ssh-cluster.yaml").read_text())
    node = example["ssh"]
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(example))
    code, out, err = run_repro(["config", "check", "--base", REPO / "config" / "config.yaml", tmp_path / "mine.yaml"],
                               capsys)
    assert code == 1 and re.search(said, err), err


@pytest.mark.parametrize("given", [True, False], ids=["--log-file", "the default trims-server.log"])
def test_a_daemon_log_that_is_a_symbolic_link_is_refused_and_what_it_names_kept(given, tmp_path, monkeypatch, capsys):
    """`trims server run -d --log-file lnk.log` (or the default ./trims-server.log) where the log is a
    link to a file of the user's: the daemon's output was appended to that file."""
    from repro.trims.models import generate

    monkeypatch.chdir(tmp_path)
    generate("squeezenet_1.1", tmp_path / "models" / "squeezenet_1.1", seed=1)
    (tmp_path / "notes.txt").write_text("mine\n")
    log = tmp_path / ("lnk.log" if given else "trims-server.log")
    log.symlink_to(tmp_path / "notes.txt")
    socket_path = tmp_path / "s.sock"
    argv = ["trims", "server", "run", "--socket", socket_path, "--base-path", tmp_path / "models", "--memory-mb", "64",
            "-d", "--pid-file", tmp_path / "s.pid", *(["--log-file", log] if given else [])]
    try:
        code, _, err = run_repro(argv, capsys)
    finally:
        if socket_path.exists():  # the old code's daemon: stopped, not left running
            run_repro(["trims", "server", "stop", "--socket", socket_path], capsys)
    label = str(log) if given else "trims-server.log"
    assert (code, err) == (1, f"repro: error: --log-file {label}: is a symbolic link; expected a log file of its own\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_trims_memory_refuses_weights_of_another_size_than_the_manifest_records(tmp_path, capsys):
    """`repro trims memory squeezenet_1.1` where model.params is a 3 GiB sparse file (the manifest
    records 4.9 MB): the measuring process allocated 3 GiB for it."""
    from repro.trims.models import generate

    generate("squeezenet_1.1", tmp_path / "m" / "squeezenet_1.1", seed=1)
    params = tmp_path / "m" / "squeezenet_1.1" / "model.params"
    recorded = params.stat().st_size
    os.truncate(params, 3 << 30)
    code, out, err = run_repro(["trims", "memory", "squeezenet_1.1", "--base-path", tmp_path / "m"], capsys)
    assert (code, out, err) == (1, "", f"repro: error: {params}: {3 << 30} bytes; expected the {recorded} bytes of "
                                       "weights its manifest records (params_bytes)\n")


def test_a_json_number_past_pythons_digit_limit_is_named_not_called_not_json(tmp_path):
    """Valid JSON that Python's int cannot take (over sys.get_int_max_str_digits() digits): named as
    such, where it read "not JSON"."""
    import sys

    (tmp_path / "state.json").write_text('{"backend": ' + "9" * (sys.get_int_max_str_digits() + 1) + "}")
    code, out, err = run_forked(["cluster", "status", "--state", "state.json"], tmp_path, timeout=60)
    assert (code, err) == (1, f"repro: error: state.json: holds a whole number of more than "
                              f"{sys.get_int_max_str_digits()} digits (expected the cluster state JSON that cluster "
                              "start writes); run cluster start first\n")
