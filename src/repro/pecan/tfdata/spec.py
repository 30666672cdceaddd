"""What one tf.data engine run is (EngineSpec), from the config and the miniature settings, and its
miniature scale: the accelerator step time's factor derived from the pipeline's calibrated CPU cost
and the CPUs this machine lets the engine use (derive_scale). Nothing here needs TensorFlow, so a
run's settings are checked, and its scale computed, before TensorFlow is imported.
"""

import math
from dataclasses import dataclass

from repro.errors import ReproError
from repro.pecan.costs import lookup
from repro.pecan.policies import fastflow_workers
from repro.pecan.run import fixed_remote_workers
from repro.pecan.tfdata import check_worker_memory, cpus_available

# A policy decision per window of about WINDOW_S of training (at least MIN_WINDOW_STEPS steps):
# 16 steps for ResNet, 8 for RetinaNet at the default scales (fewer batches per window let noise
# reach the policies' 3-10% thresholds).
WINDOW_S = 1.4
MIN_WINDOW_STEPS = 8
# The accelerator step times a given time scale may make: below 0.1 ms the sleep is shorter than its own
# resolution and the client's step around it (a window of ~WINDOW_S held 10^4 steps and more, at a
# subnormal scale an infinite number); above a minute, a window of MIN_WINDOW_STEPS takes 8 minutes.
STEP_TIME_S = (1e-4, 60.0)
# Miniature defaults. Worker caps left at None are the workers the CPUs hold (max_workers_for):
# the remote cap one more, so Cachew sees that a worker beyond the CPUs gains nothing.
MINIATURE = {"batch_size": 16, "worker_threads": 1, "collocated_threads": 1, "max_remote_workers": None,
             "max_local_workers": None, "settle_windows": 3, "max_windows": 80, "images": 64, "probe_seconds": 1.0}
# The derived scale (derive_scale): collocated preprocessing may deliver at most this share of
# the accelerator's demand (the paper's collocated runs are input-bound).
COLLOCATED_SHARE = 0.6


@dataclass(frozen=True)
class EngineSpec:
    """Everything one engine run depends on (recorded in its metrics.json)."""

    experiment: str
    mode: str
    placement: str  # collocated, cachew, autoplacement, fixed or fastflow
    autoorder: bool
    pipeline: str
    batch_size: int
    decision_steps: int
    accelerator_examples_per_s: float  # full scale
    time_scale: float
    worker_threads: int  # each worker's vCPU share
    collocated_threads: int  # the host's thread budget for the pipeline in collocated mode
    max_remote_workers: int
    max_local_workers: int
    fixed_remote_workers: int
    fixed_local_workers: int
    cachew_threshold_up: float
    client_cost: float
    worker_cost: float
    settle_windows: int  # windows at the final deployment before the run ends (the parser needs 3)
    max_windows: int
    images: int  # distinct generated JPEGs, repeated endlessly
    seed: int
    probe_seconds: float  # the least seconds of each phase of the transfer probe (measure_transfer_cost)

    @property
    def step_time_s(self):
        return self.batch_size * self.time_scale / self.accelerator_examples_per_s

    @property
    def derived(self):
        """The time scale (and the window length that follows from it) is derived by the run."""
        return self.time_scale == 0


def max_workers_for(cpus, worker_threads):
    """(remote, local) worker caps where the config leaves them: the workers the CPUs hold, one
    more remote one so that Cachew sees a worker beyond the CPUs gain nothing."""
    held = max(1, cpus // worker_threads)
    return held + 1, held


def derive_scale(cost_s, accelerator_examples_per_s, collocated_threads, worker_threads, cpus):
    """The miniature time scale from measurements: {time_scale, demand, ...} as metrics.json records it.

    With `cost_s` CPU seconds per element, collocated's `collocated_threads` CPUs deliver
    collocated_threads / cost_s examples/s and the largest deployment the machine holds (whole
    workers on its `cpus`) delivers held / cost_s. The accelerator's miniature demand D must lie
    between collocated_threads / (COLLOCATED_SHARE x cost_s) (collocated input-bound) and
    held / cost_s (the largest deployment reaches the bound). D is the geometric middle of that
    range, so that neither condition holds only by the margin of a measurement's noise; a larger
    machine gets a larger D and a longer scaling curve. A machine whose CPUs cannot satisfy both
    is refused in one line.
    """
    held = check_cpus(collocated_threads, worker_threads, cpus)
    low, high = collocated_threads / (COLLOCATED_SHARE * cost_s), held / cost_s
    demand = math.sqrt(low * high)
    return {"rule": f"geometric middle of collocated at {COLLOCATED_SHARE:.0%} of demand and the largest deployment "
                    "at the bound", "cost_s_per_element": cost_s, "cpus": cpus, "preprocessing_cpus": held,
            "collocated_threads": collocated_threads, "demand_examples_per_s": demand,
            "collocated_share": collocated_threads / cost_s / demand, "largest_share": high / demand,
            "time_scale": accelerator_examples_per_s / demand}


def check_cpus(collocated_threads, worker_threads, cpus):
    """The CPUs of the largest deployment `cpus` CPUs hold (whole workers); a ReproError when they
    cannot make any deployment input-bound at a scale where they reach the bound (derive_scale)."""
    held = (cpus // worker_threads) * worker_threads
    if held < collocated_threads / COLLOCATED_SHARE:
        need = math.ceil(collocated_threads / COLLOCATED_SHARE / worker_threads) * worker_threads
        wide = worker_threads > 1  # then fewer threads per worker may be the way out
        workers = f", whole workers of {worker_threads} threads (pecan.tfdata.worker_threads)," if wide else ""
        fewer = "fewer threads per worker, " if wide else ""
        raise ReproError(
            f"{cpus} CPU(s) available (os.sched_getaffinity): too few for an input-bound miniature, where collocated "
            f"({collocated_threads} CPU) delivers at most {COLLOCATED_SHARE:.0%} of the accelerator's demand and the "
            f"largest deployment{workers} reaches it; expected at least {need} CPUs, {fewer}or set "
            "pecan.tfdata.time_scale")
    return held


def check_deployment_memory(spec, remote_here=True, meminfo="/proc/meminfo"):
    """A ReproError naming the settings at fault where the largest deployment a run of `spec` may
    start needs more memory than this machine has available (check_worker_memory): its local workers,
    and its remote ones unless they run on worker hosts (`remote_here`); the policy's caps (Cachew
    scales remote workers only), or the workers a fixed deployment holds. Every run with a service
    starts a worker here first (the transfer probe)."""
    if spec.placement == "collocated":
        return
    if spec.placement in ("fixed", "fastflow"):
        remote, local = spec.fixed_remote_workers, spec.fixed_local_workers
        keys = f"pecan.modes.{spec.mode}.remote_workers, local_workers, within max_remote_workers, max_local_workers"
    else:
        remote, local = spec.max_remote_workers, spec.max_local_workers if spec.placement == "autoplacement" else 0
        keys = ("max_remote_workers, max_local_workers: pecan.tfdata's or --max-remote-workers, --max-local-workers, "
                "within pecan.cluster's")
    where = "on this machine" if remote_here else "on the worker hosts"
    check_worker_memory(max(1, local + (remote if remote_here else 0)),
                        f"mode {spec.mode}: up to {remote} remote worker(s) {where} and {local} local ({keys})", meminfo)


def check_step_time(pecan, experiment, time_scale, batch_size, key):
    """A ReproError naming `key` (what set `time_scale`) where the step time it gives `experiment`'s
    accelerator, batch_size x time_scale / its examples per second, lies outside STEP_TIME_S."""
    low, high = STEP_TIME_S
    accelerator = accelerator_examples_per_s(pecan, experiment)
    per_scale = batch_size / accelerator
    if not low <= time_scale * per_scale <= high:
        raise ReproError(f"{key} {time_scale:g}: a step time of {time_scale * per_scale:.3g} s for {experiment} "
                         f"({batch_size} examples at {accelerator:g} examples/s, times the scale); expected a time "
                         f"scale from {low / per_scale:.3g} to {high / per_scale:.3g} (a step time from {low:g} to "
                         f"{high:g} s)")


def window_steps(step_time_s):
    return max(MIN_WINDOW_STEPS, round(WINDOW_S / step_time_s))


def accelerator_examples_per_s(pecan, experiment):
    """The full-scale accelerator bound of `experiment`: its accelerator's max_batches_per_s for its
    model x the model's batch size."""
    exp = lookup(pecan["experiments"], experiment, "experiment")
    accel = lookup(pecan["accelerators"], exp["accelerator"], "accelerator")
    model = lookup(pecan["models"], exp["model"], "model")
    return lookup(accel["max_batches_per_s"], exp["model"], "model for this accelerator") * model["batch_size"]


def spec_from_config(pecan, experiment, mode, seed=0, time_scale=None, decision_steps=None, **miniature):
    """The EngineSpec of experiment x mode from the `pecan` config section and miniature settings."""
    exp = lookup(pecan["experiments"], experiment, "experiment")
    model = lookup(pecan["models"], exp["model"], "model")
    mode_cfg = lookup(pecan["modes"], mode, "mode")
    cluster = pecan["cluster"]
    settings = {**MINIATURE, **{k: v for k, v in miniature.items() if v is not None}}
    held_remote, held_local = max_workers_for(cpus_available(), settings["worker_threads"])
    settings["max_remote_workers"] = settings["max_remote_workers"] if settings["max_remote_workers"] is not None else held_remote
    settings["max_local_workers"] = settings["max_local_workers"] if settings["max_local_workers"] is not None else held_local
    bad = [k for k, v in settings.items() if k != "probe_seconds"
           and (not isinstance(v, int) or v < (0 if k.endswith("_workers") else 1))]
    probe = settings["probe_seconds"]
    if isinstance(probe, bool) or not isinstance(probe, (int, float)) or not 0 < probe <= 60:
        raise ReproError(f"--probe-seconds {probe}: expected a number of seconds above 0, at most 60")
    if bad:
        raise ReproError(f"--{bad[0].replace('_', '-')} {settings[bad[0]]}: expected a positive whole number")
    if time_scale is None:
        time_scale = 0.0  # derived by the run from its own measurements (derive_scale)
    elif not time_scale > 0:
        raise ReproError(f"--time-scale {time_scale}: expected a positive number")
    accelerator = accelerator_examples_per_s(pecan, experiment)
    if time_scale:
        check_step_time(pecan, experiment, time_scale, settings["batch_size"], "--time-scale")
    if decision_steps is None:
        # 0: from the derived step time, once the run knows it
        decision_steps = window_steps(settings["batch_size"] * time_scale / accelerator) if time_scale else 0
    elif decision_steps < 1:
        raise ReproError(f"--decision-steps {decision_steps}: expected a positive whole number")
    max_local = min(mode_cfg.get("max_local_workers", cluster["max_local_workers"]), settings["max_local_workers"])
    max_remote = min(cluster["max_remote_workers"], settings["max_remote_workers"])
    fixed_remote = min(fixed_remote_workers(mode, mode_cfg), max_remote)
    if mode_cfg["placement"] == "fastflow":  # its fixed workers, as many as the miniature cluster has
        fastflow_workers(fixed_remote, "--max-remote-workers")
    return EngineSpec(
        experiment=experiment, mode=mode, placement=mode_cfg["placement"], autoorder=mode_cfg["autoorder"],
        pipeline=model["pipeline"], batch_size=settings["batch_size"], decision_steps=decision_steps,
        accelerator_examples_per_s=accelerator,
        time_scale=float(time_scale), worker_threads=settings["worker_threads"],
        collocated_threads=settings["collocated_threads"], max_remote_workers=max_remote,
        max_local_workers=max_local, fixed_remote_workers=fixed_remote,
        fixed_local_workers=min(mode_cfg.get("local_workers", 0), max_local),
        cachew_threshold_up=cluster["cachew_threshold_up"], client_cost=cluster["policy_prices"]["client_cost"],
        worker_cost=cluster["policy_prices"]["worker_cost"], settle_windows=settings["settle_windows"],
        max_windows=settings["max_windows"], images=settings["images"], seed=seed, probe_seconds=float(probe))


def calibrated_cost(calibration):
    """The declared order's CPU seconds per element in TF ops on one pinned CPU, as a calibration
    records it (`repro pecan calibrate --ops tf`, or `tf_ops` beside the Pillow measurement under
    `--engine tfdata`); None in a calibration without it."""
    if calibration is None:
        return None
    tf_ops = calibration if calibration.get("ops_measured") == "tf" else calibration.get("tf_ops")
    return tf_ops["declared"]["cpu_s_per_element"] if tf_ops else None


def scale_from_calibration(spec, calibration):
    """The derived scale (derive_scale) from the pipeline's calibrated TF cost: every run of the
    pipeline that reads this calibration (an experiment's modes, its sweep) gets the same one, so
    their accelerator bounds and costs compare; None where the config sets the scale or the
    calibration has no TF cost (the run then derives its own)."""
    cost = calibrated_cost(calibration)
    if not spec.derived or cost is None:
        return None
    scale = derive_scale(cost, spec.accelerator_examples_per_s, spec.collocated_threads, spec.worker_threads,
                         cpus_available())
    return {**scale, "source": "the calibration's TF cost of the declared order"}
