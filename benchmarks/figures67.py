"""Workflow time of the paper's Fig 6 and 7 from a fresh results/: one row.

A copy of the workflow (no results, no Snakemake metadata) builds plots/Cachew_AP_FF.pdf and
plots/AutoOrder_Cost.pdf with `snakemake --cores 2` (calibrating every pipeline, every run of the
five workloads, their tables and the figures). Goal: under 5 minutes of workflow time on a 2-core
machine (set-up excluded). The row also gives the load average before and after, and each
calibrate job's seconds (Snakemake's benchmark files): on a shared machine other work moves them.

    python benchmarks/figures67.py [--preset local|artifact] [--keep DIR]

--keep DIR copies the figures, their tables, verdicts and logs out of the temporary copy into DIR.
"""

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sidebyside import copy_workflow, load  # noqa: E402
from benchcli import run_main  # noqa: E402

GOAL_S = 300


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="local", choices=["local", "artifact"])
    parser.add_argument("--keep", type=Path, help="copy the figures, tables, verdicts and logs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = copy_workflow(Path(tmp) / "wf")
        before = load()
        start = time.monotonic()
        proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--cores", "2", "plots/Cachew_AP_FF.pdf",
                               "plots/AutoOrder_Cost.pdf", "--config", f"calibration={{preset: {args.preset}}}"],
                              cwd=work, capture_output=True, text=True)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"snakemake failed:\n{proc.stderr[-2000:]}")
        if args.keep:
            for part in ("plots", "results/tables", "results/reference", "results/logs/comparison"):
                shutil.copytree(work / part, args.keep / part, dirs_exist_ok=True)
        calibrate = {}
        for path in sorted((work / "results" / "benchmarks" / "calibrate").glob("*.tsv")):
            with open(path, newline="") as fh:
                calibrate[path.stem] = float(next(csv.DictReader(fh, delimiter="\t"))["s"])
    verdict = "met" if seconds < GOAL_S else "missed"
    print(f"Fig 6 + Fig 7, preset {args.preset}, fresh results/: {seconds:.0f} s (goal < {GOAL_S} s: {verdict}); "
          f"calibrate jobs {', '.join(f'{k} {v:.0f} s' for k, v in calibrate.items())}; {before} before, {load()} after")


if __name__ == "__main__":
    run_main(main)
