"""The cluster model against the tf.data engine: for every deployment an engine run passed through,
the throughput the engine measured next to the ones the model predicts for the same deployment,
and the worker counts each converged to.

The model's job is the engine run's own (repro.pecan.tfdata.engine.EngineSpec): its miniature
accelerator bound, batch size, worker caps, window length and one CPU per worker thread, and the
network the config gives the cluster. It is fed twice, with two sets of inputs, so the table and
the figure show what each explains:

* `model` (the Pillow-fed model): the pipeline's cost per element as the calibration measured it
  on this machine (results/calibration, the Pillow pipeline in the run's order), every worker a
  CPU of its own: the inputs the cluster model's runs use.
* `model_tf` (the engine-fed model): inputs measured for the system the engine runs. The cost and
  bytes per element are the run's own pipeline (its TF ops, in its order) measured by the run
  itself in-process on one CPU before its service started (metrics.json `pipeline_cost`,
  repro.pecan.tfdata.engine.measure_pipeline_cost). The CPUs are the machine's: on the local
  backend the client, the dispatcher and every worker share `cpus` CPUs (metrics.json), so no
  deployment preprocesses on more than that many (JobSpec.host_cpus). Where remote workers ran on
  other hosts (ssh backend) that cap does not describe them, and it is left out.

Neither is tuned to the engine's throughput: both are the model's formula on measured inputs.
The model's convergence comes from `simulate` on each job, as many windows as the engine's run
allowed.

A FastFlow run keeps its workers throughout and changes what the client reads: its rows are per
phase (`phase`: the policy's state, its profiles and its decision), each predicted as the cluster
model runs that phase (repro.pecan.cluster.fastflow_capacity, the run's own local share).
"""

import dataclasses

from repro.errors import ReproError
from repro.pecan.cluster import JobSpec, capacity, fastflow_capacity, simulate

MODELS = ("model", "model_tf")  # the column prefixes: Pillow-fed, engine-fed
LABELS = {"model": "model, Pillow calibration, a CPU per worker",
          "model_tf": "model, the engine's TF pipeline measured, the machine's CPUs shared"}
COLUMNS = ["experiment", "mode", "remote_workers", "local_workers", "phase", "windows", "engine_examples_per_s",
           "model_examples_per_s", "model_vs_engine", "model_tf_examples_per_s", "model_tf_vs_engine",
           "engine_converged", "model_converged", "model_tf_converged"]


def miniature_job(metrics, calibration, network_gbps):
    """The cluster model's JobSpec of one engine run (its metrics.json) at the engine's scale, fed
    the Pillow calibration of the run's order, every worker with CPUs of its own."""
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


def engine_job(metrics, calibration, network_gbps, path="metrics.json"):
    """The same job fed what the engine's run measured for itself: its TF pipeline's CPU seconds
    and bytes per element (in the run's order, one CPU), and the CPUs its processes share."""
    cost = metrics.get("pipeline_cost")
    if not cost or "cpus" not in metrics:
        raise ReproError(f"{path}: no pipeline_cost or cpus (a run from before the engine measured its pipeline); "
                         "run it again (snakemake --forcerun run)")
    order = "autoorder" if metrics["spec"]["autoorder"] else "declared"
    if cost["order"] != order:
        raise ReproError(f"{path}: pipeline_cost measured the {cost['order']} order, the run used {order}")
    shared = 0 if metrics.get("worker_hosts") else metrics["cpus"]  # workers on other hosts: not one machine
    return dataclasses.replace(miniature_job(metrics, calibration, network_gbps),
                               cost_per_element=cost["cpu_s_per_element"],
                               bytes_per_element=cost["bytes_per_element"], host_cpus=shared)


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
    jobs = {"model": miniature_job(metrics, calibrations[pipeline], network_gbps),
            "model_tf": engine_job(metrics, calibrations[pipeline], network_gbps, path)}
    job = jobs["model"]
    converged = {"engine_converged": f"{metrics['remote_workers']}+{metrics['local_workers']}"}
    for name, model_job in jobs.items():
        final = simulate(model_job).windows[-1]
        converged[f"{name}_converged"] = f"{final.remote}+{final.local}"
    deployments = {}  # (remote, local, phase) -> [examples, seconds, windows], windows whose worker set held still
    for window in metrics["windows"]:
        if sorted(window["workers"]) != sorted(window["workers_after"]):
            continue
        counts = (0, 0) if job.placement == "collocated" else _counts(window["workers"])
        entry = deployments.setdefault((*counts, window.get("phase", "")), [0, 0.0, 0])
        entry[0] += window["steps"] * job.batch_size
        entry[1] += window["seconds"]
        entry[2] += 1
    rows = []
    decision = (metrics.get("fastflow") or {}).get("decision") or {}
    for (remote, local, phase), (examples, seconds, windows) in sorted(deployments.items()):
        measured = examples / seconds
        row = {"experiment": job.experiment, "mode": job.mode, "remote_workers": remote, "local_workers": local,
               "phase": phase, "windows": windows, "engine_examples_per_s": round(measured, 2)}
        for name, model_job in jobs.items():
            bound = model_job.accelerator_batches_per_s * model_job.batch_size
            if phase:  # FastFlow: what the client read in that phase
                supply = fastflow_capacity(model_job, phase, remote, decision.get("ratio_local", 1.0))
            else:
                supply = capacity(model_job, remote, local)
            predicted = min(bound, supply)
            row[f"{name}_examples_per_s"] = round(predicted, 2)
            row[f"{name}_vs_engine"] = round(predicted / measured - 1, 4)
        rows.append({**row, **converged})
    return rows


def summary(rows, tolerance=0.15, model="model"):
    """What the caption says of one model column: how many deployments agree within `tolerance`,
    the largest gap, how many modes converged within one worker of the engine, and which not."""
    gap = f"{model}_vs_engine"
    within = sum(abs(r[gap]) <= tolerance for r in rows)
    worst = max(rows, key=lambda r: abs(r[gap]))
    modes = {r["mode"]: (r["engine_converged"], r[f"{model}_converged"]) for r in rows}
    differ = sorted(mode for mode, (engine, predicted) in modes.items() if not _close(engine, predicted))
    text = (f"{within} of {len(rows)} deployments within ±{tolerance:.0%}; largest gap {worst[gap]:+.0%} "
            f"({worst['mode']}, {worst['remote_workers']} remote + {worst['local_workers']} local); "
            f"converged within ±1 worker in {len(modes) - len(differ)} of {len(modes)} modes")
    if differ:
        text += f" (not {', '.join(differ)})"
    return text


def _close(engine, model):
    (er, el), (mr, ml) = (map(int, c.split("+")) for c in (engine, model))
    return abs(er + el - mr - ml) <= 1


def measured_inputs(runs):
    """{order: [CPU ms per element of each run's own measurement]} and the CPUs the runs shared."""
    costs = {}
    for metrics in runs:
        cost = metrics.get("pipeline_cost")
        if cost:
            costs.setdefault(cost["order"], []).append(cost["cpu_s_per_element"] * 1e3)
    return costs, sorted({m["cpus"] for m in runs if "cpus" in m})


def caption_text(rows, runs, tolerance=0.15):
    """The figure's caption: the scale, each model column's inputs and agreement, and what neither
    model describes (why they can differ)."""
    spec = runs[0]["spec"]
    costs, cpus = measured_inputs(runs)
    measured = ", ".join(f"{order} {min(v):.2f}-{max(v):.2f}" if len(v) > 1 else f"{order} {v[0]:.2f}"
                         for order, v in sorted(costs.items()))
    mb = runs[0].get("pipeline_cost", {}).get("bytes_per_element", 0) / 1e6
    return (f"engine tfdata at miniature scale (accelerator step time x{spec['time_scale']:g}, "
            f"{spec['worker_threads']} CPU per worker) vs the cluster model of the same job. "
            f"Model fed the Pillow calibration, a CPU per worker: {summary(rows, tolerance, 'model')}. "
            f"Model fed the engine's own TF pipeline measured by each run in-process on one CPU ({measured} ms CPU "
            f"per element) and the {'/'.join(map(str, cpus))} CPUs the client, dispatcher and workers share: "
            f"{summary(rows, tolerance, 'model_tf')}. Neither model counts sending the batches "
            f"({mb:.1f} MB per element) from worker to client over loopback, the client's and dispatcher's own CPU, "
            f"or other work on the machine")
