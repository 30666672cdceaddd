"""Fault injection for TrIMS: the model store's trust boundaries (paths, manifests, requests, peers,
answers, its socket) and the `repro trims` / `trims-tools` command lines.

Every test carries the `fault` marker (one case each in the suite's summary line). Servers are real
processes started by tests/support.py and stopped by their recorded pid; no test leaves a shared
memory segment of its server behind.
"""

import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from repro.cli import main
from repro.processes import describe, matches, read_record
from repro.trims.modelstore import segment_prefix
from repro.trims.originals import main as tools_main
from support import run_forked, snapshot, start_server, stop_server

pytestmark = pytest.mark.fault

MODEL = "squeezenet_1.1"


def _segments(sock):
    """The shared memory segments of the server on `sock`."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(segment_prefix(sock))}


def _raw(sock, timeout=20):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    conn.connect(str(sock))
    return conn, conn.makefile("rb")


def _ask(conn, reader, payload):
    conn.sendall(payload if isinstance(payload, bytes) else json.dumps(payload).encode() + b"\n")
    answer = reader.readline()
    assert answer, f"the server dropped the connection after {payload!r:.200}"
    return json.loads(answer)


def _copy_model(models, target):
    """A copy of the generated model in `target`: the large file hard-linked, the manifest a copy."""
    target.mkdir(parents=True)
    for name in ("model.onnx", "model.params"):
        os.link(models / MODEL / name, target / name)
    shutil.copy(models / MODEL / "manifest.json", target / "manifest.json")
    return target


def _edit_manifest(directory, edit):
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    result = edit(manifest)
    path.unlink()  # not through the link: the copy's manifest is its own file
    if isinstance(result, (bytes, str)):
        (path.write_bytes if isinstance(result, bytes) else path.write_text)(result)
    else:
        path.write_text(json.dumps(manifest if result is None else result))


def _set(**fields):
    return lambda m: m.update(fields)


def _last_tensor_beyond(m):
    m["tensors"][-1]["offset"] = m["params_bytes"]


def _sha_escape(m):
    m["sha256"]["../../escaped"] = m["sha256"]["model.params"]


def _drop(key):
    return lambda m: m.pop(key)


MANIFESTS = [  # (id, edit): each gets an error answer, and no segment is created
    ("params-float", lambda m: m.update(params_bytes=float(m["params_bytes"]))),
    ("params-string", lambda m: m.update(params_bytes=str(m["params_bytes"]))),
    ("params-negative", _set(params_bytes=-1)),
    ("params-bool", _set(params_bytes=True)),
    ("tensors-missing", _drop("tensors")),
    ("tensors-a-mapping", _set(tensors={"a": 1})),
    ("tensor-beyond-params", _last_tensor_beyond),
    ("sha256-missing", _drop("sha256")),
    ("sha256-a-path-outside", _sha_escape),
    ("manifest-a-list", lambda m: [1]),
    ("manifest-deep", lambda m: "[" * 100_000 + "]" * 100_000),
]


@pytest.fixture(scope="module")
def hostile_store(models, tmp_path_factory):
    """A server over a base path holding the good model and one broken copy per MANIFESTS row, plus
    a model whose weights are a symlink out of the base path and one whose manifest is a FIFO."""
    root = tmp_path_factory.mktemp("hostile")
    base = root / "base"
    _copy_model(models, base / MODEL)
    for kind, edit in MANIFESTS:
        _edit_manifest(_copy_model(models, base / kind), edit)
    outside = _copy_model(models, root / "outside")
    linked = base / "params-symlink-outside"
    linked.mkdir()
    shutil.copy(models / MODEL / "manifest.json", linked / "manifest.json")
    os.symlink(outside / "model.params", linked / "model.params")
    fifo = _copy_model(models, base / "manifest-fifo")
    (fifo / "manifest.json").unlink()
    os.mkfifo(fifo / "manifest.json")
    server_dir = root / "server"
    server_dir.mkdir()
    pid = start_server(base, server_dir)
    record = describe(pid, "test server")
    sock = server_dir / "store.sock"
    yield SimpleNamespace(sock=sock, pid=pid, base=base)
    stop_server(pid, record)
    assert not _segments(sock), "segments outlived the store's clean stop"


def _refused(store, name, message):
    conn, reader = _raw(store.sock)
    try:
        answer = _ask(conn, reader, {"op": "acquire", "model": name})
        assert answer["ok"] is False and re.search(message, answer["error"]), answer
        assert _ask(conn, reader, {"op": "status"})["ok"] is True  # the connection still serves
    finally:
        conn.close()
    assert not _segments(store.sock), "a refused model left a shared memory segment"
    assert matches(describe(store.pid, "test server"))


@pytest.mark.parametrize("kind", [m[0] for m in MANIFESTS])
def test_store_answers_a_malformed_manifest(hostile_store, kind):
    _refused(hostile_store, kind, r"manifest\.json")


def test_store_refuses_weights_symlinked_outside_its_base_path(hostile_store):
    _refused(hostile_store, "params-symlink-outside", "outside the store's base path")


def test_store_answers_a_manifest_that_is_a_fifo(hostile_store):
    _refused(hostile_store, "manifest-fifo", r"manifest.json: is a FIFO; expected a regular file \(a model manifest\)")


@pytest.mark.parametrize("name, message", [
    ("squeeze\0net", "no NUL byte"), ("m" * 300, "at most 255 bytes"), ("\ud800", "not UTF-8"),
    ("..", "one path component"), (".", "one path component"),
    # another name for the model's own directory would load its weights a second time
    (f"x/../{MODEL}", "one path component"), (f"./{MODEL}", "one path component"), (f"{MODEL}/", "one path component"),
], ids=["nul-byte", "overlong", "lone-surrogate", "dot-dot", "dot", "up-and-back", "dot-slash", "trailing-slash"])
def test_store_answers_a_model_name_it_cannot_use(hostile_store, name, message):
    _refused(hostile_store, name, message)


def test_store_answers_a_deeply_nested_request(hostile_store):
    conn, reader = _raw(hostile_store.sock)
    try:
        answer = _ask(conn, reader, b"[" * 30_000 + b"]" * 30_000 + b"\n")  # within MAX_LINE
        assert answer["ok"] is False and "nested too deeply" in answer["error"], answer
        assert _ask(conn, reader, {"op": "status"})["ok"] is True
    finally:
        conn.close()


def test_store_bounds_a_request_line(hostile_store):
    from repro.trims.server import MAX_LINE

    conn, reader = _raw(hostile_store.sock)
    try:
        answer = _ask(conn, reader, b'{"op": "status", "pad": "' + b"x" * (MAX_LINE + 100) + b'"}\n')
        assert answer["ok"] is False and "longer than" in answer["error"], answer
    finally:
        conn.close()
    assert matches(describe(hostile_store.pid, "test server"))


def _as_another_user(sock, requests, uid=65534):
    """The answers (None: the connection was closed) the store on `sock` gives a process of uid `uid`:
    a forked child of this process (the interpreter may lie where that user cannot read it)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        answers = []
        try:
            os.close(read)
            os.setuid(uid)
            conn, reader = _raw(sock)
            for request in requests:
                try:
                    conn.sendall(json.dumps(request).encode() + b"\n")
                    line = reader.readline()
                    answers.append(json.loads(line) if line else None)
                except OSError:
                    answers.append(None)
        finally:
            os.write(write, json.dumps(answers).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(child, 0)
    return json.loads(data)


@pytest.mark.service
def test_store_serves_only_its_own_user(models, tmp_path):
    """A socket anyone can reach (umask 000, a world-writable directory): another user's requests
    are refused on every connection, whatever the directory's mode."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another user")
    shared = Path(tempfile.mkdtemp(prefix="repro-open-"))
    shared.chmod(0o777)
    old_umask = os.umask(0)
    try:
        pid = start_server(models, shared)
    finally:
        os.umask(old_umask)
    record = describe(pid, "test server")
    sock = shared / "store.sock"
    try:
        answers = _as_another_user(sock, [{"op": "acquire", "model": MODEL}, {"op": "shutdown"}])
        assert answers and answers[0]["ok"] is False and "serves uid" in answers[0]["error"], answers
        assert all(a is None or a["ok"] is False for a in answers), answers
        assert matches(record), "another user shut the store down"
        assert not _segments(sock)
    finally:
        stop_server(pid, record)
        shutil.rmtree(shared)


# -- the server's socket, pid file and log --------------------------------------------------


def _server_argv(models, sock, *extra):
    return ["trims", "server", "run", "--socket", str(sock), "--base-path", str(models), "--memory-mb", "10",
            "--device", "cpu", *extra]


def _stop_whatever_answers(sock):
    """Stop a server the old code would have started on `sock` (a failed test leaves nothing running)."""
    from repro.trims.server import server_pid

    pid = server_pid(sock) if os.path.exists(sock) else None
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        psutil.Process(pid).wait(30)


def _run(argv, capsys):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_file_at_the_socket_path_is_never_deleted(models, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "some.csv"
    victim.write_text("a,b\n1,2\n")
    try:
        code, _, err = _run([*_server_argv(models, victim), "-d"], capsys)
    finally:
        _stop_whatever_answers(victim)
    assert victim.read_text() == "a,b\n1,2\n"
    assert code == 1 and err.count("\n") == 1 and "exists and is not a socket" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["some.csv"]  # no log, no pid file


@pytest.mark.service
def test_a_socket_another_program_answers_on_is_not_taken(models, tmp_path, capsys):
    sock = tmp_path / "busy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen()
    identity = os.stat(sock).st_ino
    try:
        code, _, err = _run(_server_argv(models, sock), capsys)
    finally:
        listener.close()
    assert code == 1 and "another program answers" in err, err
    assert os.stat(sock).st_ino == identity  # still the listener's socket


def test_a_pid_file_that_is_not_a_record_is_not_overwritten(models, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    keep = tmp_path / "results.json"
    keep.write_text('{"important": true}\n')
    sock = tmp_path / "store.sock"
    try:
        code, _, err = _run([*_server_argv(models, sock), "-d", "--pid-file", keep], capsys)
    finally:
        _stop_whatever_answers(sock)
    assert keep.read_text() == '{"important": true}\n'
    assert code == 1 and "--pid-file" in err and "refusing to overwrite" in err, err


def test_a_log_file_that_is_a_fifo_is_refused(models, tmp_path):
    os.mkfifo(tmp_path / "log")
    sock = tmp_path / "store.sock"
    try:
        proc = _serve(_server_argv(models, sock, "-d", "--log-file", tmp_path / "log"), sock, tmp_path)
    finally:
        _stop_whatever_answers(sock)
    assert proc.returncode == 1 and "--log-file" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_missing_base_path_is_refused_before_serving(tmp_path):
    sock = tmp_path / "store.sock"
    proc = _serve(_server_argv(tmp_path / "nope", sock), sock, tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("repro: error: --base-path"), proc.stderr
    assert not sock.exists()


@pytest.mark.service
def test_the_server_removes_only_the_socket_it_bound(models, tmp_path):
    pid = start_server(models, tmp_path)
    record = describe(pid, "test server")
    sock = tmp_path / "store.sock"
    try:
        os.rename(sock, tmp_path / "moved.sock")
        sock.write_text("put here after the server started\n")
        os.kill(pid, signal.SIGTERM)
        psutil.Process(pid).wait(30)
    finally:
        stop_server(pid, record)
    assert sock.read_text() == "put here after the server started\n"
    assert read_record(tmp_path / "store.pid") is None


# -- clients: what a store answers --------------------------------------------------------


class _FakeStore(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A process of this user on the socket, answering acquire with `answer` (bytes, one line)."""

    daemon_threads = True


def _fake_store(sock, answer):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                op = json.loads(line)["op"]
                self.wfile.write(answer if op == "acquire" else b'{"ok": true}\n')

    server = _FakeStore(str(sock), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _segment(name, size):
    shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    resource_tracker.unregister(shm._name, "shared_memory")
    return shm


def _answers(models, sock):
    size = json.loads((models / MODEL / "manifest.json").read_text())["params_bytes"]
    own = segment_prefix(sock) + "1_2_3"
    return {
        "foreign-segment": (lambda: _segment(f"victim_{os.getpid()}", size),
                            {"ok": True, "device": "cpu", "shm": f"victim_{os.getpid()}", "size": size, "hit": False},
                            "not one of its own"),
        "size-not-the-manifests": (lambda: _segment(own, 4096),
                                   {"ok": True, "device": "cpu", "shm": own, "size": 4096, "hit": False},
                                   "its manifest says"),
        "deep-json": (None, "[" * 30_000, "malformed answer"),
        "gpu-without-ipc": (None, {"ok": True, "device": "gpu", "size": size, "hit": False}, "CUDA IPC handle"),
        "endless-line": (None, "x" * (1 << 20), "longer than"),
    }


@pytest.mark.parametrize("kind", ["foreign-segment", "size-not-the-manifests", "deep-json", "gpu-without-ipc",
                                  "endless-line"])
def test_client_checks_what_the_store_hands_out(models, tmp_path, kind):
    from repro.trims.client import Client, ClientOptions

    sock = tmp_path / "fake.sock"
    make, answer, message = _answers(models, sock)[kind]
    segment = make() if make else None
    line = (answer if isinstance(answer, str) else json.dumps(answer)).encode() + b"\n"
    server = _fake_store(sock, line)
    try:
        results, _ = Client(ClientOptions(base_path=models, socket=sock, device="cpu")).run([(MODEL, 0)])
    finally:
        server.shutdown()
        server.server_close()
        if segment is not None:
            segment.close()
            segment.unlink()
    assert results[0]["ok"] is False and message in results[0]["error"], results


# -- command lines ------------------------------------------------------------------------


def _one_line(run, work, capsys, pattern, status=1):
    """`run()` exits with `status` (1: bad input, 2: a usage error) with one line on stderr matching `pattern`,
    and writes, changes or deletes nothing."""
    before = snapshot(work.dir)
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == status and len(lines) == 1 and re.search(pattern, lines[0]), f"exit {code}: {err[-2000:]}"
    assert snapshot(work.dir) == before, "files were written, changed or deleted"


def _tools(work, *words):
    return lambda: tools_main(["client", "run", "--original", f"--config={work.config}", *words])


def _repro(work, *words):
    return lambda: main(["trims", "client", "run", "--original", "--device", "cpu", "--config", str(work.config),
                         *[str(w) for w in words]])


@pytest.mark.parametrize("words, pattern", [
    (["--concurrent=100000000000000000000000"], r"--concurrent: expected a whole number from 1 to 1024"),
    (["--concurrent=0"], r"--concurrent: expected a whole number from 1"),
    (["--models_percentage=NaN"], r"--models_percentage: expected a fraction"),
    (["--models_percentage=-0.5"], r"--models_percentage: expected a fraction"),
    (["--model_iterations=0"], r"--model_iterations: expected at least 1 request per model"),
    (["--model_iterations=-7"], r"--model_iterations: expected at least 1 request per model"),
    (["-n", "5000000000"], r"--iterations: expected a whole number from 1 to 1000000"),
], ids=["concurrent-overflow", "concurrent-zero", "models-percentage-nan", "models-percentage-negative",
        "model-iterations-zero", "model-iterations-negative", "iterations-huge"])
def test_trims_tools_client_flags_out_of_range(work, capsys, words, pattern):
    _one_line(_tools(work, *words), work, capsys, r"^trims-tools: error: " + pattern)


@pytest.mark.parametrize("words, pattern", [
    (["--seed", "-1", "--distribution", "pareto"], r"--seed: expected a whole number from 0"),
    (["--seed", str(2**70)], r"--seed: expected a whole number from 0"),
], ids=["seed-negative-pareto", "seed-huge"])
def test_repro_client_flags_out_of_range(work, capsys, words, pattern):
    _one_line(_repro(work, *words), work, capsys, r"^repro: error: " + pattern)


@pytest.mark.parametrize("words, pattern", [
    (["trims-tools", "client", "run", "--concurrent=0"], r"--concurrent: expected a whole number from 1"),
    (["trims-tools", "client", "run", "--distribution=gauss"], r"--distribution: invalid choice 'gauss' \(choose from"),
    (["trims-tools", "client", "run", "--distribution=pareto", "--distribution_params=1"],
     r"--distribution_params: pareto takes 2 parameter\(s\)"),
    (["trims-tools", "client", "run", "--distribution=pareto", "--distribution_params=1,-1"],
     r"--distribution_params: out of range for pareto"),
    (["trims-tools", "client", "compare", "--model_iterations=0"], r"--model_iterations: expected at least 1"),
    (["trims-tools", "client", "run", "--models_percentage=200"], r"--models_percentage: expected a fraction"),
    (["trims-tools", "run", "--concurrent=2000"], r"--concurrent: expected a whole number from 1 to 1024"),
    (["trims-tools", "run", "--eviction=random"], r"--eviction: unknown policy 'random'"),
    (["repro", "trims", "client", "run", "--concurrent", "0"], r"--concurrent: expected a whole number from 1"),
    (["repro", "trims", "client", "run", "--distribution", "pareto", "--distribution-params", "1"],
     r"--distribution-params: pareto takes 2 parameter\(s\)"),
], ids=["concurrent-zero", "distribution-unknown", "distribution-params-one", "distribution-params-negative",
        "compare-model-iterations-zero", "models-percentage-200", "run-concurrent-2000", "run-eviction-random",
        "repro-concurrent-zero", "repro-distribution-params-one"])
def test_client_flags_are_checked_before_the_model_directory(tmp_path, monkeypatch, capsys, words, pattern):
    """A bad flag value is named as such where the model directory is missing (the missing directory
    was named instead: the flag's error came only once models were there)."""
    work = SimpleNamespace(dir=tmp_path / "work")
    work.dir.mkdir()
    monkeypatch.chdir(work.dir)
    config = work.dir / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {work.dir / 'no-models'}\n  profile_output_directory: {work.dir / 'p'}\n")
    program, *words = words
    tools = program == "trims-tools"
    argv = [*words, f"--config={config}"] if tools else [*words, "--original", "--device", "cpu", "--config", str(config)]
    _one_line(lambda: (tools_main if tools else main)(argv), work, capsys, rf"^{program}: error: " + pattern,
              status=2 if "invalid choice" in pattern else 1)


def _broken(work, breaker):
    base = work.dir / "base"
    breaker(_copy_model(work.models, base / "broken"), work.dir)
    return base


def _no_graph(directory, _):
    (directory / "model.onnx").unlink()


def _renamed_tensor(directory, _):
    _edit_manifest(directory, lambda m: m["tensors"][0].update(name="not_in_the_graph"))


def _empty_input(directory, _):
    _edit_manifest(directory, lambda m: m["input"].update(shape=[1, 3, 0, 224]))


def _graph_garbage(directory, _):
    (directory / "model.onnx").unlink()
    (directory / "model.onnx").write_bytes(b"\xff" * 1000)


@pytest.mark.parametrize("breaker, pattern", [
    (_no_graph, r"model\.onnx: cannot read model file"),
    (_renamed_tensor, r"manifest\.json: does not describe .*model\.onnx"),
    (_empty_input, r"manifest\.json: input\.shape: expected"),
    (_graph_garbage, r"model\.onnx: not an ONNX model"),
], ids=["model-without-graph", "manifest-inconsistent", "manifest-empty-input", "graph-not-onnx"])
def test_a_broken_model_is_refused_before_any_request(work, capsys, breaker, pattern):
    base = _broken(work, breaker)
    _one_line(_repro(work, "--base-path", base, "--model", "broken"), work, capsys, r"^repro: error: .*" + pattern)


def test_client_refuses_a_model_directory_symlinked_outside(work, capsys):
    outside = _copy_model(work.models, work.dir / "elsewhere" / MODEL)
    base = work.dir / "base"
    base.mkdir()
    os.symlink(outside, base / "linked")
    _one_line(_repro(work, "--base-path", base, "--model", "linked"), work, capsys,
              r"^repro: error: model 'linked' is outside the store's base path")


def test_client_refuses_weights_symlinked_outside(work, capsys):
    base = work.dir / "base"
    directory = _copy_model(work.models, base / "linked")
    (directory / "model.params").unlink()
    os.symlink(work.models / MODEL / "model.params", directory / "model.params")
    _one_line(_repro(work, "--base-path", base, "--model", "linked"), work, capsys,
              r"^repro: error: linked/model\.params is outside the store's base path")


def test_models_seed_out_of_range(work, capsys):
    _one_line(lambda: main(["trims", "models", MODEL, "--base-path", str(work.dir / "m"), "--seed", "-1"]), work,
              capsys, r"^repro: error: --seed: expected a whole number from 0")


def test_fetch_refuses_a_manifest_naming_files_outside_the_model(work, capsys):
    source = _copy_model(work.models, work.dir / "assets" / MODEL)
    (work.dir / "assets" / "escaped.txt").write_text("x\n")
    _edit_manifest(source, lambda m: m["sha256"].update({"../escaped.txt": "0" * 64}))
    _one_line(lambda: main(["trims", "fetch", MODEL, "--asset-store", str(work.dir / "assets"), "--base-path",
                            str(work.dir / "base")]), work, capsys, r"^repro: error: .*manifest\.json: sha256: expected")


def test_fetch_refuses_a_model_name_that_is_a_path(work, capsys):
    _copy_model(work.models, work.dir / "assets" / MODEL)
    _one_line(lambda: main(["trims", "fetch", f"x/../../{MODEL}", "--asset-store", str(work.dir / "assets" / "a"),
                            "--base-path", str(work.dir / "base")]), work, capsys,
              r"^repro: error: model name .*: expected a directory name, one path component")


def test_memory_refuses_a_model_outside_the_base_path(work, capsys):
    _copy_model(work.models, work.dir / "outside")
    (work.dir / "base").mkdir()
    _one_line(lambda: main(["trims", "memory", "../outside", "--base-path", str(work.dir / "base"), "--socket",
                            str(work.dir / "none.sock")]), work, capsys,
              r"^repro: error: model name '\.\./outside': expected a directory name, one path component")


def test_memory_names_a_graph_that_is_not_onnx(work, capsys):
    base = _broken(work, _graph_garbage)
    _one_line(lambda: main(["trims", "memory", "broken", "--base-path", str(base), "--socket", str(work.dir / "none.sock")]),
              work, capsys, r"^repro: error: .*model\.onnx: cannot read the model graph")


@pytest.mark.parametrize("key, value", [
    ("server_memory_fraction", "'half'"), ("server_memory_fraction", "true"), ("server_eviction", "[lru]"),
    ("upload_bucket_name", "../../elsewhere"),
], ids=["fraction-a-string", "fraction-a-bool", "eviction-a-list", "bucket-outside"])
def test_tool_config_values_of_the_wrong_kind(work, capsys, key, value):
    work.config.write_text(work.config.read_text() + f"  {key}: {value}\n")
    _one_line(lambda: main(["trims", "config", "--config", str(work.config)]), work, capsys,
              rf"^repro: error: .*carml\.yml: micro18\.{key}: expected")


# -- refused before the run starts ----------------------------------------------------------


@pytest.mark.parametrize("earlier", [None, 7], ids=["new", "rebuilt-with-another-seed"])
def test_an_interrupted_download_leaves_no_model_behind(tmp_path, monkeypatch, capsys, earlier):
    """`trims-tools download assets` interrupted (Ctrl-C) while it writes the first model: nothing under
    the base path looks like a model, not even an empty directory (the model's directory was made
    first and left behind, with what had been written into it); a model it rebuilds stays as it was."""
    import onnx

    from repro.trims.models import ARCHITECTURES, generate, load_manifest

    base = tmp_path / "models"
    first = next(iter(ARCHITECTURES))
    if earlier is not None:
        generate(first, base / first, seed=earlier)
    before = snapshot(tmp_path)
    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {base}\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(onnx, "save_model", interrupted)  # the graph is written after the weights
    code = tools_main(["download", "assets", f"--config={config}"])
    assert (code, capsys.readouterr().err) == (130, "trims-tools: interrupted\n")
    config.unlink()
    if earlier is None:
        assert not base.exists() or not any(base.iterdir())
    else:
        assert snapshot(tmp_path) == before
        assert load_manifest(base / first, verify=True)["seed"] == earlier


@pytest.mark.parametrize("earlier", [None, 7], ids=["new", "fetched-over-another-seed"])
def test_an_interrupted_fetch_leaves_no_model_behind(work, monkeypatch, capsys, earlier):
    """`repro trims fetch` interrupted (Ctrl-C) as it writes the manifest, its files copied: nothing
    under the base path looks like a model, not even an empty directory (the model's directory was
    made first and left with the files but no manifest); a model fetched again stays as it was (its
    files were replaced under its old manifest)."""
    from repro.trims import experiments
    from repro.trims.models import generate, load_manifest

    _copy_model(work.models, work.dir / "assets" / MODEL)
    base = work.dir / "base"
    if earlier is not None:
        generate(MODEL, base / MODEL, seed=earlier)
    before = snapshot(work.dir)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments, "write_json", interrupted)  # the manifest is written last
    code = main(["trims", "fetch", MODEL, "--asset-store", str(work.dir / "assets"), "--base-path", str(base)])
    assert (code, capsys.readouterr().err) == (130, "repro: interrupted\n")
    if earlier is None and base.exists():
        base.rmdir()  # the base path may be left made, but empty
    assert snapshot(work.dir) == before
    if earlier is not None:
        assert load_manifest(base / MODEL, verify=True)["seed"] == earlier


def test_a_shared_run_without_a_server_is_refused_before_it_starts(work, capsys):
    _one_line(lambda: main(["trims", "client", "run", "--device", "cpu", "--config", str(work.config), "--model", MODEL,
                            "--socket", str(work.dir / "nobody.sock")]), work, capsys,
              r"^repro: error: model store server not running: cannot connect to .*nobody\.sock")


def test_trims_tools_upr_client_without_a_server_is_refused_before_it_starts(work, capsys):
    work.config.write_text(work.config.read_text() + f"  server_socket: {work.dir / 'nobody.sock'}\n")
    _one_line(lambda: tools_main(["client", "run", f"--config={work.config}"]), work, capsys,
              r"^trims-tools: error: model store server not running: cannot connect to .*nobody\.sock")


@pytest.mark.parametrize("url, pattern", [
    (None, r"micro18\.base_bucket_url: 'http://s3\.amazonaws\.com/micro18profiles' is not a trace store here"),
    ("{dir}/carml.yml", r"micro18\.base_bucket_url .*carml\.yml: not a directory this user can write"),
    ("gs://repro-unreachable/traces", r"micro18\.base_bucket_url gs://repro-unreachable/traces: cannot reach"),
], ids=["original-default-s3", "a-file", "gs-unreachable"])
def test_an_upload_target_that_cannot_be_reached_is_refused_before_the_run(work, capsys, monkeypatch, url, pattern):
    if url is not None:
        work.config.write_text(work.config.read_text() + f"  base_bucket_url: {url.format(dir=work.dir)}\n")
    with socket.socket() as closed:  # a port nothing listens on: the emulator host that cannot be reached
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "repro-test")
    _one_line(_tools(work, "--trace_upload"), work, capsys, r"^trims-tools: error: " + pattern)


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero"])
def test_a_store_record_that_is_no_regular_file_is_refused_before_a_store_starts(tmp_path, kind):
    """The model store's record (store.json in the private runtime directory) as a FIFO would hang
    `trims store start`, a link to /dev/zero fill its memory: refused by name, and no store starts."""
    from repro.processes import runtime_dir

    xdg, work = tmp_path / "xdg", tmp_path / "work"
    xdg.mkdir(mode=0o700)
    work.mkdir()
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(xdg)
    try:
        record = runtime_dir(work) / "store.json"
    finally:
        os.environ.pop("XDG_RUNTIME_DIR") if old is None else os.environ.__setitem__("XDG_RUNTIME_DIR", old)
    if kind == "fifo":
        os.mkfifo(record)
    else:
        record.symlink_to("/dev/zero")
    settings = json.dumps({"base_path": str(tmp_path / "models"),
                           "server": {"memory_mb": 10, "eviction": "lru", "device": "cpu"}})
    try:  # in a child forked from this process, its address space bounded: reading /dev/zero whole would fill it
        code, _, err = run_forked(["trims", "store", "start", "--settings", settings, "--state", work / "state.json"],
                                  work, 60, growth=2 << 30, env={"XDG_RUNTIME_DIR": str(xdg)})
    except subprocess.TimeoutExpired:
        pytest.fail("trims store start did not end within 60 s")
    finally:
        if (runtime_dir_pid := record.with_name("trims.pid")).is_file():  # a store it started: stop it by its record
            pid = read_record(runtime_dir_pid)
            if pid and matches(pid):
                os.kill(pid["pid"], signal.SIGTERM)
    kind_name = "a FIFO" if kind == "fifo" else "a symbolic link"
    assert code == 1 and re.fullmatch(rf"repro: error: .*store.json \(the model store's record\): is {kind_name}; "
                                      r"expected a regular file.*\n", err), err[-2000:]
    assert not (work / "state.json").exists() and not record.with_name("trims.pid").exists()


@pytest.mark.parametrize("text, pattern", [
    ("seed: " + "9" * 5000 + "\n", r"line 1: an integer of 5000 characters"),
    ("a: &a [*a]\n", r"line 1: alias \*a refers to a collection that holds it"),
], ids=["int-5000-digits", "recursive-alias"])
def test_trims_tools_tool_config_that_cannot_be_built(work, capsys, text, pattern):
    config = work.dir / "bad.yml"
    config.write_text(text)
    _one_line(lambda: tools_main(["info", "config", f"--config={config}"]), work, capsys,
              r"^trims-tools: error: .*bad.yml: " + pattern)


def _serve(argv, sock, cwd):
    """`repro` with a server command line expected to be refused, in a child forked from this process
    (support.run_forked), as subprocess.run gives its result; a server the old code started on `sock`
    is stopped."""
    try:
        code, out, err = run_forked(argv, cwd, 30)
    except subprocess.TimeoutExpired:
        _stop_whatever_answers(sock)
        raise
    return subprocess.CompletedProcess(["repro", *argv], code, out, err)


def test_a_memory_budget_beyond_any_machine_is_refused_before_serving(models, tmp_path):
    sock = tmp_path / "store.sock"
    argv = _server_argv(models, sock)
    argv[argv.index("--memory-mb") + 1] = "9" * 23
    proc = _serve(argv, sock, tmp_path)
    assert proc.returncode == 1 and re.fullmatch(r"repro: error: --memory-mb: expected a whole number of MiB from 1 to \d+, "
                                                 r"got 9+\n", proc.stderr), proc.stderr
    assert not sock.exists()


def test_a_memory_budget_beyond_this_machine_is_refused_before_serving(models, tmp_path):
    import psutil

    sock = tmp_path / "store.sock"
    argv = _server_argv(models, sock)
    argv[argv.index("--memory-mb") + 1] = str((psutil.virtual_memory().total >> 20) + 1)
    proc = _serve(argv, sock, tmp_path)
    assert proc.returncode == 1 and re.fullmatch(r"repro: error: --memory-mb: \d+ MiB is more than this machine's "
                                                 r"memory \(\d+ MiB\); expected a budget the host can hold\n",
                                                 proc.stderr), proc.stderr
    assert not sock.exists()


def test_a_model_larger_than_the_free_shared_memory_is_refused_without_a_segment(monkeypatch):
    """Writing into a segment past what /dev/shm holds would kill the server (SIGBUS): refused before
    it is made. /dev/shm's free space is made small here; the check reads it with os.statvfs."""
    from repro.errors import ReproError
    from repro.trims import modelstore

    real = os.statvfs(modelstore.SHM_DIR)
    small = os.statvfs_result((*real[:4], 10, *real[5:]))  # 10 blocks free
    monkeypatch.setattr(modelstore.os, "statvfs", lambda path: small)
    before = set(os.listdir(modelstore.SHM_DIR))
    with pytest.raises(ReproError, match=r"/dev/shm: 0 MiB free, a model of 1 MiB does not fit"):
        modelstore.HostMemory(1 << 20, "repro-test-too-large")
    assert set(os.listdir(modelstore.SHM_DIR)) == before
    modelstore.HostMemory(10 * real.f_frsize, "repro-test-fits").close()  # what fits is made


def test_a_stop_signal_as_the_server_binds_its_socket_leaves_neither_socket_nor_pid_file(models, tmp_path):
    """SIGTERM that comes once the store has bound its socket, before its clean-up covers it (the
    moment a daemon still starting is stopped by the command that started it), left the socket."""
    import repro.trims.server as server

    sock = tmp_path / "s.sock"
    identity = server._socket_identity

    def signalled_main(argv):
        def socket_identity(path):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # where the signal is not put off, its handler raises here
            return identity(path)

        server._socket_identity = socket_identity  # the forked child's own module: this test's is untouched
        return main(argv)

    code, _, err = run_forked(["trims", "server", "run", "--socket", str(sock), "--base-path", str(models),
                               "--memory-mb", "50", "--pid-file", str(tmp_path / "s.pid")], tmp_path, 60,
                              main=signalled_main)
    assert code == 128 + signal.SIGTERM, err
    assert not sock.exists() and not (tmp_path / "s.pid").exists()


@pytest.mark.service
def test_a_stop_signal_inside_the_daemons_fork_leaves_no_server(models, tmp_path):
    """SIGTERM that comes while subprocess.Popen forks the daemon (before it returns the child) is
    held until the daemon is known, then stops it with the command: no server, socket or pid file."""
    import repro.trims.server as server

    sock = tmp_path / "s.sock"

    class SignalledInsidePopen(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)  # before Popen has returned
            time.sleep(0.5)  # where the signal is not put off, its handler raises here

    def signalled_main(argv):
        server.subprocess.Popen = SignalledInsidePopen  # the forked child's own module: this test's is untouched
        return main(argv)

    code, _, err = run_forked(["trims", "server", "run", "-d", "--socket", str(sock), "--base-path", str(models),
                               "--memory-mb", "50", "--pid-file", str(tmp_path / "s.pid"), "--log-file",
                               str(tmp_path / "s.log")], tmp_path, 60, main=signalled_main)
    assert code == 128 + signal.SIGTERM, err
    daemons = [p for p in psutil.process_iter(["cmdline"]) if str(sock) in (p.info["cmdline"] or ())]
    for daemon in daemons:  # where it did outlive the command: this test started it; psutil checks it is the same
        daemon.terminate()
    assert not daemons, "the daemon outlived the command that started it"
    assert not sock.exists() and not (tmp_path / "s.pid").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.service
def test_a_daemon_start_interrupted_leaves_no_server(models, tmp_path, signum):
    """`trims server run -d` signalled while its daemon starts: the daemon ends with the command (as
    every repro command cleans up after Ctrl-C, SIGTERM or SIGHUP), leaving no socket behind."""
    sock = tmp_path / "s.sock"
    parent = subprocess.Popen([sys.executable, "-m", "repro.cli", "trims", "server", "run", "-d", "--socket", str(sock),
                               "--base-path", str(models), "--memory-mb", "50", "--pid-file", str(tmp_path / "s.pid"),
                               "--log-file", str(tmp_path / "s.log")], stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    children = []
    while not children and time.monotonic() < deadline and parent.poll() is None:
        children = psutil.Process(parent.pid).children()
        time.sleep(0.01)
    assert children, "the daemon did not start"
    daemon = children[0]
    try:
        parent.send_signal(signum)
        _, err = parent.communicate(timeout=60)
        assert parent.returncode == 128 + signum, err
        try:
            daemon.wait(timeout=15)  # reaped by the command before it exited
        except psutil.NoSuchProcess:
            pass
        assert not daemon.is_running(), "the daemon outlived the command that started it"
    finally:  # where it did outlive it: this test started it, so stop it (psutil checks it is the same process)
        if daemon.is_running():
            daemon.terminate()
            daemon.wait(timeout=15)
    assert not sock.exists() and not _segments(sock)


def test_measuring_a_model_whose_weights_are_a_fifo_is_refused(models, tmp_path, capsys):
    base = tmp_path / "base"
    model = _copy_model(models, base / MODEL)
    (model / "model.params").unlink()
    os.mkfifo(model / "model.params")
    code = main(["trims", "memory", "--base-path", str(base), "--measure", MODEL])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "model.params: not a regular file (expected the model's model.params)" in err[0], err


@pytest.mark.parametrize("megabytes", ["9" * 23, str((1 << 24) + 1)], ids=["overflow", "past-16-tib"])
def test_a_host_tier_beyond_any_machine_is_refused_before_serving(models, tmp_path, megabytes):
    sock = tmp_path / "store.sock"
    proc = _serve([*_server_argv(models, sock), f"--persist-cpu-mb={megabytes}"], sock, tmp_path)
    assert proc.returncode == 1 and re.fullmatch(r"repro: error: --persist-cpu-mb: expected a whole number of MiB from 0 "
                                                 r"\(no host tier\) to \d+, got -?\d+\n", proc.stderr), proc.stderr
    assert not sock.exists()
