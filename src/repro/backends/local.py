"""The local backend: a real dispatcher process on loopback, the trace store directory, this machine.

The dispatcher plays the part of the tf.data service dispatcher of the artifact's cluster (port
31000 there): runs register with it before they start and report when they finish, and the status
checks ask it over HTTP. It is started once by `cluster_start` and found again by later starts.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import write_json

MIN_FREE_BYTES = 200 << 20


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie child still answers kill(0)
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def request(state, path, payload=None, timeout=2.0):
    """Call the dispatcher; return its JSON answer."""
    url = f"http://127.0.0.1:{state['port']}{path}"
    data = None if payload is None else json.dumps(payload).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=timeout) as answer:
        return json.loads(answer.read())


def _healthy(state):
    try:
        return _pid_alive(state["pid"]) and request(state, "/health").get("ok") is True
    except (OSError, ValueError, KeyError):
        return False


def _store_answers(state):
    from repro.trims.server import StoreConnection

    try:
        StoreConnection(state["trims"]["socket"], timeout=2).request({"op": "status"})
        return True
    except (ReproError, KeyError):
        return False


def start(config, state_path):
    """Start the dispatcher unless the one recorded in state_path still answers; write the state."""
    state_path = Path(state_path)
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text())
        except ValueError:
            state = {}
        if state and _healthy(state) and _store_answers(state):
            state["reused"] = True
            write_json(state_path, state)
            return state
        stop(state)  # whatever of the old cluster still runs would hold its socket and memory
    # Snakemake deletes the state file before a forced cluster_start: the pid files still say
    # what an earlier start left running
    for pid_file in (state_path.with_name("dispatcher.pid"), state_path.with_name("trims.pid")):
        if pid_file.exists():
            _terminate(int(pid_file.read_text().split()[0]))
            pid_file.unlink(missing_ok=True)
    store = config["trace_store"]
    if not store.startswith("gs://"):
        Path(store).mkdir(parents=True, exist_ok=True)
        store = str(Path(store).resolve())
    ready = state_path.with_suffix(".ready")
    ready.unlink(missing_ok=True)
    log = open(state_path.with_suffix(".dispatcher.log"), "ab")
    proc = subprocess.Popen([sys.executable, "-m", "repro.backends.local", str(ready)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise ReproError(f"local dispatcher did not start; see {log.name}")
        time.sleep(0.05)
    port = int(ready.read_text())
    ready.unlink()
    state_path.with_name("dispatcher.pid").write_text(f"{proc.pid}\n")
    state = {"backend": "local", "pid": proc.pid, "port": port, "trace_store": store,
             "started_at": time.time(), "reused": False}
    try:
        state["trims"] = _start_model_store(config["trims"], state_path)
    except BaseException:
        _terminate(proc.pid)
        raise
    write_json(state_path, state)
    return state


def _start_model_store(trims, state_path):
    """The TrIMS model store server, on a socket beside the state file."""
    from repro.trims.runtimes import resolve_device
    from repro.trims.server import budget_bytes, start_daemon, usable_socket_path

    socket_path = usable_socket_path(state_path.with_name("trims.sock").resolve())
    base = Path(trims["base_path"]).resolve()
    base.mkdir(parents=True, exist_ok=True)
    server = trims["server"]
    pid = start_daemon(socket_path, base, budget_bytes(megabytes=server["memory_mb"]), server["eviction"],
                       state_path.with_name("trims.pid"), state_path.with_name("trims-server.log"),
                       resolve_device(server["device"]))
    return {"pid": pid, "socket": str(socket_path), "base_path": str(base), **server}


def describe(state):
    verb = "found running" if state.get("reused") else "started"
    return (f"local backend {verb}: dispatcher pid {state['pid']} on 127.0.0.1:{state['port']}, "
            f"model store pid {state['trims']['pid']} on {state['trims']['socket']}")


def _store_reachable(store):
    """(ok, detail) for the trace store: a writable directory, or a bucket that answers a listing."""
    if store.startswith("gs://"):
        from repro.store import GCSStore

        try:
            GCSStore(store, retry_deadline_s=10).list("traces/")
            return True, ""
        except Exception as exc:  # any client or network failure means: not reachable
            return False, str(exc)
    path = Path(store)
    return path.is_dir() and os.access(path, os.W_OK), "missing or read-only"


def status(state, calibration_paths=()):
    """One entry per check: {'name', 'ok', 'detail'}."""
    checks = []

    def check(name, ok, detail=""):
        checks.append({"name": name, "ok": bool(ok), "detail": "" if ok else detail})

    check("dispatcher process running", _pid_alive(state.get("pid", -1)),
          f"pid {state.get('pid')} is gone; restart it with `snakemake cluster_start --forcerun cluster_start`")
    try:
        answer = request(state, "/health")
        check(f"dispatcher answers on 127.0.0.1:{state['port']}", answer.get("ok") is True, f"unexpected answer {answer}")
    except (OSError, ValueError) as exc:
        check(f"dispatcher answers on 127.0.0.1:{state.get('port')}", False, str(exc))
    trims = state.get("trims", {})
    check(f"model store server answers on {trims.get('socket')}", _store_answers(state),
          "not running; restart it with `snakemake cluster_start --forcerun cluster_start`")
    store = state.get("trace_store", "")
    check(f"trace store {store} reachable", *_store_reachable(store))
    free = shutil.disk_usage(".").free
    check("free disk space", free > MIN_FREE_BYTES, f"only {free >> 20} MiB free")
    for path in calibration_paths:
        check(f"calibration {path} present", Path(path).is_file(), "missing")
    return checks


def execute(settings, experiment, mode, calibration_paths, run_dir, state, receipt):
    """One per-mode run here: register with the dispatcher, run, upload traces, report done."""
    from repro.pecan.run import load_calibrations, run_mode
    from repro.store import open_store, upload_traces

    job = f"{experiment}/{mode}"
    request(state, "/jobs", {"job": job, "status": "running"})
    try:
        metrics = run_mode(settings, experiment, mode, load_calibrations(calibration_paths), run_dir)
    except BaseException:
        request(state, "/jobs", {"job": job, "status": "failed"})
        raise
    traces = sorted((Path(run_dir) / "traces").glob("*.json"))
    upload_traces(open_store(state["trace_store"]), traces, f"traces/{experiment}/{mode}", receipt)
    request(state, "/jobs", {"job": job, "status": "done", "throughput": metrics["throughput"]})
    return metrics


def stop(state):
    for pid in (state.get("trims", {}).get("pid"), state.get("pid")):
        _terminate(pid)
    if state.get("trims", {}).get("socket"):
        Path(state["trims"]["socket"]).with_name("dispatcher.pid").unlink(missing_ok=True)
    return {"stopped": [state.get("pid"), state.get("trims", {}).get("pid")]}


def _terminate(pid):
    if pid and _pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not _pid_alive(pid):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)


class _Dispatcher(BaseHTTPRequestHandler):
    jobs = {}

    def _answer(self, body, code=200):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._answer({"ok": True, "jobs": len(self.jobs), "pid": os.getpid()})
        elif self.path == "/jobs":
            self._answer(self.jobs)
        else:
            self._answer({"error": "not found"}, 404)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/jobs":
            self.jobs[body["job"]] = {**self.jobs.get(body["job"], {}), **body, "updated": time.time()}
            self._answer({"ok": True})
        else:
            self._answer({"error": "not found"}, 404)

    def log_message(self, fmt, *args):
        sys.stderr.write("dispatcher: " + fmt % args + "\n")


def serve(ready_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dispatcher)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    Path(ready_path).write_text(str(server.server_address[1]))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    serve(sys.argv[1])
