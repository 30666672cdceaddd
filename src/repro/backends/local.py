"""The local backend: runs execute on this machine and upload their traces to the trace store.

No process runs between jobs: `cluster_start` records the settings and creates the trace store,
and each run's status checks test what that run needs (its calibrations, a writable trace store
with free space). The TrIMS model store is a service of its own (repro.trims.service), started
only when TrIMS targets are built.
"""

import shutil
import tempfile
from pathlib import Path

from repro.backends import Backend, RunRequest
from repro.errors import ReproError

MIN_FREE_BYTES = 200 << 20


def _trace_store_writable(store):
    """(ok, detail) for the trace store: a directory a file can be written to, or a bucket that answers."""
    if store.startswith("gs://"):
        from repro.tracestore import GCSStore

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


class LocalBackend(Backend):
    runs_trims = True

    def start(self, settings, state_path):
        """Create the trace store (a directory, or a bucket that must already exist) and return the state."""
        store = settings["trace_store"]
        if not store.startswith("gs://"):
            path = Path(store)
            if path.exists() and not path.is_dir():
                raise ReproError(f"trace_store: {store} exists and is not a directory")
            try:
                path.mkdir(parents=True, exist_ok=True)  # kept as configured: relative to the workflow directory
            except OSError as exc:
                raise ReproError(f"trace_store: {store}: cannot make the directory ({exc.strerror}); expected a "
                                 "writable directory or gs://bucket/prefix") from None
        from repro.pecan.engines import start_engine_service

        service = start_engine_service(settings, state_path)
        return {"trace_store": store, **({"engine_service": service} if service else {})}

    def bind(self, state, state_path):
        from repro.pecan.engines import ENGINES

        store = state.get("trace_store")
        if not isinstance(store, str) or not store or "\0" in store:
            raise ReproError(f"{state_path}: trace_store: expected a directory or gs://bucket/prefix, got {store!r:.60}; "
                             "run cluster start again")
        service = state.get("engine_service")
        if service is None:
            return state
        engine = service.get("engine") if isinstance(service, dict) else None
        if not isinstance(engine, str) or engine not in ENGINES or ENGINES[engine].start_service is None:
            raise ReproError(f"{state_path}: engine_service: expected an object naming an engine with a service "
                             f"({', '.join(n for n, e in ENGINES.items() if e.start_service)}), got {service!r:.80}; "
                             "run cluster start again")
        if not isinstance(service.get("address"), str):
            raise ReproError(f"{state_path}: engine_service.address: expected host:port, got {service.get('address')!r:.60}")
        # the service's directory lies beside the state, where start_engine_service put it
        return {**state, "engine_service": {**service, "directory": str(Path(state_path).parent / engine)}}

    def describe(self, state):
        service = state.get("engine_service")
        return (f"local backend: runs on this machine, traces to {state['trace_store']}"
                + (f"; {service['engine']} service at {service['address']}" if service else ""))

    def checks(self, state):
        store = state.get("trace_store", "")
        ok, detail = _trace_store_writable(store)
        checks = [{"name": f"trace store {store} writable", "ok": ok, "detail": detail}]
        if not store.startswith("gs://") and Path(store).is_dir():
            free = shutil.disk_usage(store).free
            ok = free > MIN_FREE_BYTES
            checks.append({"name": f"free disk space at {store}", "ok": ok,
                           "detail": "" if ok else f"only {free >> 20} MiB free, {MIN_FREE_BYTES >> 20} MiB needed"})
        from repro.pecan.engines import engine_service_checks

        return checks + engine_service_checks(state)

    def run(self, request: RunRequest, state):
        from repro.pecan.engines import run_engine
        from repro.pecan.calibration_files import load_calibrations

        service = state.get("engine_service")
        return run_engine(request.settings, request.experiment, request.mode,
                          load_calibrations(request.calibration_paths), request.run_dir,
                          service_dir=service["directory"] if service else None)

    def stop(self, state):
        from repro.pecan.engines import stop_engine_service

        stopped = stop_engine_service(state)
        return {"stopped": [f"{state['engine_service']['engine']} service: {stopped} process(es)"] if stopped else []}

    def caption(self, preset, measured):
        # the markers (a reference's, or the paper's values) say what they are in the figure's legend,
        # where they are drawn
        return f"local model (backend=local, calibration={preset}; {measured})"


BACKEND = LocalBackend
