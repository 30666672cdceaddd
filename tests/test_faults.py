"""Fault injection: bad input, hostile requests and killed processes, each with the outcome a user needs.

Every test here carries the `fault` marker and counts as one case in the summary line
`faults: N cases, N handled` (tests/conftest.py). Command-line faults are rows of `CLI_FAULTS`:
append a `Fault` to add one. Each row runs `repro` and requires exit code 1, exactly one line on
stderr matching `error` (which names the file, key or flag), no new, changed or deleted file or
directory under the test's directory (no partial output, earlier results intact) and no process
left running. Faults that need a live server or a killed process have their own tests below.
"""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import psutil
import pytest
import yaml

from repro.errors import ReproError
from repro.fsutil import write_json
from repro.processes import alive, matches, read_record
from repro.traces import write_trace
from repro.trims.server import StoreConnection
from support import run_repro, server_record, snapshot, start_server, stop_server

pytestmark = pytest.mark.fault

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "config.yaml"
HOST = socket.gethostname()
BINARY = bytes(range(256)) * 4


@dataclass(frozen=True)
class Fault:
    id: str
    prepare: Callable  # (ctx) -> the `repro` arguments; ctx.dir is the test's directory (the cwd)
    error: str  # regular expression the single stderr line must start with
    root: bool = False  # needs root (it mounts a file system)


def _trace(directory, name="trace.json"):
    write_trace(directory / name, [{"name": "step", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}],
                {"otherData": {"model_name": "m", "upr_enabled": False}})
    return str(directory / name)


def _write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


def _summarize_into(output):
    def prepare(ctx):
        return ["trace", "summarize", _trace(ctx.dir), "-o", str(ctx.dir / output(ctx))]

    return prepare


def _directory_output(ctx):
    (ctx.dir / "out").mkdir()
    return "out"


def _read_only_output(ctx):
    ctx.tmpfs(ctx.dir / "ro", "16k", readonly=True)
    return "ro/summary.json"


def _full_disk_output(ctx):
    full = ctx.tmpfs(ctx.dir / "full", "16k")
    fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill it up
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return "full/summary.json"


def _zero_throughput_log(ctx):
    lines = [f"I0101 00:00:{i:02d}.000000 1 keras_utils.py:145] TimeHistory: 1.00 seconds, 0.00 examples/second "
             f"between steps {i * 100} and {(i + 1) * 100}" for i in range(3)]
    log = _write(ctx.dir / "zero.log", "\n".join(lines) + "\n")
    return ["pecan", "costs", log, "--config", str(CONFIG), "--experiment", "ResNet50_v2-8", "-o",
            str(ctx.dir / "costs.csv")]


def _costs_into_directory(ctx):
    (ctx.dir / "costs.csv").mkdir()
    return ["pecan", "costs", str(REPO / "tests" / "fixtures" / "pecan-logs" / "resnet_colloc.log"), "--config",
            str(CONFIG), "--experiment", "ResNet50_v2-8", "-o", str(ctx.dir / "costs.csv")]


def _pecan_run(calibration=None, config=None, settings=None):
    def prepare(ctx):
        good = _write(ctx.dir / "retinanet.json", json.dumps(
            {"pipeline": "retinanet", "autoorder_saving": 0.1,
             "declared": {"cpu_s_per_element": 0.01, "bytes_out_per_element": 10},
             "autoorder": {"cpu_s_per_element": 0.009, "bytes_out_per_element": 10}}))
        argv = ["pecan", "run", "--experiment", "ResNet50_v2-8", "--mode", "collocated", "--out", str(ctx.dir / "run"),
                "--calibration", _write(ctx.dir / "resnet.json", calibration) if calibration is not None
                else str(ctx.dir / "missing.json"), good]
        if settings is not None:
            return argv + ["--settings", _write(ctx.dir / "settings.json", settings)]
        return argv + ["--config", _write(ctx.dir / "config.yaml", config) if config is not None else str(CONFIG)]

    return prepare


def _state(content, command):
    def prepare(ctx):
        return ["cluster", command, "--state", _write(ctx.dir / "state.json", content)]

    return prepare


def _trace_store_is_a_file(ctx):
    config = yaml.safe_load(CONFIG.read_text())
    config["trace_store"] = _write(ctx.dir / "store", "not a directory\n")
    return ["cluster", "start", "--config", _write(ctx.dir / "config.yaml", yaml.safe_dump(config)), "--state",
            str(ctx.dir / "state.json")]


def _trims_client(*extra, config=None):
    """A `repro trims client run --original` against the generated models, profiles under ctx.dir/profiles."""
    def prepare(ctx):
        text = config if config is not None else (
            f"micro18:\n  base_path: {ctx.models}\n  profile_output_directory: {ctx.dir / 'profiles'}\n")
        return ["trims", "client", "run", "--original", "--model", "squeezenet_1.1", "--device", "cpu",
                "--config", _write(ctx.dir / "carml.yml", text), *extra]

    return prepare


def _earlier_run(*extra):
    prepare = _trims_client(*extra)

    def with_earlier(ctx):
        _write(ctx.dir / "profiles" / HOST / "run1" / "original" / "squeezenet_1.1" / "original-00000.json",
               '{"traceEvents": [], "earlier": true}\n')
        _write(ctx.dir / "profiles" / HOST / "run1" / ".repro-made", "")  # as a run marks its directory
        return prepare(ctx)

    return with_earlier


def _victim(where):
    prepare = _trims_client("--profile-output", where, "--profile-output-overwrite")

    def with_victim(ctx):
        _write(ctx.dir / "victim" / "original" / "keep.txt", "an unrelated file\n")
        return prepare(ctx)

    return with_victim


CLI_FAULTS = [
    Fault("output-is-a-directory", _summarize_into(_directory_output), r"repro: error: .*/out: cannot write: it is a directory"),
    Fault("output-in-read-only-directory", _summarize_into(_read_only_output),
          r"repro: error: .*/ro/summary.json: cannot write \(Read-only file system\)", root=True),
    Fault("output-on-full-disk", _summarize_into(_full_disk_output),
          r"repro: error: .*/full/summary.json: cannot write \(No space left on device\)", root=True),
    Fault("costs-output-is-a-directory", _costs_into_directory, r"repro: error: .*/costs.csv: cannot write: it is a directory"),
    Fault("combine-output-is-a-directory",
          lambda ctx: ["trace", "combine", _trace(ctx.dir), "-o", str(ctx.dir / _directory_output(ctx))],
          r"repro: error: .*/out: cannot write: it is a directory"),
    Fault("costs-log-missing",
          lambda ctx: ["pecan", "costs", str(ctx.dir / "nope.log"), "--config", str(CONFIG), "--experiment", "ResNet50_v2-8"],
          r"repro: error: .*/nope.log: cannot read log"),
    Fault("costs-unknown-experiment",
          lambda ctx: ["pecan", "costs", str(REPO / "tests" / "fixtures" / "pecan-logs" / "resnet_colloc.log"), "--config",
                       str(CONFIG), "--experiment", "Nope"],
          r"repro: error: unknown experiment 'Nope'"),
    Fault("costs-all-samples-zero", _zero_throughput_log,
          r"repro: error: .*/zero.log: every throughput sample is 0 examples/second"),
    Fault("calibrate-outputs-miscounted",
          lambda ctx: ["pecan", "calibrate", "--pipeline", "resnet", "retinanet", "-o", str(ctx.dir / "resnet.json")],
          r"repro: error: --output: 1 file\(s\) for 2 --pipeline value\(s\)"),
    Fault("calibrate-pipeline-twice",
          lambda ctx: ["pecan", "calibrate", "--pipeline", "resnet", "resnet", "-o", str(ctx.dir / "a.json"),
                       str(ctx.dir / "b.json")],
          r"repro: error: --pipeline: resnet resnet names a pipeline twice"),
    Fault("calibration-missing", _pecan_run(), r"repro: error: --calibration .*/missing.json: cannot read"),
    Fault("calibration-binary", _pecan_run(calibration=BINARY), r"repro: error: --calibration .*/resnet.json: not JSON"),
    Fault("calibration-not-a-calibration", _pecan_run(calibration='{"pipeline": "resnet"}'),
          r"repro: error: --calibration .*/resnet.json: not a calibration"),
    Fault("calibration-a-list", _pecan_run(calibration="[1]"), r"repro: error: --calibration .*/resnet.json: not a calibration"),
    Fault("config-missing",
          lambda ctx: ["pecan", "run", "--config", str(ctx.dir / "nope.yaml"), "--experiment", "ResNet50_v2-8", "--mode",
                       "collocated", "--calibration", str(ctx.dir / "c.json"), "--out", str(ctx.dir / "run")],
          r"repro: error: .*/nope.yaml: cannot read config"),
    Fault("config-binary", _pecan_run(calibration="[1]", config=BINARY), r"repro: error: .*/config.yaml: not a text file"),
    Fault("config-check-missing", lambda ctx: ["config", "check", "--base", str(CONFIG), str(ctx.dir / "nope.yaml")],
          r"repro: error: .*/nope.yaml: cannot read config: No such file"),
    Fault("config-check-invalid-yaml",
          lambda ctx: ["config", "check", "--base", str(CONFIG), _write(ctx.dir / "my.yaml", "seed: 1\nrepeats: [2\n")],
          r"repro: error: .*/my.yaml: invalid YAML, line 3, column 1: expected ',' or '\]'"),
    Fault("config-check-bad-value",
          lambda ctx: ["config", "check", "--base", str(CONFIG), _write(ctx.dir / "my.yaml", "repeats: many\n")],
          r"repro: error: .*/config.yaml \+ .*/my.yaml: repeats: 'many' is not of type 'integer'"),
    Fault("settings-without-pecan", _pecan_run(calibration="[1]", settings='{"seed": 1}'),
          r"repro: error: --settings .*/settings.json: .*missing pecan"),
    Fault("state-empty-object-status", _state("{}", "status"), r"repro: error: .*/state.json: not a cluster state"),
    Fault("state-list-status", _state("[1]", "status"), r"repro: error: .*/state.json: not a cluster state"),
    Fault("state-empty-object-stop", _state("{}", "stop"), r"repro: error: .*/state.json: not a cluster state"),
    Fault("state-list-stop", _state("[1]", "stop"), r"repro: error: .*/state.json: not a cluster state"),
    Fault("state-binary-stop", _state(BINARY, "stop"),
          r"repro: error: .*/state.json: not JSON \(expected the cluster state JSON that cluster start writes\); run cluster start first"),
    Fault("trace-store-is-a-file", _trace_store_is_a_file, r"repro: error: .*/store\b"),
    Fault("trace-truncated-validate", lambda ctx: ["trace", "validate", _write(ctx.dir / "t.json", '{"traceEvents": [{"ph"')],
          r"INVALID .*/t.json"),
    Fault("trace-truncated-summarize",
          lambda ctx: ["trace", "summarize", _write(ctx.dir / "t.json", '{"traceEvents": [{"ph"'), "-o", str(ctx.dir / "s.json")],
          r"repro: error: .*/t.json"),
    Fault("trace-not-json-combine",
          lambda ctx: ["trace", "combine", _write(ctx.dir / "t.json", BINARY), "-o", str(ctx.dir / "c.json")],
          r"repro: error: .*/t.json"),
    Fault("trace-events-not-a-list-combine",
          lambda ctx: ["trace", "combine", _write(ctx.dir / "t.json", '{"traceEvents": 5}'), "-o", str(ctx.dir / "c.json")],
          r"repro: error: .*/t.json"),
    Fault("tool-config-binary", _trims_client(config=BINARY), r"repro: error: .*/carml.yml: not a text file"),
    # its requests were made twice over
    Fault("client-a-model-twice", _trims_client("--model", "squeezenet_1.1", "squeezenet_1.1"),
          r"repro: error: --model: 'squeezenet_1.1' named twice; expected each model once$"),
    Fault("tool-config-a-list", _trims_client(config="- 1\n"), r"repro: error: .*/carml.yml: expected a mapping"),
    Fault("tool-config-section-a-list", _trims_client(config="micro18: [1]\n"), r"repro: error: .*/carml.yml: "),
    Fault("trims-unknown-model", _trims_client("--model", "nope"), r"repro: error: --model: unknown model\(s\) \['nope'\]"),
    Fault("trims-base-path-missing", _trims_client("--base-path", "/nonexistent/models"),
          r"repro: error: --base-path /nonexistent/models: no such directory \(each model a directory with a manifest.json"),
    Fault("trims-base-path-empty", lambda ctx: _trims_client("--base-path", str(ctx.dir))(ctx),
          r"repro: error: --base-path .*: holds no models"),
    Fault("summarize-group-by-unknown-field",
          lambda ctx: ["trace", "summarize", _trace(ctx.dir), "--group-by", "model_name,colour", "-o", str(ctx.dir / "s.json")],
          r"repro: error: group-by field\(s\) \['colour'\]: no trace records them; fields to group by: "
          r"\['eager_mode', 'eager_mode_async', 'experiment_description', 'file', 'hostname', 'model_name', "
          r"'run_id', 'server', 'upr_enabled'\]"),
    Fault("profile-output-absolute", _victim("{dir}/victim"), r"repro: error: --profile-output .*victim.*: expected a relative name"),
    Fault("profile-output-parent", _victim("../../victim"), r"repro: error: --profile-output '\.\./\.\./victim': expected a relative name"),
    Fault("profile-output-rerun", _earlier_run("--profile-output", "run1"),
          r"repro: error: .*/run1: holds an earlier run's traces; pass --profile-output-overwrite"),
]


@pytest.fixture
def tmpfs():
    """Mount small tmpfs file systems (root only); unmounted afterwards."""
    mounted = []

    def mount(path, size, readonly=False):
        path.mkdir()
        options = f"size={size}" + (",ro" if readonly else "")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("fault", CLI_FAULTS, ids=[f.id for f in CLI_FAULTS])
def test_cli_fault(fault, tmp_path, monkeypatch, capsys, tmpfs, models):
    if fault.root and os.geteuid() != 0:
        pytest.skip("needs root to mount a file system")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ctx = SimpleNamespace(dir=work, tmpfs=tmpfs, models=models)
    argv = [a.format(dir=work) for a in fault.prepare(ctx)]
    before = snapshot(work)
    children = {p.pid for p in psutil.Process().children(recursive=True)}

    code, _, err = run_repro(argv, capsys)

    assert code == 1, f"exit code {code}; stderr: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert re.match(fault.error, lines[0]), lines[0]
    assert snapshot(work) == before, "files were written, changed or deleted"
    left = {p.pid for p in psutil.Process().children(recursive=True)} - children
    assert not left, f"processes left running: {left}"


# -- the model store server ---------------------------------------------------------------


def _raw(sock):
    """A raw connection to the server: send lines, read answers."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    conn.connect(str(sock))
    return conn, conn.makefile("rb")


def _ask(conn, reader, line):
    conn.sendall(line)
    answer = reader.readline()
    assert answer, f"the server dropped the connection after {line!r}"
    return json.loads(answer)


@pytest.mark.parametrize("where", ["absolute", "parent"])
def test_store_refuses_models_outside_its_base_path(models, module_server, tmp_path, where):
    sock, _ = module_server
    evil = tmp_path / "outside" / "evil"
    shutil.copytree(models / "squeezenet_1.1", evil)
    name = str(evil) if where == "absolute" else os.path.relpath(evil, models)
    conn, reader = _raw(sock)
    answer = _ask(conn, reader, json.dumps({"op": "acquire", "model": name}).encode() + b"\n")
    # a name that is a path is refused as one; a symlink leading out: test_faults_trims
    assert answer["ok"] is False and "one path component" in answer["error"], answer
    assert _ask(conn, reader, b'{"op": "status"}\n')["models"] == {}
    conn.close()


MALFORMED = [
    ("not-json", b"not json\n", "not a JSON line"),
    ("not-utf8", b"\xff\xfe\n", "not a JSON line"),
    ("json-list", b"[1, 2]\n", "expected a JSON object"),
    ("missing-op", b'{"model": "squeezenet_1.1"}\n', "'op' must be one of"),
    ("op-a-list", b'{"op": ["shutdown"]}\n', "'op' must be one of"),
    ("model-a-number", b'{"op": "acquire", "model": 5}\n', "needs a 'model' name"),
    ("model-a-list", b'{"op": "acquire", "model": ["a"]}\n', "needs a 'model' name"),
    ("release-unheld", b'{"op": "release", "model": "squeezenet_1.1"}\n', "holds no reference"),
]


@pytest.mark.parametrize("line, message", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_server_answers_malformed_requests(module_server, line, message):
    sock, pid = module_server
    conn, reader = _raw(sock)
    answer = _ask(conn, reader, line)
    assert answer["ok"] is False and message in answer["error"], answer
    assert _ask(conn, reader, b'{"op": "status"}\n')["pid"] == pid  # the same connection still works
    conn.close()
    assert alive(pid) and "Traceback" not in (sock.parent / "server.log").read_text()


FAKE_SERVER = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.setgid(65534); os.setuid(65534)  # the kernel records who listens: another user
s.listen()
print("ready", flush=True)
while True:
    conn, _ = s.accept()
    try:
        conn.recv(4096)
        conn.sendall(b'{"ok": true, "pid": 1, "device": "cpu", "shm": "fake", "size": 1, "hit": true, "models": {}}\\n')
    except OSError:
        pass
    conn.close()
"""


def test_client_refuses_a_server_run_by_another_user(tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user")
    sock = tmp_path / "fake.sock"
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, str(sock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(ReproError, match="runs as uid 65534, not as this user"):
            StoreConnection(sock).request({"op": "status"})
        code, _, err = run_repro(["trims", "server", "status", "--socket", sock], capsys)
        assert code == 1 and err.count("\n") == 1 and "refusing to use it" in err
    finally:
        proc.kill()
        proc.wait()


def test_default_socket_lies_in_a_private_directory(tmp_path, monkeypatch, capsys):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    code, _, err = run_repro(["trims", "server", "status"], capsys)
    assert code == 1 and f"cannot connect to {runtime}/repro/trims.sock" in err, err
    info = (runtime / "repro").stat()
    assert info.st_mode & 0o777 == 0o700 and info.st_uid == os.getuid()
    # a directory someone else could enter is refused, not used
    (runtime / "repro").chmod(0o777)
    code, _, err = run_repro(["trims", "server", "status"], capsys)
    assert code == 1 and err.startswith(f"repro: error: {runtime}/repro: not a private directory"), err
    # without a (private) XDG_RUNTIME_DIR: a per-user directory in the temp directory
    runtime.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "tmp").mkdir()
    code, _, err = run_repro(["trims", "server", "status"], capsys)
    assert code == 1 and f"cannot connect to {tmp_path}/tmp/repro-{os.getuid()}/trims.sock" in err, err
    assert (tmp_path / "tmp" / f"repro-{os.getuid()}").stat().st_mode & 0o777 == 0o700


def test_a_second_daemon_on_a_live_socket_is_refused(models, server, tmp_path, capsys):
    sock, pid = server
    code, out, err = run_repro(["trims", "server", "run", "-d", "--socket", sock, "--base-path", models, "--memory-mb",
                                "64", "--device", "cpu", "--pid-file", tmp_path / "second.pid", "--log-file",
                                tmp_path / "second.log"], capsys)
    assert code == 1, out
    assert err == f"repro: error: a model store server already runs on {sock} (pid {pid}); stop it first with " \
                  f"`repro trims server stop --socket {sock}`\n"
    assert not (tmp_path / "second.pid").exists()
    record = read_record(tmp_path / "store.pid")  # the running server's record: pid and start time
    assert record["pid"] == pid and matches(record)


def _segments(sock):
    """The shared memory segments of the server on `sock` (other processes' come and go meanwhile)."""
    from repro.trims.modelstore import segment_prefix

    return {name for name in os.listdir("/dev/shm") if name.startswith(segment_prefix(sock))}


@pytest.mark.parametrize("cleaner", ["restart", "stop"])
@pytest.mark.service
def test_a_killed_servers_shared_memory_is_removed(models, tmp_path, capsys, cleaner):
    sock = tmp_path / "store.sock"
    pid = start_server(models, tmp_path)
    try:
        connection = StoreConnection(sock)
        connection.request({"op": "acquire", "model": "squeezenet_1.1"})
        connection.close()
        leaked = _segments(sock)
        assert leaked
    finally:
        os.killpg(pid, signal.SIGKILL)
        stop_server(pid)
    assert leaked <= _segments(sock)  # nothing unlinked them
    if cleaner == "restart":
        pid = start_server(models, tmp_path)
        stop_server(pid, server_record(tmp_path), tmp_path)
    else:
        code, _, err = run_repro(["trims", "server", "stop", "--socket", sock], capsys)
        assert code == 1 and "not running" in err and "removed 1 shared memory segment(s)" in err, err
    assert not _segments(sock)


@pytest.mark.service
def test_cluster_stop_removes_a_killed_model_stores_shared_memory(models, tmp_path):
    from repro.trims import service

    settings = {"base_path": str(models), "server": {"memory_mb": 256, "eviction": "lru", "device": "cpu"}}
    record = service.start(settings, tmp_path / "store-state.json", workdir=tmp_path)
    pid = record["process"]["pid"]
    try:
        connection = StoreConnection(record["socket"])
        connection.request({"op": "acquire", "model": "squeezenet_1.1"})
        connection.close()
        leaked = _segments(record["socket"])
    finally:
        os.killpg(pid, signal.SIGKILL)
        stop_server(pid)
    assert leaked and leaked <= _segments(record["socket"])
    service.stop(tmp_path)
    assert not _segments(record["socket"])


# -- clients -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["original", pytest.param("shared", marks=pytest.mark.service)])
@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_damaged_model_files_fail_their_requests(models, tmp_path, capsys, damage, mode):
    base = tmp_path / "base"
    shutil.copytree(models / "squeezenet_1.1", base / "squeezenet_1.1")
    params = base / "squeezenet_1.1" / "model.params"
    data = bytearray(params.read_bytes())
    if damage == "corrupt":
        data[1000:1004] = b"\x7f\x7f\x7f\x7f"  # same size, different weights
    else:
        del data[len(data) // 2:]
    params.write_bytes(bytes(data))
    config = _write(tmp_path / "carml.yml", f"micro18:\n  profile_output_directory: {tmp_path / 'profiles'}\n")
    argv = ["trims", "client", "run", "--base-path", base, "--iterations", "2", "--device", "cpu", "--config", config,
            "--results", tmp_path / "r.json"]
    if mode == "original":
        code, out, err = run_repro([*argv, "--original"], capsys)
    else:  # the store checks the model when it loads it
        pid = start_server(base, tmp_path)
        try:
            code, out, err = run_repro([*argv, "--socket", tmp_path / "store.sock"], capsys)
        finally:
            stop_server(pid, server_record(tmp_path), tmp_path)
    assert code == 1, out
    expected = "truncated or corrupt" if damage == "truncated" and mode == "original" else "checksum mismatch"
    failed = [line for line in err.splitlines() if line.startswith("  FAILED request")]
    assert len(failed) == 2 and all(f"{params}:" in line and expected in line for line in failed), err
    assert err.splitlines()[-1] == "repro: error: 2 request(s) failed"
    assert not list((tmp_path / "profiles").rglob("*.json"))  # no trace claims a result
    assert not any(r["ok"] for r in json.loads((tmp_path / "r.json").read_text())[mode]["results"])


def test_a_killed_model_store_fails_the_remaining_requests(models, server, tmp_path, capsys, monkeypatch):
    sock, pid = server
    options = ["--base-path", str(models), "--device", "cpu", "--model", "squeezenet_1.1"]
    script = ("import sys; from repro.cli import main; "
              f"sys.exit(main(['trims', 'client', 'run', *{options!r}, '--socket', '{sock}', '--iterations', '400']))")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # killed once the client's requests run (it checks the store before the first)
    while time.monotonic() < deadline and not StoreConnection(sock).request({"op": "status"})["models"]:
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "FAILED request" in err and err.splitlines()[-1].startswith("repro: error: ") and "Traceback" not in err
    # a client asking a store that is not there: named, one request failed, nothing hangs (in this process)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_repro(["trims", "client", "run", *options, "--socket", tmp_path / "nobody.sock"], capsys)
    assert code == 1 and "nobody.sock" in err and "not running" in err


# -- output files ----------------------------------------------------------------------------


def test_json_output_never_holds_non_finite_numbers(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(ReproError, match=r"out.json: runs\[1\].latency is not a finite number"):
        write_json(target, {"runs": [{"latency": 1.0}, {"latency": float("inf")}]})
    assert list(tmp_path.iterdir()) == []


def test_outputs_are_readable_as_the_umask_allows(tmp_path):
    """Written beside the target and renamed, an output still gets the mode open() would give it,
    not the owner-only mode of its temporary file."""
    write_json(tmp_path / "out.json", {"ok": 1})
    (tmp_path / "opened").write_text("")
    mode = stat.S_IMODE((tmp_path / "opened").stat().st_mode)
    assert mode & 0o044  # the usual umask lets others read: the comparison below can tell
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == mode
