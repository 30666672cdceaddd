"""The model store server: answers over a Unix socket, one JSON object per line each way.

Requests: {"op": "acquire", "model": M} -> {"ok": true, "device": "cpu", "shm": NAME, "size": N, "hit": bool}
(or "device": "gpu", "ipc": HANDLE for a GPU-resident store);
{"op": "release", "model": M}; {"op": "status"}; {"op": "flush"} (evict every model not in use);
{"op": "shutdown"}. Every line gets an answer, malformed ones an error. References a connection
holds are released when it closes, so a crashed client never pins a model.

The default socket lives in a directory only this user can enter (processes.private_directory),
and a client checks on connect that the server runs as this user (SO_PEERCRED): another user
cannot stand in for the store.
"""

import json
import os
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from repro.errors import ReproError
from repro.processes import describe, private_directory, read_record, write_record
from repro.trims.modelstore import ModelStore, remove_stale_segments, segment_prefix

_OPS = ("acquire", "release", "status", "flush", "shutdown")


def _parse(line):
    """The request on one line, or ReproError saying what is wrong with it."""
    try:
        request = json.loads(line)
    except ValueError:
        raise ReproError("bad request: not a JSON line") from None
    if not isinstance(request, dict):
        raise ReproError(f"bad request: expected a JSON object, got {type(request).__name__}")
    if request.get("op") not in _OPS:
        raise ReproError(f"bad request: 'op' must be one of {list(_OPS)}, got {request.get('op')!r}")
    if request["op"] in ("acquire", "release") and not isinstance(request.get("model"), str):
        raise ReproError(f"bad request: {request['op']} needs a 'model' name (a string), got {request.get('model')!r}")
    return request


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        store = self.server.store
        held = []
        try:
            for line in self.rfile:
                shutdown = False
                try:
                    request = _parse(line)
                    answer = self._answer(store, request, held)
                    shutdown = request["op"] == "shutdown"
                except ReproError as exc:
                    answer = {"ok": False, "error": str(exc)}
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()
                if shutdown:
                    threading.Thread(target=self.server.shutdown, daemon=True).start()
        except OSError:
            pass  # the client went away mid-answer: what it held is released below
        finally:
            for model in held:
                store.release(model)

    def _answer(self, store, request, held):
        op = request["op"]
        if op == "acquire":
            handle, size, hit = store.acquire(request["model"])
            held.append(request["model"])
            return {"ok": True, **handle, "size": size, "hit": hit}
        if op == "release":
            if request["model"] not in held:
                raise ReproError(f"this connection holds no reference to {request['model']!r}")
            held.remove(request["model"])
            store.release(request["model"])
            return {"ok": True}
        if op == "status":
            status = store.status()
            status["rss_bytes"] = psutil.Process().memory_info().rss
            return {"ok": True, **status}
        if op == "flush":
            store.flush()
            return {"ok": True}
        return {"ok": True}  # shutdown: the handler stops the server once this is sent


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def budget_bytes(fraction=None, megabytes=None, device="cpu"):
    """The store's budget: megabytes if given, else a fraction of this machine's RAM (or of the GPU's memory)."""
    if megabytes is not None:
        if megabytes <= 0:
            raise ReproError(f"--memory-mb must be positive, got {megabytes}")
        return int(megabytes) << 20
    if not 0 < fraction <= 1:
        raise ReproError(f"--memory-fraction must be in (0, 1], got {fraction}")
    if device == "gpu":
        from repro.trims.cuda import driver

        return int(driver().memory()[1] * fraction)
    return int(psutil.virtual_memory().total * fraction)


MAX_SOCKET_PATH = 107  # bytes: a Unix socket address holds 108 with the terminating NUL (Linux)


def default_socket_path():
    return private_directory() / "trims.sock"


def serve(socket_path, base_path, budget, policy, pid_file=None, ready=None, device="cpu", persist_bytes=0):
    socket_path = Path(socket_path)
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
        raise ReproError(f"--socket {socket_path}: longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have")
    if socket_path.exists():
        running = server_pid(socket_path)
        if running is not None:
            raise ReproError(f"a model store server already runs on {socket_path} (pid {running})")
        socket_path.unlink()
    prefix = segment_prefix(socket_path)
    remove_stale_segments(prefix)  # what a killed predecessor on this socket left in shared memory
    store = ModelStore(base_path, budget, policy, device=device, segment_prefix=prefix, persist_bytes=persist_bytes)
    server = _Server(str(socket_path), _Handler)
    server.store = store
    record = describe(os.getpid(), "trims-server")
    if pid_file:
        write_record(pid_file, record)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    if ready:
        ready()
    try:
        server.serve_forever()
    finally:
        server.server_close()
        store.close()
        socket_path.unlink(missing_ok=True)
        if pid_file and read_record(pid_file) == record:
            Path(pid_file).unlink(missing_ok=True)


def server_pid(socket_path):
    """The pid of the model store server answering on `socket_path`, or None when none answers."""
    try:
        connection = StoreConnection(socket_path, timeout=2)
    except ReproError:
        return None
    try:
        return connection.request({"op": "status"}).get("pid")
    except ReproError:
        return None
    finally:
        connection.close()


def start_daemon(socket_path, base_path, budget, policy, pid_file, log_file, device="cpu", persist_bytes=0):
    """Start the server in its own session; return its pid once it answers. budget: bytes.

    The answering server must be the one started here: a server already on the socket is an error.
    """
    running = server_pid(socket_path)
    if running is not None:
        raise ReproError(f"a model store server already runs on {socket_path} (pid {running}); "
                         f"stop it first with `repro trims server stop --socket {socket_path}`")
    cmd = [sys.executable, "-m", "repro.cli", "trims", "server", "run", "--socket", str(socket_path),
           "--base-path", str(base_path), "--memory-mb", str(max(1, budget >> 20)), "--eviction", policy,
           "--pid-file", str(pid_file), "--device", device, "--persist-cpu-mb", str(persist_bytes >> 20)]
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReproError(f"model store server exited with code {proc.returncode}; see {log_file}")
        answering = server_pid(socket_path) if Path(socket_path).exists() else None
        if answering == proc.pid:
            return proc.pid
        if answering is not None:  # another server took the socket first: ours refuses and exits
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise ReproError(f"a model store server already runs on {socket_path} (pid {answering})")
        time.sleep(0.05)
    proc.kill()
    raise ReproError(f"model store server did not answer on {socket_path} within 30 s; see {log_file}")


_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid


class StoreConnection:
    """A client's connection to the server (one per thread), refused unless the server runs as this user."""

    def __init__(self, socket_path, timeout=60):
        self.socket_path = str(socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.socket_path)
            _, uid, _ = _PEER.unpack(self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
        except OSError as exc:
            self.sock.close()
            raise ReproError(f"model store server not running: cannot connect to {self.socket_path} ({exc.strerror})") from None
        if uid != os.getuid():
            self.sock.close()
            raise ReproError(f"{self.socket_path}: the process answering there runs as uid {uid}, not as this user "
                             f"(uid {os.getuid()}); refusing to use it as the model store")
        self.reader = self.sock.makefile("rb")

    def request(self, payload):
        try:
            self.sock.sendall(json.dumps(payload).encode() + b"\n")
            line = self.reader.readline()
        except OSError as exc:
            raise ReproError(f"model store server on {self.socket_path} failed: {exc}") from None
        if not line:
            raise ReproError(f"model store server on {self.socket_path} closed the connection")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ReproError(f"model store server on {self.socket_path} sent a malformed answer")
        if not answer.get("ok"):
            raise ReproError(answer.get("error", "model store server refused the request"))
        return answer

    def close(self):
        self.reader.close()
        self.sock.close()
