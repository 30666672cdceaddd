"""One per-mode run on the local backend: simulate, write the artifact-format log, trace and metrics."""

import contextlib
import dataclasses
import itertools
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from repro import processes
from repro.errors import ReproError
from repro.fsutil import DIRECTORY_MODE, atomic_path, open_regular, read_json, size_text, write_json
from repro.pecan.calibrate import resample
from repro.pecan.cluster import JobSpec, simulate, step_times, worker_names
from repro.pecan.costs import lookup
from repro.pecan.logs import MAX_LINE, RUN_LINE, LogWriter, parse_log
from repro.pecan.policies import FASTFLOW_WORKERS, fastflow_workers
from repro.pecan.presets import pipeline_costs
from repro.pecan.runsize import check_run_size
from repro.traces import TraceReader, write_trace


def job_spec(pecan, experiment, mode, costs, seed):
    """Build the JobSpec of one experiment x mode from the `pecan` config section."""
    exp = lookup(pecan["experiments"], experiment, "experiment")
    model = lookup(pecan["models"], exp["model"], "model")
    accel = lookup(pecan["accelerators"], exp["accelerator"], "accelerator")
    mode_cfg = lookup(pecan["modes"], mode, "mode")
    cluster = pecan["cluster"]
    if model["pipeline"] not in costs:
        preset = next(iter(costs.values()))["preset"]
        raise ReproError(f"model {exp['model']!r}: no costs for pipeline {model['pipeline']!r} with calibration preset "
                         f"{preset!r} (costs for {sorted(costs)}): "
                         + ("the artifact has no runs of it; use calibration.preset local" if preset == "artifact"
                            else "pass its calibration (repro pecan calibrate --pipeline NAME)"))
    pipeline_cost = costs[model["pipeline"]]
    order = "autoorder" if mode_cfg["autoorder"] else "declared"
    return JobSpec(
        experiment=experiment,
        mode=mode,
        placement=mode_cfg["placement"],
        autoorder=mode_cfg["autoorder"],
        batch_size=model["batch_size"],
        steps_per_epoch=model["steps_per_epoch"],
        epochs=mode_cfg["epochs"],
        steps_per_loop=mode_cfg["steps_per_loop"],
        accelerator_batches_per_s=lookup(accel["max_batches_per_s"], exp["model"], "model for this accelerator"),
        cost_per_element=pipeline_cost[order],
        bytes_per_element=pipeline_cost["bytes_per_element"],
        collocated_vcpus=pipeline_cost["collocated_vcpus"],
        remote_worker_vcpus=cluster["remote_worker_vcpus"],
        local_worker_vcpus=cluster["local_worker_vcpus"],
        max_remote_workers=cluster["max_remote_workers"],
        max_local_workers=mode_cfg.get("max_local_workers", cluster["max_local_workers"]),
        fixed_remote_workers=fixed_remote_workers(mode, mode_cfg),
        fixed_local_workers=mode_cfg.get("local_workers", 0),
        network_gbps=cluster["network_gbps"],
        decision_steps=cluster["decision_steps"],
        noise_cv=cluster["noise_cv"],
        cachew_threshold_up=cluster["cachew_threshold_up"],
        client_cost=cluster["policy_prices"]["client_cost"],
        worker_cost=cluster["policy_prices"]["worker_cost"],
        seed=seed,
    )


def fixed_remote_workers(mode, mode_cfg):
    """The mode's fixed remote worker count: FastFlow's (default 2, at least 1) or a fixed deployment's."""
    if mode_cfg["placement"] == "fastflow":
        return fastflow_workers(mode_cfg.get("remote_workers", FASTFLOW_WORKERS), f"pecan.modes.{mode}.remote_workers")
    return mode_cfg.get("remote_workers", 0)


def write_log(sim, path, preset):
    spec = sim.spec
    lines = []  # (seconds, order, callable)
    for window in sim.windows:
        if spec.placement != "collocated":
            names = worker_names(window.remote, window.local)
            lines.append((window.start_s, 1, lambda w, t=window.start_s, n=names: w.heartbeat(t, n)))
    previous_step, previous_t = 0, 0.0
    for step, t in step_times(sim):
        elapsed = t - previous_t
        rate = (step - previous_step) * spec.batch_size / elapsed
        lines.append((t, 0, lambda w, t=t, e=elapsed, r=rate, a=previous_step, b=step: w.time_history(t, e, r, a, b)))
        previous_step, previous_t = step, t
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        writer = LogWriter(fh)
        writer.info(0.0, f"repro local model: experiment={spec.experiment} mode={spec.mode} placement={spec.placement} "
                         f"autoorder={spec.autoorder} calibration={preset} seed={spec.seed}")
        for _, _, emit in sorted(lines, key=lambda item: (item[0], item[1])):
            emit(writer)
        writer.info(sim.seconds, f"Training finished: {spec.epochs} epochs, {sim.seconds:.2f} simulated seconds")


def trace_events(sim):
    spec = sim.spec
    windows = [(w.start_s, w.seconds, w.first_step, w.steps, w.remote, w.local) for w in sim.windows]
    return window_events(f"{spec.experiment} {spec.mode}", spec.batch_size, windows, sim.decisions)


def window_events(name, batch_size, windows, decisions):
    """A run's trace: per window (start_s, seconds, first_step, steps, remote, local) its workers,
    throughput and training span; per decision (time_s, state, remote, local) an instant."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": name}}]
    for start_s, seconds, first_step, steps, remote, local in windows:
        ts = start_s * 1e6
        events.append({"ph": "C", "name": "workers", "ts": ts, "pid": 1, "args": {"remote": remote, "local": local}})
        events.append({"ph": "C", "name": "throughput", "ts": ts, "pid": 1,
                       "args": {"examples_per_second": steps * batch_size / seconds}})
        events.append({"ph": "X", "name": "train_steps", "cat": "training", "ts": ts, "dur": seconds * 1e6,
                       "pid": 1, "tid": 1, "args": {"first_step": first_step, "steps": steps}})
    for t, state, remote, local in decisions:
        events.append({"ph": "i", "name": "placement_decision", "cat": "policy", "ts": t * 1e6, "pid": 1, "tid": 2,
                       "s": "p", "args": {"state": state, "remote": remote, "local": local}})
    return events


def repeat_seed(seed, repeat):
    """Repeat 0 keeps the configured seed (the log it writes is run.log); the others independent streams."""
    return seed if repeat == 0 else int(np.random.SeedSequence([seed, repeat]).generate_state(1)[0])


def repeat_calibrations(calibrations, seed, repeat):
    """Repeat 0 uses the calibration as measured; the others a bootstrap draw of its elements."""
    if repeat == 0:
        return calibrations
    rng = np.random.default_rng([seed, repeat])
    return {pipeline: resample(calibration, rng) for pipeline, calibration in sorted(calibrations.items())}


def run_mode(config, experiment, mode, calibrations, out_dir, backend="local"):
    """Simulate one experiment x mode into out_dir (run.log, metrics.json, traces/); return the metrics.

    `backend` names where this runs (the ssh backend's command passes `--backend ssh`).
    With `repeats` > 1 the run is repeated with a fresh draw of the calibration and of the model's
    noise each time; repeat 0 writes run.log and the trace, the others repeats/run-<r>.log, and
    metrics.json lists every repeat's parsed log. Everything is written to a hidden directory in
    out_dir and moved into place when all is done: repeats/ holds this run's repeats only, and a
    run that fails leaves nothing of its own (the files it moved into place are removed again, and
    the directories it made where they are empty), and an earlier run's files, its repeats/
    included, as they were unless it failed while moving its own into place. What others wrote
    into out_dir meanwhile (a concurrent run) is kept.
    """
    pecan = config["pecan"]
    preset = config["calibration"]["preset"]
    model = lookup(pecan["models"], lookup(pecan["experiments"], experiment, "experiment")["model"], "model")
    # settings given by hand (`--settings`) are checked here, as a config file is when it is read
    check_run_size(f"pecan.experiments.{experiment}", model, mode, lookup(pecan["modes"], mode, "mode"),
                   pecan["cluster"])
    out = Path(out_dir)
    check_run_directory(out)
    made = _missing_directories(out)
    remove_repeats(out, stale_only=True)  # the earlier run's repeats stay until this one has its own
    out.mkdir(parents=True, exist_ok=True)
    me = processes.describe(os.getpid(), "pecan run")  # in its name: removed as stale only once this run ended
    stage = Path(tempfile.mkdtemp(prefix=f".run.{me['pid']}-{me['start_ticks']}.", suffix=".tmp", dir=out))
    placed, complete = {}, False  # what this run moved into out: path -> its inode
    try:
        metrics = _run_into(stage, config, pecan, preset, experiment, mode, calibrations, backend)
        trace = Path("traces") / f"{experiment}-{mode}.json"
        made += _missing_directories(out / "traces")
        (out / "traces").mkdir(exist_ok=True)
        remove_run_traces(out)  # another experiment's or mode's, which would stay beside this run's
        remove_repeats(out)  # those of a run into this directory that ended while this one ran
        for name in ("run.log", trace, "repeats", "metrics.json"):  # metrics.json last: the run is complete
            if (stage / name).exists():
                placed[out / name] = os.lstat(stage / name).st_ino
                os.replace(stage / name, out / name)
        complete = True
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if not complete:
            _remove_own(placed, made)
    return metrics


def _missing_directories(path):
    """The directories that mkdir(parents=True) of `path` would make, deepest first."""
    return list(itertools.takewhile(lambda directory: not os.path.lexists(directory), [path, *path.parents]))


def _remove_own(placed, made):
    """After a failed run: the files it moved into place that are still its own (a concurrent run may
    have replaced them since), then the directories it made, each only where it is empty. Never a
    whole directory: a concurrent run into the same one may have put its files there."""
    for path, inode in placed.items():
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ino == inode:
                (shutil.rmtree if path.is_dir() and not path.is_symlink() else os.unlink)(path)
    for directory in sorted(made, key=lambda path: len(path.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty: it holds what others wrote
            directory.rmdir()


def _run_into(stage, config, pecan, preset, experiment, mode, calibrations, backend):
    """run_mode's work, every file written under `stage`."""
    repeats, written, total = [], 0, config.get("repeats", 1)
    for repeat in range(total):
        costs = pipeline_costs(preset, pecan["cluster"], repeat_calibrations(calibrations, config["seed"], repeat))
        spec = job_spec(pecan, experiment, mode, costs, repeat_seed(config["seed"], repeat))
        sim = simulate(spec)
        if repeat == 0:
            log = stage / "run.log"
        else:
            (stage / "repeats").mkdir(mode=DIRECTORY_MODE, exist_ok=True)
            log = stage / "repeats" / f"run-{repeat}.log"
        write_log(sim, log, preset)
        written += log.stat().st_size
        _check_room_for_repeats(stage, written, repeat + 1, total)
        parsed = parse_log(log)
        repeats.append({"repeat": repeat, "seed": spec.seed,
                        "log": "run.log" if repeat == 0 else f"repeats/run-{repeat}.log",
                        "cost_per_element": spec.cost_per_element, "simulated_seconds": sim.seconds,
                        "converged": parsed.converged, "throughput": parsed.throughput,
                        "remote_workers": parsed.remote_workers, "local_workers": parsed.local_workers})
        if repeat == 0:
            first, first_sim = repeats[0], sim
    metadata = {"otherData": {"run_id": f"{experiment}-{mode}-seed{config['seed']}", "experiment": experiment,
                              "mode": mode, "backend": backend, "calibration": preset}}
    metrics = {
        "experiment": experiment,
        "mode": mode,
        "backend": backend,
        "calibration": preset,
        "spec": dataclasses.asdict(first_sim.spec),
        "simulated_seconds": first_sim.seconds,
        "decisions": [{"time_s": time_s, "state": state, "remote": remote, "local": local}
                      for time_s, state, remote, local in first_sim.decisions],
        **{key: first[key] for key in ("converged", "throughput", "remote_workers", "local_workers")},
        "repeats": repeats,
    }
    write_json(stage / "metrics.json", metrics)  # first: it refuses a NaN or infinity before the trace is written
    write_trace(stage / "traces" / f"{experiment}-{mode}.json", trace_events(first_sim), metadata)
    return metrics


def _check_room_for_repeats(stage, written, done, total):
    """ReproError where the repeats left, each writing what those done did on average, need more
    than the free space where the run writes: repeats x log lines is not bounded by the config."""
    needed = written // done * (total - done)
    free = shutil.disk_usage(stage).free
    if needed > free:
        raise ReproError(f"repeats: {total}: a repeat's log is about {size_text(written // done)}, and the "
                         f"{total - done} left need {size_text(needed)}, more than the {size_text(free)} free in "
                         f"{stage.parent}; expected fewer repeats or log lines (pecan.modes.<mode>.steps_per_loop)")


_REPEAT_LOG = re.compile(r"run-[0-9]+\.log")
_STAGE = re.compile(r"\.run\.([0-9]+)-([0-9]+)\..+\.tmp")  # run_mode's staging directory: pid, start ticks


_STAGED = {"run.log": None, "metrics.json": None, "traces": re.compile(r".+\.json"), "repeats": _REPEAT_LOG}
RUN_FILES = tuple(_STAGED)  # what a run writes into its run directory


def _holds_only_a_runs_files(stage):
    """Whether the directory `stage` holds nothing but what run_mode writes there (run.log, metrics.json,
    traces/*.json, repeats/run-<n>.log): a directory of the user's with such a name is not removed."""
    try:
        for entry in stage.iterdir():
            pattern = _STAGED.get(entry.name, False)
            if pattern is False or entry.is_symlink() or (pattern is None) != entry.is_file():
                return False
            if pattern is not None and not all(pattern.fullmatch(f.name) and f.is_file() and not f.is_symlink()
                                               for f in entry.iterdir()):
                return False
    except OSError:
        return False
    return True


def _stale_stages(run_dir):
    """The staging directories in run_dir that runs no longer running left (not those of a run still
    writing into it, nor a file or directory of the user's that only looks like one)."""
    me = processes.describe(os.getpid(), "pecan run")
    for path in run_dir.glob(".run.*.tmp"):
        owner = _STAGE.fullmatch(path.name)
        if (owner and not processes.matches({**me, "pid": int(owner[1]), "start_ticks": int(owner[2])})
                and path.is_dir() and not path.is_symlink() and _holds_only_a_runs_files(path)):
            yield path


def check_run_directory(run_dir):
    """ReproError where run_dir holds, under a name a run writes, what no run wrote: traces/ that is
    a symbolic link (the run's trace would go wherever it points) or no directory, or holds what is
    not a run's trace (all of it is uploaded as this run's); a run.log whose first line names no run,
    a metrics.json that is no run's metrics. A run replaces these."""
    traces = Path(run_dir) / "traces"
    if traces.is_symlink() or os.path.lexists(traces) and not traces.is_dir():
        kind = "a symbolic link" if traces.is_symlink() else "not a directory"
        raise ReproError(f"run directory {run_dir}: {traces} is {kind}; expected the traces/ directory a run "
                         "writes (or nothing): move it, or name another run directory")
    found = sorted(traces.iterdir()) if traces.is_dir() else []
    replaced = "a run would replace it"
    checked = [("run.log", _is_run_log, "a run's log (its first line names the run)", replaced),
               ("metrics.json", _is_run_metrics, "a run's metrics (experiment, mode, throughput)", replaced),
               *((path.relative_to(run_dir), _is_run_trace, "a run's trace (otherData.run_id)",
                  "a run would upload it, or replace it, as its own") for path in found)]
    for name, is_a_runs, what, why in checked:
        path = Path(run_dir) / name
        if os.path.lexists(path) and not is_a_runs(path):
            raise ReproError(f"run directory {run_dir}: {path} is not {what}, and {why}; it may be yours: move it, "
                             "or name another run directory")


def remove_run_traces(run_dir):
    """Remove an earlier run's traces from run_dir/traces (the files check_run_directory found to be a
    run's, checked again): a run's traces/ holds its own only, and all of it is uploaded as its own."""
    traces = Path(run_dir) / "traces"
    for path in sorted(traces.iterdir()) if traces.is_dir() and not traces.is_symlink() else ():
        if _is_run_trace(path):
            path.unlink()


def _is_run_log(path):
    try:
        with open_regular(path, str(path), "a run's log", "r", errors="replace") as fh:
            return not path.is_symlink() and RUN_LINE.search(fh.readline(MAX_LINE).rstrip("\n")) is not None
    except (OSError, ReproError):
        return False


def _is_run_trace(path):
    if path.is_symlink() or path.suffix != ".json":
        return False
    try:
        return "run_id" in TraceReader(path).other_data
    except (OSError, ReproError):
        return False


def _is_run_metrics(path):
    try:
        metrics = read_json(path, "a run's metrics")
    except ReproError:
        return False
    return not path.is_symlink() and isinstance(metrics, dict) and {"experiment", "mode", "throughput"} <= set(metrics)


def remove_repeats(run_dir, stale_only=False):
    """Remove an earlier run's repeats/ (and the staging directories killed runs left) from run_dir;
    stale_only: only the staging directories, once repeats/ is checked to be a run's."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    repeats = run_dir / "repeats"
    if os.path.lexists(repeats) and (repeats.is_symlink() or not repeats.is_dir() or not all(
            _REPEAT_LOG.fullmatch(p.name) and _is_run_log(p) for p in repeats.iterdir())):
        raise ReproError(f"run directory {run_dir}: {repeats} is not the repeats/ directory a run writes (run-<n>.log "
                         "files only, each a run's log); it may be yours: move it, or name another run directory")
    for path in [*([] if stale_only else [repeats]), *_stale_stages(run_dir)]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
