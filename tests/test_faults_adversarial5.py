"""Fault injection: what the workflow keeps beside its outputs (the checked config under
.snakemake/repro) and the files the commands write beside their main output, when a link, a FIFO
or a device is in their place.

Each ends with nothing outside the command's own files written to, no hang and no unbounded read;
a command that refuses says so in one line naming the file or flag.
"""

import json
import os
import stat

import pytest
import yaml
from support import run_forked
from test_faults_input import CONFIG, MEMORY_LIMIT


pytestmark = pytest.mark.fault


def _config():
    return yaml.safe_load(CONFIG.read_text())


def _kept_path(cache, config):
    from repro.checkedconfig import _key

    return cache / f"config-{_key(json.dumps(config, allow_nan=False))}.json"


def test_the_kept_config_is_not_written_through_a_link(tmp_path):
    """The checked config was written to `.config-<key>.json.<pid>` beside it, opened through
    whatever stood at that name: a symbolic link there had the file it named overwritten with the
    config."""
    from repro.checkedconfig import checked_config

    cache, victim = tmp_path / "cache", tmp_path / "mine.txt"
    cache.mkdir()
    victim.write_text("mine\n")
    config = _config()
    kept = _kept_path(cache, config)
    (cache / f".{kept.name}.{os.getpid()}").symlink_to(victim)
    checked_config(config, "config", cache)
    assert victim.read_text() == "mine\n"
    assert stat.S_ISREG(os.lstat(kept).st_mode)
    assert json.loads(kept.read_text())["config"] == config


def _check_with_kept(cache):
    from repro.checkedconfig import checked_config

    def main(argv):
        config = _config()
        checked_config(config, "config", cache)
        return 0 if config["backend"] == "local" else 1

    return main


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_kept_config_that_is_no_regular_file_is_validated_afresh(kind, tmp_path, monkeypatch):
    """A kept config (.snakemake/repro/config-<key>.json) that is a FIFO, or a link to /dev/zero:
    every Snakemake start waited forever for a writer, or read /dev/zero until the memory was full."""
    monkeypatch.chdir(tmp_path)  # where the check runs: the key holds where the config's paths lead
    cache = tmp_path / "cache"
    cache.mkdir()
    kept = _kept_path(cache, _config())
    if kind == "fifo":
        os.mkfifo(kept)
    else:
        kept.symlink_to("/dev/zero")
    code, out, err = run_forked([], tmp_path, 30, main=_check_with_kept(cache), growth=MEMORY_LIMIT)
    assert (code, out, err) == (0, "", "")
    assert stat.S_ISREG(os.lstat(kept).st_mode)  # replaced by the config checked afresh


@pytest.mark.parametrize("linked", [True, False], ids=["linked-directory", "own-directory"])
def test_keeping_a_config_drops_only_its_own_older_files(linked, tmp_path):
    """Keeping a checked config drops the older ones beside it (config-*.json): where .snakemake/repro
    was a symbolic link, the user's config-*.json files wherever it led were deleted."""
    from repro.checkedconfig import checked_config

    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("config-local.json", "config-0123456789abcdef0123456789abcdef.json"):
        (mine / name).write_text("{}\n")
    cache = tmp_path / "cache"
    if linked:
        cache.symlink_to(mine)
    else:
        cache = mine
    config = _config()
    checked_config(config, "config", cache)
    assert config["backend"] == "local"
    left = sorted(p.name for p in mine.iterdir())
    if linked:  # nothing kept there, nothing dropped
        assert left == ["config-0123456789abcdef0123456789abcdef.json", "config-local.json"]
    else:  # an older kept config dropped, a file of another name kept
        assert left == sorted(["config-local.json", _kept_path(mine, _config()).name])
