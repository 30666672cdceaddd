"""Fault cases found by the fourth round of adversarial passes over the whole surface."""

import os

import pytest

from repro.cli import main
from support import REPO

pytestmark = pytest.mark.fault


def _started(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["cluster", "start", "--config", str(REPO / "config" / "config.yaml"), "--state", "state.json"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("kind, make", [("a directory", os.mkdir), ("a FIFO", os.mkfifo)])
def test_cluster_status_names_a_calibration_that_is_not_a_file(tmp_path, monkeypatch, capsys, kind, make):
    """A directory or a FIFO named as a calibration was reported "missing", which it was not."""
    _started(tmp_path, monkeypatch, capsys)
    make(tmp_path / "cal.json")
    assert main(["cluster", "status", "--state", "state.json", "--calibration", "cal.json"]) == 1
    out, err = capsys.readouterr()
    assert f"[FAILED] calibration cal.json present: {kind}, not a file" in out, out
    assert err.startswith("repro: error: cluster status: 1 check(s) FAILED: calibration cal.json present")


@pytest.mark.parametrize("second", ["cal.json", "link.json"])
def test_cluster_status_fails_a_calibration_named_twice(tmp_path, monkeypatch, capsys, second):
    """A calibration named twice (or through a symlink) passed the status check, exit 0, where the run
    after it refuses it."""
    _started(tmp_path, monkeypatch, capsys)
    assert main(["pecan", "calibrate", "--pipeline", "resnet", "--elements", "2", "--repeats", "1", "-o", "cal.json"]) == 0
    os.symlink("cal.json", tmp_path / "link.json")
    capsys.readouterr()
    assert main(["cluster", "status", "--state", "state.json", "--calibration", "cal.json", second]) == 1
    out, err = capsys.readouterr()
    assert (f"[FAILED] calibration {second} named once: --calibration {second}: named twice; expected each pipeline's "
            "calibration once") in out, out
    assert err.startswith(f"repro: error: cluster status: 1 check(s) FAILED: calibration {second} named once")
