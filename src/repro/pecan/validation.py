"""The cluster model against the tf.data engine: for every deployment an engine run passed through,
the throughput the engine measured next to the ones the model predicts for the same deployment,
and the worker counts each converged to.

The model's job is the engine run's own (repro.pecan.tfdata.spec.EngineSpec): its miniature
accelerator bound, batch size, worker caps, window length and one CPU per worker thread, and the
network the config gives the cluster. It is fed twice, with two sets of inputs, so the table and
the figure show what each explains:

* `model` (the Pillow-fed model): the pipeline's cost per element as the calibration measured it
  on this machine (results/calibration, the Pillow pipeline in the run's order), every worker a
  CPU of its own: the inputs the cluster model's runs use.
* `model_tf` (the engine-fed model): inputs measured for the system the engine runs. The cost and
  bytes per element are the run's own pipeline (its TF ops, in its order) measured by the run
  itself in-process on one CPU before its service started (metrics.json `pipeline_cost`,
  repro.pecan.tfdata.engine.measure_pipeline_cost). Moving an element from a worker to the client
  costs CPU on both sides (sending, receiving), measured per byte by the run's probe before its
  deployment started (metrics.json `transfer_cost`, measure_transfer_cost); the same probe's
  worker then serves the run's pipeline, and what it spends per element served (pipeline and
  sending, every thread busy, the client receiving beside it) is a worker's cost in the model
  (`served_s_per_element`; runs from before it had one add the two measured apart). The CPUs are the machine's: on the local
  backend the client, the dispatcher and every worker share `cpus` CPUs (metrics.json), so no
  deployment preprocesses on more than that many (JobSpec.host_cpus). Where remote workers ran on
  other hosts (ssh backend) that cap does not describe them, and it is left out. Each worker (and
  collocated's client) is pinned to its CPUs, but shares them with the machine's other work: the
  model gives it the share of its CPUs it measured in that deployment's windows (metrics.json
  windows' `cpu_share`, repro.pecan.tfdata.engine.Sharing; the `cpu_share` column), not a whole
  CPU.

Neither is tuned to the engine's throughput: both are the model's formula on measured inputs.
The model's convergence comes from `simulate` on each job, as many windows as the engine's run
allowed.

Only a deployment where the model predicts less than the accelerator's bound tests it: at the
bound every model agrees with an engine that reaches the bound. So the agreement is counted over
the deployments below the bound of the engine-fed model (`TESTED_BY`), those at the bound are
counted apart, and `verdict` says the validation failed when fewer than `MIN_TESTED` deployments
are below the bound (nothing was tested) or fewer than `MIN_AGREEMENT` of them agree within the
tolerance.

A FastFlow run keeps its workers throughout and changes what the client reads: its rows are per
phase (`phase`: the policy's state, its profiles and its decision), each predicted as the cluster
model runs that phase (repro.pecan.cluster.fastflow_capacity, the run's own local share).
"""

import dataclasses
import sys

from repro.errors import ReproError
from repro.pecan.cluster import JobSpec, capacity, fastflow_capacity, simulate
from repro.pecan.policies import FASTFLOW_CUTS, LOCAL_ONLY, OFFLOADED, PROFILE_GTHP, PROFILE_LTHP

MODELS = ("model", "model_tf")  # the column prefixes: Pillow-fed, engine-fed
LABELS = {"model": "model, Pillow calibration, a CPU per worker",
          "model_tf": "model, the engine's TF pipeline measured, the machine's CPUs shared"}
COLUMNS = ["experiment", "mode", "remote_workers", "local_workers", "phase", "windows", "engine_examples_per_s",
           "bound_examples_per_s", "cpu_share", "model_examples_per_s", "model_vs_engine", "model_below_bound",
           "model_tf_examples_per_s", "model_tf_vs_engine", "model_tf_below_bound",
           "engine_converged", "model_converged", "model_tf_converged"]
CLIENT_PHASES = (PROFILE_LTHP, LOCAL_ONLY)  # FastFlow reads only the client's own pipeline
TESTED_BY = "model_tf"  # the model fed the run's own measurements is the one the verdict rests on
MIN_TESTED = 3  # deployments below the bound needed before the model counts as tested
MIN_AGREEMENT = 0.8  # share of those within the tolerance
# Bounds of what a run's metrics.json may say it measured: a minute of CPU per element is beyond any
# step time a run may have (repro.pecan.tfdata.spec.STEP_TIME_S), a gigabyte beyond any element
MAX_ELEMENT_S, MAX_ELEMENT_BYTES, MAX_COUNT = 60.0, 1 << 30, 1 << 16
NOT_TESTED = "not validated: accelerator-bound everywhere"
# what a window's `phase` may be: none, or (a FastFlow run's) its policy's state
FASTFLOW_PHASES = (PROFILE_LTHP, PROFILE_GTHP, *(f"PROFILE_RTHP_{cut}" for cut in FASTFLOW_CUTS), LOCAL_ONLY, OFFLOADED)
# Windows left out after each change in the worker set: the first one runs up to 1.7x faster than
# the deployment does once settled (the client drains what the service buffered meanwhile), or, at
# a run's start or a FastFlow phase's, slower (a pipeline warming up: RetinaNet's at 0.7-0.9x)
SETTLE_WINDOWS = 1
UNSETTLED = "a run's first, or in or after a change of its workers or FastFlow phase"  # why a window gives no row


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
    transfer = metrics.get("transfer_cost") or {}
    if not transfer and metrics["spec"]["placement"] != "collocated":
        raise ReproError(f"{path}: no transfer_cost (a run from before the engine measured moving its batches); "
                         "run it again (snakemake --forcerun run)")
    shared = 0 if metrics.get("worker_hosts") else metrics["cpus"]  # workers on other hosts: not one machine
    return dataclasses.replace(miniature_job(metrics, calibration, network_gbps),
                               cost_per_element=cost["cpu_s_per_element"],
                               bytes_per_element=cost["bytes_per_element"], host_cpus=shared,
                               send_s_per_byte=transfer.get("send_s_per_byte", 0.0),
                               receive_s_per_byte=transfer.get("receive_s_per_byte", 0.0),
                               served_s_per_element=transfer.get("served_s_per_element", 0.0))


def _window_share(window, placement):
    """The mean CPU share of a window's preprocessing processes as the engine measured them
    (repro.pecan.tfdata.engine.Sharing); a process it did not measure (on another host) counts 1.
    FastFlow's phases: the client's own pipeline ("collocated") where it reads that, the workers
    where it reads theirs, both after it decided to offload."""
    measured = window.get("cpu_share") or {}
    phase = window.get("phase", "")
    if placement == "collocated" or phase in CLIENT_PHASES:
        names = ["collocated"]
    elif phase == OFFLOADED:
        names = ["collocated", *window["workers"]]
    else:
        names = window["workers"]
    return sum(measured.get(name, 1.0) for name in names) / len(names) if names else 1.0


def with_share(job, share):
    """The job with every worker's (and collocated's) CPUs at `share` of a CPU each."""
    return dataclasses.replace(job, collocated_vcpus=job.collocated_vcpus * share,
                               remote_worker_vcpus=job.remote_worker_vcpus * share,
                               local_worker_vcpus=job.local_worker_vcpus * share)


def _counts(names):
    local = sum("localhost" in name for name in names)
    return len(names) - local, local


def _positive(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= sys.float_info.max


def _within(value, low, high):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def _is_share(value):  # as Sharing.shares measures it
    return _within(value, 0, 1)


def check_measured(metrics, path):
    """ReproError naming the first value a deployment's throughput and bound are computed from
    (steps x batch_size / seconds; accelerator_examples_per_s / time_scale) that is not what the
    engine writes: a negative one was drawn as a negative throughput or bound, and workers given as
    a string were counted by its characters."""
    for key, kind, what in (("spec", dict, "an object: the run's settings"), ("windows", list, "a list of its decision "
                            "windows"), ("scale", dict, "an object: how its time scale was set")):
        if not isinstance(metrics.get(key, {} if key == "scale" else None), kind):  # scale: runs from before it
            raise ReproError(f"{path}: {key}: expected {what}, as the engine writes them")
    for key in ("remote_workers", "local_workers"):  # where the run ended
        if not (type(metrics.get(key)) is int and _within(metrics[key], 0, MAX_COUNT)):
            raise ReproError(f"{path}: {key}: expected the whole number of workers the run ended with, from 0 to "
                             f"{MAX_COUNT}")
    spec = metrics["spec"]
    for key in ("batch_size", "time_scale", "accelerator_examples_per_s"):
        if not _positive(spec.get(key)):
            raise ReproError(f"{path}: spec.{key}: expected a positive number")
    for key, least in (("worker_threads", 1), ("collocated_threads", 1), ("max_remote_workers", 0),
                       ("max_local_workers", 0)):
        if not (isinstance(spec.get(key), int) and _within(spec[key], least, MAX_COUNT)):
            raise ReproError(f"{path}: spec.{key}: expected a whole number from {least} to {MAX_COUNT}")
    if "cpus" in metrics and not (isinstance(metrics["cpus"], int) and _within(metrics["cpus"], 1, MAX_COUNT)):
        raise ReproError(f"{path}: cpus: expected the whole number of CPUs the run used, from 1 to {MAX_COUNT}")
    cost = metrics.get("pipeline_cost")  # the engine-fed model's cost per element
    if cost is not None:
        if not (isinstance(cost, dict) and _positive(cost.get("cpu_s_per_element"))
                and cost["cpu_s_per_element"] <= MAX_ELEMENT_S):
            raise ReproError(f"{path}: pipeline_cost.cpu_s_per_element: expected a positive number of seconds, at "
                             f"most {MAX_ELEMENT_S:g}")
        if "bytes_per_element" in cost and not (_positive(cost["bytes_per_element"])
                                                and cost["bytes_per_element"] <= MAX_ELEMENT_BYTES):
            raise ReproError(f"{path}: pipeline_cost.bytes_per_element: expected a positive number of bytes, at most "
                             f"{MAX_ELEMENT_BYTES}")
    transfer = metrics.get("transfer_cost")  # moving an element: seconds per byte, a worker's per element
    if transfer is not None:
        if not isinstance(transfer, dict):
            raise ReproError(f"{path}: transfer_cost: expected an object (the run's transfer probe)")
        for key in ("send_s_per_byte", "receive_s_per_byte", "worker_s_per_element", "client_s_per_element",
                    "served_s_per_element"):  # the last one optional: runs from before the probe measured it
            if (key in transfer or key != "served_s_per_element") and not _within(transfer.get(key), 0, MAX_ELEMENT_S):
                raise ReproError(f"{path}: transfer_cost.{key}: expected a number of seconds from 0 to "
                                 f"{MAX_ELEMENT_S:g}")
    for i, window in enumerate(metrics["windows"]):
        where = f"{path}: windows[{i}]"
        if not isinstance(window, dict):
            raise ReproError(f"{where}: expected an object (a decision window)")
        for key in ("workers", "workers_after"):
            if not (isinstance(window.get(key), list) and all(isinstance(name, str) for name in window[key])):
                raise ReproError(f"{where}.{key}: expected a list of worker addresses")
            if len(set(window[key])) != len(window[key]):  # one worker counted twice
                raise ReproError(f"{where}.{key}: expected each worker address once")
        phases = ("", *FASTFLOW_PHASES) if spec.get("placement") == "fastflow" else ("",)
        if window.get("phase", "") not in phases:
            raise ReproError(f"{where}.phase: {str(window['phase'])[:80]!r}; expected "
                             + (f"none or one of FastFlow's states {', '.join(FASTFLOW_PHASES)}" if len(phases) > 1
                                else "none (a phase is FastFlow's state; this run's placement is not fastflow)"))
        if not (_positive(window.get("steps")) and isinstance(window["steps"], int)):
            raise ReproError(f"{where}.steps: expected a whole number of steps, at least 1")
        if not _positive(window.get("seconds")):
            raise ReproError(f"{where}.seconds: expected a positive number")
        shares = window.get("cpu_share") or {}
        if not (isinstance(shares, dict) and all(_is_share(share) for share in shares.values())):
            raise ReproError(f"{where}.cpu_share: expected each process's CPU share, a fraction from 0 to 1")


def validation_rows(metrics, calibrations, network_gbps, path="metrics.json"):
    """One row per (mode, deployment) of one engine run: measured and predicted examples/s."""
    if metrics.get("engine") != "tfdata":
        raise ReproError(f"{path}: not a tf.data engine run (engine {metrics.get('engine', 'model')!r}); "
                         "the validation compares the engine's runs with the model: set pecan.engine: tfdata")
    check_measured(metrics, path)
    pipeline = metrics["spec"]["pipeline"]
    if pipeline not in calibrations:
        raise ReproError(f"{path}: no calibration of pipeline {pipeline!r}")
    engine = engine_job(metrics, calibrations[pipeline], network_gbps, path)
    jobs = {"model": miniature_job(metrics, calibrations[pipeline], network_gbps), "model_tf": engine}
    job = jobs["model"]
    converged = {"engine_converged": f"{metrics['remote_workers']}+{metrics['local_workers']}"}
    for name, model_job in jobs.items():
        final = simulate(model_job).windows[-1]
        converged[f"{name}_converged"] = f"{final.remote}+{final.local}"
    # (remote, local, phase) -> [examples, seconds, windows, [per window: mean CPU share of its workers]],
    # over the windows whose worker set held still, from the second after a change on (phase:
    # FastFlow's state, what the client read)
    deployments = {}
    # windows still left out after the last change in the worker set, within a window or between two
    # (a decision that stops a worker: the next window drains what it had buffered), or in FastFlow's
    # phase (the client's dataset made anew); the run's start is the first change (from none): a
    # window after a start or a phase change also pays for the new pipeline's warm-up
    unsettled, before = SETTLE_WINDOWS, None  # before: the last window's (workers at its end, phase)
    for window in metrics["windows"]:
        workers, phase = sorted(window["workers"]), window.get("phase", "")
        if before is not None and (workers, phase) != before:
            unsettled = SETTLE_WINDOWS
        before = (sorted(window["workers_after"]), phase)
        if workers != before[0]:
            unsettled = SETTLE_WINDOWS
            continue
        if unsettled:
            unsettled -= 1
            continue
        counts = (0, 0) if job.placement == "collocated" else _counts(window["workers"])
        entry = deployments.setdefault((*counts, phase), [0, 0.0, 0, []])
        entry[0] += window["steps"] * job.batch_size
        entry[1] += window["seconds"]
        entry[2] += 1
        entry[3].append(_window_share(window, job.placement))
    rows = []
    decision = (metrics.get("fastflow") or {}).get("decision") or {}
    for (remote, local, phase), (examples, seconds, windows, shares) in sorted(deployments.items()):
        measured = examples / seconds
        share = sum(shares) / len(shares)
        jobs["model_tf"] = with_share(engine, share)
        bound = job.accelerator_batches_per_s * job.batch_size  # the same for both models
        row = {"experiment": job.experiment, "mode": job.mode, "remote_workers": remote, "local_workers": local,
               "phase": phase, "windows": windows, "engine_examples_per_s": round(measured, 2),
               "bound_examples_per_s": round(bound, 2), "cpu_share": round(share, 4)}
        for name, model_job in jobs.items():
            if phase:  # FastFlow: what the client read in that phase
                supply = fastflow_capacity(model_job, phase, remote, decision.get("ratio_local", 1.0))
            else:
                supply = capacity(model_job, remote, local)
            predicted = min(bound, supply)
            row[f"{name}_examples_per_s"] = round(predicted, 2)
            row[f"{name}_vs_engine"] = round(predicted / measured - 1, 4)
            row[f"{name}_below_bound"] = supply < bound
        rows.append({**row, **converged})
    return rows


def _below(row, model):
    value = row[f"{model}_below_bound"]
    return value if isinstance(value, bool) else str(value) == "True"  # a row read back from the CSV


def tested(rows, model=TESTED_BY):
    """The rows where `model` predicts less than the accelerator's bound: the ones that test it."""
    return [r for r in rows if _below(r, model)]


def summary(rows, tolerance=0.15, model="model"):
    """What the caption says of one model column: of the deployments where it predicts less than
    the bound, how many agree within `tolerance` and the largest gap; how many sit at the bound
    (agreement there tests nothing); how many modes converged within one worker of the engine."""
    gap = f"{model}_vs_engine"
    below = tested(rows, model)
    if below:
        within = sum(abs(r[gap]) <= tolerance for r in below)
        worst = max(below, key=lambda r: abs(r[gap]))
        text = (f"{within} of {len(below)} deployments below the bound within ±{tolerance:.0%}; largest gap "
                f"{worst[gap]:+.0%} ({worst['mode']}, {worst['remote_workers']} remote + {worst['local_workers']} local)")
    else:
        text = "no deployment below the bound"
    modes = {r["mode"]: (r["engine_converged"], r[f"{model}_converged"]) for r in rows}
    differ = sorted(mode for mode, (engine, predicted) in modes.items() if not _close(engine, predicted))
    text += (f"; {len(rows) - len(below)} at the bound (not counted); "
             f"converged within ±1 worker in {len(modes) - len(differ)} of {len(modes)} modes")
    if differ:
        text += f" (not {', '.join(differ)})"
    return text


def verdict(rows, tolerance=0.15):
    """(passed, headline) of the validation: it passes only when at least MIN_TESTED deployments
    are below the bound of the engine-fed model and at least MIN_AGREEMENT of them agree."""
    below = tested(rows)
    if len(below) < MIN_TESTED:
        if not below:
            return False, f"{NOT_TESTED} (0 of {len(rows)} deployments below the bound, {MIN_TESTED} needed)"
        return False, (f"{NOT_TESTED} but {len(below)} of {len(rows)} deployments ({MIN_TESTED} below the bound "
                       "needed)")
    within = sum(abs(r[f"{TESTED_BY}_vs_engine"]) <= tolerance for r in below)
    if within < MIN_AGREEMENT * len(below):
        return False, (f"validation failed: {within} of {len(below)} deployments below the bound within "
                       f"±{tolerance:.0%} ({MIN_AGREEMENT:.0%} needed)")
    return True, f"validated: {within} of {len(below)} deployments below the bound within ±{tolerance:.0%}"


def machine_limits(runs, calibrations, network_gbps):
    """What this machine lets an experiment's deployments deliver, in the engine-fed model of each
    run that probed a worker here (its whole CPUs, no other work): {collocated, largest: the share
    of the accelerator's demand each delivers (at most all of it); ratio: largest / collocated},
    each a [low, high] over those runs, and the measured costs behind them. The scale rule
    (repro.pecan.tfdata.spec.derive_scale) prices a worker at the pipeline's in-process cost; a
    worker serving it costs more, so on few CPUs the largest deployment may fall short of the bound
    while collocated is input-bound. None where no run probed a worker on this machine (collocated
    alone, or workers on other hosts; a sweep's runs hold their count, whatever the machine holds),
    or where the runs' machines had different CPU counts."""
    found = {"collocated": [], "largest": [], "ratio": [], "cost_ms": [], "served_ms": [], "receive_ms": [],
             "cpus": set()}
    for metrics in runs:
        if metrics.get("worker_hosts") or not (metrics.get("transfer_cost") or {}).get("served_s_per_element"):
            continue
        if metrics["spec"]["placement"] == "fixed":  # a sweep's count: its caps are that count, not the machine's
            continue
        job = engine_job(metrics, calibrations[metrics["spec"]["pipeline"]], network_gbps)
        demand = job.accelerator_batches_per_s * job.batch_size
        # what each delivers: no deployment delivers more than the accelerator takes
        collocated = min(demand, capacity(dataclasses.replace(job, placement="collocated"), 0, 0))
        largest = min(demand, capacity(job, job.max_remote_workers, job.max_local_workers))
        for key, value in (("collocated", collocated / demand), ("largest", largest / demand),
                           ("ratio", largest / collocated), ("cost_ms", 1e3 * job.cost_per_element),
                           ("served_ms", 1e3 * job.served_s_per_element),
                           ("receive_ms", 1e3 * job.receive_s_per_byte * job.bytes_per_element)):
            found[key].append(value)
        found["cpus"].add(metrics["cpus"])
    if not found["ratio"] or len(found["cpus"]) > 1:  # none probed here, or runs of machines of other sizes
        return None
    return {key: sorted(values) if key == "cpus" else [min(values), max(values)] for key, values in found.items()}


def limits_text(limits):
    """The caption's sentence of machine_limits: the shares, the most any mode can gain on
    collocated, and whether the paper's regime fits this machine."""
    if limits is None:
        return ""
    high = limits["ratio"][1]
    text = (f" On these {'/'.join(map(str, limits['cpus']))} CPUs the engine-fed model lets collocated deliver "
            f"{_range(limits['collocated'], '.0%')} of the accelerator's demand and the largest deployment "
            f"{_range(limits['largest'], '.0%')} (the pipeline {_span(limits['cost_ms'])} ms CPU per element in-process, a "
            f"worker serving it {_span(limits['served_ms'])} ms, the client receiving it {_span(limits['receive_ms'])} "
            f"ms): no mode delivers more than {_range(limits['ratio'], '.2f', 'x')} collocated's throughput, so "
            + ("collocated costs at most that multiple of any mode's accelerator time." if high >= 1 else
               "every mode with workers spends more accelerator time than collocated."))
    if limits["largest"][0] < 1 and limits["collocated"][1] < 1:
        text += (" The largest deployment falls short of the bound while collocated is input-bound: with workers "
                 "this dear, the paper's regime needs more CPUs than this machine has.")
    return text


def _range(pair, form, unit=""):
    """[low, high] as the caption writes it: one value where both read the same in `form`."""
    low, high = (format(value, form) + unit for value in pair)
    return low if low == high else f"{low}-{high}"


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


def caption_text(rows, runs, tolerance=0.15, limits=None):
    """The figure's caption: the scale, each model column's inputs and agreement, what neither
    model describes (why they can differ) and what the machine lets the modes reach (`limits`,
    machine_limits)."""
    spec = runs[0]["spec"]
    costs, cpus = measured_inputs(runs)
    measured = ", ".join(f"{order} {min(v):.2f}-{max(v):.2f}" if len(v) > 1 else f"{order} {v[0]:.2f}"
                         for order, v in sorted(costs.items()))
    mb = runs[0].get("pipeline_cost", {}).get("bytes_per_element", 0) / 1e6
    scales = sorted(m["spec"]["time_scale"] for m in runs)
    scale = f"x{scales[0]:.3g}" if scales[0] == scales[-1] else f"x{scales[0]:.3g}-{scales[-1]:.3g}"
    if all(m.get("scale", {}).get("rule", "configured") != "configured" for m in runs):
        derived = "from the calibration" if all(m["scale"].get("source", "").startswith("the calibration") for m in runs) \
            else "by each run"
        scale += (f" derived {derived}: collocated at {max(m['scale']['collocated_share'] for m in runs):.0%} "
                  "of the accelerator's demand at most, the largest deployment at the bound")
    shares = [r["cpu_share"] for r in rows if "cpu_share" in r]
    share = f"{min(shares):.2f}-{max(shares):.2f}" if shares else "1"
    return (f"{verdict(rows, tolerance)[1]}. "
            f"engine tfdata at miniature scale (accelerator step time {scale}, "
            f"{spec['worker_threads']} CPU per worker, pinned) vs the cluster model of the same job. "
            f"Model fed the Pillow calibration, a CPU per worker: {summary(rows, tolerance, 'model')}. "
            f"Model fed the engine's own TF pipeline measured by each run in-process on one CPU ({measured} ms CPU "
            f"per element), the {'/'.join(map(str, cpus))} CPUs the client, dispatcher and workers share, and the "
            f"share of its CPU each worker measured ({share}): "
            f"{summary(rows, tolerance, 'model_tf')}. {_transfer_text(runs, mb)}.{limits_text(limits)}"
            + _unsettled_text(rows, runs))


def _unsettled_text(rows, runs):
    """The caption's word on the modes whose runs gave no row, which the figure would leave out unsaid."""
    unsettled = sorted({str(m["spec"]["mode"]) for m in runs} - {str(r["mode"]) for r in rows})
    if not unsettled:
        return ""
    return f" No settled deployment in the run(s) of {', '.join(unsettled)}: each window was {UNSETTLED}."


def _transfer_text(runs, mb):
    """What the caption says of moving the batches from worker to client."""
    probes = [m["transfer_cost"] for m in runs if m.get("transfer_cost")]
    if not probes:
        return (f"Neither model counts sending the batches ({mb:.1f} MB per element) from worker to client, "
                "or the client's and dispatcher's own CPU")
    sent = [1e3 * p["worker_s_per_element"] for p in probes]
    received = [1e3 * p["client_s_per_element"] for p in probes]
    served = [1e3 * p["served_s_per_element"] for p in probes if p.get("served_s_per_element")]
    worker = (f"; a worker's CPU per element, the probe's worker serving the run's pipeline: {_span(served)} ms, "
              "the engine-fed model's cost of a worker") if served else ""
    return (f"The engine-fed model also counts moving each element ({mb:.1f} MB) from worker to client, as each "
            f"run's probe measured it: {_span(sent)} ms CPU sending, {_span(received)} ms receiving{worker}; the "
            "Pillow-fed model does not; neither counts the dispatcher's own CPU")


def _span(values):
    return f"{min(values):.2f}-{max(values):.2f}" if max(values) - min(values) >= 0.005 else f"{values[0]:.2f}"
