"""The benchmark scripts as docs/BENCHMARKS.md runs them: their flags checked before any work, their
errors one line, and their clean-up run when they are stopped (benchmarks/benchcli.py)."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from support import REPO, path_env

BENCHMARKS = REPO / "benchmarks"


def _benchmark(name, *flags, cwd=REPO, timeout=300):
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *flags], cwd=cwd, env=path_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name, flags, message", [
    ("traces.py", ["--files", "0"], "argument --files: expected a whole number of at least 1, got 0"),
    ("dag_scale.py", ["--jobs", "100", "-3"], "argument --jobs: expected a whole number of at least 1, got -3"),
    ("tests_time.py", ["--rounds", "0"], "argument --rounds: expected a whole number of at least 1, got 0"),
    ("tests_time.py", ["--workers", "2,abc"],
     "argument --workers: expected 'default' or whole numbers from 0, comma-separated, got '2,abc'"),
    ("workflow.py", ["--rounds", "x"], "argument --rounds: expected a whole number of at least 1, got 'x'"),
], ids=["traces-files", "dag-jobs", "tests-time-rounds", "tests-time-workers", "workflow-rounds"])
def test_a_bad_flag_is_refused_before_any_work(tmp_path, name, flags, message):
    """--rounds 0 ended at once with nothing printed and status 0; --workers abc reached make, which
    installed the test extras first; --files 0 ended in a traceback."""
    done = _benchmark(name, *flags, cwd=tmp_path, timeout=60)  # refused at once: no work to wait for
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == f"{name}: error: {message}", done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_error_is_one_line(tmp_path):
    done = _benchmark("pecan.py", "--config", str(tmp_path / "missing.yaml"), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.strip() == f"pecan.py: error: {tmp_path / 'missing.yaml'}: cannot read config: No such file or directory"


@pytest.mark.workflow
def test_the_dag_scale_benchmark_runs(tmp_path):
    """It failed at its first dry-run: the figures and the self-check named experiments it replaced."""
    done = _benchmark("dag_scale.py", "--jobs", "60", "--goal-rounds", "1", "--rounds", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "goal 1.5:" in done.stdout, done.stdout


def _running(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.service
def test_a_trims_benchmark_stopped_by_sigterm_stops_its_store(tmp_path):
    """`timeout` (SIGTERM) ended the benchmark and left its model store running, with its directory."""
    proc = subprocess.Popen([sys.executable, str(BENCHMARKS / "trims.py"), "--models", "squeezenet_1.1", "--requests", "200"],
                            cwd=tmp_path, env=path_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = []
    try:
        assert proc.stdout.readline().startswith("store: "), proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.5)  # requests under way
        store += [child for child in psutil.Process(proc.pid).children() if "server" in child.cmdline()]
        assert len(store) == 1, [child.cmdline() for child in psutil.Process(proc.pid).children()]
        socket_dir = store[0].cmdline()[store[0].cmdline().index("--socket") + 1].rsplit("/", 1)[0]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = [server for server in store if _running(server)]
        for server in left:  # psutil's Process: the same process it found, not a pid reused since
            server.terminate()
            server.wait(30)
    assert not left, "the benchmark left its model store running"
    assert proc.returncode == 128 + signal.SIGTERM and err.strip().endswith("trims.py: terminated (SIGTERM)"), err
    assert not psutil.pid_exists(store[0].pid)  # the benchmark's clean-up stopped and reaped it
    assert not Path(socket_dir).exists()  # and removed its temporary directory
