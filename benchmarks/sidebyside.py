"""Side-by-side timing of Snakemake invocations, for benchmarks/workflow.py and dag_scale.py.

Every measurement runs once per round, the rounds one after the other, the order within a round
rotated from round to round (so no measurement always runs first, or always right after the
heaviest). A ratio is taken within each round (a measurement over its reference in the same
round, seconds apart, so load from other work that hits a round hits both) and summarised over
the rounds: the median, a 95% confidence interval of the median (distribution-free: from the
order statistics of the per-round ratios, as in Conover, Practical Nonparametric Statistics,
ch. 3.2) and the extremes. A goal holds beyond noise when the whole interval is under it
("ok"), is missed beyond noise when the whole interval is over it ("MISSED"), and is undecided
("~goal") when the interval straddles it: more rounds, or a quieter machine, then decide.

Where the machine is too busy for that (the interval straddles the goal), `instructions` counts
what an invocation executes under valgrind's callgrind: the same count whatever else runs, so one
run each decides, at about 40x the time (a minute per invocation); it counts work, not waiting on
files or memory, so it is a check of the CPU-bound part, next to the timed ratios.

Each invocation is timed twice over: wall-clock seconds, and CPU seconds (user + system, of the
process and the processes it waited for). On a machine shared with other work the CPU time moves
much less than the wall clock, which also counts the time spent waiting for a core; on an idle
machine the two agree, as a Snakemake dry-run is one busy process.
"""

import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = ("Snakefile", "rules", "config", "envs", "profiles", "report")


def environment(bin_dir):
    """The measured commands' environment: this one, with `bin_dir` first on PATH and Python's
    bytecode cache on (PYTHONDONTWRITEBYTECODE dropped). The package is installed editable, its
    modules compiled by whichever start imports them first; with the cache off they would be
    compiled again at every start (about 30 million instructions of the full dry-run), which no
    start after a user's first one pays. The benchmarks' first, untimed invocations write it."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def timed(command, cwd, env):
    """(wall seconds, CPU seconds) of `command`, which must succeed; and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{' '.join(map(str, command))} in {cwd} failed:\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (wall, cpu), done.stdout


def instructions(command, cwd, env):
    """Instructions executed by `command` (a Python program, run as `python -m ...`), counted by
    valgrind's callgrind."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                          cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(map(str, command))} in {cwd} failed:\n{done.stdout}{done.stderr}")
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def rounds(measurements, count):
    """{name: [(wall, cpu), ...]}: each measurement (a callable returning (wall, cpu)) once per
    round, `count` rounds, the order rotated by one each round."""
    names = list(measurements)
    samples = {name: [] for name in names}
    for index in range(count):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(measurements[name]())
    return samples


def ratios(samples, reference, which):
    """Per-round ratios of `samples` over `reference`; `which` 0 for wall, 1 for CPU seconds."""
    return [s[which] / r[which] for s, r in zip(samples, reference)]


def median_interval(values, level=0.95):
    """(low, high): the order statistics X(k), X(n+1-k) that hold the median with probability at
    least `level` (k the largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2); the extremes
    when there are too few values for that."""
    ordered, n = sorted(values), len(values)
    k, tail = 0, 0.0
    while k < n and tail + math.comb(n, k) / 2**n <= (1 - level) / 2:
        tail += math.comb(n, k) / 2**n
        k += 1
    k = max(k, 1)
    return ordered[k - 1], ordered[n - k]


def verdict(values, goal):
    """ok / MISSED when the median's confidence interval lies on one side of the goal."""
    low, high = median_interval(values)
    if high <= goal:
        return "ok"
    if low > goal:
        return "MISSED"
    return "~goal"  # the goal lies within the interval: not decided beyond noise


def fmt_ratio(values):
    low, high = median_interval(values)
    return f"{statistics.median(values):5.2f} [{low:.2f}-{high:.2f}] ({min(values):.2f}-{max(values):.2f})"


def load():
    """The 1-, 5- and 15-minute load averages, as uptime shows them."""
    return "load average " + ", ".join(Path("/proc/loadavg").read_text().split()[:3])


def copy_workflow(target):
    target.mkdir()
    for item in WORKFLOW:
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / item)
    return target


def bare_workflow(workdir, jobs):
    """One rule with jobs - 1 independent jobs, plus `all`: Snakemake's own work on a DAG that size."""
    workdir.mkdir(exist_ok=True)
    (workdir / "Snakefile").write_text(
        f"rule all:\n    input: expand('out/{{i}}.txt', i=range({jobs - 1}))\n\n"
        "rule one:\n    output: 'out/{i}.txt'\n    shell: 'touch {output}'\n"
    )
    return workdir
