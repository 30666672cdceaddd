"""Calibration in TF ops (`calibration.ops: tf`): the pipelines as the tf.data engine runs them
(repro.pecan.tfdata.ops, the artifact's pipelines are tf.data ones), in the record
`repro pecan calibrate` writes, so the `local` preset takes its cost ratios from the same ops.

Per pipeline and order, the dataset a one-thread worker runs, in this process with every thread
pinned to one CPU (repro.pecan.tfdata.engine.measure_pipeline_cost): after a warm-up batch, each
round reads one batch of every (pipeline, order), from one moment the process is idle to the next
(tf.data fills its buffers in the background, so that work is the batch's), and then times the
reference kernel (the Pillow
calibration's fixed JPEG decodes, repro.pecan.calibrate.REFERENCE_KERNEL) on this thread, so load
that drifts hits them alike. A batch's cost is the process's CPU seconds over its elements; an
order's cost is the median over rounds, the kernel's too, and `per_reference_kernel` their ratio
(what the local preset reads). TF runs whole batches, so there is no per-op breakdown: `ops` lists
the op names, `element_cpu_s` holds the per-batch draws (what `resample` bootstraps).
"""

import os
import tempfile
import time

from repro.errors import ReproError
from repro.pecan.calibrate import REFERENCE_KERNEL, saving, spread
from repro.pecan.pipelines import PIPELINES, decode, synthetic_jpegs

BATCH = 16
WARMUP_BATCHES = 1


def _idle(poll_s=0.02, quiet_s=0.0003):
    """Wait until the process stops using CPU (tf.data's background threads have filled their
    buffers): the CPU one batch costs then lies between two such waits, not in another's."""
    while True:
        before = time.process_time()
        time.sleep(poll_s)
        if time.process_time() - before < quiet_s:
            return


def calibrate_tf(pipelines, elements=32, seed=0, repeats=20):
    """{pipeline: calibration record} from the pipelines' TF forms, measured together."""
    from repro.machine import machine_description
    from repro.pecan.tfdata import ops, tensorflow
    from repro.pecan.tfdata.engine import process_cpus

    tensorflow()
    missing = [p for p in pipelines if p not in PIPELINES or not PIPELINES[p].tf_form]
    if missing:
        raise ReproError(f"calibration.ops: tf: pipeline(s) {missing} have no TF form; expected calibration.ops: pillow")
    kernel_elements = synthetic_jpegs(REFERENCE_KERNEL["pipeline"], elements, seed=REFERENCE_KERNEL["seed"])
    draws, kernel, names, nbytes, iterators = {}, [], {}, {}, {}
    with tempfile.TemporaryDirectory() as data, process_cpus(1):
        for pipeline in pipelines:
            manifest = ops.write_data(pipeline, elements, data, seed=seed)
            for order in ("declared", "autoorder"):
                dataset, names[pipeline, order] = ops.dataset(manifest, order, BATCH, 1)
                iterators[pipeline, order] = iter(dataset)
                for _ in range(WARMUP_BATCHES):
                    next(iterators[pipeline, order])
                draws[pipeline, order] = []
        for _ in range(repeats):
            for key, iterator in iterators.items():
                _idle()
                start = time.process_time()
                batch = next(iterator)
                _idle()  # the refill of its buffers, which tf.data runs in the background, is its cost too
                draws[key].append((time.process_time() - start) / BATCH)
                nbytes[key] = sum(int(t.numpy().nbytes) for t in batch.values()) / BATCH
            start = time.thread_time()
            for element in kernel_elements:
                decode(element, None)
            kernel.append((time.thread_time() - start) / len(kernel_elements))
        iterators.clear()
    kernel_spread = spread(kernel)
    machine, load = machine_description(), list(os.getloadavg())
    results = {}
    for pipeline in pipelines:
        result = {"pipeline": pipeline, "ops_measured": "tf", "machine": machine, "elements": elements,
                  "repeats": repeats, "warmup_batches": WARMUP_BATCHES, "batch_size": BATCH, "seed": seed,
                  "statistic": "median over rounds of the process's CPU seconds per element of one batch, every "
                               "thread pinned to one CPU (TF ops, as the tf.data engine's one-thread worker)",
                  "measured_with": list(pipelines), "load_average": load,
                  "reference_kernel": {"work": REFERENCE_KERNEL["work"], "cpu_s": kernel_spread["median"],
                                       "cpu_s_draws": kernel_spread}}
        for order in ("declared", "autoorder"):
            cost = spread(draws[pipeline, order])
            result[order] = {"ops": names[pipeline, order], "cpu_s_per_element": cost["median"], "cpu_s": cost,
                             "element_cpu_s": draws[pipeline, order],
                             "bytes_out_per_element": nbytes[pipeline, order],
                             "per_reference_kernel": cost["median"] / kernel_spread["median"]}
        declared_names = names[pipeline, "declared"]
        result["autoorder"]["moves"] = [f"{name} moved" for i, name in enumerate(names[pipeline, "autoorder"])
                                        if i >= len(declared_names) or declared_names[i] != name]
        result["autoorder_saving"] = saving(result["declared"]["cpu_s_per_element"],
                                            result["autoorder"]["cpu_s_per_element"])
        results[pipeline] = result
    return results
