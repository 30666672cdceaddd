"""Measure the real input pipelines on this machine: CPU seconds and bytes per element, per op.

Both the declared order and the order AutoOrder picks are run and measured; the saving is
what the two measurements say, not an assumption.

The estimate has to hold still on a shared, loaded machine:
* CPU time of the measuring thread, not wall time: time spent descheduled does not count.
* A warm-up pass first: it takes the first-touch page faults (RetinaNet's first passes cost
  19 ms/element, the warm ones 13 ms).
* A steady allocator: glibc's malloc thresholds are fixed (`repro.allocator`) so every large block
  is reused whatever the process did before (left free, RetinaNet's resize-and-pad cost 1.7 or
  2.9 ms/element from one calibration to the next).
* Per element and op, the minimum over `repeats` interleaved passes: interference only ever adds
  time, so the least-disturbed draw estimates the op's own cost. The per-op cost is the mean of
  these minima over the elements (elements differ in real work: crop sizes, flips).
* Twenty passes (`REPEATS`): on a busy machine ten leave ResNet's ms/element 3-5% apart between
  calibrations, twenty 1-2%.
* One cost for the work both orders share (`shared_columns`, `order_minima`): ops before
  AutoOrder's first move, and the same op on the same bytes after its last, get their minimum
  over both orders' draws, so their noise stays out of the saving (a difference of two sums whose
  terms are mostly this shared work), which then rests on the ops AutoOrder changed. The record's
  `other_work` says how busy the machine was over the passes.
* A reference kernel for the machine's speed (`REFERENCE_KERNEL`): decoding a fixed set of JPEGs
  (its own image per element slot, since one image keeps one draw of the machine's speed for a
  whole calibration), timed right beside every element with the ops' statistic. Each order's
  cost is also recorded per reference kernel (`per_reference_kernel`), which the self-check holds
  to its tolerance: no statistic removes the machine's own speed from absolute CPU time.
"""

import os
import time

import numpy as np

from repro.allocator import fix_malloc_thresholds
from repro.errors import ReproError
from repro.machine import cpu_seconds, machine_description, other_work
from repro.pecan.pipelines import PIPELINES, Op, batch, decode, element_bytes, synthetic_jpegs
from repro.pecan.policies import autoorder

BATCH_FOR_MEASURE = 16  # stacking cost is measured on small batches and reported per element
WARMUP_PASSES = 1  # per order, before anything is recorded
REPEATS = 20  # measured passes over both orders (the module docstring says why this many)
# The machine's speed, timed beside every element (the module docstring says why): fixed
# synthetic JPEGs of ImageNet's typical 500x375, decoded to RGB.
REFERENCE_KERNEL = {"work": "decoding fixed 500x375 JPEGs (quality 90, one per element slot) to RGB",
                    "pipeline": "resnet", "seed": 2**16}


# `make mutation` scores the statistics (spread, summarize_order, saving, resample), not the measuring
# itself (clocks, the machine, the record's fields), which the calibration tests run end to end.
# pragma: no mutate start
def measure_pass(runs, seed, flip=False):
    """One pass over every run in `runs` ({name: (ops, elements)}, the same number of elements each).

    Element i goes through every run back to back (in reversed turn when `flip`), so load that
    drifts over seconds hits all runs alike: the declared and AutoOrder orders of one pipeline,
    and the pipelines calibrated together, whose costs the local preset relates to each other.
    Every element draws its crops and flips from its own seed.
    Returns {name: (cpu, sizes)}: cpu is an elements x (ops + 1) array of thread CPU seconds, the
    last column the element's share of stacking its batch; sizes maps op -> [bytes in, bytes out].
    """
    names = list(runs)[::-1] if flip else list(runs)
    count = len(next(iter(runs.values()))[1])
    cpu = {name: np.zeros((count, len(ops) + 1)) for name, (ops, _) in runs.items()}
    sizes = {name: {op.name: [0, 0] for op in ops} for name, (ops, _) in runs.items()}
    outputs = {name: [] for name in runs}
    for i in range(count):
        for name in names:
            ops, elements = runs[name]
            rng, element = np.random.default_rng([seed, i]), elements[i]
            for j, op in enumerate(ops):
                before = element_bytes(element)
                start = time.thread_time()
                element = op.fn(element, rng)
                cpu[name][i, j] = time.thread_time() - start
                sizes[name][op.name][0] += before
                sizes[name][op.name][1] += element_bytes(element)
            outputs[name].append(element)
    for name in names:
        for i in range(0, count, BATCH_FOR_MEASURE):
            chunk = outputs[name][i : i + BATCH_FOR_MEASURE]
            start = time.thread_time()
            batch(chunk)
            cpu[name][i : i + len(chunk), -1] = (time.thread_time() - start) / len(chunk)
    return {name: (cpu[name], sizes[name]) for name in runs}


# pragma: no mutate end
def spread(samples):
    """Median, quartiles, IQR and count of a sample (the calibration JSON's record of the spread)."""
    samples = np.asarray(samples, float).ravel()
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "n": int(samples.size)}


def shared_columns(declared, autoorder, sizes):
    """Which columns (the ops, then batch) do the same work in both orders, so that their draws
    measure one cost: the ops before AutoOrder's first move (the identical data in both orders),
    and those after its last that get and give the same bytes in both orders (the same op on
    data of the same size; stacking counts as an op here). `declared`, `autoorder`: the op names
    in each order; `sizes`: {order: {op: [bytes in, bytes out]}}. A list of bools, one per column.
    """
    final = {order: sizes[order][names[-1]][1] for order, names in (("declared", declared), ("autoorder", autoorder))}
    columns = [(a, b, sizes["declared"][a], sizes["autoorder"][b]) for a, b in zip(declared, autoorder)]
    columns.append(("batch", "batch", [final["declared"]] * 2, [final["autoorder"]] * 2))
    shared = [False] * len(columns)
    for j, (a, b, _, _) in enumerate(columns):  # the common start: identical data, draw for draw
        if a != b:
            break
        shared[j] = True
    for j in reversed(range(len(columns))):  # the common end: the same op on the same bytes
        a, b, size_a, size_b = columns[j]
        if a != b or list(size_a) != list(size_b):
            break
        shared[j] = True
    return shared


def order_minima(declared, autoorder, shared):
    """Per element and column the minimum over repeats (elements x columns), for each order's passes
    (repeats x elements x columns). A shared column takes the minimum over both orders' draws: the
    two orders then carry the same cost for it, and its noise cancels in the AutoOrder saving,
    which rests on the columns AutoOrder changed alone."""
    minima = {"declared": declared.min(axis=0), "autoorder": autoorder.min(axis=0)}
    pooled = np.minimum(minima["declared"], minima["autoorder"])
    for order in minima:
        minima[order][:, shared] = pooled[:, shared]
    return minima


def summarize_order(ops, passes, sizes, n, minima=None, shared=None):
    """The order's estimate from its passes (repeats x elements x ops+1 CPU seconds) and its per-element
    minima (`order_minima`; by default this order's own)."""
    minima = passes.min(axis=0) if minima is None else minima  # elements x ops+1: each element's least-disturbed draw per op
    shared = [False] * passes.shape[2] if shared is None else shared
    names = [op.name for op in ops] + ["batch"]
    rows = []
    for j, name in enumerate(names):
        # stacking neither grows nor shrinks an element
        bytes_in, bytes_out = sizes[name] if name != "batch" else [sizes[ops[-1].name][1]] * 2
        rows.append({
            "op": name,
            "cpu_s_per_element": float(minima[:, j].mean()),
            "cpu_s": spread(passes[:, :, j]),  # every draw of this order, disturbed ones included
            "cpu_s_minima": spread(minima[:, j]),
            "shared": bool(shared[j]),  # minima taken over both orders' draws
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
def calibrate(pipeline, elements=32, seed=0, repeats=REPEATS):
    """Measure `pipeline` in its declared and AutoOrder orders (see the module docstring)."""
    return calibrate_together([pipeline], elements=elements, seed=seed, repeats=repeats)[pipeline]


def calibrate_together(pipelines, elements=32, seed=0, repeats=REPEATS):
    """Measure several pipelines, each in its declared and AutoOrder orders, element by element
    in one interleaved loop: the ratio of their costs then holds still while the machine's load
    changes (measured separately, minutes apart, it moves by up to 15%). {pipeline: result}.
    """
    unknown = [p for p in pipelines if p not in PIPELINES]
    if unknown or not pipelines:
        raise ReproError(f"unknown pipeline(s) {unknown or pipelines!r}; expected one or more of {sorted(PIPELINES)}")
    if elements < 1 or repeats < 1:
        raise ReproError("calibration needs at least one element and one repeat")
    pipelines = list(dict.fromkeys(pipelines))
    allocator = fix_malloc_thresholds(trim_threshold=2**30)  # the module docstring says why
    runs, moves, data = {}, {}, {}
    for pipeline in pipelines:
        ops = list(PIPELINES[pipeline].ops)
        data[pipeline] = synthetic_jpegs(pipeline, elements, seed=seed)
        probe = {"declared": (ops, data[pipeline][: min(4, elements)])}
        _, sizes = measure_pass(probe, seed)["declared"]
        reordered, moves[pipeline] = autoorder(ops, {name: out / inp for name, (inp, out) in sizes.items()})
        runs[pipeline, "declared"] = (ops, data[pipeline])
        runs[pipeline, "autoorder"] = (reordered, data[pipeline])
    runs["reference"] = ([Op("decode", decode)],
                         synthetic_jpegs(REFERENCE_KERNEL["pipeline"], elements, seed=REFERENCE_KERNEL["seed"]))
    for _ in range(WARMUP_PASSES):
        measure_pass(runs, seed)
    passes, run_sizes = {name: [] for name in runs}, {}
    machine_before, own_before, started = cpu_seconds(), time.process_time(), time.monotonic()
    for r in range(repeats):
        for name, (cpu, run_sizes[name]) in measure_pass(runs, seed, flip=r % 2 == 1).items():
            passes[name].append(cpu)
    others = other_work(machine_before, cpu_seconds(), time.process_time() - own_before, time.monotonic() - started)
    machine, load = machine_description(), list(os.getloadavg())
    kernel = reference_kernel(np.array(passes["reference"])[:, :, 0])
    results = {}
    for pipeline in pipelines:
        result = {
            "pipeline": pipeline,
            "machine": machine,
            "elements": elements,
            "repeats": repeats,
            "warmup_passes": WARMUP_PASSES,
            "allocator": allocator or "the C library's defaults (not glibc)",
            "statistic": "per element and op the minimum over repeats (thread CPU time), mean over elements; "
                         "the shared ops' minima over both orders' draws",
            "measured_with": pipelines,  # interleaved element by element in one loop
            "seed": seed,
            "load_average": load,  # other work on the machine while measuring (1, 5, 15 min)
            "other_work": others,  # ... and measured over the passes themselves (None where not Linux)
            "image_bytes_per_element": sum(len(e["image"]) for e in data[pipeline]) / elements,
        }
        names = {order: [op.name for op in runs[pipeline, order][0]] for order in ("declared", "autoorder")}
        shared = shared_columns(names["declared"], names["autoorder"],
                                {order: run_sizes[pipeline, order] for order in names})
        drawn = {order: np.array(passes[pipeline, order]) for order in names}
        minima = order_minima(drawn["declared"], drawn["autoorder"], shared)
        result["shared_ops"] = [name for name, same in zip([*names["declared"], "batch"], shared) if same]
        for order in names:
            result[order] = summarize_order(runs[pipeline, order][0], drawn[order], run_sizes[pipeline, order],
                                            elements, minima[order], shared)
            result[order]["per_reference_kernel"] = result[order]["cpu_s_per_element"] / kernel["cpu_s"]
        result["reference_kernel"] = kernel
        result["autoorder"]["moves"] = moves[pipeline]
        result["autoorder_saving"] = saving(result["declared"]["cpu_s_per_element"],
                                            result["autoorder"]["cpu_s_per_element"])
        results[pipeline] = result
    return results


# pragma: no mutate end
def reference_kernel(passes):
    """The reference kernel's record from its draws (repeats x elements CPU seconds): the same
    statistic as an op's, the mean over the element slots of each slot's minimum over repeats."""
    minima = passes.min(axis=0)
    return {"work": REFERENCE_KERNEL["work"], "cpu_s": float(minima.mean()), "cpu_s_draws": spread(passes),
            "cpu_s_minima": spread(minima)}


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
    kernel = calibration.get("reference_kernel", {}).get("cpu_s")
    for name in ("declared", "autoorder"):
        cost = float(np.asarray(calibration[name]["element_cpu_s"])[picks].mean())
        drawn[name] = {**calibration[name], "cpu_s_per_element": cost}
        if kernel:  # the local preset reads the cost per reference kernel
            drawn[name]["per_reference_kernel"] = cost / kernel
    drawn["autoorder_saving"] = saving(drawn["declared"]["cpu_s_per_element"], drawn["autoorder"]["cpu_s_per_element"])
    return drawn
