"""Where the rules' shell commands find `repro`: in the environment Snakemake runs from.

Snakemake started as `.venv/bin/snakemake` or `python -m snakemake` without the environment on
PATH would otherwise leave the rules' `repro ...` commands unfound, or run another installation's.
"""

import os
import sys
from pathlib import Path


def own_bin_first(path, executable=sys.executable):
    """`path` (a PATH value) with the folder of `executable` first, when that folder holds `repro`."""
    folder = str(Path(executable).parent)  # not resolved: a virtualenv's python links outside it
    if not (Path(folder) / "repro").exists():
        return path
    return os.pathsep.join([folder, *(entry for entry in path.split(os.pathsep) if entry and entry != folder)])


def put_own_bin_first(environ=os.environ):
    """Make the rules' shell commands, which inherit `environ`, run this environment's `repro`."""
    environ["PATH"] = own_bin_first(environ.get("PATH", ""))
