"""Trace toolkit throughput and memory, measured side by side in one run.

Generates a corpus of TrIMS-style traces (default 200 files, >= 500 MB) and one large trace
(default >= 200 MB), then times, each in its own process so peak RSS is its own:
  - orjson.loads of the same bytes (the floor any JSON tool pays),
  - `repro trace combine`, `repro trace summarize` and `summarize --detailed` (every event written),
  - jq merging the same traceEvents (needs `apt-get install jq`).
The tools run in turn, --repeats times; each keeps its best time (the least disturbed by other
work on the machine) and its largest RSS (of all its processes together: combine reads with a
worker process per CPU). Prints MB/s, ratios to orjson and jq, peak RSS /
largest input, and the targets: combine and summarize at least 0.5x orjson and 4x faster than
jq, combine's and the detailed summary's RSS under 3x the largest input.

    python benchmarks/traces.py [--files 200] [--corpus-mb 500] [--single-mb 200] [--repeats 2] [--workdir DIR]
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
from benchcli import count, run_main

PHASES = ["read_params", "load_model", "create_prediction", "set_predict_input", "forward_predict", "get_output", "free_predictor"]
MODELS = ["alexnet", "vgg16", "resnet50_v1", "squeezenet_1.0", "bvlc_googlenet"]


def trace_doc(seed, target_bytes):
    rng = random.Random(seed)
    model = MODELS[seed % len(MODELS)]
    other = {"run_id": f"run-{seed}", "model_name": model, "hostname": "bench", "upr_enabled": bool(seed % 2),
             "eager_mode": False, "eager_mode_async": False, "experiment_description": "benchmark corpus"}
    events, ts, size, request = [], 0.0, 0, 0
    while size < target_bytes:
        tid = request % 8
        events.append({"name": "warmup", "cat": "ignore", "ph": "B", "ts": ts, "pid": 1, "tid": tid})
        ts += rng.uniform(5, 50)
        events.append({"name": "warmup", "cat": "ignore", "ph": "E", "ts": ts, "pid": 1, "tid": tid})
        for phase in PHASES:
            args = {"model_name": model, "request": request, "batch_size": 1, "device": "cpu"}
            events.append({"name": phase, "cat": "prediction", "ph": "B", "ts": ts, "pid": 1, "tid": tid, "args": args})
            ts += rng.uniform(10, 5000)
            events.append({"name": phase, "cat": "prediction", "ph": "E", "ts": ts, "pid": 1, "tid": tid})
        request += 1
        size = request * 1700
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def generate(workdir, files, corpus_mb, single_mb):
    corpus = workdir / "corpus"
    single = workdir / "single" / "large.json"
    if not corpus.exists():
        corpus.mkdir(parents=True)
        per_file = corpus_mb * 1e6 / files
        for i in range(files):
            (corpus / f"trace-{i:04d}.json").write_bytes(orjson.dumps(trace_doc(i, per_file)))
    if not single.exists():
        single.parent.mkdir(parents=True)
        single.write_bytes(orjson.dumps(trace_doc(10_000, single_mb * 1e6)))
    return sorted(corpus.glob("*.json")), [single]


def _tree(pid):
    """pid and the processes under it, as /proc lists them."""
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        try:
            for task in os.listdir(f"/proc/{found[-1]}/task"):
                with open(f"/proc/{found[-1]}/task/{task}/children") as fh:
                    todo += map(int, fh.read().split())
        except OSError:
            pass  # ended meanwhile
    return found


def _high_water(pid):
    """The peak RSS so far of a living process, in bytes (0 once it has ended)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def measure(cmd, stdout=subprocess.DEVNULL):
    """Run cmd; return (seconds, peak RSS in bytes). A command that starts processes of its own (combine's
    workers) is given the sum of the peaks of all of them, an upper bound of their peak together: each
    one's peak is read from /proc every 20 ms while it lives."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    peaks, done = {}, threading.Event()

    def watch():
        while not done.wait(0.02):
            for pid in _tree(proc.pid):
                peaks[pid] = max(peaks.get(pid, 0), _high_water(pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)  # ru_maxrss: its own peak, or its largest child's
    elapsed = time.perf_counter() - start
    done.set()
    watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]}... failed: {proc.stderr.read().decode()[-500:]}")
    return elapsed, max(usage.ru_maxrss * 1024, sum(peaks.values()))


ORJSON_ONLY = "import orjson,sys\nfor p in sys.argv[1:]:\n    orjson.loads(open(p,'rb').read())"
JQ_MERGE = '{traceEvents: [.[] | if type == "array" then .[] else .traceEvents[] end]}'


def bench(name, files, out, rows, repeats, check_rss):
    total = sum(f.stat().st_size for f in files)
    largest = max(f.stat().st_size for f in files)
    mb = total / 1e6
    args = [str(f) for f in files]
    repro = [sys.executable, "-m", "repro.cli", "trace"]
    commands = {
        "orjson.loads only": ([sys.executable, "-c", ORJSON_ONLY, *args], None),
        "repro combine": ([*repro, "combine", "-o", str(out / f"combined-{name}.json"), *args], None),
        "repro summarize": ([*repro, "summarize", "-o", str(out / f"summary-{name}.json"), *args], None),
        "repro summ --detailed": ([*repro, "summarize", "--detailed", "-o", str(out / f"detailed-{name}.json"), *args],
                                  None),
    }
    if shutil.which("jq"):
        commands["jq merge"] = (["jq", "-c", "-s", JQ_MERGE, *args], out / f"jq-{name}.json")
    results = {}
    for _ in range(repeats):  # in turn, so load from elsewhere hits every tool alike
        for tool, (cmd, sink) in commands.items():
            with open(sink or os.devnull, "wb") as stdout:
                secs, rss = measure(cmd, stdout=stdout)
            best = results.get(tool, (secs, rss))
            results[tool] = (min(secs, best[0]), max(rss, best[1]))
    floor = mb / results["orjson.loads only"][0]
    print(f"\n== {name}: {len(files)} files, {mb:.0f} MB, largest {largest / 1e6:.0f} MB; best of {repeats}")
    print(f"{'tool':<20}{'seconds':>9}{'MB/s':>9}{'x orjson':>10}{'peak RSS MB':>13}{'RSS/largest':>13}")
    for tool, (secs, rss) in results.items():
        rate = mb / secs
        print(f"{tool:<20}{secs:>9.2f}{rate:>9.1f}{rate / floor:>10.2f}{rss / 1e6:>13.0f}{rss / largest:>13.2f}")
        rows.append((name, tool, secs, rate, rate / floor, rss, rss / largest))
    verdicts = []
    for tool in ("repro combine", "repro summarize"):
        secs = results[tool][0]
        verdicts.append(mb / secs / floor >= 0.5)
        line = f"{tool}: {mb / secs / floor:.2f}x orjson"
        if "jq merge" in results:
            line += f", {results['jq merge'][0] / secs:.1f}x faster than jq"
            verdicts.append(results["jq merge"][0] / secs >= 4)
        print(line)
    if check_rss:  # small inputs: the interpreter's own footprint is the whole RSS
        verdicts.append(results["repro combine"][1] / largest < 3)
        verdicts.append(results["repro summ --detailed"][1] / largest < 3)  # its events streamed, not held
    print(f"{name}: targets {'met' if all(verdicts) else 'MISSED'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=count(), default=200)
    parser.add_argument("--corpus-mb", type=count(), default=500)
    parser.add_argument("--single-mb", type=count(), default=200)
    parser.add_argument("--repeats", type=count(), default=2)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/out/traces"))
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.generate_only:
        generate(args.workdir, args.files, args.corpus_mb, args.single_mb)
        return
    # generate in a child process: a child forked from a big parent would inherit its peak RSS
    subprocess.run([sys.executable, __file__, "--generate-only", "--files", str(args.files), "--corpus-mb",
                    str(args.corpus_mb), "--single-mb", str(args.single_mb), "--workdir", str(args.workdir)], check=True)
    corpus, single = generate(args.workdir, args.files, args.corpus_mb, args.single_mb)
    rows = []  # (experiment, tool, seconds, MB/s, x orjson, rss, rss/largest)
    bench("corpus", corpus, args.workdir, rows, args.repeats, check_rss=False)
    bench("single", single, args.workdir, rows, args.repeats, check_rss=True)
    print("\ntargets: combine and summarize >= 0.5x orjson and >= 4x faster than jq; combine and summarize "
          "--detailed RSS/largest < 3 on the single file")


if __name__ == "__main__":
    run_main(main)
