"""Shared fixtures (generated models, a model store server) and the fault suite's summary line."""

import os
import signal
import time

import pytest

SMALL_MODELS = ("squeezenet_1.1", "resnet18_v1")


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """A base path with small generated models."""
    from repro.trims.models import generate

    base = tmp_path_factory.mktemp("models")
    for name in SMALL_MODELS:
        generate(name, base / name, seed=1)
    return base


@pytest.fixture
def server(models, tmp_path):
    """A real model store server process on a socket in tmp_path, stopped by pid afterwards."""
    from repro.trims.server import start_daemon

    sock, pid_file = tmp_path / "store.sock", tmp_path / "store.pid"
    pid = start_daemon(sock, models, 1 << 30, "lru", pid_file, tmp_path / "server.log")
    yield sock, pid
    try:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.05)
    except ProcessLookupError:
        pass


# -- fault suite summary ------------------------------------------------------------------
# Every test marked `fault` is one case; a case is handled when it passes.

_FAULTS = {}


def pytest_runtest_logreport(report):
    if "fault" not in report.keywords:
        return
    if report.when == "call" or report.outcome != "passed":
        # a failure or skip in setup or teardown overrides a passed call
        if _FAULTS.get(report.nodeid) in (None, "passed"):
            _FAULTS[report.nodeid] = report.outcome


def pytest_terminal_summary(terminalreporter):
    if not _FAULTS:
        return
    handled = sum(outcome == "passed" for outcome in _FAULTS.values())
    skipped = sum(outcome == "skipped" for outcome in _FAULTS.values())
    line = f"faults: {len(_FAULTS)} cases, {handled} handled"
    terminalreporter.write_line(line + (f" ({skipped} skipped)" if skipped else ""))
