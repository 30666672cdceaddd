"""Measure the real input pipelines on this machine: CPU seconds and bytes per element, per op.

Both the declared order and the order AutoOrder picks are run and measured; the saving is
what the two measurements say, not an assumption.

The estimate has to hold still on a shared, loaded machine:
* CPU time of the measuring thread, not wall time: time spent descheduled does not count.
* Warm-up passes first: the first passes over large arrays pay page faults until the allocator
  keeps those sizes; measured here, RetinaNet's first passes cost 19 ms/element and the warm ones 13 ms.
* A steady allocator: left to itself, glibc moves its mmap threshold as large blocks are freed and
  returns freed heap to the system, so whether an op's 4.9 MB output lands on pages already
  touched or on fresh ones (a page fault each 4 KiB) depends on the process's history. Measured
  on an idle machine, RetinaNet's resize-and-pad then cost 1.7 ms/element in one calibration and
  2.9 ms in the next (its np.zeros), and the pipeline moved 10%. The calibration fixes both
  thresholds (`repro.allocator`) so every large block is reused: 1.54-1.67 ms in six runs.
* Per element and op, the minimum over `repeats` interleaved passes: interference (cache, memory
  bandwidth and core sharing with other processes) only ever adds time, so the least-disturbed
  draw estimates the op's own cost. The per-op cost is the mean of these minima over the
  elements (elements differ in real work: crop sizes, flips). Measured here, one pass's total
  sits 5-35% above these minima and varies pass to pass; the minima agree between fresh runs
  within a few percent (`python benchmarks/pecan.py` prints the estimate next to the median single pass).
* Twenty passes (`REPEATS`): on a busy machine ten do not reach every element's floor, and what
  is left moves the whole estimate from one calibration to the next. Measured here (2026-12-01,
  other processes busy on 0.9-1.4 of the 2 CPUs) on the passes of 31 calibrations in 9 fresh
  processes, taking 5 or 10 passes of one calibration or the 20 of two in a row: ResNet's declared ms/element had a spread (sd
  between calibrations) of 4.9-8.2% with 5 passes, 3.2-4.5% with 10 and 1.3-2.1% with 20,
  RetinaNet's 3.6-4.7%, 2.6-3.4% and 1.8-2.0%; the minima fell by 2.5-4% from 10 passes to 20. A
  first calibration in a process is not slower than the next ones in it: over 19 fresh processes
  with 3-4 calibrations each, ResNet's first one came out from 8.5% below to 14% above the mean
  of the later ones, on average 0.0% (the warm-up pass takes the first-touch page faults: 75,000,
  and the measured passes 1,200 or 3,200 each, the same in every calibration).
* One cost for the work both orders share (`shared_columns`, `order_minima`). The saving is a
  difference of two sums whose terms are mostly the same work: the ops before AutoOrder's first
  move get the identical data in both orders, those after its last the same op on the same bytes
  (ResNet: decode, normalize and stacking, 58% of its cost; RetinaNet: all but to_float and the
  flip, 88%). Taken per order, their minima differ by noise and by the loop's neighbours (an op run
  right after a RetinaNet element, whose 5 MB arrays evict the caches, costs more: decode 0.1
  ms/element), and the difference goes whole into the saving: over 40 fresh processes here,
  ResNet's decode alone moved a saving of per-order minima over 1.8 points, RetinaNet's decode and
  resize-and-pad each over 0.8. So a shared op's per-element minimum is taken over both orders'
  draws: both orders carry one cost for it, and the saving rests on the ops AutoOrder changed. On
  the passes of 66 fresh processes ResNet's saving is then 12.1-14.4% (per-order minima:
  12.0-15.0%; sd 0.57 against 0.71 points) and RetinaNet's 0.7-2.0% (0.8-2.6%; sd 0.19 against
  0.33). What remains is the machine's: memory traffic from other work, in this machine or beside
  it, slows the declared order's float ops more than AutoOrder's uint8 ones, and no minimum removes
  it while it lasts. ResNet's declared to_float cost 0.171 ms/element on average with the second
  CPU idle and 0.187 with it busy, and 0.168-0.243 in idle runs minutes apart (neither load average
  nor steal time showed why); its saving follows, 12.4-14.4% in those runs. The record's
  `other_work` says how busy the machine was over the passes.
* A reference kernel for the machine's speed (`REFERENCE_KERNEL`): fixed work, decoding a fixed
  set of JPEGs (its own image per element slot), timed in the same loop right beside every element
  and summarized with the ops' statistic. No statistic removes the machine's own speed from
  absolute CPU time: on this 2-core virtual machine a whole calibration ran 6-11% slower on one
  idle minute than a few minutes later, and with the other CPU busy every op slows with the memory
  traffic. Each order's cost is therefore also recorded per reference kernel
  (`per_reference_kernel`), which the self-check holds to its tolerance; the ms/element stay in the
  record. Measured here (2026-12-01, ten calibrations in fresh processes, other work on 1.1-1.5 of
  the 2 CPUs, load average 3.0-5.5) with the decode of one fixed JPEG as the kernel: between
  calibrations, ResNet's declared ms/element spread 4.1% (sd; 13.7% max-min) and per kernel 1.0%
  (3.4%); RetinaNet's 3.1% (10.4%) and 1.5% (4.5%). The decode tracked the pipelines best among
  the kernels tried: zlib decompression stayed at 1.77-1.82 ms while the pipelines moved 10-14%,
  and float32 arithmetic over an image (0.34-0.44 ms) moved more than they did. But one image is
  not enough on an idle machine: two calibrations minutes apart in one process measured its decode
  at 1.64 and 1.52 ms while the pipelines agreed within 1%. The same bytes decoded into the same
  buffers keep one draw of whatever sets their speed for a whole calibration; an image per slot
  averages it out over the slots, as the pipelines' own elements do.
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
    changes (measured separately, minutes apart, it moved by up to 15% here). {pipeline: result}.
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
