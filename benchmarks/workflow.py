"""Workflow speed, measured side by side in one run.

From a clean results/: the fig8 target (set-up excluded); then a no-op rerun and a full
--dry-run, each next to the dry-run time of an empty Snakefile (Snakemake's own floor).
Targets: fig8 under 120 s; no-op and dry-run under 3 s.

    python benchmarks/workflow.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def timed(args, cwd):
    start = time.perf_counter()
    subprocess.run([SNAKEMAKE, *args], cwd=cwd, check=True, capture_output=True, env=ENV)
    return time.perf_counter() - start


def main():
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "workflow"
        work.mkdir()
        for item in ("Snakefile", "rules", "workflow", "config", "envs", "profiles"):
            source = REPO / item
            (shutil.copytree if source.is_dir() else shutil.copy)(source, work / item)
        empty = Path(tmp) / "empty"
        empty.mkdir()
        (empty / "Snakefile").write_text("rule all:\n    input: []\n")
        try:
            fig8 = timed(["plots/fig8_ResNet50_v2-8.pdf", "--cores", "1"], work)
            noop = timed(["plots/fig8_ResNet50_v2-8.pdf", "--cores", "1"], work)
            shutil.rmtree(work / "results")
            dry = timed(["--dry-run", "--cores", "1"], work)
            floor = timed(["--dry-run", "--cores", "1"], empty)
        finally:
            state = work / "results" / "cluster" / "local" / "state.json"
            subprocess.run([str(Path(sys.executable).parent / "repro"), "cluster", "stop", "--state", str(state)],
                           capture_output=True)
    print(f"{'measurement':<36}{'seconds':>9}{'target':>9}{'x empty Snakefile':>20}")
    print(f"{'fig8 from a clean results/':<36}{fig8:>9.2f}{120:>9}{fig8 / floor:>20.1f}")
    print(f"{'no-op rerun of fig8':<36}{noop:>9.2f}{3:>9}{noop / floor:>20.1f}")
    print(f"{'full --dry-run (clean results/)':<36}{dry:>9.2f}{3:>9}{dry / floor:>20.1f}")
    print(f"{'empty Snakefile --dry-run (floor)':<36}{floor:>9.2f}{'':>9}{1:>20.1f}")


if __name__ == "__main__":
    main()
