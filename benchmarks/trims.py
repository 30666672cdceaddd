"""TrIMS model sharing, measured side by side in one run.

For each model size: median model-loading latency (read_params + load_model +
create_prediction) and end-to-end latency, cold original (page cache dropped) vs shared (model
resident in the store), and the speedups. Then end-to-end requests/s at concurrency 1, 2 and 4
for both modes. Target: at least 10x for models of 500 MB or more.

With --device gpu the store keeps the models in GPU memory (half of it is the budget) and clients
infer on the GPU; --monitor DIR samples every GPU (NVML, 50 ms) throughout and ends with the GPU
memory that 4 concurrent requests for the largest model add: one copy of the weights per request
in flight in original mode, none in shared mode (the store's copy is already resident).

    python benchmarks/trims.py [--models squeezenet_1.1 resnet50_v1 bvlc_alexnet vgg16] [--requests 5]
                               [--device cpu|gpu] [--monitor DIR]
"""

import argparse
import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from repro.trims.client import Client, ClientOptions
from repro.trims.experiments import LOAD_PHASES, _trace_phases
from repro.trims.models import generate
from repro.trims.monitor import MemoryMonitor
from repro.trims.server import budget_bytes, start_daemon
from benchcli import count, run_main


def measure(client, model, requests):
    results, _ = client.run([(model, i) for i in range(requests)], 1)
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise SystemExit(f"{model}: {failed[0]['error']}")
    if not client.options.original:
        results = results[1:]  # the first shared request loads the model into the store
    load = np.median([sum(_trace_phases(r["trace"]).get(p, 0) for p in LOAD_PHASES) for r in results]) / 1000
    total = np.median([r["latency_us"] for r in results]) / 1000
    return load, total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["squeezenet_1.1", "resnet50_v1", "bvlc_alexnet", "vgg16"])
    parser.add_argument("--requests", type=count(), default=5)
    parser.add_argument("--concurrency-requests", type=count(), default=24)
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--monitor", type=Path, help="sample GPU memory throughout; write memory.csv and summary here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sizes = {m: generate(m, tmp / "models" / m)["params_bytes"] for m in args.models}
        budget = budget_bytes(0.5, device="gpu") if args.device == "gpu" else 8 << 30
        pid = start_daemon(tmp / "store.sock", tmp / "models", budget, "lru", tmp / "store.pid", tmp / "store.log",
                           args.device)
        print(f"store: {args.device} memory, budget {budget >> 20} MiB; inference on the {args.device}")
        monitor = MemoryMonitor(store_pid=pid) if args.monitor else contextlib.nullcontext()
        try:
            with monitor:
                compare(args, tmp, sizes, monitor if args.monitor else None)
        finally:  # on SIGTERM too (benchcli): the store is this process's child, started just above
            os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):  # reaped once it has removed its socket and segments
                os.waitpid(pid, 0)
        if args.monitor:
            monitor.write(args.monitor / "memory.csv", args.monitor / "memory-summary.json")
            print(f"GPU samples in {args.monitor}")


def gpu_used(monitor, first_sample=-1):
    used = [s["memory_used_bytes"] for s in monitor.samples[first_sample:] if s.get("memory_used_bytes")]
    return max(used) if used else 0


def memory_added(clients, monitor, model, concurrency=4, requests=8):
    """GPU memory (MiB) that `concurrency` requests in flight for `model` add, per mode."""
    print(f"\nGPU memory added by {concurrency} concurrent requests for {model} (NVML peak over the run's start)")
    for mode, client in clients.items():
        client.runtime.torch.cuda.empty_cache()  # freed copies of earlier runs must not hide this run's
        time.sleep(0.2)
        first, before = len(monitor.samples), gpu_used(monitor)
        client.run([(model, i) for i in range(requests)], concurrency)
        time.sleep(0.2)
        print(f"{mode:<10}{(gpu_used(monitor, first) - before) / 2**20:>10.0f} MiB")


def compare(args, tmp, sizes, monitor):
    clients = {
        mode: Client(ClientOptions(base_path=tmp / "models", socket=tmp / "store.sock", original=original,
                                   cold_cache=original, eager=True, profile_output=tmp / mode, device=args.device))
        for mode, original in (("original", True), ("shared", False))
    }
    print(f"{'model':<16}{'MB':>7}{'load cold ms':>14}{'load shared ms':>16}{'load x':>8}"
          f"{'e2e cold ms':>13}{'e2e shared ms':>15}{'e2e x':>7}")
    for model in args.models:
        cold_load, cold_total = measure(clients["original"], model, args.requests)
        shared_load, shared_total = measure(clients["shared"], model, args.requests + 1)
        print(f"{model:<16}{sizes[model] / 1e6:>7.0f}{cold_load:>14.1f}{shared_load:>16.1f}"
              f"{cold_load / shared_load:>8.1f}{cold_total:>13.1f}{shared_total:>15.1f}"
              f"{cold_total / shared_total:>7.1f}")
    plan = [(args.models[i % len(args.models)], i) for i in range(args.concurrency_requests)]
    print(f"\nend-to-end requests/s over {len(plan)} requests cycling through the models")
    print(f"{'concurrency':<14}{'original':>10}{'shared':>10}{'ratio':>8}")
    for concurrency in (1, 2, 4):
        rates = {}
        for mode, client in clients.items():
            results, wall = client.run(plan, concurrency)
            rates[mode] = sum(r["ok"] for r in results) / wall
        print(f"{concurrency:<14}{rates['original']:>10.2f}{rates['shared']:>10.2f}"
              f"{rates['shared'] / rates['original']:>8.2f}")
    if monitor and args.device == "gpu":
        memory_added(clients, monitor, max(sizes, key=sizes.get))


if __name__ == "__main__":
    run_main(main)
