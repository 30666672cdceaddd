"""The tf.data engine measured: per-worker throughput, 1 -> 2 worker scaling, the service's overhead
against the same pipeline in-process, the AutoOrder saving in TF next to the Pillow pipeline's,
and the wall time of each mode's miniature run (target: under 2 minutes each).

Rates are examples/s of the pipeline alone (no accelerator emulation), each the best of
`--rounds` interleaved rounds of `--batches` batches of 16 (interference only ever slows a round).
Needs the 'tfdata' extra.

    python benchmarks/tfdata.py [--config config/config.yaml] [--experiment ResNet50_v2-8] [--no-runs]
"""

import argparse
import tempfile
import time
from pathlib import Path

from repro.config import load_config
from repro.errors import ReproError
from repro.pecan.calibrate import calibrate
from repro.pecan.tfdata import ops, tensorflow
from repro.pecan.tfdata.engine import process_cpus, run
from repro.pecan.tfdata.spec import MINIATURE, spec_from_config
from repro.pecan.tfdata.service import Service
from benchcli import count, run_main

tf = tensorflow()
BATCH = MINIATURE["batch_size"]


def rate(iterator, batches):
    """(examples/s wall, process CPU s per element) over `batches` batches."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(iterator)
    return batches * BATCH / (time.perf_counter() - start), (time.process_time() - cpu) / (batches * BATCH)


def in_process(manifest, order, threads):
    dataset, _ = ops.dataset(manifest, order, BATCH, threads)
    iterator = iter(dataset.prefetch(2))
    next(iterator)
    return iterator


def through_service(manifest, order, address, name):
    dataset, _ = ops.dataset(manifest, order, BATCH, MINIATURE["worker_threads"])
    dataset = dataset.apply(tf.data.experimental.service.distribute(
        processing_mode="parallel_epochs", service=f"grpc://{address}", job_name=name, compression=None))
    iterator = iter(dataset.prefetch(2))
    next(iterator)
    return iterator


def wait_serving(service, count, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while len(service.serving()) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{count} workers did not serve within {timeout_s} s")
        time.sleep(0.2)


def best(iterator, batches, rounds):
    results = [rate(iterator, batches) for _ in range(rounds)]
    return max(r[0] for r in results), min(r[1] for r in results)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--experiment", default="ResNet50_v2-8")
    parser.add_argument("--batches", type=count(), default=12)
    parser.add_argument("--rounds", type=count(), default=3)
    parser.add_argument("--no-runs", action="store_true", help="skip the miniature runs")
    args = parser.parse_args()
    pecan = load_config(args.config)["pecan"]
    if args.experiment not in pecan["experiments"]:
        raise ReproError(f"--experiment {args.experiment}: not an experiment of {args.config}; expected one of "
                         f"{', '.join(pecan['experiments'])}")
    with tempfile.TemporaryDirectory(prefix="tfdata-bench-") as work:
        measure(args, pecan, Path(work))


def measure(args, pecan, work):
    pipeline = pecan["models"][pecan["experiments"][args.experiment]["model"]]["pipeline"]
    manifest = ops.write_data(pipeline, MINIATURE["images"], work / "data")

    # AutoOrder in TF (one thread, in-process) next to the Pillow pipeline's calibration
    measured = {order: [] for order in ops.ORDERS}
    with process_cpus(1):
        iterators = {order: in_process(manifest, order, 1) for order in ops.ORDERS}
        for _ in range(args.rounds):
            for order, iterator in iterators.items():
                measured[order].append(rate(iterator, args.batches))
    local = {order: (max(r[0] for r in m), min(r[1] for r in m)) for order, m in measured.items()}
    saving_tf = 1 - local["autoorder"][1] / local["declared"][1]
    pillow = calibrate(pipeline, elements=16, repeats=3)
    print(f"{pipeline}, in-process, 1 CPU: declared {local['declared'][0]:.0f} examples/s "
          f"({local['declared'][1] * 1e3:.2f} ms CPU/element), AutoOrder {local['autoorder'][0]:.0f} examples/s "
          f"({local['autoorder'][1] * 1e3:.2f} ms CPU/element)")
    print(f"AutoOrder saving (CPU per element): TF {saving_tf:.1%}, Pillow {pillow['autoorder_saving']:.1%} "
          f"(moves: {', '.join(ops.ordered_ops(manifest, 'autoorder')[1])})")
    del iterators

    # the service: one worker, then two (1 vCPU each), same job
    service = Service.start(work / "service")
    try:
        service.add_worker("remote", MINIATURE["worker_threads"])
        iterator = through_service(manifest, "declared", service.address, "bench")
        wait_serving(service, 1)
        one, _ = best(iterator, args.batches, args.rounds)
        service.add_worker("remote", MINIATURE["worker_threads"])
        wait_serving(service, 2)
        rate(iterator, args.batches)  # the second worker's task starts
        two, _ = best(iterator, args.batches, args.rounds)
    finally:
        service.stop()
    overhead = 1 - one / local["declared"][0]
    print(f"service: 1 worker {one:.0f} examples/s, 2 workers {two:.0f} examples/s, "
          f"scaling efficiency {two / (2 * one):.0%}")
    print(f"service overhead against in-process (1 worker vs 1 CPU): {overhead:.0%}")
    bound = pecan["accelerators"][pecan["experiments"][args.experiment]["accelerator"]]["max_batches_per_s"]
    full = bound[pecan["experiments"][args.experiment]["model"]] * pecan["models"][
        pecan["experiments"][args.experiment]["model"]]["batch_size"]
    print(f"time scale that puts the miniature bound midway between 1 and 2 workers: {full / ((one + two) / 2):.1f}")

    if args.no_runs:
        return
    for mode in pecan["experiments"][args.experiment]["modes"]:
        spec = spec_from_config(pecan, args.experiment, mode)
        metrics = run(spec, work / mode, work / "data")
        print(f"run {args.experiment} {mode:<10} {metrics['wall_s']:6.1f} s   target < 120 s   "
              f"{metrics['throughput']:.0f} examples/s (bound {metrics['accelerator_bound_miniature']:.0f}), "
              f"{metrics['remote_workers']} remote + {metrics['local_workers']} local, "
              f"converged {metrics['converged']}, {len(metrics['windows'])} windows")


if __name__ == "__main__":
    run_main(main)
