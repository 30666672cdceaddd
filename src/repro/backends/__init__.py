"""Where runs execute: the backend registry and the interface every backend implements.

A backend is a module in this package named after it (its name is the config's `backend` value)
that defines `BACKEND`, a subclass of `Backend`. Its settings are the config section of the same
name, if it has one (the schema's `<name>:` entry, or the backend's own `schema`). The registry is
the package's module list, so adding a backend is its module.
"""

import os
import pkgutil
import stat
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from repro.errors import ReproError
from repro.fsutil import file_kind, write_json
from repro.settings import settings_digest


def backend_names():
    """Every backend, in name order: the modules of this package (found without importing them)."""
    return sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))


def get_backend(name):
    """The backend called `name`, ready to use."""
    if name not in backend_names():
        raise ReproError(f"unknown backend {name!r}; expected one of {backend_names()}")
    return import_module(f"{__name__}.{name}").BACKEND(name)


@dataclass(frozen=True)
class RunRequest:
    """One per-mode run, as the `run` rule asks for it."""

    settings: dict  # the run's settings (repro.rulesettings.run_settings)
    experiment: str
    mode: str
    calibration_paths: tuple  # calibration JSON files, one per pipeline
    run_dir: Path  # where run.log, metrics.json and traces/ end up on this machine
    receipt: Path  # where the trace upload's receipt is written


class Backend(ABC):
    """Start, check, run on and stop one kind of cluster. `state` is the JSON object `start` returns
    (with the backend's name and settings digest added), as `cluster_start` wrote it."""

    # what a configuration needs for this backend: its own section, an optional part of the install
    # ((extra, module it provides) in pyproject.toml), and whether the TrIMS experiments can run on it;
    # the keys of its section holding paths on this machine (`~` and $VAR expanded at load; "*": every entry)
    needs_section: ClassVar[bool] = False
    path_keys: ClassVar[tuple] = ()
    extra: ClassVar[tuple[str, str] | None] = None
    runs_trims: ClassVar[bool] = False
    # the JSON schema of its config section, added to the config schema where the package's schema has none
    schema: ClassVar[dict | None] = None

    def __init__(self, name):
        self.name = name

    @abstractmethod
    def start(self, settings, state_path) -> dict:
        """Bring the cluster up (idempotently) for `settings` (repro.rulesettings.cluster_settings)."""

    @abstractmethod
    def describe(self, state) -> str:
        """One line saying what was started."""

    @abstractmethod
    def checks(self, state) -> list:
        """The backend's own status checks, each {'name', 'ok', 'detail'}."""

    @abstractmethod
    def run(self, request: RunRequest, state) -> dict:
        """Run one experiment x mode; leave run.log, metrics.json and traces/ in request.run_dir; return the metrics."""

    @abstractmethod
    def stop(self, state) -> dict:
        """Stop what `start` started."""

    def bind(self, state, state_path):
        """`state` as read from `state_path`, checked, its paths on this machine taken from where the
        state file lies (not from what it records: a state copied from another working directory
        names that directory's files and processes). A ReproError names the file and the entry."""
        return state

    def caption(self, preset, measured):
        """What produced a figure's bars (`measured`: what was measured on which machine)."""
        return f"backend={self.name}, calibration={preset}"

    def status(self, state, calibration_paths=()):
        """The backend's checks, then one per calibration the run needs."""
        return self.checks(state) + [
            {"name": f"calibration {path} present", "ok": Path(path).is_file(), "detail": _not_a_file(path)}
            for path in calibration_paths
        ]

    def execute(self, request: RunRequest, state):
        """Run, then put the run's traces in the trace store with a receipt; return the metrics."""
        from repro.fsutil import check_default_output
        from repro.pecan.costs import experiment_mode
        from repro.pecan.calibration_files import load_calibrations
        from repro.pecan.run import RUN_FILES, check_run_directory, remove_repeats, remove_run_traces
        from repro.tracestore import is_receipt, open_store, upload_traces

        check_run_directory(request.run_dir)  # nothing of the user's replaced; this run's traces uploaded only
        receipt, run_dir = Path(request.receipt).resolve(), Path(request.run_dir).resolve()
        if receipt.is_relative_to(run_dir) and receipt.relative_to(run_dir).parts[0] in RUN_FILES:
            raise ReproError(f"--receipt {request.receipt}: is the run's own {receipt.relative_to(run_dir)} in "
                             f"--run-dir {request.run_dir}; expected another file (the workflow's: upload.json there)")
        # what the run reads, and the receipt it replaces, checked before an earlier run's results go
        check_default_output(request.receipt, "--receipt", is_receipt, "an upload receipt", "name another file")
        experiment_mode(request.settings["pecan"], request.experiment, request.mode)
        load_calibrations(request.calibration_paths)
        # the earlier run's marks of completion first, which this run replaces: one stopped or failed
        # leaves none, and one stopped while the rest below goes leaves no earlier run looking complete
        for done in (Path(request.receipt), Path(request.run_dir) / "metrics.json"):
            if done.is_symlink() or done.is_file():
                done.unlink()
        remove_repeats(request.run_dir)  # an earlier run's repeat logs never pass for this one's, whatever ran it
        remove_run_traces(request.run_dir)  # nor its traces: every trace there is uploaded as this run's
        metrics = self.run(request, state)
        traces = sorted((Path(request.run_dir) / "traces").glob("*.json"))
        upload_traces(open_store(state["trace_store"]), traces, f"traces/{request.experiment}/{request.mode}",
                      request.receipt)
        return metrics


def _not_a_file(path):
    """Why `path` is not a calibration file to read: "" where it is a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return "" if stat.S_ISREG(mode) else f"{file_kind(mode)}, not a file"


def start_cluster(settings, state_path):
    """Start the backend `settings` name (the `cluster_settings` of the effective config) and write
    its state, which records the settings' digest so that later status checks can compare."""
    state = get_backend(settings["backend"]).start(settings, state_path)
    state.update(backend=settings["backend"], settings_digest=settings_digest(settings), started_at=time.time())
    write_json(state_path, state)
    return state


def state_check(state, state_path, expected_digest):
    """A status check: the cluster state was written for the settings the configuration gives now."""
    ok = state.get("settings_digest") == expected_digest
    return {"name": f"cluster state {state_path} matches the configuration", "ok": ok,
            "detail": "" if ok else (
                f"it was started for other settings (backend {state.get('backend')!r}, digest "
                f"{state.get('settings_digest')}; the configuration now gives {expected_digest}); restart it with "
                "`snakemake cluster_start --forcerun cluster_start` (with the same --configfile/--config options), "
                "then run again")}


def format_checks(checks):
    """The artifact's manage_cluster.sh status lines: '[ OK ] check' or '[FAILED] check: detail'."""
    lines = []
    for check in checks:
        if check["ok"]:
            lines.append(f"[ OK ] {check['name']}")
        else:
            lines.append(f"[FAILED] {check['name']}: {check['detail']}")
    return "\n".join(lines)
