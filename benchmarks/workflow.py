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
    what the environment alone costs.
Wall-clock and CPU seconds both; on a busy machine neither holds still (at a load of 3 on 2 cores
the full dry-run's interval spans 1.3-1.6), so --instructions also counts what each invocation
executes, once, under valgrind's callgrind: the same count however busy the machine, the ratio of
the CPU-bound work (it leaves out waiting on files, which a dry-run hardly does).
Run it from the default install (`make setup`): extras such as [slurm] or [gcs] add their
plugins' import time to every start. Goals: start-up and dry-run <= 1.3x the floor, no-op <= 1.5x.

Measured 2026-12-01 on 2 shared cores, --rounds 15 at load 1.4-1.8 from other work (floor 1.24 s
wall, 1.21 s CPU), wall ratios, median [95% interval]: start-up 1.12x [1.07-1.22], full dry-run
1.41x [1.29-1.53] (CPU 1.51x [1.36-1.66]), no-op rerun 1.20x [1.13-1.38], config validated afresh
1.50x [1.32-1.56], the bare workflow with the dry-run's 83 jobs 1.20x [1.15-1.35]. Instructions
(--rounds 0 --instructions, load 3-5): floor 2.86 billion; start-up 1.13x, full dry-run 1.53x
(missed beyond doubt), no-op 1.31x, config validated afresh 1.64x, bare 83 jobs 1.27x. Where the
full dry-run's 1.52 billion instructions over the floor go (callgrind, one run each):
  - this environment, 0.37 billion (the start-up row): numpy and Pillow are installed (the package
    needs them), and Snakemake's own yte and docutils import them at every start (yte's value
    handler imports numpy, about 0.14 s with -X importtime);
  - the workflow's definition, 0.43 billion (`snakemake -n cluster_stop`, one job, over the
    start-up): parsing the Snakefile and 8 rule files, Snakemake reading config/config.yaml with
    the pure-Python YAML loader (about 0.04 s), defining 24 rules, the package modules the rules import (about
    0.015 s with -X importtime), the workflow profile (profiles/default makes Snakemake parse its
    arguments twice: 0.03 billion, 1%); the config check itself reuses its kept result (0.002 s);
  - the other 82 jobs, 0.72 billion, 8.8 million each where a bare job costs 4.9 million (the bare
    workflow's row): Snakemake's work on larger jobs (several inputs and outputs, a log, resources,
    a conda environment, a shell command formatted three times per job in a dry-run); the rules'
    own input and params functions take under 0.01 s of it (cProfile).
Since then (callgrind as --instructions counts, `python -m snakemake` run once each with
PYTHONHASHSEED=0 and the bytecode cache on, 2026-12-01 at load 3-4): floor 2.86 billion, start-up
1.13x, bare 83 jobs 1.27x, full dry-run 1.524x before and 1.506x after these cuts (4.354 to 4.303
billion; about 1.51x with the version check kept, as below): the rules' input and params functions
and the targets moved from rules/common.smk and the rule files' lambdas into repro.rulefunctions
(0.026 billion: Snakemake parses the rule files at every start, about 50,000 instructions a token,
where an imported module is compiled once), a Snakemake version check without importing packaging
(0.012 billion; not kept: the Snakefile uses Snakemake's own min_version); and the package's modules
read from the bytecode cache rather than compiled at every start (0.03 billion, which the benchmark
counted before: this environment sets PYTHONDONTWRITEBYTECODE). The definition is now 0.37 billion
over the start-up (`-n cluster_stop`): parsing the Snakefile and the rule files 0.16 (24 rules, 2.3
million for even a minimal one), Snakemake's config YAML read 0.08 (its comments 0.02), defining the
rules 0.07, the package imports 0.02. The other 82 jobs cost 8.6 million each against 4.9 million
for a bare job: Snakemake's per-job work, building the DAG 0.16 billion over the bare workflow's and
logging the jobs 0.12. Taking one directive out of every rule (parsing included) saves: log 0.045,
params 0.05, resources 0.025, the shell commands' formatting 0.033, conda 0.001; printshellcmds:
false saves nothing (the job's log record formats the command whether or not it is printed). The
goal of 1.3x is out of reach without changing the environment or the jobs: the bare workflow with as
many jobs is 1.27x by itself.
Then the Snakefile freezes what is built before it is read (gc.freeze): the cyclic garbage
collector no longer walks the modules Snakemake and the package imported at each of its full
collections. Full dry-run 4.314 to 4.141 billion (1.509x to 1.449x the floor; with the collector
disabled instead, 4.265); a threshold raised besides saves 0.003 more, not kept. The rest of the
gap is the environment, Snakemake's reading of the workflow and its per-job work, as above.
Measured after it on an idle fresh clone (2026-12-01, 15 rounds, load 1.1-1.7, floor 1.51 s wall,
1.48 s CPU): start-up 1.15x [1.12-1.26] (CPU 1.24x [1.19-1.31]), full dry-run 1.24x [1.09-1.34]
(CPU 1.27x [1.19-1.41]: undecided), no-op rerun 1.08x [1.02-1.13], the bare workflow with as many
jobs 1.26x, and the full dry-run 0.94x [0.90-1.03] that bare workflow (which pays the collector's
walks). Instructions on the same clone: floor 2.85 billion; start-up 1.13x, full dry-run 1.45x
(missed), no-op 1.23x, config validated afresh 1.53x, bare 83 jobs 1.27x.
On 2026-12-02, with the Snakemake-only row (idle fresh clone, 25 rounds, load 1.1-1.4, floor 1.56 s
wall, 1.51 s CPU): start-up 1.10x [1.09-1.17] (CPU 1.18x [1.15-1.21]), full dry-run 1.23x
[1.13-1.29] (CPU 1.29x [1.22-1.35]: ok on the wall clock, undecided in CPU time), no-op rerun 1.02x
[0.96-1.12], the bare workflow with as many jobs 1.21x; the same full dry-run from the
Snakemake-only virtualenv 1.06x [0.99-1.10] (CPU 1.06x [1.00-1.09]). Instructions on the same clone
(at load 3, which they do not feel): floor 2.86 billion; start-up 1.13x, full dry-run 1.45x, no-op
rerun 1.23x, bare 83 jobs 1.27x, the full dry-run from the Snakemake-only virtualenv 1.32x: the
floor's time holds more than instructions (loading shared libraries, page faults), so its wall
ratios are lower than its instruction ratios. The workflow itself is within
the goal; what this environment adds, numpy, Pillow and Pygments imported by Snakemake's own report
module (yte and docutils) at every start, takes it to the edge (the same dry-run in this
environment with those three imports refused by a wrapper: 1.08x, against 1.25x). Its CPU time
exceeds its wall time where numpy is imported: OpenBLAS starts a thread per core.
With 40 rounds (the default since), two idle fresh clones on 2026-12-02: full dry-run 1.16x
[1.14-1.22] and 1.26x [1.17-1.29] on the wall clock, 1.25x [1.22-1.27] and 1.34x [1.24-1.36] in
CPU time (floors 1.50 and 1.41 s); the Snakemake-only row 1.10x and 1.11x. A third (floor
0.87 s): start-up 1.16x [1.14-1.19], full dry-run 1.24x [1.21-1.26], no-op 1.08x [1.06-1.10] on
the wall clock; in CPU time 1.29x, 1.37x [1.34-1.39] and 1.21x. That CPU excess is OpenBLAS's
threads: `python -c "import numpy"` takes 0.15 s of CPU for 0.10 s of wall time, and 0.08 s with
OPENBLAS_NUM_THREADS=1.
The config validated afresh adds 0.30 billion: importing jsonschema and the registries the schema
names, and validating; it is paid once per changed config (repro.checkedconfig).
Every rule runs a `repro` command (`shell:`): a `script:` rule would make Snakemake read its script
and import nbformat (and jsonschema with it) to tell the script's language, once per invocation
that plans one.

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

BIN = Path(sys.executable).parent
ENV = environment(BIN)
FLOOR_VENV = REPO / "benchmarks" / "out" / "floor-venv"
SNAKEMAKE_ONLY_VENV = REPO / "benchmarks" / "out" / "snakemake-only-venv"
STARTUP, DRY, NOOP = "start-up (empty Snakefile)", "full --dry-run", "no-op rerun of fig8"
COLD, REFERENCE = "full --dry-run, config unkept", "bare workflow, same jobs"
SNAKEMAKE_ONLY = "full --dry-run, Snakemake-only"
GOALS = {STARTUP: 1.3, DRY: 1.3, NOOP: 1.5}


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
        label = name if over == "floor" else f"{name} / bare"
        judged = f"{goal:>5.1f}  {verdict(wall, goal)}/{verdict(cpu, goal)}" if goal else f"{'-':>5}"
        print(f"{label:<31}{seconds:>7.2f} {fmt_ratio(wall):<30}{fmt_ratio(cpu):<30}{judged}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40,
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
                }
        finally:
            loads.append(load())
            state = work / "results" / "cluster" / "local" / "state.json"
            if state.exists():
                subprocess.run([str(BIN / "repro"), "cluster", "stop", "--state", str(state)], capture_output=True)
    print(f"snakemake {version('snakemake')}; {jobs} jobs in the full dry-run; load before: {loads[0]}; after: {loads[1]}")
    rows = [(name, "floor", GOALS.get(name)) for name in [*GOALS, COLD, REFERENCE, SNAKEMAKE_ONLY]]
    rows += [(DRY, REFERENCE, None)]  # what the rules add over Snakemake's own work on as many jobs
    if args.rounds:
        print_timed(samples, rows, args.rounds)
    if args.instructions:
        print(f"instructions executed (valgrind callgrind, one run each); floor {counted['floor'] / 1e9:.2f} billion")
        for name, over, goal in rows:
            label = name if over == "floor" else f"{name} / bare"
            ratio = counted[name] / counted[over]
            judged = f"goal {goal:.1f}  {'ok' if ratio <= goal else 'MISSED'}" if goal else ""
            print(f"{label:<31}{counted[name] / 1e9:>7.2f} {ratio:>5.2f}  {judged}")
    floor = statistics.median(wall for wall, _ in samples["floor"]) if args.rounds else float("nan")
    print(f"{'fig8 from a clean results/':<31}{first[0]:>7.2f} {first[0] / floor:5.2f}")


if __name__ == "__main__":
    main()
