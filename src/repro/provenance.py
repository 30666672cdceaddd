"""Provenance records: what produced a result, so that a reader can check and redo it."""

import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import check_regular, check_text_name, first_named_twice, sha256_file

PACKAGES = ("repro", "snakemake", "numpy", "pillow", "matplotlib", "orjson", "scipy", "onnxruntime")


def git_state(directory="."):
    """(commit, dirty) of the git work tree at `directory`, or ("unknown", None) outside one."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=directory, capture_output=True,
                                    text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", None
    return commit, dirty


def package_versions():
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def describe_figure(inputs, settings):
    """The record for a figure drawn from `inputs` (paths) under `settings` (the config it depends on)."""
    from repro.machine import machine_description

    for path in inputs:  # a FIFO or a device would never end its checksum
        check_regular(path, path, "a file a figure was drawn from")
        check_text_name(path, "the record names it")
    if (twice := first_named_twice(inputs)) is not None:
        raise ReproError(f"{twice}: named twice among the inputs; expected each file once")
    commit, dirty = git_state()
    sizes = [Path(path).stat().st_size for path in inputs]
    return {
        "inputs": [{"path": str(path), "sha256": sha256_file(path, size), "bytes": size}
                   for path, size in zip(inputs, sizes)],
        "settings": settings,
        "git_commit": commit,
        "git_dirty": dirty,
        "machine": machine_description(),
        "packages": package_versions(),
    }
