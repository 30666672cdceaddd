"""The tf.data engine's service as real processes: a dispatcher and WorkerServer processes started,
checked and stopped, and what a run does when they fail under it (a killed worker, a dead dispatcher,
a run killed midway, bad run settings).

Needs the 'tfdata' extra (TensorFlow); without it these tests are skipped, unless
REPRO_REQUIRE_TFDATA=1 (as in CI), where that is a failure.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.errors import ReproError
from repro.processes import alive, matches, read_record

from support import engine_spec

REPO = Path(__file__).resolve().parents[1]
REPRO = Path(sys.executable).parent / "repro"


def _status(state_dir):
    return subprocess.run([str(REPRO), "pecan", "tfdata", "status", "--state-dir", str(state_dir)],
                          capture_output=True, text=True, timeout=180)


def test_service_starts_answers_a_probe_job_and_stops_every_process(tf, tmp_path):
    from repro.pecan.tfdata.service import Service

    state = tmp_path / "service"
    try:
        started = subprocess.run([str(REPRO), "pecan", "tfdata", "start", "--state-dir", str(state), "--workers", "1"],
                                 capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        service = Service(state)
        records = [service.state["dispatcher"], *service.state["workers"]]
        assert all(matches(r) for r in records) and len(records) == 2
        assert (state / "work_dir").is_dir()  # the fault-tolerant journal
        result = _status(state)
        assert result.returncode == 0, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith("[ OK ] dispatcher running")
        assert "[ OK ] dispatcher answers at localhost:" in result.stdout
        assert "[ OK ] 1 worker(s) registered, 1 expected" in result.stdout
        assert "[ OK ] probe job returned elements [0, 1, 2, 3, 4, 5, 6, 7]" in result.stdout
        # started again as it was: the one worker runs on, none is added (a second served jobs beside it)
        again = subprocess.run([str(REPRO), "pecan", "tfdata", "start", "--state-dir", str(state), "--workers", "1"],
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "[ OK ] 1 worker(s) registered, 1 expected" in again.stdout, again.stdout
        assert [w["pid"] for w in Service(state).state["workers"]] == [records[1]["pid"]]
    finally:
        stopped = subprocess.run([str(REPRO), "pecan", "tfdata", "stop", "--state-dir", str(state)],
                                 capture_output=True, text=True, timeout=120)
    assert "stopped 2 process(es)" in stopped.stdout
    assert not any(alive(r["pid"]) and matches(r) for r in records)
    down = _status(state)
    assert down.returncode == 1 and "[FAILED]" in down.stdout


def test_the_status_of_a_service_between_runs_runs_no_probe_that_cannot_be_served(tf, tmp_path):
    """A service without workers (the workflow's, between runs): `tfdata status` waited 60 s on a
    probe job no worker could serve, then failed. It says why the probe was not run, and passes."""
    state = tmp_path / "service"
    try:
        started = subprocess.run([str(REPRO), "pecan", "tfdata", "start", "--state-dir", str(state)],
                                 capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        result = _status(state)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-2:] == [
            "[ OK ] 0 worker(s) registered, 0 expected",
            "[ OK ] probe job not run: no worker is registered to serve it (--probe-workers starts one to run it)"]
    finally:
        subprocess.run([str(REPRO), "pecan", "tfdata", "stop", "--state-dir", str(state)], capture_output=True,
                       timeout=120)


@pytest.mark.fault
def test_a_dispatcher_that_died_restarts_from_its_journal_and_its_worker_comes_back(tf, tmp_path):
    from repro.pecan.tfdata.service import Service

    service = Service.start(tmp_path / "service")
    try:
        worker = service.add_worker("remote", 1)
        address = service.address
        os.kill(service.state["dispatcher"]["pid"], signal.SIGKILL)
        service._children[service.state["dispatcher"]["pid"]].wait()
        assert not Service(tmp_path / "service").checks(probe=False)[0][0]
        service = Service.start(tmp_path / "service")
        assert service.address == address and service.state["workers"][0]["pid"] == worker["pid"]
        lines = service.checks()
        assert all(ok for ok, _ in lines), lines
    finally:
        service.stop()


@pytest.mark.fault
def test_a_killed_worker_fails_the_registered_check(tf, tmp_path):
    from repro.pecan.tfdata.service import Service, workflow_checks

    service = Service.start(tmp_path / "service")
    try:
        # the workflow's check: a probe worker here is expected, registers and serves the probe job
        lines = workflow_checks(tmp_path / "service")
        assert all(ok for ok, _ in lines), lines
        assert lines[2][1] == "1 worker(s) registered, 1 expected, a probe worker on this host"
        assert service.state["workers"] == [] and Service(tmp_path / "service").state["workers"] == []
        workers = [service.add_worker("remote", 1) for _ in range(2)]
        assert "[ OK ] 2 worker(s) registered, 2 expected" in _status(tmp_path / "service").stdout
        os.kill(workers[0]["pid"], signal.SIGKILL)
        service._children[workers[0]["pid"]].wait()
        result = _status(tmp_path / "service")
        assert result.returncode == 1
        assert (f"[FAILED] 1 worker(s) registered, 2 expected: worker pid {workers[0]['pid']} (this host) is not "
                "running") in result.stdout
        assert "probe job" not in result.stdout  # no job for the dead worker to hold until its timeout
        # the dead worker stays registered until its timeout: its port is kept from the next worker
        dead_port = int(read_record(workers[0]["status"])["address"].rsplit(":", 1)[1])
        service.prune()
        assert service.state["retired_ports"].keys() == {str(dead_port)}
        local = service.add_worker("local", 1)
        argv = Path(f"/proc/{local['pid']}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"--avoid-ports") + 1] == str(dead_port).encode()
        assert read_record(local["status"])["address"] != f"localhost:{dead_port}"
    finally:
        service.stop()


class _Kernel:
    """Sockets whose bind(("", 0)) gets the first of `ports` no open socket holds, as a kernel would
    offer a port again once it is free."""

    def __init__(self, ports):
        self.ports, self.held, self.binds = ports, set(), 0

    def socket(self):
        kernel = self

        class Socket:
            port = None

            def bind(self, address):
                kernel.binds += 1
                assert kernel.binds < 10, "offered the same ports again and again"
                self.port = next(p for p in kernel.ports if p not in kernel.held)
                kernel.held.add(self.port)

            def getsockname(self):
                return ("0.0.0.0", self.port)

            def close(self):
                kernel.held.discard(self.port)

        return Socket()


def test_a_new_worker_takes_no_port_of_a_worker_the_dispatcher_may_still_list(monkeypatch):
    from repro.pecan.tfdata import server

    kernel = _Kernel([40235, 40236, 40237])
    monkeypatch.setattr(server.socket, "socket", kernel.socket)
    assert server.free_port({40235, 40236}) == 40237
    assert kernel.held == set()  # every probe socket closed, for the server to bind the port
    assert server.free_port(set()) == 40235


def test_a_workflow_probes_its_dispatcher_once_per_invocation(tf, tmp_path, monkeypatch):
    """The workflow's check before each run: the probe worker and probe job run once per Snakemake
    invocation and dispatcher; later checks in that invocation say when it passed. Another invocation,
    a command outside one, or a dispatcher started again, probes again."""
    from repro.invocation import INVOCATION_VARIABLE
    from repro.processes import describe
    from repro.pecan.tfdata.service import Service, workflow_checks

    sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(2)]  # stand for two invocations
    first, second = (f"{p.pid}:{describe(p.pid, 'x')['start_ticks']}" for p in sleepers)
    service = Service.start(tmp_path / "service")
    try:
        monkeypatch.setenv(INVOCATION_VARIABLE, first)
        probed = workflow_checks(tmp_path / "service")
        assert all(ok for ok, _ in probed) and len(probed) == 4, probed
        assert probed[2][1] == "1 worker(s) registered, 1 expected, a probe worker on this host"
        again = workflow_checks(tmp_path / "service")
        assert again[:2] == probed[:2] and len(again) == 3 and again[2][0]
        assert again[2][1].startswith(probed[3][1] + " (a probe worker on this host, at ")
        assert again[2][1].endswith(": this dispatcher, probed once in this Snakemake invocation)")
        monkeypatch.setenv(INVOCATION_VARIABLE, second)
        assert len(workflow_checks(tmp_path / "service")) == 4  # another invocation probes
        monkeypatch.delenv(INVOCATION_VARIABLE)
        assert len(workflow_checks(tmp_path / "service")) == 4  # outside one, every check probes
        monkeypatch.setenv(INVOCATION_VARIABLE, second)
        service.stop()
        service = Service.start(tmp_path / "service")  # a new dispatcher: probed again
        assert len(workflow_checks(tmp_path / "service")) == 4
    finally:
        service.stop()
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


@pytest.mark.fault
def test_a_dispatcher_port_in_use_is_a_clear_error(tf, tmp_path):
    from repro.pecan.tfdata.service import Service

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ReproError, match=f"--port {port}: port in use"):
            Service.start(tmp_path / "service", port=port)
    assert not (tmp_path / "service" / "state.json").exists()


@pytest.mark.fault
def test_a_run_against_a_stopped_dispatcher_does_not_start(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import run

    with pytest.raises(ReproError, match=r"\[FAILED\] no tf.data service recorded in .*state.json; no run started"):
        run(engine_spec(pecan_config, "cachew"), tmp_path / "run", data, service_dir=tmp_path / "no-service")
    assert not (tmp_path / "run" / "run.log").exists()


@pytest.mark.fault
@pytest.mark.parametrize("flag, value, message", [
    ("--batch-size", "0", "--batch-size: batch_size: 0 is less than the minimum of 1"),
    ("--max-windows", "0", "--max-windows: max_windows: 0 is less than the minimum of 1"),
    ("--probe-seconds", "0", "--probe-seconds: probe_seconds: 0.0 is less than or equal to the minimum of 0"),
    ("--probe-seconds", "nan", "--probe-seconds: pecan.tfdata.probe_seconds: nan is not a finite number"),
    ("--time-scale", "-1", "--time-scale -1.0: expected a positive number"),
    ("--batch-timeout", "inf", "--batch-timeout inf: expected a positive, finite number of seconds"),
    ("--mode", "no-such-mode", "unknown mode 'no-such-mode'"),
])
def test_bad_run_settings_are_one_line_errors_and_write_nothing(tf, tmp_path, flag, value, message):
    arguments = {"--experiment": "ResNet50_v2-8", "--mode": "collocated", "--out": str(tmp_path / "run"), flag: value}
    result = subprocess.run([str(REPRO), "pecan", "tfdata", "run", *[x for kv in arguments.items() for x in kv]],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1 and f"repro: error: {message}" in result.stderr
    assert not (tmp_path / "run").exists()


def _wait_for_a_serving_worker(service_dir, within_s=120):
    """Until a worker of the service recorded in `service_dir` serves a job, or `within_s` passed."""
    from repro.pecan.tfdata.service import Service

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and not Service(service_dir).serving():
        time.sleep(0.2)


@pytest.mark.fault
def test_a_run_killed_midway_leaves_no_process_and_no_log(tf, tmp_path):
    """SIGKILL gives the run no chance to clean up: its service's processes end with it (the
    kernel's parent-death signal), and nothing half-written is left under the final names."""
    import time

    from repro.pecan.tfdata.service import Service

    out = tmp_path / "run"
    proc = subprocess.Popen([str(REPRO), "pecan", "tfdata", "run", "--experiment", "ResNet50_v2-8", "--mode", "cachew",
                             "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_a_serving_worker(out / "service")
        records = [Service(out / "service").state["dispatcher"], *Service(out / "service").state["workers"]]
        assert len(records) >= 2, "no worker served within 120 s"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(matches(r) for r in records):
        time.sleep(0.2)
    assert not any(matches(r) for r in records)
    assert not (out / "run.log").exists() and not (out / "metrics.json").exists()


def test_batches_come_as_asked_and_a_wait_has_a_deadline(tf):
    import threading

    from repro.pecan.tfdata.engine import Batches

    asked = []

    def numbers():
        for n in range(3):
            asked.append(n)
            yield n
        raise ValueError("broken pipeline")

    batches = Batches(numbers, 5, lambda: "unused")
    assert [next(batches), next(batches)] == [0, 1]
    assert asked == [0, 1]  # read one at a time, none ahead
    assert next(batches) == 2
    with pytest.raises(ValueError, match="broken pipeline"):  # raised where the batch was asked for
        next(batches)
    batches.close()

    never = threading.Event()
    stuck = Batches(lambda: iter(never.wait, None), 0.2, lambda: "the service is gone")
    started = time.monotonic()
    with pytest.raises(ReproError, match=r"^no batch within 0.2 s: the service is gone; the run stops$"):
        next(stuck)
    assert time.monotonic() - started < 5
    never.set()


@pytest.mark.fault
@pytest.mark.parametrize("ending", ["batch timeout", "SIGTERM"])
def test_a_run_whose_service_died_ends_and_leaves_nothing(tf, tmp_path, ending):
    """TensorFlow's client waits for ever, deaf to signals, once the service is gone: the run fails
    after its batch timeout, naming the cause, or ends at once on SIGTERM, with no output and no
    process left."""
    from repro.pecan.tfdata.service import Service

    out = tmp_path / "run"
    # the first batch waits for a worker to import TensorFlow: on a busy machine, longer than 15 s
    timeout = 45 if ending == "batch timeout" else 600
    # a run that would go on for its 80 windows (about 2 minutes): the service dies during it
    with open(tmp_path / "stderr", "w") as log:  # a file, not a pipe: TensorFlow writes a lot
        proc = subprocess.Popen([str(REPRO), "pecan", "tfdata", "run", "--experiment", "ResNet50_v2-8", "--mode",
                                 "cachew", "--out", str(out), "--settle-windows", "80", "--batch-timeout", str(timeout)],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait_for_a_serving_worker(out / "service")
        service = Service(out / "service")
        assert service.serving(), "no worker served within 120 s"
        records = [service.state["dispatcher"], *service.state["workers"]]
        for record in records:  # the whole service dies under the run
            if matches(record):
                os.kill(record["pid"], signal.SIGKILL)
        if ending == "SIGTERM":
            time.sleep(3)  # the client waits in TensorFlow by now
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30 if ending == "SIGTERM" else timeout + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = (tmp_path / "stderr").read_text()
    if ending == "SIGTERM":
        assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    else:
        assert proc.returncode == 1, stderr[-2000:]
        assert (f"repro: error: no batch within 45 s: the tf.data dispatcher (pid {records[0]['pid']}) is not "
                "running; the run stops") in stderr
    assert not (out / "run.log").exists() and not (out / "metrics.json").exists()
    assert not (out / "service").exists()  # the run stopped its service on the way out, and removed its logs

