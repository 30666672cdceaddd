"""How the DAG scales: --dry-run of config-generated experiment matrices next to a bare workflow
with the same number of jobs, measured side by side in one run.

Each experiment of the matrix is a copy of ResNet50_v2-8 with its own name (three modes: three
runs, their status checks and trace downloads, then combine, summarize and the cost table).
The bare workflow is one rule with as many independent jobs plus `all`, under the same
Snakemake, so the ratio is what the project's rules add per job: per size, rounds of the pair
(--goal-rounds, 11, at the first size, where the goal is judged; --rounds, 5, at the others), the
order rotated, each round's ratio, then their median, a 95% interval of the median and the
extremes (benchmarks/sidebyside.py; with 5 rounds the interval is the extremes), wall-clock and
CPU seconds. Goals: at most 1.5x the bare workflow at 1,000 jobs, and growing linearly to
5,000 (the growth column, x time / x jobs against the first size, near 1 or below). Each size's
config is validated and kept before the timed runs.

The ratio rises with the size because the bare workflow's fixed start-up weighs less per job as
it grows: it tends to the ratio of the per-job costs. What remains is Snakemake's per-job work on
these larger jobs (a run has 4 inputs and 4 outputs, a log, resources, a benchmark file and a
conda environment); the rules' input and params functions take about 0.02 s of a 1,000-job
dry-run (cProfile). The project's own per-job costs are cut: signatures inspected once (per_job
in repro.snakemake_adapter), no `script:` rules, inputs shared by every run named as their rules'
outputs (rules.X.output, so Snakemake takes the producer without matching the path), wildcard
constraints as a trie (repro.wildcards: 16 patterns for 416 experiments compile in 0.05 s
against 0.15 s flat), and gc.freeze after start-up (repro.snakemake_adapter; 12.61 to 12.40 billion instructions at 999
jobs). The latest results are in docs/BENCHMARKS.md.

    python benchmarks/dag_scale.py [--jobs 1000 2500 5000] [--goal-rounds 11] [--rounds 5]
"""

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from sidebyside import REPO, bare_workflow, copy_workflow, environment, fmt_ratio, load, ratios, rounds, timed, verdict
from benchcli import count, run_main

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
ENV = environment(Path(sys.executable).parent)
JOBS_PER_EXPERIMENT = 12  # 3 modes x (run, cluster_status, download_traces) + combine, summarize, costs
GOAL = 1.5  # x bare at the first size


def dry_run(workdir, targets=("all",)):
    """(wall, CPU) seconds of a --dry-run of `targets`, and the job count Snakemake reports."""
    seconds, stdout = timed([SNAKEMAKE, "--dry-run", "--cores", "1", *targets], workdir, ENV)
    return seconds, int(re.search(r"^total\s+(\d+)", stdout, re.MULTILINE).group(1))


def project_matrix(workdir, jobs):
    """Write a config with enough experiments for about `jobs` jobs; return the targets: every
    run (`all`) and every cost table."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    pecan = config["pecan"]
    template = pecan["experiments"]["ResNet50_v2-8"]
    matrix = {f"matrix{i:04d}": dict(template) for i in range(max(1, jobs // JOBS_PER_EXPERIMENT))}
    # Getting_started stays, with its figure: the self-check needs one (the others' experiments go)
    pecan["experiments"] = {"Getting_started": pecan["experiments"]["Getting_started"], **matrix}
    config["plots"]["figures"] = {"Getting_started": config["plots"]["figures"]["Getting_started"]}
    config["plots"]["comparisons"] = {}
    config["plots"]["trims"] = []
    config["reproducibility"]["figures"] = ["Getting_started"]
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return ["all", *(f"results/tables/{name}.csv" for name in matrix)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=count(), nargs="+", default=[1000, 2500, 5000])
    parser.add_argument("--goal-rounds", type=count(), default=11,
                        help="rounds at the first size, where the goal is judged (its interval narrows with more)")
    parser.add_argument("--rounds", type=count(), default=5, help="rounds at each further size (the growth)")
    args = parser.parse_args()
    rows = []
    loads = [load()]
    with tempfile.TemporaryDirectory() as tmp:
        work = copy_workflow(Path(tmp) / "project")
        for index, target in enumerate(args.jobs):
            targets = project_matrix(work, target)
            _, jobs = dry_run(work, targets)  # validates the new config and keeps it
            bare = bare_workflow(Path(tmp) / f"bare{jobs}", jobs)
            assert dry_run(bare)[1] == jobs
            samples = rounds({"project": lambda: dry_run(work, targets)[0], "bare": lambda: dry_run(bare)[0]},
                             args.rounds if index else args.goal_rounds)
            rows.append((jobs, samples))
    loads.append(load())
    first_jobs, first = rows[0]
    first_s = statistics.median(wall for wall, _ in first["project"])
    print(f"{args.goal_rounds} rounds at {first_jobs} jobs, {args.rounds} at each further size; load before: {loads[0]}; after: {loads[1]}")
    print("x bare: median [95% interval of the median] (min-max) of the per-round ratios")
    print(f"{'jobs':>6}{'project s':>10}{'bare s':>8} {'x bare, wall':<30}{'x bare, cpu':<30}{'ms/job':>7}{'growth':>8}")
    for jobs, samples in rows:
        seconds = statistics.median(wall for wall, _ in samples["project"])
        bare = statistics.median(wall for wall, _ in samples["bare"])
        wall, cpu = ratios(samples["project"], samples["bare"], 0), ratios(samples["project"], samples["bare"], 1)
        growth = (seconds / first_s) / (jobs / first_jobs)
        judged = f"  goal {GOAL}: {verdict(wall, GOAL)}/{verdict(cpu, GOAL)}" if jobs == first_jobs else ""
        print(f"{jobs:>6}{seconds:>10.2f}{bare:>8.2f} {fmt_ratio(wall):<30}{fmt_ratio(cpu):<30}"
              f"{1000 * seconds / jobs:>7.2f}{growth:>8.2f}{judged}")
    print(f"goals: x bare <= {GOAL} at the first size (verdict wall/cpu on the interval); growth (x time / x jobs "
          "against the first size) near 1 or below means linear growth")


if __name__ == "__main__":
    run_main(main)
