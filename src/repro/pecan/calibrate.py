"""Measure the real input pipelines on this machine: CPU seconds and bytes per element, per op.

Both the declared order and the order AutoOrder picks are run and measured; the saving is
what the two measurements say, not an assumption.
"""

import platform
import time
from importlib.metadata import version

import numpy as np

from repro.errors import ReproError
from repro.pecan.pipelines import PIPELINES, batch, element_bytes, synthetic_jpegs
from repro.pecan.policies import autoorder

BATCH_FOR_MEASURE = 16  # stacking cost is measured on small batches and reported per element


def machine_description():
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), model)
    except OSError:
        pass
    import os

    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "pillow": version("pillow"),
    }


def measure_order(ops, elements, seed):
    """Run `ops` over `elements`; return per-op thread CPU seconds and bytes, plus the outputs."""
    rng = np.random.default_rng(seed)
    stats = {op.name: {"cpu_s": 0.0, "bytes_in": 0, "bytes_out": 0} for op in ops}
    outputs = []
    for element in elements:
        for op in ops:
            before = element_bytes(element)
            start = time.thread_time()
            element = op.fn(element, rng)
            stats[op.name]["cpu_s"] += time.thread_time() - start
            stats[op.name]["bytes_in"] += before
            stats[op.name]["bytes_out"] += element_bytes(element)
        outputs.append(element)
    start = time.thread_time()
    for i in range(0, len(outputs), BATCH_FOR_MEASURE):
        batch(outputs[i : i + BATCH_FOR_MEASURE])
    batch_cpu = time.thread_time() - start
    n = len(elements)
    rows = [
        {
            "op": op.name,
            "cpu_s_per_element": stats[op.name]["cpu_s"] / n,
            "bytes_in_per_element": stats[op.name]["bytes_in"] / n,
            "bytes_out_per_element": stats[op.name]["bytes_out"] / n,
            "inflation": stats[op.name]["bytes_out"] / stats[op.name]["bytes_in"],
        }
        for op in ops
    ]
    rows.append({"op": "batch", "cpu_s_per_element": batch_cpu / n, "bytes_in_per_element": rows[-1]["bytes_out_per_element"],
                 "bytes_out_per_element": rows[-1]["bytes_out_per_element"], "inflation": 1.0})
    return rows


def _summary(rows):
    return {
        "order": [r["op"] for r in rows],
        "ops": rows,
        "cpu_s_per_element": sum(r["cpu_s_per_element"] for r in rows),
        "bytes_out_per_element": rows[-1]["bytes_out_per_element"],
    }


def calibrate(pipeline, elements=32, seed=0, repeats=3):
    """Measure `pipeline` in its declared and AutoOrder orders; the best of `repeats` runs per order."""
    if pipeline not in PIPELINES:
        raise ReproError(f"unknown pipeline {pipeline!r}; expected one of {sorted(PIPELINES)}")
    if elements < 1 or repeats < 1:
        raise ReproError("calibration needs at least one element and one repeat")
    ops = PIPELINES[pipeline]
    data = synthetic_jpegs(pipeline, elements, seed=seed)

    inflation = {r["op"]: r["inflation"] for r in measure_order(ops, data[:4], seed)}
    reordered, moves = autoorder(ops, inflation)
    # the two orders are measured in alternation, so drifting background load hits both alike
    runs = {"declared": [], "autoorder": []}
    for _ in range(repeats):
        runs["declared"].append(measure_order(ops, data, seed))
        runs["autoorder"].append(measure_order(reordered, data, seed))
    declared, auto = (min(r, key=lambda rows: sum(x["cpu_s_per_element"] for x in rows)) for r in runs.values())
    result = {
        "pipeline": pipeline,
        "machine": machine_description(),
        "elements": elements,
        "repeats": repeats,
        "seed": seed,
        "image_bytes_per_element": sum(len(e["image"]) for e in data) / elements,
        "declared": _summary(declared),
        "autoorder": {**_summary(auto), "moves": moves},
    }
    result["autoorder_saving"] = 1.0 - result["autoorder"]["cpu_s_per_element"] / result["declared"]["cpu_s_per_element"]
    return result
