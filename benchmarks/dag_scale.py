"""How the DAG scales: --dry-run time of config-generated experiment matrices of 50, 200 and 500 runs.

Each experiment of the matrix is a copy of ResNet50_v2-8 with its own name (three modes, so one
experiment is three runs). Target: 500 runs dry-run in under 10 s, growing about linearly.

    python benchmarks/dag_scale.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def dry_run_seconds(workdir, runs):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    pecan = config["pecan"]
    template = pecan["experiments"]["ResNet50_v2-8"]
    pecan["experiments"] = {f"matrix{i:04d}": dict(template) for i in range(runs // len(template["modes"]))}
    config["plots"]["figures"] = {}
    config["plots"]["trims"] = []
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    subprocess.run([SNAKEMAKE, "--dry-run", "--cores", "1", "--quiet", "all"], cwd=workdir, env=ENV, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def main():
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for item in ("Snakefile", "rules", "workflow", "config", "envs", "profiles"):
            source = REPO / item
            (shutil.copytree if source.is_dir() else shutil.copy)(source, work / item)
        rows = [(runs, dry_run_seconds(work, runs)) for runs in (51, 201, 501)]
    base_runs, base_s = rows[0]
    print(f"{'runs':>6}{'dry-run s':>11}{'s per run':>11}{'x time / x runs':>17}")
    for runs, seconds in rows:
        print(f"{runs:>6}{seconds:>11.2f}{seconds / runs:>11.4f}{(seconds / base_s) / (runs / base_runs):>17.2f}")
    print("target: 500 runs under 10 s; the last column near 1 (or below) means linear growth")


if __name__ == "__main__":
    main()
