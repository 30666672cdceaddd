"""Measure the real input pipelines on this machine: CPU seconds and bytes per element, per op.

Both the declared order and the order AutoOrder picks are run and measured; the saving is
what the two measurements say, not an assumption.

The estimate has to hold still on a shared, loaded machine:
* CPU time of the measuring thread, not wall time: time spent descheduled does not count.
* Warm-up passes first: the first passes over large arrays pay page faults until the allocator
  keeps those sizes (glibc raises its mmap threshold as large blocks are freed); measured here,
  RetinaNet's first passes cost 19 ms/element and the warm ones 13 ms.
* Per element and op, the minimum over `repeats` interleaved passes: interference (cache, memory
  bandwidth and core sharing with other processes) only ever adds time, so the least-disturbed
  draw estimates the op's own cost. The per-op cost is the mean of these minima over the
  elements (elements differ in real work: crop sizes, flips). Measured here, one pass's total
  sits 5-35% above these minima and varies pass to pass; the minima agree between fresh runs
  within a few percent (`python benchmarks/pecan.py` prints the estimate next to the median single pass).
"""

import os
import platform
import time
from importlib.metadata import version

import numpy as np

from repro.errors import ReproError
from repro.pecan.pipelines import PIPELINES, batch, element_bytes, synthetic_jpegs
from repro.pecan.policies import autoorder

BATCH_FOR_MEASURE = 16  # stacking cost is measured on small batches and reported per element
WARMUP_PASSES = 1  # per order, before anything is recorded


# `make mutation` scores the statistics (spread, summarize_order, saving, resample), not the measuring
# itself (clocks, the machine, the record's fields), which the calibration tests run end to end.
# pragma: no mutate start
def machine_description():
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "pillow": version("pillow"),
    }


def measure_pass(orders, elements, seed, flip=False):
    """One pass over `elements`, each element through every order in turn ({name: ops}).

    Both orders of one element run back to back (in alternating turn when `flip`), so load that
    drifts over seconds hits both alike. Every element draws its crops and flips from its own seed.
    Returns {name: (cpu, sizes)}: cpu is an elements x (ops + 1) array of thread CPU seconds, the
    last column the element's share of stacking its batch; sizes maps op -> [bytes in, bytes out].
    """
    names = list(orders)[::-1] if flip else list(orders)
    cpu = {name: np.zeros((len(elements), len(ops) + 1)) for name, ops in orders.items()}
    sizes = {name: {op.name: [0, 0] for op in ops} for name, ops in orders.items()}
    outputs = {name: [] for name in orders}
    for i, source in enumerate(elements):
        for name in names:
            rng, element = np.random.default_rng([seed, i]), source
            for j, op in enumerate(orders[name]):
                before = element_bytes(element)
                start = time.thread_time()
                element = op.fn(element, rng)
                cpu[name][i, j] = time.thread_time() - start
                sizes[name][op.name][0] += before
                sizes[name][op.name][1] += element_bytes(element)
            outputs[name].append(element)
    for name in names:
        for i in range(0, len(elements), BATCH_FOR_MEASURE):
            chunk = outputs[name][i : i + BATCH_FOR_MEASURE]
            start = time.thread_time()
            batch(chunk)
            cpu[name][i : i + len(chunk), -1] = (time.thread_time() - start) / len(chunk)
    return {name: (cpu[name], sizes[name]) for name in orders}


# pragma: no mutate end
def spread(samples):
    """Median, quartiles, IQR and count of a sample (the calibration JSON's record of the spread)."""
    samples = np.asarray(samples, float).ravel()
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "n": int(samples.size)}


def summarize_order(ops, passes, sizes, n):
    """The order's estimate from its passes (repeats x elements x ops+1 CPU seconds)."""
    minima = passes.min(axis=0)  # elements x ops+1: each element's least-disturbed draw per op
    names = [op.name for op in ops] + ["batch"]
    rows = []
    for j, name in enumerate(names):
        # stacking neither grows nor shrinks an element
        bytes_in, bytes_out = sizes[name] if name != "batch" else [sizes[ops[-1].name][1]] * 2
        rows.append({
            "op": name,
            "cpu_s_per_element": float(minima[:, j].mean()),
            "cpu_s": spread(passes[:, :, j]),  # every draw, disturbed ones included
            "cpu_s_minima": spread(minima[:, j]),
            "bytes_in_per_element": bytes_in / n,
            "bytes_out_per_element": bytes_out / n,
            "inflation": bytes_out / bytes_in,
        })
    return {
        "order": names,
        "ops": rows,
        "cpu_s_per_element": float(minima.sum(axis=1).mean()),
        "bytes_out_per_element": rows[-1]["bytes_out_per_element"],
        # per element: the sum of its per-op minima (what resample() draws from)
        "element_cpu_s": [float(v) for v in minima.sum(axis=1)],
        # per pass: the mean total, i.e. what a single pass would have reported
        "pass_cpu_s_per_element": [float(v) for v in passes.sum(axis=2).mean(axis=1)],
    }


# pragma: no mutate start
def calibrate(pipeline, elements=32, seed=0, repeats=10):
    """Measure `pipeline` in its declared and AutoOrder orders (see the module docstring)."""
    if pipeline not in PIPELINES:
        raise ReproError(f"unknown pipeline {pipeline!r}; expected one of {sorted(PIPELINES)}")
    if elements < 1 or repeats < 1:
        raise ReproError("calibration needs at least one element and one repeat")
    ops = PIPELINES[pipeline]
    data = synthetic_jpegs(pipeline, elements, seed=seed)

    _, sizes = measure_pass({"declared": ops}, data[: min(4, elements)], seed)["declared"]
    reordered, moves = autoorder(ops, {name: out / inp for name, (inp, out) in sizes.items()})
    orders = {"declared": ops, "autoorder": reordered}
    for _ in range(WARMUP_PASSES):
        measure_pass(orders, data, seed)
    passes, order_sizes = {name: [] for name in orders}, {}
    for r in range(repeats):
        for name, (cpu, order_sizes[name]) in measure_pass(orders, data, seed, flip=r % 2 == 1).items():
            passes[name].append(cpu)
    result = {
        "pipeline": pipeline,
        "machine": machine_description(),
        "elements": elements,
        "repeats": repeats,
        "warmup_passes": WARMUP_PASSES,
        "statistic": "per element and op the minimum over repeats (thread CPU time), mean over elements",
        "seed": seed,
        "load_average": list(os.getloadavg()),  # other work on the machine while measuring (1, 5, 15 min)
        "image_bytes_per_element": sum(len(e["image"]) for e in data) / elements,
    }
    for name, order in orders.items():
        result[name] = summarize_order(order, np.array(passes[name]), order_sizes[name], elements)
    result["autoorder"]["moves"] = moves
    result["autoorder_saving"] = saving(result["declared"]["cpu_s_per_element"], result["autoorder"]["cpu_s_per_element"])
    return result


# pragma: no mutate end
def saving(declared, autoorder_cost):
    return 1.0 - autoorder_cost / declared


def resample(calibration, rng):
    """One bootstrap draw of the calibration: its elements drawn with replacement.

    The same elements for both orders (they were measured on the same elements), so the draw
    keeps the pairing the AutoOrder saving rests on. Returns a copy with the drawn costs.
    """
    if "element_cpu_s" not in calibration["declared"]:
        raise ReproError(f"calibration of {calibration['pipeline']!r} has no per-element costs (an older file); "
                         "measure it again (snakemake --forcerun calibrate)")
    n = len(calibration["declared"]["element_cpu_s"])
    picks = rng.integers(0, n, n)
    drawn = dict(calibration)
    for name in ("declared", "autoorder"):
        drawn[name] = {**calibration[name],
                       "cpu_s_per_element": float(np.asarray(calibration[name]["element_cpu_s"])[picks].mean())}
    drawn["autoorder_saving"] = saving(drawn["declared"]["cpu_s_per_element"], drawn["autoorder"]["cpu_s_per_element"])
    return drawn
