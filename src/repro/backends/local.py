"""The local backend: runs execute on this machine and upload their traces to the trace store.

No process runs between jobs: `cluster_start` records the settings and creates the trace store,
and each run's status checks test what that run needs (its calibrations, a writable trace store
with free space). The TrIMS model store is a service of its own (repro.trims.service), started
only when TrIMS targets are built.
"""

import os
import shutil
import tempfile
from pathlib import Path

from repro.errors import ReproError

MIN_FREE_BYTES = 200 << 20


def start(settings, state_path):
    """Create the trace store (a directory, or a bucket that must already exist) and return the state."""
    store = settings["trace_store"]
    if not store.startswith("gs://"):
        path = Path(store)
        if path.exists() and not path.is_dir():
            raise ReproError(f"trace_store: {store} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)  # kept as configured: relative to the workflow directory
    return {"trace_store": store}


def describe(state):
    return f"local backend: runs on this machine, traces to {state['trace_store']}"


def _store_writable(store):
    """(ok, detail) for the trace store: a directory a file can be written to, or a bucket that answers."""
    if store.startswith("gs://"):
        from repro.store import GCSStore

        try:
            GCSStore(store, retry_deadline_s=10).list("traces/")
            return True, ""
        except Exception as exc:  # any client or network failure means: not reachable
            return False, str(exc)
    try:
        with tempfile.NamedTemporaryFile(dir=store, prefix=".write-check."):
            return True, ""
    except OSError as exc:
        return False, f"cannot write there ({exc.strerror})"


def status(state, calibration_paths=()):
    """One entry per check: {'name', 'ok', 'detail'}."""
    checks = []

    def check(name, ok, detail=""):
        checks.append({"name": name, "ok": bool(ok), "detail": "" if ok else detail})

    store = state.get("trace_store", "")
    check(f"trace store {store} writable", *_store_writable(store))
    if not store.startswith("gs://") and os.path.isdir(store):
        free = shutil.disk_usage(store).free
        check(f"free disk space at {store}", free > MIN_FREE_BYTES,
              f"only {free >> 20} MiB free, {MIN_FREE_BYTES >> 20} MiB needed")
    for path in calibration_paths:
        check(f"calibration {path} present", Path(path).is_file(), "missing")
    return checks


def execute(settings, experiment, mode, calibration_paths, run_dir, state, receipt):
    """One per-mode run here, then its traces go to the trace store."""
    from repro.pecan.run import load_calibrations, run_mode
    from repro.store import open_store, upload_traces

    metrics = run_mode(settings, experiment, mode, load_calibrations(calibration_paths), run_dir)
    traces = sorted((Path(run_dir) / "traces").glob("*.json"))
    upload_traces(open_store(state["trace_store"]), traces, f"traces/{experiment}/{mode}", receipt)
    return metrics


def stop(state):
    return {"stopped": []}
