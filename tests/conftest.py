"""Shared fixtures (generated models, a model store server, the GCS emulator, one full build of the tiny
workflow), the fault suite's and the tier's summary lines (wall time, and CPU time per test), and the
tests a mutation run leaves out."""

import fcntl
import importlib.util
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from support import (REPO, configfiles, copy_workflow, free_port, server_record, snakemake, start_server, stop_clusters,
                     stop_server)

SMALL_MODELS = ("squeezenet_1.1", "resnet18_v1")


@pytest.fixture(scope="session", autouse=True)
def private_runtime_directory(tmp_path_factory):
    """The session's own $XDG_RUNTIME_DIR (mode 0700, as pytest makes it), for the sockets and process
    records of the stores and services the tests start: the runtime directory of each test's workflow
    directory goes with the session's temporary files, not into the user's /tmp/repro-<uid>."""
    runtime, earlier = tmp_path_factory.mktemp("runtime"), os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    yield runtime
    if earlier is None:
        os.environ.pop("XDG_RUNTIME_DIR")
    else:
        os.environ["XDG_RUNTIME_DIR"] = earlier


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """A base path with small generated models."""
    from repro.trims.models import generate

    base = tmp_path_factory.mktemp("models")
    for name in SMALL_MODELS:
        generate(name, base / name, seed=1)
    return base


@pytest.fixture(scope="module")
def config():
    """The workflow's own config/config.yaml, validated and with the schema's defaults (a module's tests
    share it: copy it before changing it)."""
    from repro.config import load_config

    return load_config(REPO / "config" / "config.yaml")


@pytest.fixture
def workdir(tmp_path):
    """A copy of the workflow in tmp_path/work (not of results); tests pass the tiny config with
    --configfile. Whatever its backend started there is stopped after the test."""
    work = copy_workflow(tmp_path / "work")
    yield work
    stop_clusters(work)


@pytest.fixture
def work(models, tmp_path, monkeypatch):
    """The test's directory (cwd), a tool config naming the generated models, and a base path of
    its own for models a case breaks."""
    directory = tmp_path / "work"
    directory.mkdir()
    monkeypatch.chdir(directory)
    config = directory / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {models}\n  profile_output_directory: {directory / 'profiles'}\n")
    return SimpleNamespace(dir=directory, config=config, models=models)


@pytest.fixture
def server(models, tmp_path):
    """A real model store server process on tmp_path/store.sock (pid file store.pid, log server.log)."""
    pid = start_server(models, tmp_path)
    record = server_record(tmp_path)
    yield tmp_path / "store.sock", pid
    stop_server(pid, record, tmp_path)


@pytest.fixture(scope="module")
def module_server(models, tmp_path_factory):
    """Like `server`, shared by a module's tests that leave it as they found it."""
    directory = tmp_path_factory.mktemp("server")
    pid = start_server(models, directory)
    record = server_record(directory)
    yield directory / "store.sock", pid
    stop_server(pid, record, directory)


@pytest.fixture(scope="session")
def emulator():
    """gcp-storage-emulator in its own process on a loopback port, stopped by pid; yields its URL. One
    per session: each test makes a bucket of its own name."""
    port = free_port()
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    proc = subprocess.Popen([str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the GCS emulator did not start")
    yield f"http://127.0.0.1:{port}"
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def tf():
    """TensorFlow (the 'tfdata' extra), or a skip naming it (a failure where REPRO_REQUIRE_TFDATA=1)."""
    if importlib.util.find_spec("tensorflow") is None:
        hint = "pip install -e '.[tfdata]'"
        if os.environ.get("REPRO_REQUIRE_TFDATA") == "1":
            raise RuntimeError(f"REPRO_REQUIRE_TFDATA=1 but tensorflow is not installed ({hint})")
        pytest.skip(f"tensorflow is not installed ({hint})")
    from repro.pecan.tfdata import tensorflow

    return tensorflow()


@pytest.fixture(scope="module")
def pecan_config():
    """The `pecan` section of config/config.yaml, as the engine's tests build their runs from it."""
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())["pecan"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A directory for the engine's generated input data, written once per module (ops.write_data)."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory):
    """One full build of every target with the tiny config (tests/configs/tiny.yaml, --cores 2), made
    once per session: the longest step of the workflow tests. Tests that only read its results use it
    as it is; tests that run Snakemake on it take a copy (the `built` fixture of test_workflow.py).
    Under pytest-xdist the workers share one build: the first to need it makes it in the session's
    common directory, under a lock the others wait on."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the directory every worker's base directory is in
    work, done = root / "tiny-build", root / "tiny-build.done"
    with open(root / "tiny-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        made = not done.exists()
        if made:
            shutil.rmtree(work, ignore_errors=True)  # a build that failed part-way
            snakemake(copy_workflow(work), *configfiles(work))
            done.touch()
    yield work
    if made:
        stop_clusters(work)


# -- fault suite summary ------------------------------------------------------------------
# Every test marked `fault` is one case; a case is handled when it passes.

_FAULTS = {}


# -- CPU time per test -----------------------------------------------------------------------
# On a 2-core machine the suite is bound by CPU, not by waiting: what a test costs is its CPU time and
# that of the processes it waited for (Snakemake, the commands, TensorFlow's), counted from its setup
# to its teardown (a shared fixture counts in the first test that needs it). Daemons reaped by others
# (sshd's and SLURM's jobs, a service started detached) are not in it. Each test's figure travels to
# the controller (and into --junitxml) as the property cpu_s.

_CPU_START = pytest.StashKey[float]()
_CPU = {}


def _cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        outcome.get_result().user_properties.append(("cpu_s", round(_cpu_seconds() - item.stash[_CPU_START], 2)))


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _CPU.update({report.nodeid: value for name, value in report.user_properties if name == "cpu_s"})
    if "fault" not in report.keywords:
        return
    if report.when == "call" or report.outcome != "passed":
        # a failure or skip in setup or teardown overrides a passed call
        if _FAULTS.get(report.nodeid) in (None, "passed"):
            _FAULTS[report.nodeid] = report.outcome


def pytest_configure(config):
    # registered here rather than among pyproject.toml's markers: a change there makes `make` reinstall
    config.addinivalue_line("markers", "service: starts real services or whole programs and waits on them (the tf.data "
                            "service, the original tools), or runs TensorFlow: seconds each; make test-fast leaves them out")
    config.addinivalue_line("markers", "large: builds an input of tens or hundreds of megabytes (or a run of 100,000 "
                            "requests) to show that a memory or size bound holds: seconds each; make test-fast leaves them out")


_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session):
    session.config.stash[_STARTED] = time.monotonic()


def pytest_terminal_summary(terminalreporter, config):
    # the tier's wall time, collection included (REPRO_TEST_TIER names it: the Makefile's targets set it)
    tier = os.environ.get("REPRO_TEST_TIER", "pytest")
    started = config.stash.get(_STARTED, None)
    if started is not None:
        terminalreporter.write_line(f"tier {tier}: {time.monotonic() - started:.1f} s wall")
    if _CPU:
        most = sorted(_CPU.items(), key=lambda item: -item[1])[:5]
        terminalreporter.write_line(f"CPU: {sum(_CPU.values()):.0f} s in the tests and the processes they waited for; "
                                    "most: " + ", ".join(f"{nodeid} {cpu:.0f} s" for nodeid, cpu in most))
    if not _FAULTS:
        return
    handled = sum(outcome == "passed" for outcome in _FAULTS.values())
    skipped = sum(outcome == "skipped" for outcome in _FAULTS.values())
    line = f"faults: {len(_FAULTS)} cases, {handled} handled"
    terminalreporter.write_line(line + (f" ({skipped} skipped)" if skipped else ""))


# -- mutation testing (`make mutation`) ---------------------------------------------------
# mutmut runs the tests with MUTANT_UNDER_TEST set, in the process that imports the mutated
# package. A model store server is a process of its own that imports the package unchanged, so a
# test that needs one cannot tell a mutant from the original: the mutation run leaves them out.
SERVER_FIXTURES = {"server", "module_server"}


# Tests that use the tf.data service (the `tf` fixture) or a model store server start those
# programs and wait on them: they are `service` tests, as are those marked so in their modules.
SERVICE_FIXTURES = {"tf", "hostile_store", *SERVER_FIXTURES}


# -- the order modules start in ------------------------------------------------------------
# pytest-xdist (`--dist loadfile --no-loadscope-reorder`, the Makefile's) gives each free worker the
# next module in the order collected. First the modules of a minute or more in `make test` (its
# --durations, summed per module), longest first, most of it spent waiting on the SLURM, sshd and
# tf.data services and workflows they start; then the others whose tests run programs; then the
# unit tests, whose many short tests keep every CPU busy to the end. (xdist's own order, by count of
# tests, started the few long tests last, to run alone while the other workers had nothing left.)
LONGEST_MODULES = ("test_slurm.py", "test_tfdata_service.py", "test_ssh.py", "test_workflow.py",
                   "test_tfdata_workflow.py", "test_tfdata.py", "test_readme_figures.py", "test_tfdata_runs.py",
                   "test_workflow_store.py")
PROGRAM_MARKS = {"workflow", "service", "registry", "large"}


def start_order(items):
    """`items` module by module: LONGEST_MODULES in that order, then the modules with tests that
    run programs (PROGRAM_MARKS), most such tests first, then the others, most tests first."""
    modules = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)

    def rank(module):
        name, tests = module.rpartition("/")[2], modules[module]
        if name in LONGEST_MODULES:
            return 0, LONGEST_MODULES.index(name)
        programs = sum(1 for test in tests if PROGRAM_MARKS & {mark.name for mark in test.iter_markers()})
        return (1, -programs) if programs else (2, -len(tests))

    return [item for module in sorted(modules, key=rank) for item in modules[module]]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.service)
    items[:] = start_order(items)
    if "MUTANT_UNDER_TEST" not in os.environ:
        return
    left_out = [item for item in items if SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]
