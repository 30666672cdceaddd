"""The conda environment pins the same versions as pyproject.toml, the one place they are set."""

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_envs_mirror_pyproject_pins():
    pins = {}
    for requirement in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", requirement).groups()
        pins[name.lower()] = version
    for env_file in (REPO / "envs").glob("*.yaml"):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
        listed = {}
        for line in pip:
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
            if match:
                listed[match.group(1).lower()] = match.group(2)
        assert listed == pins, f"{env_file.name} disagrees with pyproject.toml"
