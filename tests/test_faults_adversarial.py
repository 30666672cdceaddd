"""Fault injection, an adversarial pass: help written to a full device, and a key repeated inside one
trace event (read as the last of its values, unsaid).

The command rows run as test_faults_input's rows do (`check_fault`): exit code 1, one line on stderr
naming the file and the key, nothing written, no process left running.
"""

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from test_faults_input import CONFIG, Fault, _calibration, _write, check_fault
from test_traces import every_reading_refuses, rich_trace


pytestmark = pytest.mark.fault


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["trace", "--help"], ["trace", "summarize", "--help"],
                                  ["pecan", "calibrate", "--help"]], ids=["help", "h", "group-help", "command-help", "pecan"])
def test_help_to_a_full_device_names_standard_output(tmp_path, buffered, argv):
    """`repro --help > /dev/full`: one line naming standard output, exit status 1, as `repro list` has;
    argparse ignored the failed write and exited 0 (unbuffered), or Python's flush at exit failed."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "repro.cli", *argv], stdout=full, stderr=subprocess.PIPE,
                                cwd=tmp_path, timeout=60, env=env if buffered else {**env, "PYTHONUNBUFFERED": "1"})
    assert (result.returncode, result.stderr) == (1, b"repro: error: standard output: No space left on device\n")


def test_help_and_usage_errors_exit_as_before(capsys):
    from repro.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("usage: repro")
    with pytest.raises(SystemExit) as info:
        main(["trace", "combine", "--no-such-flag"])
    assert info.value.code == 2 and capsys.readouterr().out == ""


EVENT = {"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
TWICE = b'{"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":2,"pid":1,"tid":1,"name":"b"}]}'

EVENT_KEY_FAULTS = [
    Fault(f"{command}-an-event-names-a-key-twice",
          lambda ctx, command=command: ["trace", command, _write(ctx.dir / "t.json", TWICE),
                                        *(["-o", str(ctx.dir / "out.json")] if command != "validate" else [])],
          ("INVALID" if command == "validate" else "repro: error:")
          + r" .*/t.json: event 0: the key 'name' appears twice in one event; expected each key once")
    for command in ("summarize", "combine", "validate")
]


@pytest.mark.parametrize("fault", EVENT_KEY_FAULTS, ids=[f.id for f in EVENT_KEY_FAULTS])
def test_an_event_naming_a_key_twice_is_refused(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def _twice(events, at, key, value):
    """The JSON text of `events` written compactly, the event at `at` naming `key` again (`value`)."""
    texts = [orjson.dumps(event) for event in events]
    texts[at] = texts[at][:-1] + b',"' + key.encode() + b'":' + orjson.dumps(value) + b"}"
    return b"[" + b",".join(texts) + b"]"


REPEATED_IN_AN_EVENT = {  # (the file's bytes, the event, the key)
    "first event, as orjson writes": (lambda events: _twice(events, 0, "ph", "M"), 0, "ph"),
    "middle event, in an object": (lambda events: b'{"traceEvents":' + _twice(events, 7, "ts", 5) + b"}", 7, "ts"),
    "last event, a key no tool reads": (lambda events: _twice(events, 14, "color", "red")
                                        .replace(b'"ctr"', b'"ctr","color":"blue"'), 14, "color"),
    "after a nested object": (lambda events: _twice(events, 4, "name", "other"), 4, "name"),
    "spaced": (lambda events: json.dumps(events[:3]).encode()[:-1] + b', {"ph": "B", "ts": 1, "ph": "E", "pid": 1}]',
               3, "ph"),
    "escaped": (lambda events: _twice(events, 2, "name", "quote\"d"), 2, "name"),
    "key escaped": (lambda events: _twice(events, 2, "n\\u0061me", "x"), 2, "name"),
}


@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 150}], ids=["whole", "chunked"])
@pytest.mark.parametrize("name", sorted(REPEATED_IN_AN_EVENT))
def test_a_key_repeated_in_one_event_is_refused_naming_it(tmp_path, monkeypatch, name, options):
    """A key twice in one event: orjson and msgspec read the last value, unsaid (a second 'ph' made a
    span a metadata event). Every reading, compact and general, whole and in chunks, refuses it,
    naming the file, the event and the key."""
    make, index, key = REPEATED_IN_AN_EVENT[name]
    path = tmp_path / "t.json"
    path.write_bytes(make(rich_trace()))
    error = rf"t\.json: event {index}: the key '{key}' appears twice in one event"
    every_reading_refuses(path, tmp_path, monkeypatch, options, error)


@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 150}], ids=["whole", "chunked"])
def test_a_key_that_events_and_their_args_share_is_no_repeat(tmp_path, monkeypatch, options):
    """'name' in an event and in its args (a metadata event's), and the same key in two events, are each
    named once in their object: read as ever."""
    from test_traces import _same_as_general

    events = rich_trace()
    events[7]["args"] = {"name": "m", "cat": 3, "l": [{"name": 1}, {"name": 2}]}
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(events))
    _same_as_general(tmp_path, monkeypatch, path, options)


def _validation(ctx, experiment):
    from test_faults_hostile import STYLE, _engine_metrics

    return ["pecan", "validation", experiment, "--metrics", _write(ctx.dir / "m.json", json.dumps(_engine_metrics())),
            "--calibration", _write(ctx.dir / "cal.json", _calibration("resnet")), "--network-gbps", "10",
            "--style", json.dumps(STYLE), "--output", str(ctx.dir / "v.pdf"), str(ctx.dir / "v.png"),
            "--table", str(ctx.dir / "v.csv")]


def _download_into_a_file(ctx):
    """A receipt of one trace in a local store, and -o naming a file of the user's."""
    import hashlib

    trace = b'{"traceEvents":[]}'
    _write(ctx.dir / "store" / "traces" / "E" / "m" / "a.json", trace)
    _write(ctx.dir / "store" / "traces" / "E" / "m" / "a.json.sha256", hashlib.sha256(trace).hexdigest() + "\n")
    receipt = {"store": str(ctx.dir / "store"), "objects": [{"key": "traces/E/m/a.json",
                                                              "sha256": hashlib.sha256(trace).hexdigest()}]}
    return ["trace", "download", _write(ctx.dir / "up.json", json.dumps(receipt)), "-o", _write(ctx.dir / "out", "mine\n")]


def _tfdata(command, *flags):
    return lambda ctx: ["pecan", "tfdata", command, "--config", str(CONFIG), "--experiment", "ResNet50_v2-8",
                        *(["--mode", "cachew"] if command == "run" else ["--counts", "0"]), "--out", str(ctx.dir / "run"),
                        *flags]


def _tfdata_state(ctx, state, command="stop"):
    """`repro pecan tfdata COMMAND` over a state.json holding `state` (its processes long gone)."""
    gone = {"pid": 999999, "start_ticks": 1, "boot_id": "gone", "role": "tfdata dispatcher"}
    state = {key: ({**gone, **value} if key == "dispatcher" else value) for key, value in state.items()}
    state["workers"] = [{**gone, **worker} for worker in state.get("workers", [])]
    _write(ctx.dir / "sd" / "state.json", json.dumps(state))
    return ["pecan", "tfdata", command, "--state-dir", str(ctx.dir / "sd")]


def _into_a_linked_model(ctx, command):
    """`repro trims models|fetch squeezenet_1.1 --base-path bp`, bp/squeezenet_1.1 a link to a directory outside."""
    (ctx.dir / "outside").mkdir()
    (ctx.dir / "bp").mkdir()
    (ctx.dir / "bp" / "squeezenet_1.1").symlink_to(ctx.dir / "outside")
    if command == "models":
        return ["trims", "models", "squeezenet_1.1", "--base-path", ctx.dir / "bp"]
    from repro.trims.models import generate

    generate("squeezenet_1.1", ctx.dir / "assets" / "squeezenet_1.1", seed=1)
    return ["trims", "fetch", "squeezenet_1.1", "--asset-store", ctx.dir / "assets", "--base-path", ctx.dir / "bp"]


def _cluster_run(ctx, settings):
    """`repro cluster run --settings SETTINGS` on a started local backend."""
    (ctx.dir / "store").mkdir()
    state = _write(ctx.dir / "state.json", json.dumps({"backend": "local", "trace_store": str(ctx.dir / "store")}))
    return ["cluster", "run", "--state", state, "--settings", json.dumps(settings), "--experiment", "Getting_started",
            "--mode", "short", "--calibration", _write(ctx.dir / "cal.json", _calibration("resnet")),
            "--run-dir", str(ctx.dir / "run"), "--receipt", str(ctx.dir / "run" / "upload.json")]


COMMAND_FAULTS = [
    # an OverflowError from bind() when start restarts the dispatcher on its recorded port
    Fault("tfdata-state-dispatcher-port-past-65535",
          lambda ctx: _tfdata_state(ctx, {"dispatcher": {"address": "localhost:99999999", "status": "d.json"}}),
          r"repro: error: .*/sd/state.json: dispatcher.address: expected host:port \(a port from 0 to 65535\), "
          r"got 'localhost:99999999'"),
    # an AttributeError: a worker on a host, and no hosts to reach it on
    Fault("tfdata-state-worker-host-without-hosts",
          lambda ctx: _tfdata_state(ctx, {"dispatcher": {"address": "localhost:1", "status": "d.json"}, "workers": [
              {"status": "w.json", "kind": "remote", "slot": 0, "host": "h"}]}),
          r"repro: error: .*/sd/state.json: workers\[0\].host: a worker on host 'h', but no worker hosts"),
    # an empty directory flag (`--out "$UNSET"`) was the working directory: a run, a tf.data service's
    # journal or generated models written into it, a state.json there read and removed
    *[Fault(f"empty-{flag[2:]}-{'-'.join(argv[1:3] if argv[1] == 'tfdata' else argv[:2])}", lambda ctx, argv=argv, flag=flag: [
        *argv, *(["--calibration", _write(ctx.dir / "cal.json", _calibration("resnet"))] if argv[1] == "run" else []),
        flag, ""], rf"repro: error: {flag} '': expected a directory name, not an empty one")
      for argv, flag in [(["pecan", "run", "--config", str(CONFIG), "--experiment", "Getting_started", "--mode", "short"],
                          "--out"),
                         (["pecan", "tfdata", "stop"], "--state-dir"), (["pecan", "tfdata", "status"], "--state-dir"),
                         (["trims", "models", "squeezenet_1.1"], "--base-path")]],
    # the model's files were moved through a symlink in the base path to where it points (/tmp here)
    *[Fault(f"trims-{command}-into-a-model-directory-symlinked-out",
            lambda ctx, command=command: _into_a_linked_model(ctx, command),
            r"repro: error: .*bp/squeezenet_1.1: is a symbolic link; expected a model's directory \(or nothing\)")
      for command in ("models", "fetch")],
    # a KeyError and an AttributeError from the backend: --settings by hand, lacking a key or of a wrong type
    *[Fault(f"cluster-run-settings-{name}", lambda ctx, settings=settings: _cluster_run(ctx, settings), error)
      for name, settings, error in [
          ("without-pecan", {}, r"repro: error: --settings: lacks key 'pecan' \(expected the settings the workflow"),
          ("pecan-a-number", {"pecan": 5}, r"repro: error: --settings: pecan: 5 is not of type 'object'"),
          ("negative-seed", {"seed": -1, "pecan": {}}, r"repro: error: --settings: seed: -1 is less than the minimum")]],
    # a store the config check let through: cluster start, an upload or a fetch refused it only once the
    # workflow ran (a gs:///x store: a bucket named '')
    *[Fault(f"config-{key.replace('.', '-')}-names-no-bucket",
            lambda ctx, key=key, value=value: ["config", "check", "--base", str(CONFIG), _write(
                ctx.dir / "c.yaml", f"trims:\n  asset_store: '{value}'\n" if "." in key else f"trace_store: '{value}'\n")],
            rf"repro: error: .*c.yaml: {key}: '{value}' names no bucket; expected gs://bucket\[/prefix\] or a directory")
      for key, value in (("trace_store", "gs://"), ("trims.asset_store", "gs:///models"))],
    # `pecan plot -o sub/` drew sub/.pdf and sub/.png, hidden files, and `-o .` drew ..pdf and ..png
    *[Fault(f"plot-out-file-{name}", lambda ctx, given=given: [
        "pecan", "plot", "-t", "1", "1", "1", "-o", given if given == "." else f"{ctx.dir}/{given}"],
            rf"repro: error: -o/--out_file '.*{given}': expected a file name or a basename, not a directory")
      for name, given in (("a-directory", "sub/"), ("dot", "."))],
    # a KeyError from status: a state without its dispatcher
    Fault("tfdata-state-without-a-dispatcher", lambda ctx: _tfdata_state(ctx, {"workers": []}, "status"),
          r"repro: error: .*/sd/state.json: lacks key 'dispatcher'; not a state file the service wrote"),
    # a KeyError traceback; with base_path given, its directory was made (and a running store stopped) first
    Fault("store-start-settings-without-keys", lambda ctx: ["trims", "store", "start", "--settings", "{}", "--state",
                                                            str(ctx.dir / "s.json")],
          r"repro: error: --settings: lacks key 'base_path' \(expected the settings the workflow passes"),
    Fault("store-start-settings-without-a-server-key",
          lambda ctx: ["trims", "store", "start", "--settings", json.dumps({"base_path": str(ctx.dir / "m"), "server": {
              "memory_mb": 64, "eviction": "lru"}}), "--state", str(ctx.dir / "s.json")],
          r"repro: error: --settings: lacks key 'device' \(expected the settings the workflow passes"),
    # the flags bypassed the schema that bounds the same settings in the config: a traceback from numpy
    # (a negative seed), from time.sleep (an infinite time scale), or JPEGs generated without end
    Fault("tfdata-run-negative-seed", _tfdata("run", "--seed", "-1"),
          r"repro: error: --seed: seed: -1 is less than the minimum of 0"),
    Fault("tfdata-run-seed-past-32-bits", _tfdata("run", "--seed", str(2**32)),
          r"repro: error: --seed: seed: 4294967296 is greater than the maximum of 4294967295"),
    Fault("tfdata-run-infinite-time-scale", _tfdata("run", "--time-scale", "inf"),
          r"repro: error: --time-scale inf: a step time of inf s for ResNet50_v2-8 .*; expected a time scale from "),
    Fault("tfdata-run-images-without-bound", _tfdata("run", "--images", str(10**12)),
          r"repro: error: --images: images: 1000000000000 is greater than the maximum of 1000000000"),
    # the second run of a count replaced the first's <out>/<count>, after minutes of both
    Fault("tfdata-sweep-a-count-twice", _tfdata("sweep", "--counts", "0", "0"),  # the later --counts holds
          r"repro: error: --counts: 0 given twice; expected each count once \(its run writes <out>/0\)"),
    Fault("tfdata-sweep-negative-seed", _tfdata("sweep", "--seed", "-1"),
          r"repro: error: --seed: seed: -1 is less than the minimum of 0"),
    # the message read "a run of experiment 'E'; expected 's", naming no argument
    Fault("validation-an-empty-experiment-name", lambda ctx: _validation(ctx, ""),
          r"repro: error: experiment: expected the experiment's name \(the runs' spec.experiment\), got an empty one"),
    # the error blamed the receipt and the store ("run it again to upload anew"), and named no flag
    Fault("download-into-a-file", _download_into_a_file,
          r"repro: error: -o/--output-dir .*/out: cannot write: .*/out is not a directory$"),
]


@pytest.mark.parametrize("fault", COMMAND_FAULTS, ids=[f.id for f in COMMAND_FAULTS])
def test_command_faults(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def test_trims_tools_names_a_config_that_does_not_exist_once(tmp_path, monkeypatch, capsys):
    """`trims-tools info config --config /dev/zero`: the note said /dev/zero does not exist, twice."""
    from repro.trims.originals import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CARML_CONFIG_FILE", raising=False)
    assert main(["info", "config", "--config", "nope.yaml"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    assert notes == ["trims-tools: note: --config: nope.yaml does not exist; searching as the original does"]


@pytest.mark.parametrize("given", ["/dev/zero", "fifo", "."])
def test_trims_tools_refuses_a_config_that_is_no_regular_file(tmp_path, monkeypatch, capsys, given):
    """`--config /dev/zero`, a FIFO or a directory: noted, then the defaults used with exit 0, where every
    other command refuses an input that is no regular file."""
    from repro.trims.originals import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    os.mkfifo(tmp_path / "fifo")
    assert main(["info", "config", "--config", given]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"trims-tools: error: --config: {given} is not a regular file; expected a config file (.carml_config.yml), "
        "or a path that does not exist to search as the original does")


def test_a_daemon_log_inside_the_base_path_is_refused(tmp_path, monkeypatch, capsys):
    """`trims server run -d --log-file BASE/<model>/manifest.json`: the daemon's output was appended to
    the model's manifest (the model no longer verified), and the daemon ran on."""
    from test_faults_input import snapshot

    from repro.trims.models import generate

    monkeypatch.chdir(tmp_path)
    generate("squeezenet_1.1", tmp_path / "models" / "squeezenet_1.1", seed=1)
    before = snapshot(tmp_path)
    socket_path = tmp_path / "s.sock"
    argv = ["trims", "server", "run", "--socket", socket_path, "--base-path", tmp_path / "models", "--memory-mb", "64",
            "-d", "--pid-file", tmp_path / "s.pid", "--log-file", tmp_path / "models" / "squeezenet_1.1" / "manifest.json"]
    from support import run_repro

    try:
        code, _, err = run_repro(argv, capsys)
    finally:
        if socket_path.exists():  # the old code's daemon: stopped, not left running
            run_repro(["trims", "server", "stop", "--socket", socket_path], capsys)
    assert (code, err) == (1, f"repro: error: --log-file {tmp_path}/models/squeezenet_1.1/manifest.json: inside --base-path "
                              f"{tmp_path}/models, the models the server reads; expected a file elsewhere\n")
    assert snapshot(tmp_path) == before


def test_client_results_inside_the_base_path_are_refused(tmp_path, monkeypatch, capsys):
    """`trims client run --results BASE/<model>/model.params`: the results JSON was written over the
    model's weights once the requests were done (exit 0; the model then failed to load)."""
    from support import run_repro
    from test_faults_input import snapshot

    from repro.trims.models import generate

    monkeypatch.chdir(tmp_path)
    generate("squeezenet_1.1", tmp_path / "models" / "squeezenet_1.1", seed=1)
    before = snapshot(tmp_path)
    weights = tmp_path / "models" / "squeezenet_1.1" / "model.params"
    code, _, err = run_repro(["trims", "client", "run", "--original", "--base-path", tmp_path / "models", "--iterations", "1",
                              "--results", weights, "--profile-output", "p"], capsys)
    assert (code, err) == (1, f"repro: error: --results {weights}: inside --base-path {tmp_path}/models, the models the "
                              "requests read; expected a file elsewhere\n")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 150}], ids=["whole", "chunked"])
def test_a_complete_event_of_negative_duration_is_refused(tmp_path, monkeypatch, options):
    """`"ph": "X", "dur": -5`: the event ends before it begins; read as it was, the summary reported an
    end-to-end time and a mean of -5 us (exit 0). Every reading refuses it, naming the event."""
    events = rich_trace()
    events[7]["dur"] = -2.5
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(events))
    error = r"t\.json: event 7: 'dur' must not be negative, found -2\.5"
    every_reading_refuses(path, tmp_path, monkeypatch, options, error)


def test_profile_output_overwrite_replaces_only_a_directory_a_run_made(tmp_path, monkeypatch, capsys):
    """`trims client run --profile-output p --profile-output-overwrite`, p holding the user's notes: the
    whole directory was deleted. It is refused; a directory an earlier run made is replaced as ever,
    unless it holds a file of the user's (any *.json was taken for a trace of the run's)."""
    from support import run_repro
    from test_faults_input import snapshot

    from repro.trims.models import generate

    monkeypatch.chdir(tmp_path)
    generate("squeezenet_1.1", tmp_path / "models" / "squeezenet_1.1", seed=1)
    client = ["trims", "client", "run", "--original", "--base-path", tmp_path / "models", "--iterations", "1",
              "--device", "cpu"]
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_repro([*client, "--profile-output", "made"], capsys)
    assert code == 0, err
    made = next(tmp_path.rglob("made"))  # <profile root>/<hostname>/made
    users = made.parent / "users"

    def overwrite_refused(user_file, name):
        """The error of overwriting --profile-output `name` once `user_file` is there; nothing changed."""
        _write(user_file, "{}")
        before = snapshot(tmp_path)
        code, _, err = run_repro([*client, "--profile-output", name, "--profile-output-overwrite"], capsys)
        assert code == 1 and snapshot(tmp_path) == before
        return err

    assert overwrite_refused(users / "notes.txt", "users") == (
        f"repro: error: --profile-output 'users': {users.relative_to(tmp_path)} holds files no run of this client made; "
        "--profile-output-overwrite replaces only a directory a run made: remove it or choose another --profile-output\n")
    code, _, err = run_repro([*client, "--profile-output", "made", "--profile-output-overwrite"], capsys)
    assert code == 0, err
    # a file of the user's, named as a trace is, in a directory a run made: it was deleted with the run's
    assert overwrite_refused(made / "my_analysis.json", "made") == (
        f"repro: error: --profile-output {made.relative_to(tmp_path)}: holds my_analysis.json, which this command does "
        "not write; it may be yours: move it, or name another directory\n")


# -- a forged process record: a process of the user's is never taken for the service's --------


def _forge_tfdata_state(directory, proc):
    """A tf.data state in `directory` naming `proc` (pid, start ticks, boot id exactly) as its dispatcher
    and as a worker."""
    from repro import processes

    record = processes.describe(proc.pid, "tfdata dispatcher")
    (directory / "state.json").write_text(json.dumps({
        "dispatcher": {**record, "address": "localhost:1", "status": str(directory / "dispatcher.status.json")},
        "workers": [{**record, "role": "tfdata worker", "kind": "local", "slot": 0, "cpus": [0], "threads": 1,
                     "status": str(directory / "worker-0.status.json")}], "started": 1}))


@pytest.mark.parametrize("how", ["working-directory", "command-line"])
def test_a_forged_tfdata_state_never_signals_a_process_of_the_users(tmp_path, how):
    """state.json forged to name a user's `sleep` running in the state directory (or a `tail -f` of its
    log): `repro pecan tfdata stop` signalled it, as its working directory (or an argument) lay in
    the state directory. Only a process started with the record's token belongs."""
    from support import BIN

    state = tmp_path / "tfdata"
    state.mkdir()
    (state / "dispatcher.log").write_text("")
    argv = (["sleep", "300"] if how == "working-directory"
            else [sys.executable, "-c", "import time; time.sleep(300)", str(state / "dispatcher.log")])
    user = subprocess.Popen(argv, cwd=state if how == "working-directory" else tmp_path)
    try:
        deadline = time.monotonic() + 10
        while b"300" not in Path(f"/proc/{user.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        _forge_tfdata_state(state, user)
        for command in ("status", "stop"):  # stop forgets the state
            proc = subprocess.run([str(BIN / "repro"), "pecan", "tfdata", command, "--state-dir", str(state)],
                                  capture_output=True, text=True, cwd=tmp_path, timeout=120)
            assert "Traceback" not in proc.stderr, proc.stderr
            assert "not started for this state directory" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
            assert user.poll() is None, f"`repro pecan tfdata {command}` signalled a process it did not start"
    finally:
        user.kill()
        user.wait()


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_tfdata_start_stopped_while_its_dispatcher_starts_leaves_nothing_running(tmp_path, signum):
    """SIGTERM to `repro pecan tfdata start` while its dispatcher imported TensorFlow: the command ended,
    and the dispatcher, which no state.json recorded yet, ran on where `tfdata stop` could not reach it."""
    import psutil
    from support import BIN, kill_started

    state = tmp_path / "sd"
    children = []
    proc = subprocess.Popen([str(BIN / "repro"), "pecan", "tfdata", "start", "--state-dir", str(state)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not psutil.Process(proc.pid).children() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children and not (state / "state.json").exists(), "the dispatcher did not start, or started already"
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == 128 + signum
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"left running: {[child.cmdline() for child in alive]}"
        assert b"Traceback" not in proc.stderr.read()
    finally:
        kill_started(proc, children)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
@pytest.mark.service
def test_two_tfdata_starts_in_one_state_directory_run_one_dispatcher(tmp_path):
    """Two `repro pecan tfdata start --state-dir sd` at once: each started a dispatcher and recorded it,
    the second record replacing the first, so one dispatcher ran on that `tfdata stop` never stopped."""
    import psutil
    from support import BIN

    state = tmp_path / "sd"
    starts = [subprocess.Popen([str(BIN / "repro"), "pecan", "tfdata", "start", "--state-dir", str(state)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        results = [start.communicate(timeout=180) for start in starts]
        assert [start.returncode for start in starts] == [0, 0], results
        dispatchers = [p for p in psutil.process_iter(["cmdline"])
                       if str(state / "work_dir") in (p.info["cmdline"] or [])]
        assert len(dispatchers) == 1, f"{len(dispatchers)} dispatchers run for one state directory"
    finally:
        subprocess.run([str(BIN / "repro"), "pecan", "tfdata", "stop", "--state-dir", str(state)], capture_output=True,
                       timeout=120)
        for process in psutil.process_iter(["cmdline"]):  # what the stop could not reach: started by this test
            with contextlib.suppress(psutil.Error):
                if str(state / "work_dir") in (process.info["cmdline"] or []):
                    process.kill()


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
def test_a_gcs_store_without_credentials_is_one_line(tmp_path, monkeypatch, capsys):
    """`repro trace download --store gs://bkt/p` where no Google credentials are set up: google-auth's
    DefaultCredentialsError as a traceback (trims fetch and trims models --publish alike)."""
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not a Google Compute Engine machine: no metadata server asked
    receipt = json.dumps({"store": "gs://bkt", "objects": [{"key": "a.json", "sha256": "0" * 64}]})
    fault = Fault("download-from-gcs-without-credentials",
                  lambda ctx: ["trace", "download", _write(ctx.dir / "up.json", receipt), "-o", str(ctx.dir / "out"),
                               "--store", "gs://bkt/p"],
                  r"repro: error: trace store gs://bkt/p: no Google credentials found; set them up with")
    check_fault(fault, tmp_path, monkeypatch, capsys)


WORKER_HOSTS_FAULTS = [
    Fault(f"tfdata-start-worker-hosts-{name}",
          lambda ctx, hosts=hosts: ["pecan", "tfdata", "start", "--state-dir", str(ctx.dir / "sd"), "--worker-hosts",
                                    _write(ctx.dir / "hosts.json", json.dumps(hosts))],
          r"repro: error: --worker-hosts .*/hosts.json: expected an object with hosts \(a list of objects with a name")
    for name, hosts in [("a-list", [1, 2]), ("hosts-a-number", {"hosts": 5}),
                        ("host-without-an-address", {"hosts": [{"name": "h"}], "python": "python3", "worker_dir": "w",
                                                     "dispatcher_host": "a"})]
]


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tfdata start needs the 'tfdata' extra")
@pytest.mark.parametrize("fault", WORKER_HOSTS_FAULTS, ids=[f.id for f in WORKER_HOSTS_FAULTS])
def test_tfdata_start_refuses_worker_hosts_it_could_not_use(fault, tmp_path, monkeypatch, capsys):
    """`tfdata start --worker-hosts h.json` holding a list: the dispatcher started and the hosts went into
    state.json, which every later status and stop refused, so nothing could stop that dispatcher."""
    check_fault(fault, tmp_path, monkeypatch, capsys)


# -- a second adversarial pass: values read from files and recorded state, and arguments handed on --


COST_SETTINGS = {"model_name": "resnet", "model": {"pipeline": "resnet", "batch_size": 1024, "steps_per_epoch": 1251},
                 "tpu_price": 4.96, "worker_price": 0.42}
REPEAT = {"throughput": 3000.0, "remote_workers": 2, "local_workers": 1}


LOG = Path(__file__).parent / "fixtures" / "pecan-logs" / "resnet_cachew.log"


def _cost_table(ctx, metrics, modes=("short",), log=LOG):
    """`repro pecan cost-table` of a run whose metrics.json holds `metrics` (one log and metrics file per mode)."""
    summary = _write(ctx.dir / "summary.json", json.dumps({"traces": [{"mode": mode} for mode in modes]}))
    path = _write(ctx.dir / "metrics.json", json.dumps(metrics))
    return ["pecan", "cost-table", "--settings", json.dumps(COST_SETTINGS), "--mode", *modes, "--log", *[log] * len(modes),
            "--metrics", *[path] * len(modes), "--summary", summary, "-o", str(ctx.dir / "table.csv")]


def _store_state(ctx, state):
    return _write(ctx.dir / "store.json", json.dumps({"base_path": str(ctx.dir / "m"), "socket": str(ctx.dir / "s.sock"),
                                                      "digest": "d", **state}))


STORE = {"memory_mb": 64, "eviction": "lru", "device": "cpu"}
CLIENT = {"eager": True, "eager_async": False, "cold_cache": False, "seed": 0, "server": STORE, "iterations": 1}

SECOND_PASS_FAULTS = [
    # the whole config by hand, used unchecked: a TypeError, or a wrong type named as a missing key
    *[Fault(f"check-reproducibility-settings-{name}",
            lambda ctx, settings=settings: ["pecan", "check-reproducibility", "--settings", json.dumps(settings),
                                            "--scratch", str(ctx.dir / "scratch"), "-o", str(ctx.dir / "check.csv")],
            error)
      for name, settings, error in [
          ("plots-a-number", {"reproducibility": {"figures": ["x"]}, "plots": 5},
           r"repro: error: --settings: plots: 5 is not of type 'object'"),
          ("figures-a-number", {"reproducibility": {"figures": 5}},
           r"repro: error: --settings: reproducibility.figures: 5 is not of type 'array'")]],
    # a metrics.json's values reached the arithmetic unchecked: tracebacks, or its lacking key blamed on --settings
    *[Fault(f"cost-table-metrics-{name}", lambda ctx, metrics=metrics: _cost_table(ctx, metrics), error)
      for name, metrics, error in [
          ("throughput-a-string", {"repeats": [{**REPEAT, "throughput": "fast"}]},
           r"repro: error: .*/metrics.json: repeats\[0\].throughput: expected a number from 0 to 1e\+12, got 'fast'"),
          ("workers-past-a-float", {"repeats": [REPEAT, {**REPEAT, "remote_workers": 10**400}]},
           r"repro: error: .*/metrics.json: repeats\[1\].remote_workers: expected a number from 0 to 1e\+12"),
          ("tfdata-without-a-time-scale", {"engine": "tfdata", "spec": {}, "repeats": [REPEAT]},
           r"repro: error: .*/metrics.json: spec.time_scale: expected a tf.data engine run's positive time scale, got None"),
          ("tfdata-time-scale-a-string", {"engine": "tfdata", "spec": {"time_scale": "x"}, "repeats": [REPEAT]},
           r"repro: error: .*/metrics.json: spec.time_scale: expected a tf.data engine run's positive time scale, got 'x'")]],
    # two rows for one mode (exit 0): the figure and the comparison tables refuse such a table later
    Fault("cost-table-a-mode-twice", lambda ctx: _cost_table(ctx, {"repeats": [REPEAT]}, ("short", "short")),
          r"repro: error: --mode: 'short' given twice; expected each mode once"),
    # another mode's run priced as this mode's row (exit 0): its metrics.json, or its log's first line, says so
    Fault("cost-table-metrics-of-another-mode", lambda ctx: _cost_table(ctx, {"mode": "cachew", "repeats": [REPEAT]}),
          r"repro: error: .*/metrics.json: a run of mode 'cachew', not of --mode 'short'$"),
    Fault("cost-table-log-of-another-mode", lambda ctx: _cost_table(ctx, {"repeats": [REPEAT]}, log=_write(
        ctx.dir / "run.log", "I0101 00:00:00.000000 140000000000000 keras_utils.py:145] repro local model: experiment=E "
        "mode=cachew placement=cachew autoorder=False calibration=local seed=1\n" + LOG.read_text())),
          r"repro: error: .*/run.log: a run of mode 'cachew', not of --mode 'short'$"),
    # a state's recorded settings started a store unchecked: a KeyError, a TypeError, or the base path
    # made and a server started that exited at once; a huge budget named a flag never given
    *[Fault(f"store-status-state-settings-{name}",
            lambda ctx, settings=settings: ["trims", "store", "status", "--state", _store_state(ctx, {"settings": settings}),
                                            "--expect", "d", "-o", str(ctx.dir / "status.json")], error)
      for name, settings, error in [
          ("empty", {}, r"repro: error: .*/store.json: settings: lacks key 'base_path'"),
          ("memory-a-string", {"base_path": "m", "server": {**STORE, "memory_mb": "x"}},
           r"repro: error: .*/store.json: settings: server.memory_mb: 'x' is not of type 'integer'"),
          ("unknown-eviction", {"base_path": "m", "server": {**STORE, "eviction": "bogus"}},
           r"repro: error: .*/store.json: settings: server.eviction: 'bogus' is not one of"),
          ("huge-budget", {"base_path": "m", "server": {**STORE, "memory_mb": 10**10}},
           r"repro: error: .*/store.json: settings: server.memory_mb: 10000000000 is greater than the maximum")]],
    # an unknown distribution was refused only after --out/traces was made and the store started for it
    *[Fault(f"experiment-distribution-{name}",
            lambda ctx, distribution=distribution, params=params: [
                "trims", "experiment", "distribution", distribution, "--params", *params, "--concurrency", "1",
                "--models", "squeezenet_1.1", "--store", _store_state(ctx, {}), "--settings", json.dumps(CLIENT),
                "--out", str(ctx.dir / "out")], error)
      for name, distribution, params, error in [
          ("unknown", "bogus", ["0", "1"], r"repro: error: distribution: unknown distribution 'bogus'"),
          ("parameter-count", "pareto", ["1", "2", "3"], r"repro: error: --params: pareto takes 2 parameter\(s\)")]],
]


@pytest.mark.parametrize("fault", SECOND_PASS_FAULTS, ids=[f.id for f in SECOND_PASS_FAULTS])
def test_second_pass_command_faults(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def _trims_tools(tmp_path, monkeypatch, capsys, argv, config=""):
    from support import run_repro

    from repro.trims.originals import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CARML_CONFIG_FILE", raising=False)
    _write(tmp_path / "c.yml", f"micro18:\n  base_path: {tmp_path / 'm'}\n{config}")
    return run_repro([*argv[:2], "--config", tmp_path / "c.yml", *argv[2:]], capsys, main=main)  # after the command


@pytest.mark.parametrize("name, error", [
    ("-h", "unknown model '-h': no {base}/-h/manifest.json"),
    ("--base-path=/etc", "model name '--base-path=/etc': expected a directory name, one path component"),
    ("--format=json", "unknown model '--format=json': no {base}/--format=json/manifest.json")])
def test_trims_tools_reads_a_traced_model_name_as_a_name(tmp_path, monkeypatch, capsys, name, error):
    """`trims-tools trace memoryinfo t.json`, the trace's model_name "-h": repro's usage text (exit 2);
    "--base-path=/etc" moved the base path. A trace's text is a model name, never a flag."""
    (tmp_path / "m").mkdir()
    trace = _write(tmp_path / "t.json", json.dumps({"traceEvents": [], "otherData": {"model_name": name}}))
    code, out, err = _trims_tools(tmp_path, monkeypatch, capsys, ["trace", "memoryinfo", trace])
    assert (code, out) == (1, "")
    assert err.startswith("trims-tools: error: " + error.format(base=tmp_path / "m")) and err.count("\n") == 1, err


def test_trims_tools_refuses_a_model_directory_named_like_a_flag(tmp_path, monkeypatch, capsys):
    """`trims-tools client memory_usage`, the base path holding a model directory named --format=json: it
    was read as repro's flag, and that model left out of the table (exit 0)."""
    from repro.trims.models import generate

    generate("squeezenet_1.1", tmp_path / "m" / "--format=json", seed=1)
    code, out, err = _trims_tools(tmp_path, monkeypatch, capsys, ["client", "memory_usage"])
    assert (code, out) == (1, "")
    assert err == (f"trims-tools: error: micro18.base_path: {tmp_path}/m/--format=json: a model directory whose name "
                   "begins with '-'; expected a model's name (rename or move it)\n")


def test_trims_tools_names_a_models_list_of_no_names(tmp_path, monkeypatch, capsys):
    """`--models ,,,`: repro's "the following arguments are required: models" (exit 2), naming no flag given."""
    from repro.trims.models import generate

    generate("squeezenet_1.1", tmp_path / "m" / "squeezenet_1.1", seed=1)
    code, _, err = _trims_tools(tmp_path, monkeypatch, capsys, ["client", "memory_usage", "--models", ",,,"])
    assert (code, err) == (1, "trims-tools: error: --models: ',,,' names no model; expected a comma-separated list of "
                              "names or regular expressions, or all\n")


@pytest.mark.parametrize("command", [["trace", "combine", "--output", "out.json"],
                                     ["trace", "summarize", "--deep", "--output", "out.json"]], ids=["combine", "summarize"])
def test_trims_tools_reads_a_dash_named_trace_after_a_double_dash(tmp_path, monkeypatch, capsys, command):
    """`trims-tools trace combine --output out.json -- -t.json` (the original's `--` ends its flags): the file
    reached repro's command line as a flag ("the following arguments are required: inputs", exit 2)."""
    _write(tmp_path / "-t.json", json.dumps({"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1,
                                                               "tid": 1}]}))
    code, _, err = _trims_tools(tmp_path, monkeypatch, capsys, [*command, "--", "-t.json"])
    assert code == 0, err
    assert (tmp_path / "out.json").is_file()


@pytest.mark.service
def test_trims_tools_run_hands_on_text_that_begins_with_a_dash(tmp_path, monkeypatch, capsys):
    """`trims-tools run --experiment_description=-x`: the store started, then the client's command line was
    refused ("--experiment-description: expected one argument", exit 2) and the store left running."""
    from support import run_repro

    from repro.trims.models import generate

    generate("squeezenet_1.1", tmp_path / "m" / "squeezenet_1.1", seed=1)
    socket_path = tmp_path / "s.sock"
    config = f"  server_socket: {socket_path}\n  profile_output_directory: {tmp_path / 'p'}\n"
    try:
        code, _, err = _trims_tools(tmp_path, monkeypatch, capsys, ["run", "--experiment_description=-x",
                                                                    "--profile_output=-o", "-n", "1"], config)
    finally:
        if socket_path.exists():  # the old code's store: stopped, not left running
            run_repro(["trims", "server", "stop", "--socket", socket_path], capsys)
    assert code == 0, err
    assert [p.name for p in (tmp_path / "p").glob("*/*")] == ["-o"]


SHORT_TABLE = "mode,workload,preset,tpu_cost_mean,worker_cost_mean\nshort,ResNet50_v2-8,local,1.5,0.5\n"


def _compare_results_into(ctx, output, second_table=SHORT_TABLE):
    """`repro pecan compare-results r1 r2 --figure fig8_ResNet50_v2-8 -o OUTPUT` over two finished results/ directories."""
    order = {"cpu_s_per_element": 0.01, "bytes_out_per_element": 10, "per_reference_kernel": 10.0}
    calibration = {"pipeline": "resnet", "autoorder_saving": 0.1, "reference_kernel": {"cpu_s": 0.001},
                   "declared": order, "autoorder": order}
    for results in ("r1", "r2"):
        _write(ctx.dir / results / "calibration" / "resnet.json", json.dumps(calibration))
        _write(ctx.dir / results / "tables" / "ResNet50_v2-8.csv",
               SHORT_TABLE if results == "r1" else second_table)
    return ["pecan", "compare-results", ctx.dir / "r1", ctx.dir / "r2", "--config", CONFIG, "--figure", "fig8_ResNet50_v2-8",
            "-o", ctx.dir / output]


# the comparison CSV was written over a cost table or a calibration of the results it compared (exit 0)
COMPARE_RESULTS_FAULTS = [
    Fault(f"compare-results-output-over-{name}", lambda ctx, output=output: _compare_results_into(ctx, output),
          rf"repro: error: -o/--output .*/{output}: is one of the inputs; writing it would overwrite that input")
    for name, output in (("a-table", "r1/tables/ResNet50_v2-8.csv"), ("a-calibration", "r2/calibration/resnet.json"))]
# the second results' bars of another mode: a KeyError; a NaN in them: blamed on the output file
COMPARE_RESULTS_FAULTS += [
    Fault("compare-results-another-mode", lambda ctx: _compare_results_into(
        ctx, "c.csv", "mode,workload,preset,tpu_cost_mean,worker_cost_mean\nlong,ResNet50_v2-8,local,1.5,0.5\n"),
          r"repro: error: .*/r1: has 'fig8_ResNet50_v2-8 short tpu_cost \$', which .*/r2 lacks; expected results of the same"),
    Fault("compare-results-a-nan-cost", lambda ctx: _compare_results_into(
        ctx, "c.csv", "mode,workload,preset,tpu_cost_mean,worker_cost_mean\nshort,ResNet50_v2-8,local,nan,0.5\n"),
          r"repro: error: .*/r2: fig8_ResNet50_v2-8 short tpu_cost \$ is nan, not a finite number")]


@pytest.mark.parametrize("fault", COMPARE_RESULTS_FAULTS, ids=[f.id for f in COMPARE_RESULTS_FAULTS])
def test_compare_results_never_writes_over_what_it_compares(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def test_cluster_status_compares_an_empty_digest(tmp_path, monkeypatch, capsys):
    """`cluster status --expect ""` (an unset variable): the digest check was skipped and the status written (exit 0)."""
    fault = Fault("cluster-status-empty-expect", lambda ctx: [
        "cluster", "status", "--state", _write(ctx.dir / "state.json", json.dumps({"backend": "local", "trace_store": str(
            Path(_write(ctx.dir / "store" / "a.json", "{}")).parent), "settings_digest": "d"})), "--expect", "", "-o",
        str(ctx.dir / "status.json")],
                  r"repro: error: cluster status: 1 check\(s\) FAILED: cluster state .*/state.json matches the configuration")
    check_fault(fault, tmp_path, monkeypatch, capsys)


@pytest.mark.workflow
@pytest.mark.parametrize("concurrency", ["0", "01", "7"])
def test_a_trims_concurrency_the_config_lacks_is_no_target(workdir, concurrency):
    """`snakemake results/trims/runs/distribution/uniform-c0/report.json`: planned (exit 0) with the store
    start, generation and fetch before it, to fail at --concurrency; c01 planned a second run of c1."""
    from support import configfiles, snakemake

    proc = snakemake(workdir, "--dry-run", *configfiles(workdir), "--",
                     f"results/trims/runs/distribution/uniform-c{concurrency}/report.json", check=False)
    assert proc.returncode != 0
    assert "MissingRuleException" in proc.stdout + proc.stderr


def test_trims_summary_refuses_a_run_reported_twice(tmp_path):
    """`trims summary --distributions r.json r.json`: the run's rows twice (exit 0), each bar drawn twice."""
    from repro.errors import ReproError
    from repro.trims.experiments import summary

    report = {"experiment": "distribution", "distribution": "uniform", "params": [0.0, 1.0], "concurrency": 1,
              "wall_s": 0.3, "evictions": 0, "store": {"store_eviction": "lru", "store_budget_bytes": 1 << 26,
                                                      "store_device": "cpu", "store_host_tier_bytes": 0},
              "results": [{"model": "m", "iteration": i, "ok": True, "latency_us": 1000.0 + i, "trace": "t.json",
                           "hit": i > 0} for i in range(5)], "client": {"iterations": 5}}
    path = _write(tmp_path / "report.json", json.dumps(report))
    with pytest.raises(ReproError, match=r"^--distributions: two reports of uniform 1; expected one report per run$"):
        summary([], [path, path])
