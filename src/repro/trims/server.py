"""The model store server: answers over a Unix socket, one JSON object per line each way.

Requests: {"op": "acquire", "model": M} -> {"ok": true, "device": "cpu", "shm": NAME, "size": N, "hit": bool}
(or "device": "gpu", "ipc": HANDLE for a GPU-resident store);
{"op": "release", "model": M}; {"op": "status"}; {"op": "flush"} (evict every model not in use);
{"op": "shutdown"}. Every line gets an answer, malformed ones an error. References a connection
holds are released when it closes, so a crashed client never pins a model.

The default socket lives in a directory only this user can enter (processes.private_directory).
Both ends check the other's uid (SO_PEERCRED) on every connection: a client refuses a server run
by another user, and the server answers a connection from another user with one error and closes
it, so a socket on a path anyone can reach (a user-chosen --socket, umask 000) still serves only
its owner. Lines are bounded both ways (MAX_LINE). The server removes a file at its socket path
only when it is a socket nobody answers on, and at the end only the socket it bound itself.
"""

import contextlib
import errno
import json
import os
import signal
import socket
import socketserver
import stat
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from repro.errors import ReproError
from repro.fsutil import not_a_directory, open_log, refuse_inside, write_json
from repro.processes import (OWNER_TOKEN, describe, matches, owner_environment, private_directory, read_record, spawn,
                              stop_child, write_record)
from repro.stopsignals import deferred, raise_deferred
from repro.trims.modelstore import ModelStore, remove_stale_segments, segment_prefix

_OPS = ("acquire", "release", "status", "flush", "shutdown")
MAX_LINE = 1 << 16  # bytes in one request or answer line; the largest real one (status) is a few KiB
MAX_HELD = 1024  # references one connection may hold at once; a client holds one per request in flight


class _KeyTwice(ValueError):
    pass


def _once_each(pairs):
    """A request's object, each key once: {"op": "status", "op": "shutdown"} was taken as a shutdown."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        raise _KeyTwice(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return obj


def _parse(line):
    """The request on one line, or ReproError saying what is wrong with it."""
    try:
        request = json.loads(line, object_pairs_hook=_once_each)
    except _KeyTwice as exc:
        raise ReproError(f"bad request: key {str(exc)[:100]!r} given twice; expected each key once") from None
    except ValueError:
        raise ReproError("bad request: not a JSON line") from None
    except RecursionError:
        raise ReproError("bad request: nested too deeply") from None
    if not isinstance(request, dict):
        raise ReproError(f"bad request: expected a JSON object, got {type(request).__name__}")
    if request.get("op") not in _OPS:
        raise ReproError(f"bad request: 'op' must be one of {list(_OPS)}, got {request.get('op')!r}")
    if request["op"] in ("acquire", "release") and not isinstance(request.get("model"), str):
        raise ReproError(f"bad request: {request['op']} needs a 'model' name (a string), got {request.get('model')!r}")
    return request


def peer_uid(sock):
    """The uid of the process at the other end of the Unix socket `sock` (SO_PEERCRED)."""
    _, uid, _ = _PEER.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
    return uid


class _Handler(socketserver.StreamRequestHandler):
    def _send(self, answer):
        self.wfile.write(json.dumps(answer).encode() + b"\n")
        self.wfile.flush()

    def handle(self):
        store = self.server.store
        held = []
        try:
            uid = peer_uid(self.connection)
            while line := self.rfile.readline(MAX_LINE + 1):
                if len(line) > MAX_LINE:  # the rest of the line cannot be told from the next request
                    self._send({"ok": False, "error": f"bad request: longer than {MAX_LINE} bytes; closing"})
                    return
                if uid != os.getuid():  # every request of another user's process: refused, never parsed
                    self._send({"ok": False, "error": f"this model store serves uid {os.getuid()} only, not uid {uid}"})
                    continue
                shutdown = False
                try:
                    request = _parse(line)
                    answer = self._answer(store, request, held)
                    shutdown = request["op"] == "shutdown"
                except ReproError as exc:
                    answer = {"ok": False, "error": str(exc)}
                except Exception as exc:  # a defect: the client gets an answer, the server log the cause
                    print(f"model store: {type(exc).__name__} answering {line[:200]!r}: {exc}", file=sys.stderr, flush=True)
                    answer = {"ok": False, "error": f"the model store failed on this request ({type(exc).__name__}); "
                                                    "see its log"}
                self._send(answer)
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
            if len(held) >= MAX_HELD:
                raise ReproError(f"this connection holds {len(held)} references already (at most {MAX_HELD}); "
                                 "release one first")
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


MAX_CONNECTIONS = 1100  # a thread each; a client opens one per request in flight (--concurrent: at most 1024)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """One thread per connection, at most MAX_CONNECTIONS at once: one more is told so and closed."""

    daemon_threads = True

    def __init__(self, *args, **kwargs):
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        if not self._connections.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(json.dumps({"ok": False, "error": f"the model store serves at most {MAX_CONNECTIONS} "
                                                                  "connections at once; closing"}).encode() + b"\n")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread was started to release it
            self._connections.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()


MAX_MEMORY_MB = 1 << 24  # 16 TiB: more than any machine's memory, so a budget beyond it is a typo


def budget_bytes(fraction=None, megabytes=None, device="cpu"):
    """The store's budget: megabytes if given, else a fraction of this machine's RAM (or of the GPU's memory)."""
    if megabytes is not None:
        if not 0 < megabytes <= MAX_MEMORY_MB:
            raise ReproError(f"--memory-mb: expected a whole number of MiB from 1 to {MAX_MEMORY_MB}, got {str(megabytes)[:40]}")
        total = psutil.virtual_memory().total
        if device == "cpu" and megabytes << 20 > total:
            raise ReproError(f"--memory-mb: {megabytes} MiB is more than this machine's memory ({total >> 20} MiB); "
                             "expected a budget the host can hold")
        return int(megabytes) << 20
    if not 0 < fraction <= 1:
        raise ReproError(f"--memory-fraction must be in (0, 1], got {fraction}")
    if device == "gpu":
        from repro.trims.cuda import driver

        return int(driver().memory()[1] * fraction)
    return int(psutil.virtual_memory().total * fraction)


def tier_bytes(megabytes):
    """The host tier's size (--persist-cpu-mb): 0 (none) up to MAX_MEMORY_MB, as the budget is bounded."""
    if not 0 <= megabytes <= MAX_MEMORY_MB:
        raise ReproError(f"--persist-cpu-mb: expected a whole number of MiB from 0 (no host tier) to {MAX_MEMORY_MB}, "
                         f"got {str(megabytes)[:40]}")
    return int(megabytes) << 20


MAX_SOCKET_PATH = 107  # bytes: a Unix socket address holds 108 with the terminating NUL (Linux)


def default_socket_path():
    return private_directory() / "trims.sock"


def _answering(socket_path):
    """Whether any process (a store or not, any user's) accepts connections on `socket_path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(str(socket_path))
        return True
    except OSError as exc:
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        probe.close()


def check_socket_path(socket_path):
    """Refuse a --socket path the server cannot take: too long, a file that is not a socket (never
    removed), or a socket some process answers on. Returns whether a stale socket is there to remove."""
    socket_path = Path(socket_path)
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
        raise ReproError(f"--socket {socket_path}: longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have")
    try:
        info = socket_path.lstat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ReproError(f"--socket {socket_path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise ReproError(f"--socket {socket_path}: exists and is not a socket; refusing to replace it "
                         "(choose another path)")
    running = server_pid(socket_path)
    if running is not None:
        raise ReproError(f"a model store server already runs on {socket_path} (pid {running})")
    if _answering(socket_path):
        raise ReproError(f"--socket {socket_path}: another program answers on this socket; refusing to replace it")
    return True


def _check_pid_file(pid_file):
    """Refuse a --pid-file that holds anything but a record of a process that has ended."""
    path = Path(pid_file)
    if not path.exists() and not path.is_symlink():
        return
    record = read_record(path) if path.is_file() and not path.is_symlink() else None
    if record is None or not {"pid", "start_ticks"} <= set(record):
        raise ReproError(f"--pid-file {path}: exists and is not a process record; refusing to overwrite it")
    if matches(record):
        raise ReproError(f"--pid-file {path}: records pid {record['pid']}, which still runs")


def _socket_identity(path):
    info = os.lstat(path)
    return info.st_dev, info.st_ino


def _check_info_file(path):
    """Refuse a server-info path that holds anything but an earlier server's info (or nothing)."""
    path = Path(path)
    blocker = not_a_directory(path.parent)  # named before the server listens, not once it has started
    if blocker is not None:
        raise ReproError(f"{path}: cannot write: {blocker} is not a directory (the server info file)")
    if not path.exists() and not path.is_symlink():
        return
    record = read_record(path) if path.is_file() and not path.is_symlink() else None
    if record is None or "server_id" not in record:
        raise ReproError(f"--info-file {path}: exists and is not a model store's server info; refusing to overwrite it")


def _server_info(store, server_id, started, socket_path, extra=None):
    """The server's settings and counters (the original's ~/.micro18_server.json, with this store's keys)."""
    status = store.status()
    return {"server_id": server_id, "server_start_time": started, "pid": status["pid"], "socket": str(socket_path),
            "base_path": str(store.base_path), "eviction_policy": status["policy"], "device": status["device"],
            "budget_bytes": status["budget_bytes"], "persist_cpu_bytes": store.persist_bytes,
            "counters": {"evictions": status["evictions"], "tiers": status["tiers"],
                         "resident": sorted(status["models"])}, **(extra or {})}


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def serve(socket_path, base_path, budget, policy, pid_file=None, ready=None, device="cpu", persist_bytes=0,
          info_file=None, profile_dir=None):
    """Serve until shutdown (or SIGTERM). info_file: the server's settings and counters as JSON, written
    at start and again at stop; profile_dir: the server's own trace, server_<id>.json, written at stop."""
    socket_path = Path(socket_path)
    if check_socket_path(socket_path):
        socket_path.unlink()  # a stale socket: nobody answers on it
    if pid_file:
        _check_pid_file(pid_file)
    if info_file:
        _check_info_file(info_file)
    if profile_dir and Path(profile_dir).exists() and not Path(profile_dir).is_dir():
        raise ReproError(f"--profile {profile_dir}: exists and is not a directory")
    if not Path(base_path).is_dir():
        raise ReproError(f"--base-path {base_path}: no such directory (it holds <model>/model.params)")
    prefix = segment_prefix(socket_path)
    remove_stale_segments(prefix)  # what a killed predecessor on this socket left in shared memory
    store = ModelStore(base_path, budget, policy, device=device, segment_prefix=prefix, persist_bytes=persist_bytes,
                       events=[] if profile_dir else None)
    server_id, started = str(uuid.uuid4()), _now()
    try:
        with deferred() as caught:  # the socket bound and known as this server's, or not bound at all
            server = _Server(str(socket_path), _Handler)
            bound = _socket_identity(socket_path)
    except OSError as exc:
        store.close()
        raise ReproError(f"--socket {socket_path}: cannot listen there ({exc.strerror})") from None
    record = None
    try:  # from here on, however the server ends (a stop signal as it starts too), its socket goes
        raise_deferred(caught)
        server.store = store
        # with the token of the directory it was started for (start_daemon's environment), if any:
        # the record that proves the process that directory's (repro.processes.belongs)
        record = describe(os.getpid(), "trims-server", os.environ.get(OWNER_TOKEN))
        if pid_file:
            write_record(pid_file, record)
        if info_file:
            write_json(info_file, _server_info(store, server_id, started, socket_path))
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
        if ready:
            ready()
        server.serve_forever()
    finally:
        server.server_close()
        try:  # the info and trace written where they can be; the socket and pid file go whatever they do
            final = _server_info(store, server_id, started, socket_path, {"server_stop_time": _now()})
            store.close()
            if info_file:
                write_json(info_file, final)
            if profile_dir:
                from repro.traces import write_trace

                Path(profile_dir).mkdir(parents=True, exist_ok=True)
                write_trace(Path(profile_dir) / f"server_{server_id}.json", store.events,
                            {"displayTimeUnit": "ms", "otherData": {**final, "upr_server": True,
                                                                     "events_dropped": store.events_dropped}})
        finally:
            with contextlib.suppress(OSError):  # only the socket this server bound: not one put there since
                if _socket_identity(socket_path) == bound:
                    socket_path.unlink()
            if pid_file and record is not None and read_record(pid_file) == record:
                Path(pid_file).unlink(missing_ok=True)


def server_pid(socket_path):
    """The pid of the model store server answering on `socket_path`, or None when none answers."""
    try:
        connection = StoreConnection(socket_path, timeout=2)
    except ReproError:
        return None
    try:
        return connection.status()["pid"]
    except ReproError:
        return None
    finally:
        connection.close()


def start_daemon(socket_path, base_path, budget, policy, pid_file, log_file, device="cpu", persist_bytes=0,
                 info_file=None, profile_dir=None, environment=None):
    """Start the server in its own session; return its pid once it answers. budget: bytes;
    environment: entries added to its environment (default: repro.processes.owner_environment of
    the pid file's directory, which it then belongs to).

    The answering server must be the one started here: a server already on the socket is an error.
    """
    running = server_pid(socket_path)
    if running is not None:
        raise ReproError(f"a model store server already runs on {socket_path} (pid {running}); "
                         f"stop it first with `repro trims server stop --socket {socket_path}`")
    check_socket_path(socket_path)  # refused here, before a daemon starts only to refuse it in its log
    _check_pid_file(pid_file)
    if info_file:
        _check_info_file(info_file)
    refuse_inside("--log-file", log_file, "--base-path", base_path, "the models the server reads")  # appended to one
    cmd = [sys.executable, "-m", "repro.cli", "trims", "server", "run", "--socket", str(socket_path),
           "--base-path", str(base_path), "--memory-mb", str(max(1, budget >> 20)), "--eviction", policy,
           "--pid-file", str(pid_file), "--device", device, "--persist-cpu-mb", str(persist_bytes >> 20)]
    cmd += ["--info-file", str(info_file)] if info_file else []
    cmd += ["--profile", str(profile_dir)] if profile_dir else []
    if environment is None:
        environment = owner_environment(Path(pid_file).parent) if Path(pid_file).parent.is_dir() else {}
    with open_log(log_file, "--log-file") as log:
        proc = spawn(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                     env={**os.environ, **environment})
    try:
        return _wait_answering(proc, socket_path, log_file)
    except BaseException:  # Ctrl-C, SIGTERM or SIGHUP while it starts: the daemon goes with this command
        stop_child(proc)  # (SIGTERM: the store cleans up its socket and pid file)
        raise


def _last_error(log_file, tail=4096):
    """The last `repro: error:` line of the daemon's log (what refused it), without its prefix; or None."""
    try:
        with open(log_file, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - tail))
            lines = fh.read(tail).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    errors = [line.removeprefix("repro: error: ") for line in lines if line.startswith("repro: error: ")]
    return errors[-1][:400] if errors else None


def _wait_answering(proc, socket_path, log_file):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = _last_error(log_file)
            raise ReproError(f"model store server exited with code {proc.returncode}"
                             + (f": {said}" if said else "") + f"; see {os.path.abspath(log_file)}")
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
    stop_child(proc)
    raise ReproError(f"model store server did not answer on {socket_path} within 30 s; see {log_file}")


_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid
PID_LIMIT = 1 << 22  # Linux's largest pid_max


def _no_constant(name):
    raise ValueError(f"{name} is no JSON value")


def _count(value):
    return type(value) is int and value >= 0


def _status_problem(status):
    """What is wrong with a status answer (ModelStore.status), or None."""
    if not (type(status.get("pid")) is int and 0 < status["pid"] < PID_LIMIT):
        return f"pid: expected a process id, got {str(status.get('pid'))[:40]!r}"
    for key in ("policy", "device"):
        if not isinstance(status.get(key), str):
            return f"{key}: expected a name, got {str(status.get(key))[:40]!r}"
    for key in ("budget_bytes", "used_bytes", "evictions"):
        if not _count(status.get(key)):
            return f"{key}: expected a whole number, got {str(status.get(key))[:40]!r}"
    tiers, models = status.get("tiers", {}), status.get("models", {})
    if not (isinstance(tiers, dict) and all(isinstance(tier, dict) for tier in tiers.values())
            and _count(tiers.get("host", {}).get("budget_bytes", 0))):
        return "tiers: expected an object of tiers, each an object (host: with its budget_bytes)"
    if not (isinstance(models, dict) and all(isinstance(entry, dict) and _count(entry.get("bytes"))
                                             for entry in models.values())):
        return "models: expected an object of models, each with its bytes"
    return None


class StoreConnection:
    """A client's connection to the server (one per thread), refused unless the server runs as this user."""

    def __init__(self, socket_path, timeout=60):
        self.socket_path = str(socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.socket_path)
            uid = peer_uid(self.sock)
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
            line = self.reader.readline(MAX_LINE + 1)
        except OSError as exc:  # what a server that closed the connection said first (it serves no more)
            raise ReproError(self._parting_words() or f"model store server on {self.socket_path} failed: {exc}") from None
        if not line:
            raise ReproError(f"model store server on {self.socket_path} closed the connection")
        if len(line) > MAX_LINE:
            raise ReproError(f"model store server on {self.socket_path} sent an answer longer than {MAX_LINE} bytes")
        try:  # NaN and Infinity are no JSON: an answer holding them is malformed
            answer = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            raise ReproError(f"model store server on {self.socket_path} sent a malformed answer")
        if answer.get("ok") is not True:
            error = answer.get("error")
            raise ReproError(error[:1000] if isinstance(error, str) else "model store server refused the request")
        return answer

    def _parting_words(self):
        """The error a server sent before it closed the connection, or None."""
        try:
            answer = json.loads(self.reader.readline(MAX_LINE + 1), parse_constant=_no_constant)
        except (OSError, ValueError, RecursionError):
            return None
        error = answer.get("error") if isinstance(answer, dict) else None
        return error[:1000] if isinstance(error, str) else None

    def status(self):
        """The store's status (ModelStore.status), its fields checked before any is used or printed."""
        answer = self.request({"op": "status"})
        problem = _status_problem(answer)
        if problem:
            raise ReproError(f"model store server on {self.socket_path} sent a malformed answer to status ({problem})")
        return answer

    def close(self):
        self.reader.close()
        self.sock.close()
