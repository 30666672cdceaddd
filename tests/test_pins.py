"""The conda environment pins the same versions as pyproject.toml, the one place they are set;
settings that need an extra say which one when it is not installed."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

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


# Run in a child interpreter whose imports cannot find the extra's module, as on an install without it.
WITHOUT = """
import sys
from importlib.abc import MetaPathFinder
from repro.config import load_config

class Missing(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1] or name.startswith(sys.argv[1] + "."):
            raise ModuleNotFoundError(name)

sys.meta_path.insert(0, Missing())
load_config(sys.argv[2])
"""


@pytest.mark.parametrize(
    "setting, module, message",
    [
        ({"trace_store": "gs://bucket/traces"}, "google.cloud.storage", "trace_store: needs the 'gcs' extra"),
        ({"trims": {"asset_store": "gs://bucket/models"}}, "google.cloud.storage", "trims.asset_store: needs the 'gcs' extra"),
        ({"backend": "ssh"}, "fabric", "backend: needs the 'ssh' extra"),
    ],
)
def test_a_setting_that_needs_a_missing_extra_names_it(tmp_path, setting, module, message):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for key, value in setting.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    if config["backend"] == "ssh":
        config["ssh"] = yaml.safe_load((REPO / "config" / "examples" / "ssh-cluster.yaml").read_text())["ssh"]
        config["plots"]["trims"] = []
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    code = WITHOUT + "print('loaded')\n"
    assert "loaded" in subprocess.run([sys.executable, "-c", code, "no-such-module", str(path)], capture_output=True,
                                      text=True, check=True).stdout
    failed = subprocess.run([sys.executable, "-c", code, module, str(path)], capture_output=True, text=True)
    assert failed.returncode != 0 and message in failed.stderr
