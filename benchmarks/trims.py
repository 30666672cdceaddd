"""TrIMS model sharing, measured side by side in one run.

For each model size: median model-loading latency (read_params + load_model +
create_prediction) and end-to-end latency, cold original (page cache dropped) vs shared (model
resident in the store), and the speedups. Then end-to-end requests/s at concurrency 1, 2 and 4
for both modes. Target: at least 10x for models of 500 MB or more.

    python benchmarks/trims.py [--models squeezenet_1.1 resnet50_v1 bvlc_alexnet vgg16] [--requests 5]
"""

import argparse
import os
import signal
import tempfile
from pathlib import Path

import numpy as np

from repro.trims.client import Client, ClientOptions
from repro.trims.experiments import LOAD_PHASES, _trace_phases
from repro.trims.models import generate
from repro.trims.server import start_daemon


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
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--concurrency-requests", type=int, default=24)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sizes = {m: generate(m, tmp / "models" / m)["params_bytes"] for m in args.models}
        pid = start_daemon(tmp / "store.sock", tmp / "models", 8 << 30, "lru", tmp / "store.pid", tmp / "store.log")
        try:
            clients = {
                mode: Client(ClientOptions(base_path=tmp / "models", socket=tmp / "store.sock", original=original,
                                           cold_cache=original, eager=True, profile_output=tmp / mode))
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
        finally:
            os.kill(pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
