"""Faults of ownership: process records copied from another working directory, outputs that would
overwrite their inputs, commands ended by SIGTERM or SIGHUP, malformed service states, and a model
store whose invocations all ended without saying so. What a user needs: no foreign process
signalled, nothing deleted or overwritten outside what the command owns, nothing left running, no
temporary file left, one line naming the file or flag.

"Another clone" is a real directory with a real process started for it as the service starts its
own (its command line names its state directory, relative to its working directory, and its
environment carries the owner marker); the tests stop it by its pid."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from support import BIN, REPO, path_env, run_forked, run_repro, snakemake, snapshot

from repro import processes
from repro.cli import main
from repro.invocation import INVOCATION_VARIABLE

pytestmark = pytest.mark.fault

CONFIG = REPO / "config" / "config.yaml"
TFDATA = Path("results/cluster/local/tfdata")
STATE = Path("results/cluster/local/state.json")


# -- another clone's processes ---------------------------------------------------------------


def _owner_environment(directory):
    """The owner marker the package puts in a service process's environment (none before it had one)."""
    marker = getattr(processes, "owner_environment", None)
    return marker(directory) if marker else {}


class Clone:
    """A working directory with a tf.data service state whose processes (sleepers standing for the
    dispatcher and workers, started as Service starts them) run for it."""

    def __init__(self, root):
        self.root = root
        self.tfdata = root / TFDATA
        self.tfdata.mkdir(parents=True)
        self.procs = []

    def spawn(self, role, *arguments):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", *arguments], cwd=self.root,
                                env={**os.environ, **_owner_environment(self.tfdata)}, start_new_session=True)
        self.procs.append(proc)
        return proc, processes.describe(proc.pid, f"tfdata {role}")

    def service(self, workers=0, absolute=False):
        """Write the clone's cluster and service states; (dispatcher process, worker processes)."""
        dispatcher, record = self.spawn("dispatcher", "--work-dir", str(TFDATA / "work_dir"), "--status",
                                        str(TFDATA / "dispatcher.status.json"))
        entries, procs = [], []
        for number in range(workers):
            proc, worker = self.spawn("worker", "--status", str(TFDATA / f"worker-{number}.status.json"))
            procs.append(proc)
            entries.append({**worker, "kind": "remote", "slot": number, "cpus": [0], "threads": 1,
                            "status": str(TFDATA / f"worker-{number}.status.json")})
        (self.tfdata / "state.json").write_text(json.dumps({
            "dispatcher": {**record, "address": "localhost:1", "status": str(TFDATA / "dispatcher.status.json")},
            "workers": entries, "started": workers}))
        directory = str(self.tfdata) if absolute else str(TFDATA)
        (self.root / STATE).write_text(json.dumps({
            "backend": "local", "trace_store": "results/store",
            "engine_service": {"engine": "tfdata", "directory": directory, "address": "localhost:1"}}))
        (self.root / "results" / "store").mkdir()
        return dispatcher, procs

    def copy_results_to(self, other):
        other.mkdir(exist_ok=True)
        shutil.copytree(self.root / "results", other / "results")
        return other

    def stop(self):
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def clone(tmp_path):
    clone = Clone(tmp_path / "A")
    yield clone
    clone.stop()


def _repro(*argv, cwd):
    return subprocess.run([str(BIN / "repro"), *map(str, argv)], capture_output=True, text=True, cwd=cwd, timeout=120)


def _running(*procs):
    return all(proc.poll() is None for proc in procs)


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
def test_cluster_stop_with_another_clones_results_signals_none_of_its_processes(clone, tmp_path, absolute):
    """`cp -r A/results B/; repro cluster stop` in B: A's dispatcher and worker run on, and nothing of
    A is deleted (the state may name A's service directory by its absolute path)."""
    dispatcher, workers = clone.service(workers=1, absolute=absolute)
    b = clone.copy_results_to(tmp_path / "B")
    before = snapshot(clone.root)
    proc = _repro("cluster", "stop", "--state", STATE, cwd=b)
    assert proc.returncode == 0, proc.stderr
    assert _running(dispatcher, *workers), "another clone's process was signalled"
    assert snapshot(clone.root) == before, "another clone's files were changed or deleted"
    assert "Traceback" not in proc.stderr


def test_tfdata_stop_with_a_copied_state_directory_signals_none_of_its_processes(clone, tmp_path):
    dispatcher, workers = clone.service(workers=2)
    b = clone.copy_results_to(tmp_path / "B")
    proc = _repro("pecan", "tfdata", "stop", "--state-dir", TFDATA, cwd=b)
    assert proc.returncode == 0, proc.stderr
    assert _running(dispatcher, *workers), "another clone's process was signalled"
    assert "not started for this state directory" in proc.stderr


def test_tfdata_status_with_a_copied_state_does_not_take_another_clones_dispatcher_for_its_own(clone, tmp_path):
    clone.service()
    b = clone.copy_results_to(tmp_path / "B")
    proc = _repro("pecan", "tfdata", "status", "--state-dir", TFDATA, cwd=b)
    assert proc.returncode == 1
    assert "runs, but was not started for this state directory" in proc.stdout, proc.stdout


@pytest.mark.workflow
def test_snakemake_cluster_stop_with_another_clones_results_signals_none_of_its_processes(clone, tmp_path):
    from support import copy_workflow

    dispatcher, workers = clone.service(workers=1, absolute=True)
    b = clone.copy_results_to(copy_workflow(tmp_path / "B"))
    before = snapshot(clone.root)
    snakemake(b, "cluster_stop", cores=1)
    assert _running(dispatcher, *workers), "another clone's process was signalled"
    assert snapshot(clone.root) == before


def test_a_store_record_naming_another_clones_process_never_signals_it(tmp_path):
    """The model store's record (in this directory's private runtime directory) names, exactly, a
    process of another clone (its command line names that clone's runtime directory): cluster stop
    leaves it running."""
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    theirs = processes.runtime_dir(a)
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--socket",
                                str(theirs / "trims.sock"), "--pid-file", str(theirs / "trims.pid")], cwd=a)
    try:
        record = {"process": processes.describe(foreign.pid, "model store"), "socket": str(theirs / "trims.sock")}
        processes.write_record(processes.runtime_dir(b) / "store.json", record)
        proc = _repro("cluster", "stop", "--state", STATE, cwd=b)
        assert proc.returncode == 0, proc.stderr
        assert foreign.poll() is None, "another clone's model store was signalled"
    finally:
        foreign.kill()
        foreign.wait()


def test_the_remote_worker_helper_stops_only_workers_of_its_directory(tmp_path):
    """`python -m repro.pecan.tfdata.remote stop` on a worker host: a record of a worker started for
    another worker directory is not signalled; one of its own directory is."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    marks = processes.owner_environment(other)  # as the helper's start gives a worker
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--status",
                               str(other / "worker-0.status.json")], cwd=tmp_path, env={**os.environ, **marks})
    try:
        record = json.dumps(processes.describe(worker.pid, "tfdata worker", marks[processes.OWNER_TOKEN]))
        helper = [sys.executable, "-m", "repro.pecan.tfdata.remote", "stop"]
        proc = subprocess.run([*helper, "--dir", str(mine), "--record", record], capture_output=True, text=True)
        assert (proc.returncode, proc.stdout.strip()) == (0, "not running"), proc.stderr
        assert worker.poll() is None
        proc = subprocess.run([*helper, "--dir", str(other), "--record", record], capture_output=True, text=True)
        assert (proc.returncode, proc.stdout.strip()) == (0, "stopped"), proc.stderr
        assert worker.wait(timeout=10) == -signal.SIGTERM
    finally:
        worker.kill()
        worker.wait()


def test_an_empty_service_directory_deletes_no_state_in_the_working_directory(tmp_path):
    """A cluster state whose engine service names the directory '' (or '.'): stop neither reads nor
    deletes ./state.json, a file of the user's."""
    (tmp_path / "state.json").write_text('{"keep": "me"}\n')
    cluster = tmp_path / "results" / "cluster" / "local"
    cluster.mkdir(parents=True)
    (tmp_path / "results" / "store").mkdir()
    for directory in ("", "."):
        (cluster / "state.json").write_text(json.dumps({"backend": "local", "trace_store": "results/store",
                                                        "engine_service": {"engine": "tfdata", "directory": directory,
                                                                           "address": "localhost:1"}}))
        proc = _repro("cluster", "stop", "--state", STATE, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "state.json").read_text() == '{"keep": "me"}\n'


# -- the model store outlives no invocation --------------------------------------------------


@pytest.mark.service
def test_the_model_store_stops_when_its_invocations_end_without_saying_so(tmp_path, monkeypatch):
    """Snakemake runs onerror only when its scheduler returns: a WorkflowError (e.g. `make clean`
    removing .snakemake under it), a SIGKILL or --no-hooks end it without `leave`. The store stops
    by itself once every invocation that used it has ended."""
    from repro.trims import service

    monkeypatch.chdir(tmp_path)
    invocation = subprocess.Popen(["sleep", "300"])  # a live process stands for the Snakemake invocation
    monkeypatch.setenv(INVOCATION_VARIABLE,
                       f"{invocation.pid}:{processes.describe(invocation.pid, 'x')['start_ticks']}")
    settings = {"base_path": str(tmp_path / "models"), "server": {"eviction": "lru", "memory_mb": 20, "device": "cpu"}}
    record = service.start(settings, tmp_path / "trims-store.json")
    try:
        assert service.running(record)
        time.sleep(2)  # longer than the watchdog's checks take to notice an invocation that ended
        assert processes.matches(record["process"])  # while its invocation runs, the store runs
        invocation.kill()  # its end never comes: no leave()
        invocation.wait()
        left = processes.runtime_dir(tmp_path) / service.RECORD
        deadline = time.monotonic() + 20
        while (processes.matches(record["process"]) or left.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes.matches(record["process"]), "the store outlived every invocation that used it"
        assert not left.exists()
        runtime = str(processes.runtime_dir(tmp_path))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _naming(runtime):
            time.sleep(0.2)
        assert not _naming(runtime), "its watchdog still runs"
    finally:
        service.stop(tmp_path)
        invocation.kill()
        invocation.wait()


@pytest.mark.service
def test_a_malformed_cluster_state_still_leaves_no_model_store_running(tmp_path, monkeypatch):
    """`make clean` runs `repro cluster stop` on whatever state is there: one that cannot be used is
    named in one line, and the model store is stopped all the same."""
    from repro.trims import service

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(INVOCATION_VARIABLE, raising=False)
    settings = {"base_path": str(tmp_path / "models"), "server": {"eviction": "lru", "memory_mb": 20, "device": "cpu"}}
    record = service.start(settings, tmp_path / "trims-store.json")
    try:
        (tmp_path / STATE).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / STATE).write_text(json.dumps({"backend": "local", "trace_store": "s", "engine_service": 5}))
        proc = _repro("cluster", "stop", "--state", STATE, cwd=tmp_path)
        assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(f"repro: error: {STATE}: engine_service: "), proc.stderr
        assert not processes.matches(record["process"]), "the model store was left running"
    finally:
        service.stop(tmp_path)


def test_make_clean_stops_the_state_of_every_backend_before_it_deletes_them(tmp_path):
    """`make clean` stops what each backend's state records (the ssh hosts' servers too), not only
    the local backend's, before it deletes the states that name them. `repro` is a stand-in that
    records its command lines: what is tested here is the Makefile's loop."""
    shutil.copy(REPO / "Makefile", tmp_path)
    (tmp_path / "plots").mkdir()
    for backend in ("local", "ssh"):
        (tmp_path / "results" / "cluster" / backend).mkdir(parents=True)
        (tmp_path / "results" / "cluster" / backend / "state.json").write_text("{}")
    stand_in = tmp_path / "bin" / "repro"
    stand_in.parent.mkdir()
    stand_in.write_text('#!/bin/sh\necho "$@" >> "$CALLS"\n')
    stand_in.chmod(0o755)
    subprocess.run(["make", "clean"], cwd=tmp_path, check=True, capture_output=True,
                   env={**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")})
    assert sorted((tmp_path / "calls").read_text().splitlines()) == [
        f"cluster stop --state results/cluster/{backend}/state.json" for backend in ("local", "ssh")] + [
        "trims store stop"]
    assert not (tmp_path / "results" / "cluster").exists()


def _naming(text):
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(text in arg for arg in process.info["cmdline"] or ()):
            found.append(process.pid)
    return found


# -- outputs that are inputs, malformed states: one line, nothing changed ----------------------


def _trace(directory, name="t.json"):
    from repro.traces import write_trace

    directory.mkdir(parents=True, exist_ok=True)
    write_trace(directory / name, [{"name": "step", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}],
                {"otherData": {"model_name": "m", "upr_enabled": False}})
    return directory / name


def _hard_link(ctx):
    os.link(_trace(ctx.dir), ctx.dir / "h.json")
    return ctx.dir / "h.json"


def _symlink(ctx):
    (ctx.dir / "s.json").symlink_to(_trace(ctx.dir))
    return ctx.dir / "s.json"


def _local_state(ctx, **extra):
    (ctx.dir / "store").mkdir(exist_ok=True)
    path = ctx.dir / "state.json"
    path.write_text(json.dumps({"backend": "local", "trace_store": str(ctx.dir / "store"), **extra}))
    return path


def _tfdata_state(ctx, content):
    path = _local_state(ctx, engine_service={"engine": "tfdata", "directory": "tfdata", "address": "localhost:1"})
    (ctx.dir / "tfdata").mkdir()
    target = ctx.dir / "tfdata" / "state.json"
    (target.write_bytes if isinstance(content, bytes) else target.write_text)(content)
    return path


def _calibrations(ctx):
    paths = []
    for pipeline in ("resnet", "retinanet"):
        paths.append(ctx.dir / f"{pipeline}.json")
        paths[-1].write_text(json.dumps({"pipeline": pipeline, "autoorder_saving": 0.1,
                                         "declared": {"cpu_s_per_element": 0.01, "bytes_out_per_element": 10},
                                         "autoorder": {"cpu_s_per_element": 0.009, "bytes_out_per_element": 10}}))
    return paths


def _log(ctx):
    path = ctx.dir / "resnet.log"
    shutil.copy(REPO / "tests" / "fixtures" / "pecan-logs" / "resnet_colloc.log", path)
    return path


def _config_copy(ctx):
    path = ctx.dir / "c.yaml"
    shutil.copy(CONFIG, path)
    return path


def _receipt_named_as_its_trace(ctx):
    """A run's upload receipt kept in the download directory under the name of a trace it lists."""
    from repro.tracestore import open_store, upload_traces

    out = ctx.dir / "out"
    out.mkdir()
    upload_traces(open_store(ctx.dir / "store"), [_trace(ctx.dir)], "traces/x", out / "t.json")
    return ["trace", "download", out / "t.json", "-o", out]


SAME_FILE = r"repro: error: {flag} .*{name}: is one of the inputs"
CASES = [
    ("summarize-output-is-its-input", lambda c: ["trace", "summarize", _trace(c.dir), "-o", c.dir / "t.json"],
     SAME_FILE.format(flag="-o/--output", name="t.json")),
    ("combine-output-is-its-input", lambda c: ["trace", "combine", _trace(c.dir), "-o", c.dir / "t.json"],
     SAME_FILE.format(flag="-o/--output", name="t.json")),
    ("combine-output-a-hard-link-to-its-input", lambda c: ["trace", "combine", c.dir / "t.json", "-o", _hard_link(c)],
     SAME_FILE.format(flag="-o/--output", name="h.json")),
    ("summarize-output-a-symlink-to-its-input", lambda c: ["trace", "summarize", c.dir / "t.json", "-o", _symlink(c)],
     SAME_FILE.format(flag="-o/--output", name="s.json")),
    ("summarize-output-another-spelling-of-its-input",
     lambda c: ["trace", "summarize", _trace(c.dir / "d"), "-o", c.dir / "d" / ".." / "d" / "t.json"],
     SAME_FILE.format(flag="-o/--output", name="t.json")),
    ("summarize-output-a-trace-in-its-input-directory",
     lambda c: ["trace", "summarize", _trace(c.dir / "d").parent, "-o", c.dir / "d" / "t.json"],
     SAME_FILE.format(flag="-o/--output", name="t.json")),
    ("combine-output-a-trace-in-its-input-directory",
     lambda c: ["trace", "combine", _trace(c.dir / "d").parent, _trace(c.dir, "u.json"), "-o", c.dir / "d" / "t.json"],
     SAME_FILE.format(flag="-o/--output", name="t.json")),
    ("download-over-its-receipt", _receipt_named_as_its_trace, SAME_FILE.format(flag="-o/--output-dir", name="t.json")),
    ("costs-output-is-its-log",
     lambda c: ["pecan", "costs", _log(c), "--config", CONFIG, "--experiment", "ResNet50_v2-8", "-o", c.dir / "resnet.log"],
     SAME_FILE.format(flag="-o/--output", name="resnet.log")),
    ("provenance-output-is-its-figure",
     lambda c: ["provenance", _trace(c.dir, "fig.pdf"), "--settings", "{}", "-o", c.dir / "fig.pdf"],
     SAME_FILE.format(flag="-o/--output", name="fig.pdf")),
    ("cluster-status-output-is-its-state",
     lambda c: ["cluster", "status", "--state", _local_state(c), "-o", c.dir / "state.json"],
     SAME_FILE.format(flag="-o/--output", name="state.json")),
    ("cluster-start-state-is-its-config",
     lambda c: ["cluster", "start", "--config", _config_copy(c), "--state", c.dir / "c.yaml"],
     SAME_FILE.format(flag="--state", name="c.yaml")),
    ("estimate-output-is-its-calibration",
     lambda c: ["pecan", "estimate", "--config", CONFIG, "--calibration", *_calibrations(c), "-o", c.dir / "resnet.json"],
     SAME_FILE.format(flag="-o/--output", name="resnet.json")),
    ("state-trace-store-empty-status", lambda c: ["cluster", "status", "--state", _local_state(c, trace_store="")],
     r"repro: error: .*/state.json: trace_store: expected a directory or gs://bucket/prefix, got ''"),
    ("state-engine-service-a-number-status",
     lambda c: ["cluster", "status", "--state", _local_state(c, engine_service=5)],
     r"repro: error: .*/state.json: engine_service: expected an object naming an engine"),
    ("state-engine-service-a-number-stop", lambda c: ["cluster", "stop", "--state", _local_state(c, engine_service=5)],
     r"repro: error: .*/state.json: engine_service: expected an object naming an engine"),
    ("state-engine-unknown-stop",
     lambda c: ["cluster", "stop", "--state", _local_state(c, engine_service={"engine": "nope", "directory": "x"})],
     r"repro: error: .*/state.json: engine_service: expected an object naming an engine"),
    ("state-backend-unknown-stop",
     lambda c: ["cluster", "stop", "--state", _local_state(c, backend="nope")],
     r"repro: error: .*/state.json: backend: unknown backend 'nope'"),
    ("state-ssh-settings-a-number-stop", lambda c: ["cluster", "stop", "--state", _local_state(c, backend="ssh", ssh=5)],
     r"repro: error: .*/state.json: ssh: expected the ssh settings"),
    ("state-path-empty-stop", lambda c: ["cluster", "stop", "--state", ""],
     r"repro: error: --state: expected the cluster state's file name, got ''"),
    ("tfdata-state-a-list-status", lambda c: ["cluster", "status", "--state", _tfdata_state(c, "[1]")],
     r"repro: error: .*/tfdata/state.json: expected a JSON object \(a tf.data service state\), got list"),
    ("tfdata-dispatcher-a-number-stop", lambda c: ["cluster", "stop", "--state", _tfdata_state(c, '{"dispatcher": 5}')],
     r"repro: error: .*/tfdata/state.json: dispatcher: expected a process record"),
    ("tfdata-workers-a-string-stop",
     lambda c: ["cluster", "stop", "--state", _tfdata_state(c, '{"workers": "x"}')],
     r"repro: error: .*/tfdata/state.json: workers: expected a list of process records"),
    ("tfdata-retired-ports-not-ports-stop",
     lambda c: ["cluster", "stop", "--state", _tfdata_state(c, '{"retired_ports": {"x": 1}}')],
     r"repro: error: .*/tfdata/state.json: retired_ports: expected an object of at most 4096 port numbers to times, "
     r"got \{'x': 1\}"),
    ("tfdata-retired-ports-too-many-stop",
     lambda c: ["cluster", "stop", "--state", _tfdata_state(
         c, json.dumps({"retired_ports": {str(port): 1.0 for port in range(5000)}}))],
     r"repro: error: .*/tfdata/state.json: retired_ports: expected an object of at most 4096 port numbers"),
    ("tfdata-retired-ports-time-a-string-stop",
     lambda c: ["cluster", "stop", "--state", _tfdata_state(c, '{"retired_ports": {"40235": "now"}}')],
     r"repro: error: .*/tfdata/state.json: retired_ports: expected an object of at most 4096 port numbers"),
    ("tfdata-dispatcher-pid-a-string-stop",
     lambda c: ["cluster", "stop", "--state", _tfdata_state(
         c, '{"dispatcher": {"pid": "1", "start_ticks": 1, "address": "localhost:1", "status": "s"}}')],
     r"repro: error: .*/tfdata/state.json: dispatcher.pid: expected an integer, got '1'"),
]


@pytest.mark.parametrize("prepare, error", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_with_one_line_and_nothing_changed(prepare, error, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [str(a) for a in prepare(SimpleNamespace(dir=work))]
    before = snapshot(work)
    children = {p.pid for p in psutil.Process().children(recursive=True)}

    code, _, err = run_repro(argv, capsys)

    assert code == 1, f"exit code {code}; stderr: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert re.match(error, lines[0]), lines[0]
    assert snapshot(work) == before, "files were written, changed or deleted"
    assert not {p.pid for p in psutil.Process().children(recursive=True)} - children, "processes left running"


# -- SIGTERM and SIGHUP do what Ctrl-C does ----------------------------------------------------


@pytest.fixture(scope="module")
def big_traces(tmp_path_factory):
    """Eight copies of a trace of about 30 MB: combining three is large enough to fork workers (a trace
    named twice is refused)."""
    path = tmp_path_factory.mktemp("big") / "big-0.json"
    events = ",".join('{"name":"step","ph":"X","ts":%d,"dur":5,"pid":1,"tid":1,"args":{"i":%d}}' % (i * 10, i)
                      for i in range(400_000))
    path.write_text('{"traceEvents":[' + events + '],"otherData":{"model_name":"m","upr_enabled":false}}')
    return [path, *(shutil.copyfile(path, path.with_name(f"big-{i}.json")) for i in range(1, 8))]


def _catches(pid, signum):
    """Whether process `pid` has a handler for `signum` (its SigCgt mask): the command is under way."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M).group(1), 16)
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.parametrize("command, signum, workers", [
    ("combine", signal.SIGTERM, True), ("combine", signal.SIGHUP, True), ("summarize", signal.SIGTERM, False),
], ids=["combine-SIGTERM", "combine-SIGHUP", "summarize-SIGTERM"])
def test_a_terminated_command_cleans_up_as_after_ctrl_c(big_traces, tmp_path, command, signum, workers):
    """`timeout 1 repro trace combine big-0.json big-1.json big-2.json`: exit 128 + signal, its forked
    workers gone, no output and no temporary file left."""
    for attempt in range(3):  # a signal that lands as the command ends finds it done: try again
        out = tmp_path / f"out-{attempt}"
        out.mkdir()
        if not _terminate_during_work(big_traces, out, command, signum, workers):
            return
        assert json.loads((out / "result.json").read_text()), "ended with 0 but its output is not whole"
    pytest.fail(f"in three tries, {command} ended before the signal came")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_as_the_output_temporary_is_made_leaves_none(tmp_path, signum):
    """A stop signal that came inside mkstemp, once the output's temporary file was made but before
    the writer knew its name (the moment `repro trace combine` has forked its workers), left it."""
    from repro import fsutil

    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    out = tmp_path / "out"
    out.mkdir()
    made_then_signalled = fsutil.tempfile.mkstemp

    def signalled_main(argv):
        def mkstemp(*args, **kwargs):
            made = made_then_signalled(*args, **kwargs)
            os.kill(os.getpid(), signum)
            time.sleep(0.5)  # where the signal is not put off, its handler raises here
            return made

        fsutil.tempfile = SimpleNamespace(mkstemp=mkstemp)  # the forked child's module: this test's is untouched
        return main(argv)

    code, _, err = run_forked(["trace", "combine", str(trace), "-o", str(out / "c.json")], tmp_path, 60,
                              main=signalled_main)
    assert code == 128 + signum, err
    assert list(out.iterdir()) == [], "the temporary file was left"


def _command_importing(tmp_path, module_code, patience=None):
    """(exit code, stdout, stderr, seconds) of a command that imports a module made of `module_code`
    (which prints "the import ended" as its last line), prints "imported", then waits; run in a forked
    child, `patience` the seconds an import may put a stop signal off (where given)."""
    (tmp_path / "signalled_while_imported.py").write_text(module_code + "print('the import ended', flush=True)\n")

    def command(args):
        import signalled_while_imported  # noqa: F401

        print("imported", flush=True)
        time.sleep(30)  # where a signal that was put off comes again

    def signalled_main(argv):
        from argparse import Namespace

        from repro import stopsignals
        from repro.commands import run

        sys.path.insert(0, str(tmp_path))
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as the interpreter starts a program
        if patience is not None:
            stopsignals._IMPORT_PATIENCE_S = patience
        return run(Namespace(func=command))

    started = time.monotonic()
    code, out, err = run_forked([], tmp_path, 40, main=signalled_main)
    return code, out, err, time.monotonic() - started


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_during_an_import_ends_the_command_once_the_import_is_over(tmp_path, signum):
    """Commands import what they need as they start (numpy, scipy, TensorFlow). A signal raised inside
    an import left the module half made: numpy's C extension, cut by SIGTERM, crashed the exit with
    SIGSEGV. Now the import finishes, then the command ends with 128 + signal."""
    code, out, err, seconds = _command_importing(
        tmp_path, "import os, signal\n"
                  f"os.kill(os.getpid(), {int(signum)})\n"
                  "made = sum(range(300_000))  # bytecode after the signal: a handler that raises at once raises here\n")
    assert code == 128 + signum, err
    # the signal comes again as the import ends: before or after the command's own line
    assert out in ("the import ended\n", "the import ended\nimported\n"), "the import was cut in two"
    assert seconds < 20, "the signal put off did not come again"


def test_an_import_that_hangs_puts_a_stop_signal_off_for_a_while_only(tmp_path):
    """A signal is not put off for ever: an import that hangs is cut once it has had its patience."""
    code, out, err, seconds = _command_importing(
        tmp_path, "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(25)\n", patience=0.2)
    assert code == 128 + signal.SIGTERM, err
    assert out == "" and seconds < 15, "the hanging import was waited for"


def _terminate_during_work(big_traces, out, command, signum, workers):
    """Whether the command ended of itself before the signal took effect (exit 0, or its output whole
    and the signal's default action as the interpreter ended); otherwise what the test asserts holds."""
    proc = subprocess.Popen([str(BIN / "repro"), "trace", command, *big_traces[:3 if workers else 8], "-o",
                             out / "result.json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=path_env(), start_new_session=True)
    started = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if workers:
                started = psutil.Process(proc.pid).children()
                if started:
                    break
            elif _catches(proc.pid, signum):  # under way: it reads the traces
                time.sleep(0.3)  # past installing its handler, into the reading the signal must interrupt
                break
            time.sleep(0.02)  # (a command that never catches the signal gets it after 60 s, or ends unsignalled)
        assert proc.poll() is None and (started or not workers), "the command ended before it could be signalled"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        if proc.returncode == 0 or (proc.returncode == -signum and (out / "result.json").exists()):
            return True
        assert proc.returncode == 128 + signum, err
        assert "Traceback" not in err
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in started):
            time.sleep(0.05)
        assert not [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "workers orphaned"
        assert list(out.iterdir()) == [], "output or temporary file left"
        return False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in started:
            if p.is_running():
                p.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_terminated_calibration_ends_as_after_ctrl_c(tmp_path, signum):
    """A long command without workers (`repro pecan calibrate`, tens of seconds): exit 128 + signal,
    one line saying so, no calibration and no temporary file written."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([str(BIN / "repro"), "pecan", "calibrate", "--pipeline", "resnet", "-o", out / "resnet.json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=path_env(),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 3  # (a command that never catches the signal gets it after 3 s)
        while time.monotonic() < deadline and proc.poll() is None and not _catches(proc.pid, signum):
            time.sleep(0.02)
        time.sleep(0.5)  # into the measuring, which the signal must interrupt, not only the start
        assert proc.poll() is None, "the calibration ended before it could be signalled"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        if proc.returncode == 0 or (proc.returncode == -signum and (out / "result.json").exists()):
            return True
        assert proc.returncode == 128 + signum, err
        assert err.strip().splitlines()[-1] == f"repro: terminated ({signal.Signals(signum).name})", err
        assert list(out.iterdir()) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_run_leaves_the_staging_directory_of_a_run_still_writing_into_its_directory(tmp_path, monkeypatch, capsys):
    """Two `pecan run --out D` at once: the second removed the first's hidden staging directory as if a
    killed run had left it, and the first failed ('D/.run.x.tmp/repeats: No such file or directory').
    A killed run's is still removed, and a file of the user's that only looks like one is kept."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    me = processes.describe(os.getpid(), "pecan run")
    live = run_dir / f".run.{me['pid']}-{me['start_ticks']}.abc.tmp"  # this process's: a run still writing
    live.mkdir(parents=True)
    (live / "run.log").write_text("being written\n")
    dead = run_dir / ".run.999999999-1.abc.tmp"  # a pid no process has: a killed run's
    dead.mkdir()
    mine = run_dir / ".run.notes.tmp"
    mine.write_text("the user's\n")
    calibrations = []
    for pipeline in ("resnet", "retinanet"):
        calibrations.append(tmp_path / f"{pipeline}.json")
        calibrations[-1].write_text(json.dumps({
            "pipeline": pipeline, "autoorder_saving": 0.1,
            **{order: {"cpu_s_per_element": 0.01, "bytes_out_per_element": 10, "element_cpu_s": [0.01, 0.01]}
               for order in ("declared", "autoorder")}}))
    code, _, err = run_repro(["pecan", "run", "--config", CONFIG, "--experiment", "Getting_started", "--mode", "short",
                              "--calibration", *calibrations, "--out", run_dir], capsys)
    assert code == 0, err
    assert (live / "run.log").read_text() == "being written\n" and mine.read_text() == "the user's\n"
    assert not dead.exists()
