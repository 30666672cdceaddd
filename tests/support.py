"""Helpers the end-to-end tests share: ports, workflow copies, stopping clusters, optional services."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKFLOW_FILES = ("Snakefile", "rules", "workflow", "config", "envs", "profiles")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_workflow(target):
    """A copy of the workflow (not of results) in `target`."""
    target.mkdir(exist_ok=True)
    for item in WORKFLOW_FILES:
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / item)
    return target


def path_env(**extra):
    """The environment with this interpreter's bin/ first on PATH (the rules call `repro`)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **extra}


def stop_clusters(*workdirs):
    """Stop every cluster a workflow copy started (its dispatcher, model store, remote commands)."""
    for workdir in workdirs:
        for state in (Path(workdir) / "results" / "cluster").glob("*/state.json"):
            subprocess.run([str(BIN / "repro"), "cluster", "stop", "--state", str(state)], capture_output=True,
                           timeout=60)


def skip_unless_installed(paths, required_by, hint):
    """Skip the calling module when a system service is missing, unless `required_by` is set to 1 (CI)."""
    missing = [p for p in paths if not Path(p).exists()]
    why = f"missing {missing}" if missing else ("not root" if os.geteuid() != 0 else None)
    if why is None:
        return
    if os.environ.get(required_by) == "1":
        raise RuntimeError(f"{required_by}=1 but {why} ({hint})")
    pytest.skip(f"{why} ({hint})", allow_module_level=True)
