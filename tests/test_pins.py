"""The conda environment pins the same versions as pyproject.toml, the one place they are set; the
extras install together; settings that need an extra say which one when it is not installed."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from support import hide_modules

REPO = Path(__file__).resolve().parents[1]
PIN = r"([A-Za-z0-9_.-]+)==(\S+)"


def pins(requirements):
    return {name.lower(): version for name, version in (re.fullmatch(PIN, r).groups() for r in requirements)}


def test_envs_mirror_pyproject_pins():
    """Every dependency, and any extra's package a job needs, at the version pyproject.toml pins."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = pins(project["dependencies"])
    known = {**required}
    for requirements in project["optional-dependencies"].values():
        known.update(pins(requirements))
    for env_file in (REPO / "envs").glob("*.yaml"):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
        listed = pins(line for line in pip if re.fullmatch(PIN, line))
        assert required.items() <= listed.items(), f"{env_file.name} disagrees with pyproject.toml's dependencies"
        assert listed.items() <= known.items(), f"{env_file.name} pins what pyproject.toml does not, or otherwise"


def test_extras_that_share_a_package_pin_it_alike():
    """An extra cannot name another, so one that needs another's packages repeats their pins."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    seen = {}
    for extra, requirements in project["optional-dependencies"].items():
        for name, version in pins(requirements).items():
            other, pinned = seen.setdefault(name, (extra, version))
            assert pinned == version, f"pyproject.toml: {name} is {pinned} in '{other}' but {version} in '{extra}'"


EXTRA_NAMES = re.compile(r"\.\[([\w,-]+)\]")  # .[gcs] or .[ssh,gcs], as the documents write an install


def documented_extras():
    """Every combination of extras the README, docs/ and the CI and Makefile installs name."""
    texts = [REPO / "README.md", REPO / "Makefile", REPO / ".ci" / "run", *sorted((REPO / "docs").glob("*.md"))]
    return {tuple(match.group(1).split(",")) for path in texts if path.exists()
            for match in EXTRA_NAMES.finditer(path.read_text())}


def test_documented_extras_exist():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    combinations = documented_extras()
    assert ("googlebatch",) in combinations
    for combination in combinations:
        assert set(combination) <= set(extras), f"documented extras {combination}: pyproject.toml has {sorted(extras)}"


@pytest.mark.registry
def test_every_extra_installs_together(tmp_path):
    """pip resolves the package with all of its extras at once against the registry (a dry run:
    nothing is installed). A set of pins that resolves together resolves in every combination, so
    this covers each combination that documented_extras finds. Where the registry cannot be reached
    the test is skipped, unless REPRO_REQUIRE_REGISTRY=1 (as in CI)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = ",".join(project["optional-dependencies"])
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--report", str(report), "-e", f"{REPO}[{extras}]"], capture_output=True, text=True,
                          timeout=600)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and "ResolutionImpossible" not in output and "conflicting dependencies" not in output:
        if os.environ.get("REPRO_REQUIRE_REGISTRY") != "1":
            pytest.skip(f"the package registry is not reachable: {output.strip().splitlines()[-1:]}")
    assert proc.returncode == 0, f"pip cannot install .[{extras}] together:\n{output[-3000:]}"
    resolved = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    wanted = pins(project["dependencies"])
    for requirements in project["optional-dependencies"].values():
        wanted.update(pins(requirements))
    for name, version in wanted.items():
        assert resolved.get(name.replace("_", "-")) == version, f"{name}: pinned {version}, resolved {resolved.get(name)}"


@pytest.mark.parametrize(
    "setting, module, message",
    [
        ({"trace_store": "gs://bucket/traces"}, "google.cloud.storage", "trace_store: needs the 'gcs' extra"),
        ({"trims": {"asset_store": "gs://bucket/models"}}, "google.cloud.storage", "trims.asset_store: needs the 'gcs' extra"),
        ({"backend": "ssh"}, "fabric", "backend: needs the 'ssh' extra"),
    ],
)
def test_a_setting_that_needs_a_missing_extra_names_it(tmp_path, monkeypatch, setting, module, message):
    """Loaded in this process with the extra's module hidden from its imports, as on an install
    without it (and loaded where something else is hidden: the setting itself is valid)."""
    from repro.config import load_config
    from repro.errors import ReproError

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for key, value in setting.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    if config["backend"] == "ssh":
        config["ssh"] = yaml.safe_load((REPO / "config" / "examples" / "ssh-cluster.yaml").read_text())["ssh"]
        config["plots"]["trims"] = []
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with monkeypatch.context() as hidden:
        hide_modules(hidden, "no_such_module")
        load_config(path)
    hide_modules(monkeypatch, module)
    with pytest.raises(ReproError, match=re.escape(message)):
        load_config(path)
