"""Rule `provenance`: what produced the results (git commit, config, machine, package versions)."""

import subprocess
import sys
from importlib.metadata import version

from repro.fsutil import write_json
from repro.pecan.calibrate import machine_description

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.strip())
except (OSError, subprocess.CalledProcessError):
    commit, dirty = "unknown", None
packages = {name: version(name) for name in ("repro", "snakemake", "numpy", "pillow", "matplotlib", "orjson", "scipy")}
write_json(snakemake.output[0], {"git_commit": commit, "git_dirty": dirty, "machine": machine_description(),  # noqa: F821
                                 "packages": packages, "config": snakemake.config})  # noqa: F821
