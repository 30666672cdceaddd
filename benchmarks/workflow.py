"""Workflow speed against Snakemake's own floor, measured side by side in one run.

The floor is a bare Snakemake: a virtualenv holding only snakemake, the version installed here
(created once under benchmarks/out/floor-venv), dry-running an empty Snakefile. Measured next
to it, interleaved and repeated (medians, since other work on the machine adds noise):
  - start-up: this environment's Snakemake on the same empty Snakefile (installed plugins cost here);
  - full --dry-run of the default config from a clean results/ (the Snakefile's config check
    reuses its kept result under .snakemake/, as at every start after the first one); and, without
    a goal, the same dry-run with that result removed first (the config validated from scratch);
  - no-op rerun of the fig8 target after a first run (the first run's time is printed too);
  - for reference, no goal: a bare workflow with as many jobs as the full dry-run (one rule, the
    shape benchmarks/dag_scale.py uses), in this environment: what Snakemake itself spends on a
    DAG of that size here, so the full dry-run's ratio splits into the environment, Snakemake's own
    per-job work and the project's rules.
Run it from the default install (`make setup`): extras such as [slurm] or [gcs] add their
plugins' import time to every start. Goals: start-up and dry-run <= 1.3x the floor, no-op <= 1.5x.

Measured 2026-12-01 on 2 shared cores (one run, --repeats 7, load 2.8-2.9 from other work; floor
1.39 s): start-up 1.09x, full dry-run 1.29x (1.38x with the config validated afresh), no-op rerun
1.10x; the bare workflow with the dry-run's 83 jobs 1.20x. The rules before they ran `repro`
commands, measured just before on the same machine (load 1.8-2.8; floor 1.17 s): 1.12x, 1.54x
(1.60x), 1.40x and 1.19x. Where the time over the floor goes:
  - this environment: numpy and Pillow are installed (the package needs them), and Snakemake's own
    yte and docutils import them at every start (yte's value handler imports numpy, about 0.14 s
    with -X importtime; the start-up row);
  - Snakemake's per-job work (the bare workflow's row);
  - the workflow's definition, about 0.08 s: parsing the Snakefile and 9 rule files (0.03 s),
    loading config/config.yaml (Snakemake reads YAML with the pure-Python loader, 0.01 s), the
    package modules the rules import (0.01 s), and defining the rules;
  - the rules' larger jobs (logs, benchmarks, conda environments, several outputs).
Every rule runs a `repro` command (`shell:`): a `script:` rule would make Snakemake read its script
and import nbformat (and jsonschema with it) to tell the script's language, once per invocation
that plans one. The Snakefile's config check keeps its result under .snakemake/repro/
(repro.checkedconfig), so a start with an unchanged config imports no jsonschema and validates
nothing (the "config unkept" row validates afresh).

    python benchmarks/workflow.py [--repeats 5]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
FLOOR_VENV = REPO / "benchmarks" / "out" / "floor-venv"
GOALS = {"start-up (empty Snakefile)": 1.3, "full --dry-run": 1.3, "no-op rerun of fig8": 1.5}


def floor_snakemake():
    """The snakemake of a virtualenv that holds nothing else, at this environment's version."""
    wanted = version("snakemake")
    stamp = FLOOR_VENV / "snakemake-version"
    if not stamp.exists() or stamp.read_text() != wanted:
        shutil.rmtree(FLOOR_VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(FLOOR_VENV)], check=True)
        subprocess.run([str(FLOOR_VENV / "bin" / "pip"), "install", "--quiet", f"snakemake=={wanted}"], check=True)
        stamp.write_text(wanted)
    return str(FLOOR_VENV / "bin" / "snakemake")


def timed(snakemake, args, cwd):
    start = time.perf_counter()
    subprocess.run([snakemake, *args], cwd=cwd, check=True, capture_output=True, env=ENV)
    return time.perf_counter() - start


def job_count(snakemake, args, cwd):
    done = subprocess.run([snakemake, *args], cwd=cwd, check=True, capture_output=True, text=True, env=ENV)
    return int(re.search(r"^total\s+(\d+)", done.stdout, re.MULTILINE).group(1))


def bare_workflow(workdir, jobs):
    """One rule with jobs - 1 independent jobs, plus `all`."""
    workdir.mkdir()
    (workdir / "Snakefile").write_text(
        f"rule all:\n    input: expand('out/{{i}}.txt', i=range({jobs - 1}))\n\n"
        "rule one:\n    output: 'out/{i}.txt'\n    shell: 'touch {output}'\n"
    )
    return workdir


def copy_workflow(target):
    target.mkdir()
    for item in ("Snakefile", "rules", "config", "envs", "profiles"):
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / item)
    return target


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bare = floor_snakemake()
    project = str(BIN / "snakemake")
    dry = ["--dry-run", "--cores", "1"]
    fig8 = ["plots/fig8_ResNet50_v2-8.pdf", "--cores", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        empty = tmp / "empty"
        empty.mkdir()
        (empty / "Snakefile").write_text("rule all:\n    input: []\n")
        work, clean = copy_workflow(tmp / "workflow"), copy_workflow(tmp / "clean")
        jobs = job_count(project, dry, clean)
        same_size = bare_workflow(tmp / "bare", jobs)
        reference = f"bare workflow, {jobs} jobs"
        cold = "full --dry-run, config unkept"
        try:
            first = timed(project, fig8, work)
            samples = {"floor": [], **{name: [] for name in GOALS}, cold: [], reference: []}
            for _ in range(args.repeats):  # interleaved, so load from elsewhere hits all alike
                samples["floor"].append(timed(bare, dry, empty))
                samples["start-up (empty Snakefile)"].append(timed(project, dry, empty))
                samples["full --dry-run"].append(timed(project, dry, clean))
                samples["no-op rerun of fig8"].append(timed(project, fig8, work))
                samples[reference].append(timed(project, dry, same_size))
                shutil.rmtree(clean / ".snakemake" / "repro", ignore_errors=True)
                samples[cold].append(timed(project, dry, clean))
        finally:
            state = work / "results" / "cluster" / "local" / "state.json"
            if state.exists():
                subprocess.run([str(BIN / "repro"), "cluster", "stop", "--state", str(state)], capture_output=True)
    floor = statistics.median(samples["floor"])
    print(f"snakemake {version('snakemake')}; medians of {args.repeats}; floor: bare Snakemake, empty Snakefile")
    print(f"{'measurement':<30}{'seconds':>9}{'x floor':>9}{'goal':>7}")
    print(f"{'floor':<30}{floor:>9.2f}{1:>9.2f}")
    notes = {cold: "(validated afresh)", reference: "(reference: Snakemake's own DAG work)"}
    for name in [*GOALS, cold, reference]:
        seconds = statistics.median(samples[name])
        # each round's ratio to that round's floor, then their median: load that hits a round hits both
        ratio = statistics.median(s / f for s, f in zip(samples[name], samples["floor"]))
        if name in GOALS:
            verdict = "ok" if ratio <= GOALS[name] else "MISSED"
            print(f"{name:<30}{seconds:>9.2f}{ratio:>9.2f}{GOALS[name]:>7.1f}  {verdict}")
        else:
            print(f"{name:<30}{seconds:>9.2f}{ratio:>9.2f}      -  {notes[name]}")
    print(f"{'fig8 from a clean results/':<30}{first:>9.2f}{first / floor:>9.2f}")


if __name__ == "__main__":
    main()
