"""What turns a run's settings into run.log, metrics.json and a trace: the engines registry.

`pecan.engine` names one of ENGINES. `model` is the cluster model (repro.pecan.run); `tfdata` runs
the mode for real on a tf.data service at miniature scale (repro.pecan.tfdata, the 'tfdata'
extra). Every engine writes the same files, so the trace, cost and plot rules read either.
A backend's `run` calls `run_engine`; the cluster a backend starts may hold an engine's
service (its state's `engine` entry), which the run then uses.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from repro.errors import ReproError


@dataclass(frozen=True)
class Engine:
    description: str
    run: Callable  # (settings, experiment, mode, calibrations, out_dir, backend, service_dir) -> metrics
    extra: tuple | None = None  # (extra, module it provides) in pyproject.toml, checked at config load
    section: str | None = None  # the `pecan` key of its own settings, passed to its runs only
    # that section's JSON schema, added to the config schema where the package's schema has none for it
    schema: dict | None = None
    caption: Callable | None = None  # (pecan config, experiment) -> what a figure says produced its bars
    # a service `cluster_start` starts on the local backend (directory -> what its state records),
    # its status checks (that record -> [{'name', 'ok', 'detail'}]) and its stop (record -> processes stopped)
    start_service: Callable | None = None
    service_checks: Callable | None = None
    stop_service: Callable | None = None


def _run_model(settings, experiment, mode, calibrations, out_dir, backend, service_dir):
    from repro.pecan.run import run_mode

    return run_mode(settings, experiment, mode, calibrations, out_dir, backend)


def _run_tfdata(settings, experiment, mode, calibrations, out_dir, backend, service_dir):
    from repro.pecan.costs import experiment_pipeline
    from repro.pecan.tfdata.engine import run_for_workflow

    calibration = calibrations.get(experiment_pipeline(settings["pecan"], experiment))
    return run_for_workflow(settings, experiment, mode, out_dir, backend, service_dir, calibration)


def _start_tfdata(directory):
    from repro.pecan.tfdata import require_tensorflow
    from repro.pecan.tfdata.service import Service

    require_tensorflow()
    return {"engine": "tfdata", "directory": str(directory), "address": Service.start(directory).address}


# What a workflow whose dispatcher is gone (cluster_stop, a reboot) runs to start it again; finished
# runs are kept (they take the cluster state as ancient)
RESTART = "start it again: snakemake cluster_start --forcerun cluster_start, with this invocation's --configfile"


def _tfdata_checks(record):
    from repro.pecan.tfdata.service import workflow_checks

    where = f"tf.data service ({record['directory']})"
    checks = workflow_checks(record["directory"])
    gone = not checks[0][0] and checks[0][1].startswith(("no tf.data service recorded", "dispatcher (pid"))
    return [{"name": f"{where}: {text}", "ok": True, "detail": ""} if ok else
            {"name": where, "ok": False, "detail": f"{text}; {RESTART}" if gone and i == 0 else text}
            for i, (ok, text) in enumerate(checks)]


def _stop_tfdata(record):
    from repro.pecan.tfdata.service import Service

    return Service(record["directory"]).stop()


def _tfdata_caption(pecan, experiments):
    """The engine's caption for a figure of one experiment (a name) or several (a list)."""
    scale = pecan["tfdata"].get("time_scale")
    # a figure of one experiment lists each mode's derived scale after the caption (pecan figure)
    scale = (f"x{scale:g}" if scale is not None else
             "derived from the pipeline's calibrated TF cost and the machine's CPUs, one per pipeline"
             + (", below" if isinstance(experiments, str) else ""))
    return (f"engine tfdata: real runs on a tf.data service on this machine at miniature scale (accelerator step "
            f"time {scale}; dollars from the miniature run's workers and throughput; one run per mode)")


ENGINES = {
    "model": Engine("the cluster model fed by the calibrated pipelines", _run_model),
    "tfdata": Engine("real runs on a tf.data service at miniature scale", _run_tfdata,
                     extra=("tfdata", "tensorflow"), section="tfdata", caption=_tfdata_caption,
                     start_service=_start_tfdata, service_checks=_tfdata_checks, stop_service=_stop_tfdata),
}


def engine_of(settings):
    """The engine a run's (or the config's) settings name; `model` where they name none."""
    name = settings["pecan"].get("engine", "model")
    if name not in ENGINES:
        raise ReproError(f"pecan.engine: unknown engine {name!r}; expected one of {sorted(ENGINES)}")
    return name


def start_engine_service(settings, state_path):
    """Start the service of the engine the cluster settings name, next to the state; its record or None."""
    engine = settings.get("engine")
    if engine is None or ENGINES[engine].start_service is None:
        return None
    return ENGINES[engine].start_service(Path(state_path).parent / engine)


def stop_services_beside(state_path):
    """Stop the engine services recorded beside the cluster state `state_path` (where
    start_engine_service puts them), from their own records: where that state is gone or cannot be
    read, no service outlives it (`make clean` removes the records next). [(directory, processes)]."""
    stopped = []
    for name, engine in ENGINES.items():
        directory = Path(state_path).parent / name
        if engine.stop_service is not None and (directory / "state.json").is_file():
            stopped.append((directory, engine.stop_service({"directory": str(directory)})))
    return stopped


def engine_service_checks(state):
    record = state.get("engine_service")
    return ENGINES[record["engine"]].service_checks(record) if record else []


def stop_engine_service(state):
    record = state.get("engine_service")
    return ENGINES[record["engine"]].stop_service(record) if record else 0


def run_engine(settings, experiment, mode, calibrations, out_dir, backend="local", service_dir=None):
    """Run experiment x mode with the settings' engine into out_dir; return the metrics. An experiment
    or mode the settings do not have is refused before anything is written."""
    from repro.pecan.costs import experiment_mode

    name = engine_of(settings)
    experiment_mode(settings["pecan"], experiment, mode)
    return ENGINES[name].run(settings, experiment, mode, calibrations, Path(out_dir), backend, service_dir)
