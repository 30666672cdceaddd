"""The cluster model against the tf.data engine: for every deployment an engine run passed through,
the throughput the engine measured next to the one the model predicts for the same deployment,
calibration and scale, and the worker counts each converged to.

The model's job is the engine run's own (repro.pecan.tfdata.engine.EngineSpec): its miniature
accelerator bound, batch size, worker caps, window length and one CPU per worker thread, with
the pipeline's cost per element as the calibration measured it on this machine (the Pillow
pipeline, in the run's order), and the network the config gives the cluster. The model's
convergence comes from `simulate` on that job, as many windows as the engine's run allowed.
"""

from repro.errors import ReproError
from repro.pecan.cluster import JobSpec, capacity, simulate

COLUMNS = ["experiment", "mode", "remote_workers", "local_workers", "windows", "engine_examples_per_s",
           "model_examples_per_s", "model_vs_engine", "engine_converged", "model_converged"]


def miniature_job(metrics, calibration, network_gbps):
    """The cluster model's JobSpec of one engine run (its metrics.json) at the engine's scale."""
    spec = metrics["spec"]
    order = calibration["autoorder" if spec["autoorder"] else "declared"]
    return JobSpec(
        experiment=spec["experiment"], mode=spec["mode"], placement=spec["placement"], autoorder=spec["autoorder"],
        batch_size=spec["batch_size"], steps_per_epoch=spec["decision_steps"] * spec["max_windows"], epochs=1,
        steps_per_loop=spec["decision_steps"],
        accelerator_batches_per_s=spec["accelerator_examples_per_s"] / spec["time_scale"] / spec["batch_size"],
        cost_per_element=order["cpu_s_per_element"], bytes_per_element=order["bytes_out_per_element"],
        collocated_vcpus=spec["collocated_threads"], remote_worker_vcpus=spec["worker_threads"],
        local_worker_vcpus=spec["worker_threads"], max_remote_workers=spec["max_remote_workers"],
        max_local_workers=spec["max_local_workers"], fixed_remote_workers=spec["fixed_remote_workers"],
        fixed_local_workers=spec["fixed_local_workers"], network_gbps=network_gbps,
        decision_steps=spec["decision_steps"], noise_cv=0.0, cachew_threshold_up=spec["cachew_threshold_up"],
        client_cost=spec["client_cost"], worker_cost=spec["worker_cost"], seed=spec["seed"])


def _counts(names):
    local = sum("localhost" in name for name in names)
    return len(names) - local, local


def validation_rows(metrics, calibrations, network_gbps, path="metrics.json"):
    """One row per (mode, deployment) of one engine run: measured and predicted examples/s."""
    if metrics.get("engine") != "tfdata":
        raise ReproError(f"{path}: not a tf.data engine run (engine {metrics.get('engine', 'model')!r}); "
                         "the validation compares the engine's runs with the model: set pecan.engine: tfdata")
    pipeline = metrics["spec"]["pipeline"]
    if pipeline not in calibrations:
        raise ReproError(f"{path}: no calibration of pipeline {pipeline!r}")
    job = miniature_job(metrics, calibrations[pipeline], network_gbps)
    bound = job.accelerator_batches_per_s * job.batch_size
    final = simulate(job).windows[-1]
    model_converged = f"{final.remote}+{final.local}"
    engine_converged = f"{metrics['remote_workers']}+{metrics['local_workers']}"
    deployments = {}  # (remote, local) -> [examples, seconds, windows], windows whose worker set held still
    for window in metrics["windows"]:
        if sorted(window["workers"]) != sorted(window["workers_after"]):
            continue
        counts = (0, 0) if job.placement == "collocated" else _counts(window["workers"])
        entry = deployments.setdefault(counts, [0, 0.0, 0])
        entry[0] += window["steps"] * job.batch_size
        entry[1] += window["seconds"]
        entry[2] += 1
    rows = []
    for (remote, local), (examples, seconds, windows) in sorted(deployments.items()):
        measured = examples / seconds
        predicted = min(bound, capacity(job, remote, local))
        rows.append({"experiment": job.experiment, "mode": job.mode, "remote_workers": remote, "local_workers": local,
                     "windows": windows, "engine_examples_per_s": round(measured, 2),
                     "model_examples_per_s": round(predicted, 2), "model_vs_engine": round(predicted / measured - 1, 4),
                     "engine_converged": engine_converged, "model_converged": model_converged})
    return rows


def summary(rows, tolerance=0.15):
    """What the caption says: how many deployments agree within `tolerance`, the largest gap, and
    the modes whose converged worker counts differ by more than one."""
    within = sum(abs(r["model_vs_engine"]) <= tolerance for r in rows)
    worst = max(rows, key=lambda r: abs(r["model_vs_engine"]))
    differ = sorted({r["mode"] for r in rows if not _close(r["engine_converged"], r["model_converged"])})
    text = (f"{within} of {len(rows)} deployments within ±{tolerance:.0%}; largest gap {worst['model_vs_engine']:+.0%} "
            f"({worst['mode']}, {worst['remote_workers']} remote + {worst['local_workers']} local)")
    if differ:
        text += f"; converged workers differ by more than one in {', '.join(differ)}"
    return text


def _close(engine, model):
    (er, el), (mr, ml) = (map(int, c.split("+")) for c in (engine, model))
    return abs(er + el - mr - ml) <= 1
