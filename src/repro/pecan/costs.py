"""Training cost per epoch from a parsed log (the artifact's extract_costs.py rules).

epoch_seconds = steps_per_epoch / (throughput / batch_size)
tpu_cost      = tpu_count x epoch_seconds / 3600 x tpu_price
worker_cost   = remote_workers x epoch_seconds / 3600 x worker_price   (local workers cost nothing extra)
"""

import math

from repro.errors import ReproError

# The artifact's CSV columns, then the mode the row belongs to.
MAX_DOLLARS = 1e9  # per epoch: a cost beyond is a typo, and a figure's axis cannot hold it
COLUMNS = ["experiment", "model", "tpu_cost", "worker_cost", "remote_workers", "local_workers", "epoch_time", "batches_sec", "mode"]


def check_price(value, key):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ReproError(f"price {key} must be a non-negative number of dollars per hour, found {value!r}")
    return float(value)


def lookup(table, key, what):
    if key not in table:
        raise ReproError(f"unknown {what} {key!r}; expected one of {sorted(table)}")
    return table[key]


def experiment_mode(pecan, experiment, mode):
    """The experiment's and the mode's config of a run; ReproError unless the experiment lists the mode."""
    exp = lookup(pecan["experiments"], experiment, "experiment")
    mode_cfg = lookup(pecan["modes"], mode, "mode")
    if mode not in exp.get("modes", ()):
        raise ReproError(f"experiment {experiment!r} has no mode {mode!r} (its modes: {', '.join(exp.get('modes', ()))})")
    return exp, mode_cfg


def experiment_pipeline(pecan, experiment):
    """The input pipeline that `experiment`'s model trains on (`pecan`: the config's `pecan` section)."""
    return pecan["models"][pecan["experiments"][experiment]["model"]]["pipeline"]


def cost_row(parsed, mode, model_name, model, tpu_price, worker_price, tpu_count=1):
    tpu_price = check_price(tpu_price, "tpu")
    worker_price = check_price(worker_price, "worker")
    batches_sec = parsed.throughput / model["batch_size"]
    if not batches_sec > 0:  # a throughput so small that it rounds to none
        raise ReproError(f"{getattr(parsed, 'path', mode)}: {parsed.throughput:g} examples/second is "
                         f"{batches_sec:g} batches/second of {model['batch_size']}; expected a throughput to price")
    epoch = model["steps_per_epoch"] / batches_sec
    total = (tpu_count * tpu_price + parsed.remote_workers * worker_price) * epoch / 3600
    if total > MAX_DOLLARS:  # as every figure refuses it: a throughput so small no epoch ends
        raise ReproError(f"{getattr(parsed, 'path', mode)}: {parsed.throughput:g} examples/second prices an epoch at "
                         f"${total:.3g}; expected at most ${MAX_DOLLARS:g} (a training log's throughput)")
    return {
        "experiment": f"{model_name}_{mode}",
        "model": model_name,
        "tpu_cost": tpu_count * epoch / 3600 * tpu_price,
        "worker_cost": parsed.remote_workers * epoch / 3600 * worker_price,
        "remote_workers": parsed.remote_workers,
        "local_workers": parsed.local_workers,
        "epoch_time": epoch,
        "batches_sec": batches_sec,
        "mode": mode,
    }
