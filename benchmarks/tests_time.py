"""Wall time of the test tiers: `make test-fast` (unit tests), `make test` (everything this machine
can run) and `make test-all` (what CI runs, less the services' install), each run as a user runs it.

Each tier's pytest prints `tier NAME: S s wall` (tests/conftest.py); this prints that, the wall time
of the whole make command (set-up included), its CPU time (user + system, of every process it
waited for), the machine's load before and after, and the pytest summary line. Goals (on 2 cores,
idle): test-fast < 60 s, test < 300 s, CI (.ci/run) < 720 s. On a shared machine the numbers
move with the load: compare two trees side by side in one window (--repo for the other tree),
not against an earlier measurement.

    python benchmarks/tests_time.py                      # test-fast, then test
    python benchmarks/tests_time.py --tiers test-fast --rounds 3
    python benchmarks/tests_time.py --repo ../other-tree --tiers test-fast
    python benchmarks/tests_time.py --tiers test-fast --workers 0,2,4    # one process against 2 and 4 workers
"""

import argparse
import os
import re
import resource
import subprocess
import time
from pathlib import Path
from benchcli import count, run_main

TIERS = ("test-fast", "test", "test-all")


def run_tier(repo, tier, make_args):
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(["make", "-C", str(repo), tier, *make_args], capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds (user + system) of make and every process it waited for: on a shared machine this
    # moves much less with the load than the wall clock does
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = proc.stdout + proc.stderr
    pytest_wall = re.search(r"^tier [\w-]+: ([\d.]+) s wall$", out, re.M)
    summary = [line for line in out.splitlines() if re.match(r"^=*\s*\d+ (passed|failed)", line.strip("= "))]
    return {"tier": tier, "rc": proc.returncode, "make_s": wall, "cpu_s": cpu,
            "pytest_s": float(pytest_wall.group(1)) if pytest_wall else None,
            "load_before": load, "load_after": os.getloadavg()[0], "summary": summary[-1].strip("= ") if summary else out[-300:]}


def _worker_counts(text):
    """--workers: 'default' or whole numbers from 0, comma-separated."""
    counts = text.split(",")
    if not all(c == "default" or (c.isdigit() and c.isascii()) for c in counts):
        raise argparse.ArgumentTypeError(f"expected 'default' or whole numbers from 0, comma-separated, got {text!r}")
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1], help="the tree to time")
    parser.add_argument("--tiers", default="test-fast,test", help=f"comma-separated, of {', '.join(TIERS)}")
    parser.add_argument("--rounds", type=count(), default=1)
    parser.add_argument("--workers", type=_worker_counts, default=["default"],
                        help="comma-separated pytest-xdist worker counts (the Makefile's WORKERS for test-fast, "
                        "TEST_WORKERS for the others; 0: one process; default: the Makefile's), each tier timed with "
                        "each, side by side")
    parser.add_argument("make_args", nargs="*", help="passed to make (VENV=..., for example)")
    args = parser.parse_args(argv)
    tiers = args.tiers.split(",")
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        parser.error(f"--tiers: unknown tier(s) {unknown}; expected some of {', '.join(TIERS)}")
    failed = False
    workers = args.workers
    for round_ in range(args.rounds):
        for tier in tiers:
            times = {}
            for workers_count in workers:
                variable = "WORKERS" if tier == "test-fast" else "TEST_WORKERS"
                chosen = [] if workers_count == "default" else [f"{variable}={workers_count}"]
                r = run_tier(args.repo, tier, [*chosen, *args.make_args])
                times[workers_count] = r["pytest_s"]
                pytest_s = f"{r['pytest_s']:.1f}" if r["pytest_s"] is not None else "?"
                print(f"round {round_ + 1} {tier} workers={workers_count}: pytest {pytest_s} s, make {r['make_s']:.1f} s, "
                      f"CPU {r['cpu_s']:.1f} s, rc {r['rc']}, "
                      f"load {r['load_before']:.1f}->{r['load_after']:.1f}: {r['summary']}", flush=True)
                failed |= r["rc"] != 0
            if len(workers) > 1 and all(times.values()):
                first = times[workers[0]]
                print(f"round {round_ + 1} {tier}: " + ", ".join(f"workers={c} {first / t:.2f}x" for c, t in times.items()
                                                            if c != workers[0]) + f" the speed of workers={workers[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
