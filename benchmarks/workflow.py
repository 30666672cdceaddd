"""Workflow speed against Snakemake's own floor, measured side by side in one run.

The floor is a bare Snakemake: a virtualenv holding only snakemake, the version installed here
(created once under benchmarks/out/floor-venv), dry-running an empty Snakefile. Measured next
to it, in rounds (benchmarks/sidebyside.py: the order rotated each round, each ratio taken within
a round, then its median, a 95% interval of that median and the extremes; a verdict only where the
interval lies on one side of the goal):
  - start-up: this environment's Snakemake on the same empty Snakefile (installed plugins cost here);
  - full --dry-run of the default config from a clean results/ (the Snakefile's config check
    reuses its kept result under .snakemake/, as at every start after the first one); and, without
    a goal, the same dry-run with that result removed first (the config validated from scratch);
  - no-op rerun of the fig8 target after a first run (the first run's time is printed too);
  - for reference, no goal: a bare workflow with as many jobs as the full dry-run (one rule, the
    shape benchmarks/dag_scale.py uses), in this environment: what Snakemake itself spends on a
    DAG of that size here, so the full dry-run's ratio splits into the environment, Snakemake's own
    per-job work and the project's rules; and the same full dry-run from a Snakemake-only
    virtualenv (benchmarks/out/snakemake-only-venv: snakemake, PyYAML and the package installed
    without its dependencies, enough to read the workflow with a kept config check), which tells
    what the environment alone costs; and the same full dry-run with the adapter's speed tricks
    off (REPRO_SNAKEMAKE_TRICKS=off: no recorded signatures, no gc.freeze; repro.snakemake_adapter),
    and with gc.freeze alone (=freeze), which tell what both and the recorded signatures save.
Wall-clock and CPU seconds both; on a busy machine neither holds still (at a load of 3 on 2 cores
the full dry-run's interval spans 1.3-1.6), so --instructions also counts what each invocation
executes, once, under valgrind's callgrind: the same count however busy the machine, the ratio of
the CPU-bound work (it leaves out waiting on files, which a dry-run hardly does).
Run it from the default install (`make setup`): extras such as [slurm] or [gcs] add their
plugins' import time to every start. Goals: start-up and dry-run <= 1.3x the floor, no-op <= 1.5x.

Where the full dry-run's cost over the floor goes, and what each cut it saved (callgrind):
  - the environment: Snakemake's report module (yte, docutils) imports numpy, Pillow and Pygments
    at every start, and numpy's OpenBLAS starts a thread per core (its CPU time exceeds its wall
    time); with those imports refused the dry-run is 1.08x the floor, against 1.25x;
  - reading the workflow: Snakemake parses the Snakefile and rule files at every start, about
    50,000 instructions a token, so the rules' functions live in repro.rulefunctions (compiled
    once; 0.026 billion of the floor's 2.86); the config check is kept (validating afresh adds
    0.30 billion, repro.checkedconfig); gc.freeze after start-up (repro.snakemake_adapter) keeps the collector off the
    modules imported before it (full dry-run 4.31 to 4.14 billion); every rule is `shell:`, since
    a `script:` rule makes Snakemake import nbformat to tell the script's language;
  - the jobs: Snakemake's own per-job work, 8.6 million instructions a job against 4.9 million
    for a bare one (several inputs and outputs, a log, resources, a conda environment); the bare
    workflow with as many jobs is 1.27x the floor by itself.
The latest results are in docs/BENCHMARKS.md.

    python benchmarks/workflow.py [--rounds 40] [--instructions]
"""

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from sidebyside import REPO, bare_workflow, copy_workflow, environment, fmt_ratio, instructions, load, ratios, rounds, timed, verdict
from benchcli import count, run_main

BIN = Path(sys.executable).parent
ENV = environment(BIN)
NO_TRICKS_ENV = {**ENV, "REPRO_SNAKEMAKE_TRICKS": "off"}
FREEZE_ONLY_ENV = {**ENV, "REPRO_SNAKEMAKE_TRICKS": "freeze"}
FLOOR_VENV = REPO / "benchmarks" / "out" / "floor-venv"
SNAKEMAKE_ONLY_VENV = REPO / "benchmarks" / "out" / "snakemake-only-venv"
STARTUP, DRY, NOOP = "start-up (empty Snakefile)", "full --dry-run", "no-op rerun of fig8"
COLD, REFERENCE = "full --dry-run, config unkept", "bare workflow, same jobs"
SNAKEMAKE_ONLY = "full --dry-run, Snakemake-only"
NO_TRICKS = "full --dry-run, tricks off"
FREEZE_ONLY = "full --dry-run, gc.freeze only"
GOALS = {STARTUP: 1.3, DRY: 1.3, NOOP: 1.5}
# a ratio over another row than the floor
LABELS = {REFERENCE: "bare", COLD: "config unkept", NO_TRICKS: "tricks off", FREEZE_ONLY: "gc.freeze only"}


def venv_python(venv, *installs):
    """The python of a virtualenv made once under benchmarks/out with `pip install` of each of
    `installs` (argument lists), in order; made anew when they change."""
    wanted = repr(installs)
    stamp = venv / "installed"
    if not stamp.exists() or stamp.read_text() != wanted:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for install in installs:
            subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", *install], check=True)
        stamp.write_text(wanted)
    return venv / "bin" / "python"


def job_count(stdout):
    return int(re.search(r"^total\s+(\d+)", stdout, re.MULTILINE).group(1))


def print_timed(samples, rows, count):
    floor = statistics.median(wall for wall, _ in samples["floor"])
    floor_cpu = statistics.median(cpu for _, cpu in samples["floor"])
    print(f"{count} rounds; ratios: median [95% interval of the median] (min-max) of the per-round ratios; "
          "verdict on the interval")
    print(f"{'x floor':<31}{'wall s':>7} {'wall ratio':<30}{'cpu ratio':<30}{'goal':>5}  verdict wall/cpu")
    print(f"{'floor: bare Snakemake':<31}{floor:>7.2f} {'(cpu ' + format(floor_cpu, '.2f') + ' s)':<30}")
    for name, over, goal in rows:
        wall, cpu = ratios(samples[name], samples[over], 0), ratios(samples[name], samples[over], 1)
        seconds = statistics.median(w for w, _ in samples[name])
        label = name if over == "floor" else f"{name} / {LABELS[over]}"
        judged = f"{goal:>5.1f}  {verdict(wall, goal)}/{verdict(cpu, goal)}" if goal else f"{'-':>5}"
        print(f"{label:<31}{seconds:>7.2f} {fmt_ratio(wall):<30}{fmt_ratio(cpu):<30}{judged}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=count(), default=40,
                        help="timed rounds (0: none); with fewer, the full dry-run's interval can straddle its goal")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each invocation's instructions once, under valgrind (minutes)")
    args = parser.parse_args()
    floor_python = venv_python(FLOOR_VENV, [f"snakemake=={version('snakemake')}"])
    # the package without its dependencies: what the Snakefile itself imports, none of numpy, Pillow
    # and Pygments, which Snakemake's report module imports at every start where they are installed
    snakemake_only_python = venv_python(SNAKEMAKE_ONLY_VENV, [f"snakemake=={version('snakemake')}", f"pyyaml=={version('pyyaml')}"],
                                ["--no-deps", "-e", str(REPO)])
    bare, snakemake_only = str(floor_python.parent / "snakemake"), str(snakemake_only_python.parent / "snakemake")
    project = str(BIN / "snakemake")
    dry = ["--dry-run", "--cores", "1"]
    fig8 = ["plots/fig8_ResNet50_v2-8.pdf", "--cores", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        empty = tmp / "empty"
        empty.mkdir()
        (empty / "Snakefile").write_text("rule all:\n    input: []\n")
        work, clean = copy_workflow(tmp / "workflow"), copy_workflow(tmp / "clean")
        jobs = job_count(timed([project, *dry], clean, ENV)[1])  # also keeps the checked config
        same_size = bare_workflow(tmp / "bare", jobs)

        def run(snakemake, arguments, cwd):
            return lambda: timed([snakemake, *arguments], cwd, ENV)[0]

        def cold(measure=lambda command, cwd: timed(command, cwd, ENV)[0], snakemake=(project,)):
            shutil.rmtree(clean / ".snakemake" / "repro", ignore_errors=True)
            return measure([*snakemake, *dry], clean)

        measurements = {
            "floor": run(bare, dry, empty),
            STARTUP: run(project, dry, empty),
            DRY: run(project, dry, clean),
            NOOP: run(project, fig8, work),
            COLD: cold,  # after it, the config is kept again for the next round's DRY
            REFERENCE: run(project, dry, same_size),
            SNAKEMAKE_ONLY: run(snakemake_only, dry, clean),  # the config kept by the first DRY (it needs numpy to check one)
            NO_TRICKS: lambda: timed([project, *dry], clean, NO_TRICKS_ENV)[0],
            FREEZE_ONLY: lambda: timed([project, *dry], clean, FREEZE_ONLY_ENV)[0],
        }
        loads = [load()]
        try:
            first = timed([project, *fig8], work, ENV)[0]
            timed([project, *fig8], work, ENV)  # a first no-op, untimed (it writes Snakemake's metadata caches)
            samples = rounds(measurements, args.rounds)
            if args.instructions:  # python -m snakemake: valgrind runs a program, not a script
                python = [sys.executable, "-m", "snakemake"]
                counted = {
                    "floor": instructions([str(floor_python), "-m", "snakemake", *dry], empty, ENV),
                    STARTUP: instructions([*python, *dry], empty, ENV),
                    DRY: instructions([*python, *dry], clean, ENV),
                    NOOP: instructions([*python, *fig8], work, ENV),
                    COLD: cold(lambda command, cwd: instructions(command, cwd, ENV), python),
                    REFERENCE: instructions([*python, *dry], same_size, ENV),
                    SNAKEMAKE_ONLY: instructions([str(snakemake_only_python), "-m", "snakemake", *dry], clean, ENV),
                    NO_TRICKS: instructions([*python, *dry], clean, NO_TRICKS_ENV),
                    FREEZE_ONLY: instructions([*python, *dry], clean, FREEZE_ONLY_ENV),
                }
        finally:
            loads.append(load())
            state = work / "results" / "cluster" / "local" / "state.json"
            if state.exists():
                subprocess.run([str(BIN / "repro"), "cluster", "stop", "--state", str(state)], capture_output=True)
    print(f"snakemake {version('snakemake')}; {jobs} jobs in the full dry-run; load before: {loads[0]}; after: {loads[1]}")
    rows = [(name, "floor", GOALS.get(name)) for name in [*GOALS, COLD, REFERENCE, SNAKEMAKE_ONLY, NO_TRICKS, FREEZE_ONLY]]
    rows += [(DRY, REFERENCE, None)]  # what the rules add over Snakemake's own work on as many jobs
    rows += [(DRY, NO_TRICKS, None), (DRY, FREEZE_ONLY, None)]  # what the adapter's speed tricks save (below 1: they pay)
    rows += [(DRY, COLD, None)]  # what the kept config check saves
    if args.rounds:
        print_timed(samples, rows, args.rounds)
    if args.instructions:
        print(f"instructions executed (valgrind callgrind, one run each); floor {counted['floor'] / 1e9:.2f} billion")
        for name, over, goal in rows:
            label = name if over == "floor" else f"{name} / {LABELS[over]}"
            ratio = counted[name] / counted[over]
            judged = f"goal {goal:.1f}  {'ok' if ratio <= goal else 'MISSED'}" if goal else ""
            print(f"{label:<31}{counted[name] / 1e9:>7.2f} {ratio:>5.2f}  {judged}")
    floor = statistics.median(wall for wall, _ in samples["floor"]) if args.rounds else float("nan")
    print(f"{'fig8 from a clean results/':<31}{first[0]:>7.2f} {first[0] / floor:5.2f}")


if __name__ == "__main__":
    run_main(main)
