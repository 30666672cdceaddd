"""The model store server: answers over a Unix socket, one JSON object per line each way.

Requests: {"op": "acquire", "model": M} -> {"ok": true, "device": "cpu", "shm": NAME, "size": N, "hit": bool}
(or "device": "gpu", "ipc": HANDLE for a GPU-resident store);
{"op": "release", "model": M}; {"op": "status"}; {"op": "flush"} (evict every model not in use);
{"op": "shutdown"}. References a connection
holds are released when it closes, so a crashed client never pins a model.
"""

import hashlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from repro.errors import ReproError
from repro.trims.store import ModelStore


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        store = self.server.store
        held = []
        try:
            for line in self.rfile:
                try:
                    request = json.loads(line)
                    answer = self._answer(store, request, held)
                except ReproError as exc:
                    answer = {"ok": False, "error": str(exc)}
                except (ValueError, KeyError) as exc:
                    answer = {"ok": False, "error": f"bad request: {exc}"}
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()
                if request.get("op") == "shutdown" and answer.get("ok"):
                    threading.Thread(target=self.server.shutdown, daemon=True).start()
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
        if op == "shutdown":
            return {"ok": True}
        raise ReproError(f"unknown op {op!r}")


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


def usable_socket_path(preferred):
    """`preferred`, or a short path in the temp directory named after it when it is too long for a Unix socket."""
    preferred = Path(preferred)
    if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(os.fsencode(preferred)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"repro-store-{digest}.sock"


def serve(socket_path, base_path, budget, policy, pid_file=None, ready=None, device="cpu"):
    socket_path = Path(socket_path)
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
        raise ReproError(f"--socket {socket_path}: longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have")
    if socket_path.exists():
        if _answers(socket_path):
            raise ReproError(f"a model store server already answers on {socket_path}")
        socket_path.unlink()
    store = ModelStore(base_path, budget, policy, device=device)
    server = _Server(str(socket_path), _Handler)
    server.store = store
    if pid_file:
        Path(pid_file).write_text(f"{os.getpid()}\n")
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
        if pid_file:
            Path(pid_file).unlink(missing_ok=True)


def _answers(socket_path):
    try:
        return StoreConnection(socket_path, timeout=2).request({"op": "status"}).get("ok", False)
    except ReproError:
        return False


def start_daemon(socket_path, base_path, budget, policy, pid_file, log_file, device="cpu"):
    """Start the server in its own session; return its pid once it answers. budget: bytes."""
    cmd = [sys.executable, "-m", "repro.cli", "trims", "server", "run", "--socket", str(socket_path),
           "--base-path", str(base_path), "--memory-mb", str(max(1, budget >> 20)), "--eviction", policy,
           "--pid-file", str(pid_file), "--device", device]
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReproError(f"model store server exited with code {proc.returncode}; see {log_file}")
        if Path(socket_path).exists() and _answers(socket_path):
            return proc.pid
        time.sleep(0.05)
    proc.kill()
    raise ReproError(f"model store server did not answer on {socket_path} within 30 s; see {log_file}")


class StoreConnection:
    """A client's connection to the server (one per thread)."""

    def __init__(self, socket_path, timeout=60):
        self.socket_path = str(socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.socket_path)
        except OSError as exc:
            self.sock.close()
            raise ReproError(f"model store server not running: cannot connect to {self.socket_path} ({exc.strerror})") from None
        self.reader = self.sock.makefile("rb")

    def request(self, payload):
        try:
            self.sock.sendall(json.dumps(payload).encode() + b"\n")
            line = self.reader.readline()
        except OSError as exc:
            raise ReproError(f"model store server on {self.socket_path} failed: {exc}") from None
        if not line:
            raise ReproError(f"model store server on {self.socket_path} closed the connection")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise ReproError(answer.get("error", "model store server refused the request"))
        return answer

    def close(self):
        self.reader.close()
        self.sock.close()
