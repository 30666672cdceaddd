"""End-to-end tests of the model store's lifetime across Snakemake invocations on the tiny config:
only TrIMS targets start it, an invocation leaves running what another still uses, and a killed or
interrupted run leaves no store behind and is redone alone."""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time

import psutil
import pytest
from repro import processes
from repro.processes import runtime_dir
from repro.trims import service
from support import BIN, configfiles, ctrl_c_heard, path_env, planned_jobs, snakemake, store_processes

pytestmark = pytest.mark.workflow

SNAKEMAKE = BIN / "snakemake"


def test_the_model_store_takes_its_budget_from_the_config_and_only_trims_targets_start_it(workdir):
    # a figure alone starts no process and leaves nothing running: no record, no state, no server
    snakemake(workdir, "plots/fig8_ResNet50_v2-8.pdf", *configfiles(workdir), cores=1)
    assert processes.read_record(processes.runtime_dir(workdir, create=False) / service.RECORD) is None
    assert not (workdir / "results" / "cluster" / "local" / "trims-store.json").exists()
    assert not store_processes(workdir)
    extra = configfiles(workdir, {"trims": {"server": {"memory_mb": 77}}})
    snakemake(workdir, "results/trims/runs/compare/squeezenet_1.1/report.json", *extra)
    assert "budget 77 MiB" in (workdir / "results" / "cluster" / "local" / "trims-server.log").read_text()
    assert not store_processes(workdir)


def _background(workdir, *args):
    """A Snakemake invocation in the background, in a process group of its own, that hears SIGINT as
    at a terminal (also where the tests run with it ignored)."""
    return subprocess.Popen([str(SNAKEMAKE), "--cores", "1", *args], cwd=workdir, env=path_env(), start_new_session=True,
                            preexec_fn=ctrl_c_heard, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _job(invocation, words, ready=lambda: True, timeout=300):
    """The first process under the Snakemake `invocation` (ours: this test started it) whose command line
    contains `words`, once `ready()` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if invocation.poll() is not None:
            raise AssertionError(f"snakemake ended (rc {invocation.returncode}) before running {words!r}:\n"
                                 f"{invocation.stdout.read()[-3000:]}")
        if ready():
            for child in psutil.Process(invocation.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if words in " ".join(child.cmdline()):
                        return child
        time.sleep(0.1)
    raise AssertionError(f"no {words!r} under snakemake within {timeout} s")


def _hold(job):
    """Suspend (SIGSTOP) a job and every process under it (the shell Snakemake runs and the command it
    starts), the parent first so that it starts nothing unheld; the processes held."""
    held = [job]
    job.suspend()
    while new := [child for child in job.children(recursive=True) if child not in held]:
        for child in new:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.suspend()
            held.append(child)
    return held


def _hold_outside_the_store_lock(invocation, words, workdir):
    """A job of `invocation` held (`_hold`) at a moment it does not hold the model store's lock, which
    another invocation's end would wait for."""
    while True:
        held = _hold(_job(invocation, words))
        with open(runtime_dir(workdir) / "store.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released as the file closes
                return held
            except BlockingIOError:
                pass
        _release(held)
        time.sleep(0.05)


def _release(held):
    for process in held:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.resume()


def _finish(invocation):
    """Wait for a background invocation; its output and exit status."""
    output, _ = invocation.communicate(timeout=600)
    return invocation.returncode, output


@contextlib.contextmanager
def _stopping_on_failure(*invocations):
    """Background invocations that a failing test stops as Ctrl-C would (SIGCONT first: a job may be
    suspended), so that none outlives the test."""
    try:
        yield
    finally:
        for invocation in invocations:
            if invocation.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(invocation.pid, signal.SIGCONT)
                    os.killpg(invocation.pid, signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    invocation.communicate(timeout=60)
                if invocation.poll() is None:
                    os.killpg(invocation.pid, signal.SIGKILL)
                    invocation.communicate()


def _store_record(workdir):
    return processes.read_record(runtime_dir(workdir, create=False) / service.RECORD)


def test_an_invocation_that_ends_leaves_the_model_store_another_still_uses_running(workdir):
    """A's TrIMS run is held while B runs another TrIMS run on the same store and ends: B's end must not
    stop the store A still uses; A's end does."""
    args = configfiles(workdir)
    # the store's state made first: an invocation planning trims_store_start would lock the other out
    snakemake(workdir, "trims_store_start", *args, cores=1)
    a = _background(workdir, "results/trims/runs/compare/squeezenet_1.1/report.json", *args)
    with _stopping_on_failure(a):
        a_job = _hold_outside_the_store_lock(a, "trims experiment compare", workdir)
        record = _store_record(workdir)
        assert service.running(record, workdir)
        snakemake(workdir, "results/trims/runs/compare/resnet18_v1/report.json", *args, cores=1)
        assert (workdir / "results" / "trims" / "runs" / "compare" / "resnet18_v1" / "report.json").exists()
        assert processes.matches(record["process"]), "an invocation that ended stopped the store another still uses"
        _release(a_job)
        rc, output = _finish(a)
        assert rc == 0, output
    assert not processes.matches(record["process"])  # A, its last user, stopped it when it ended
    assert not store_processes(workdir)


@pytest.mark.parametrize("cluster_stop", [True, False], ids=["cluster_stop", "rerun-only"])
def test_after_a_killed_trims_run_the_rerun_works_and_leaves_no_store_running(workdir, cluster_stop):
    """Snakemake killed (SIGKILL) during a TrIMS run: its state and status files stay; its store, which
    has a session of its own, is stopped by its watchdog once its only invocation is gone. With
    `snakemake cluster_stop` first, or without, `--unlock` and the rerun succeed, and no store is left
    running after it."""
    args = configfiles(workdir)
    target = "results/trims/runs/compare/squeezenet_1.1/report.json"
    killed = _background(workdir, target, *args)
    with _stopping_on_failure(killed):
        _job(killed, "trims experiment compare")
        record = _store_record(workdir)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.communicate()
    deadline = time.monotonic() + 30
    while processes.matches(record["process"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes.matches(record["process"]), "the store outlived the invocation that used it"
    assert (workdir / "results" / "cluster" / "local" / "trims-status" / "compare-squeezenet_1.1.json").exists()
    if cluster_stop:
        snakemake(workdir, "cluster_stop", *args, cores=1)
    snakemake(workdir, "--unlock", *args)
    snakemake(workdir, target, *args, cores=1)
    assert json.loads((workdir / target).read_text())
    assert not processes.matches(record["process"])
    assert not store_processes(workdir)


def test_after_ctrl_c_during_trims_runs_only_the_unfinished_ones_are_redone(workdir):
    args = configfiles(workdir)
    reports = {model: workdir / "results" / "trims" / "runs" / "compare" / model / "report.json"
               for model in ("squeezenet_1.1", "resnet18_v1")}
    targets = [str(path.relative_to(workdir)) for path in reports.values()]
    interrupted = _background(workdir, *targets, *args)
    with _stopping_on_failure(interrupted):
        # Ctrl-C once the second run has started (the first one finished and recorded before)
        _job(interrupted, "trims experiment compare", ready=lambda: any(p.exists() for p in reports.values()))
        done = [model for model, path in reports.items() if path.exists()]
        todo = next(model for model in reports if model not in done)
        # held, so that it cannot finish before the Ctrl-C reaches it
        held = _hold_outside_the_store_lock(interrupted, f"trims experiment compare {todo}", workdir)
        assert not reports[todo].exists()
        os.killpg(interrupted.pid, signal.SIGINT)
        _release(held)
        rc, output = _finish(interrupted)
    assert len(done) == 1 and rc != 0, output
    # the held run either ended with the Ctrl-C, leaving no report, or had already written its report
    # in full before the signal was handled (a report is renamed into place whole): a report that
    # exists is complete. The run finished before the Ctrl-C is not redone; the held one is redone
    # when it left no report, and may be when it did (Snakemake, interrupted, may not have recorded
    # its end and then counts it incomplete)
    finished = [model for model, path in reports.items() if path.exists()]
    assert all(json.loads(reports[model].read_text()) for model in finished)
    assert not store_processes(workdir)
    jobs = planned_jobs(workdir, *targets, *args)
    assert f"trims_compare[{done[0]}]" not in jobs, (jobs, output)
    assert todo in finished or f"trims_compare[{todo}]" in jobs, (jobs, output)
    snakemake(workdir, *targets, *args)
    assert all(path.exists() for path in reports.values()) and not store_processes(workdir)
