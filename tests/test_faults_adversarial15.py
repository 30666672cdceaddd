"""Fault cases found by the fifth round of adversarial passes over the whole surface."""

import json
import subprocess

import psutil
import pytest

from support import BIN

pytestmark = pytest.mark.fault


def _processes_naming(directory):
    """The running processes whose command line names `directory`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(directory) in " ".join(proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_two_tfdata_starts_at_once_start_the_workers_once(tf, tmp_path):
    """Two `tfdata start --workers 2` at once in one state directory each counted 0 workers and started
    2: four ran, the state recorded two, and `tfdata stop` left the other two running, unrecorded."""
    state = tmp_path / "s"
    starts = [subprocess.Popen([str(BIN / "repro"), "pecan", "tfdata", "start", "--state-dir", str(state), "--workers",
                                "2"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        outcomes = [proc.communicate(timeout=300) for proc in starts]
        assert [proc.returncode for proc in starts] == [0, 0], outcomes
        recorded = json.loads((state / "state.json").read_text())["workers"]
        workers = [proc for proc in _processes_naming(state) if "worker" in proc.info["cmdline"]]
        assert len(recorded) == 2 and sorted(w["pid"] for w in recorded) == sorted(p.pid for p in workers)
    finally:
        stop = subprocess.run([str(BIN / "repro"), "pecan", "tfdata", "stop", "--state-dir", str(state)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        # what no record names is ended here: each names this test's own directory
        left = psutil.wait_procs(_processes_naming(state), timeout=30)[1]
        for proc in left:
            proc.terminate()
        psutil.wait_procs(left, timeout=30)
    assert stop.returncode == 0, stop.stderr
    assert left == []  # nothing of the service was left
