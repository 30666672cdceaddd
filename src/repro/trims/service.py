"""The model store as a workflow service: started for TrIMS targets only, found again through a
private runtime directory keyed by the workflow directory (even after `rm -rf results`), and
stopped when the invocation that started it ends (or by `snakemake cluster_stop`).
"""

import time
from pathlib import Path

from repro import processes
from repro.errors import ReproError
from repro.fsutil import write_json
from repro.rulesettings import settings_digest

RECORD = "store.json"


def _record_path(workdir):
    return processes.runtime_dir(workdir) / RECORD


def _answers(socket_path):
    from repro.trims.server import StoreConnection

    try:
        StoreConnection(socket_path, timeout=2).request({"op": "status"})
        return True
    except ReproError:
        return False


def running(record):
    """Whether the store in `record` is the process that was started and answers on its socket."""
    return bool(record) and processes.matches(record.get("process")) and _answers(record["socket"])


def start(settings, state_path, workdir="."):
    """Start the store with `settings` (trims_store_settings) unless the same one already runs; write state_path."""
    from repro.trims.runtimes import resolve_device
    from repro.trims.server import budget_bytes, start_daemon

    record_path = _record_path(workdir)
    digest = settings_digest(settings)
    record = processes.read_record(record_path)
    if record and record.get("digest") == digest and running(record):
        record["reused"] = True
        write_json(state_path, record)
        return record
    stop(workdir)  # another incarnation, or one started with other settings
    state_path = Path(state_path)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    base = Path(settings["base_path"]).resolve()
    base.mkdir(parents=True, exist_ok=True)
    server = settings["server"]
    socket_path = record_path.with_name("trims.sock")
    log = state_path.with_name("trims-server.log")
    pid = start_daemon(socket_path, base, budget_bytes(megabytes=server["memory_mb"]), server["eviction"],
                       record_path.with_name("trims.pid"), log, resolve_device(server["device"]))
    record = {"process": processes.describe(pid, "model store"), "socket": str(socket_path), "base_path": str(base),
              **server, "digest": digest, "log": str(log), "started_at": time.time()}
    processes.write_record(record_path, record)
    write_json(state_path, record)
    return record


def status(state, expected_digest):
    """Status checks for a TrIMS run: the store recorded in `state` runs, answers, and has the configured settings."""
    checks = [
        {"name": f"model store server answers on {state.get('socket')}", "ok": running(state),
         "detail": "not running; start it again with `snakemake trims_store_start --forcerun trims_store_start`"},
        {"name": "model store settings match the configuration", "ok": state.get("digest") == expected_digest,
         "detail": "it was started with other settings; restart it with "
                   "`snakemake trims_store_start --forcerun trims_store_start`"},
    ]
    for check in checks:
        if check["ok"]:
            check["detail"] = ""
    return checks


def stop(workdir="."):
    """Stop the store this workflow directory started, if it still runs; forget its record."""
    record_path = _record_path(workdir)
    record = processes.read_record(record_path)
    if not record:
        return False
    from repro.trims.modelstore import remove_stale_segments, segment_prefix

    stopped = processes.terminate(record.get("process"))
    socket_path = Path(record.get("socket", record_path.with_name("trims.sock")))
    socket_path.unlink(missing_ok=True)
    remove_stale_segments(segment_prefix(socket_path))  # left behind when the store was killed
    record_path.unlink(missing_ok=True)
    return stopped


def stop_store_started_since(since, state_path, workdir="."):
    """At the end of an invocation: stop the store if that invocation started it (nothing stays running
    that the user did not start), and remove its state so the next invocation that needs it starts it."""
    record = processes.read_record(_record_path(workdir))
    if record and record.get("started_at", 0) >= since:
        stop(workdir)
        Path(state_path).unlink(missing_ok=True)
