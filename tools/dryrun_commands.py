"""The shell commands `snakemake -n -p --forceall` prints for a config, sorted: compare them before and
after a refactoring that must not change what the workflow runs.

    python tools/dryrun_commands.py [--repo DIR] [--configfile FILE ...] > commands.txt

The workflow of --repo (default: this checkout) is copied to a temporary directory (its results are
not), and run there with that checkout's package first on PYTHONPATH.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORKFLOW_FILES = ("Snakefile", "rules", "config", "envs", "report", "profiles")


def commands(repo, configfiles, targets=()):
    repo = Path(repo).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        for item in WORKFLOW_FILES:
            source = repo / item
            if source.exists():
                (shutil.copytree if source.is_dir() else shutil.copy)(source, work / item)
        env = {**os.environ, "PYTHONPATH": str(repo / "src")}
        args = [sys.executable, "-m", "snakemake", *targets, "-n", "-p", "--forceall", "--cores", "1"]
        if configfiles:
            args += ["--configfile", *[str(Path(f).resolve()) for f in configfiles]]
        proc = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return jobs(proc.stdout)


def jobs(text):
    """Each job's block (rule, wildcards, inputs, outputs, resources, shell command), sorted; the
    lines that differ between two dry runs of the same workflow (time, job id, reason) left out."""
    blocks, removed = [], []
    for line in text.splitlines():
        if line.startswith("Would remove temporary output"):  # printed after whichever job came last
            removed.append(line)
            continue
        if line.startswith(("rule ", "localrule ")):
            blocks.append([])
        elif not blocks or not line.strip() or re.match(r"\[.*\d\d:\d\d:\d\d \d{4}\]$|\s+(jobid|reason):", line):
            continue
        blocks[-1].append(line.rstrip())
    return sorted("\n".join(block) for block in blocks) + ["\n".join(sorted(removed))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--configfile", nargs="*", default=[])
    parser.add_argument("--targets", nargs="*", default=[], help="targets (default: the default target, all)")
    parser.add_argument("--shell-only", action="store_true", help="only the shell commands, sorted")
    args = parser.parse_args(argv)
    blocks = commands(args.repo, args.configfile, args.targets)
    if args.shell_only:
        print("\n".join(sorted(line for block in blocks for line in block.splitlines() if line.startswith("Shell command:"))))
    else:
        print("\n\n".join(blocks))


if __name__ == "__main__":
    main()
