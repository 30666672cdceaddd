"""A tf.data service on this machine: one dispatcher and WorkerServer processes, by process record.

The service lives in a state directory: state.json (the process records, written atomically
after every change), each process's status file and log, and the dispatcher's fault-tolerant
work_dir (its journal: a restarted dispatcher recovers its jobs and workers from it).
Processes are only ever signalled through repro.processes records (pid + start ticks + boot id),
and only those that belong to this state directory (started with its owner environment, whose
random token the record keeps): a state.json copied from another working directory names that
directory's processes, which are neither used nor stopped here.

The servers are addressed over loopback (localhost). Local workers register as
`localhost:<port>` and remote ones as `127.0.0.1:<port>`: the artifact's log parser counts names
with 'localhost' as workers on the accelerator host. A service started with worker hosts
(`ssh_workers`, the ssh backend) runs its remote workers there instead, over ssh
(repro.pecan.tfdata.remote): they register under their host's address, and their records
(pid, start ticks, boot id of that host) name the host.

vCPU share: each worker has `threads` threads and runs on CPUs slot*threads ... slot*threads +
threads-1 (modulo the CPUs this process may use), slot being the lowest number no running worker
holds; see repro.pecan.tfdata.server.
"""

import contextlib
import fcntl
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import open_lock, read_json, write_json
from repro.invocation import owner
from repro.pecan.tfdata.servicelog import open_service_log
from repro.processes import (OWNER_TOKEN, describe, matches, owner_environment, read_record, spawn, stop_child,
                              terminate)

START_TIMEOUT_S = 90  # a process loads TensorFlow's runtime (under a second idle, seconds under load) before it serves
# How long a run's client waits for one batch before the run fails: the longest wait that is not a
# failure is the first batch after workers start (at the start, or when every serving worker is
# replaced), each importing TensorFlow before it serves.
BATCH_TIMEOUT_S = START_TIMEOUT_S + 30
MAX_BATCH_TIMEOUT_S = 86400  # a day: no run waits longer for a batch (1e308 s overflowed the wait's time_t)
STATUS_FRESH_S = 3.0  # a status file older than this belongs to a process that no longer reports
PROBE_TIMEOUT_S = 60
REGISTER_WAIT_S = 10  # a worker that has just started registers with the dispatcher in the background
HOSTS = {"local": "localhost", "remote": "127.0.0.1"}
PROBED, PROBED_LIMIT = "probed.json", 1 << 16  # the probe that passed (workflow_checks), and its file's bound
# A stopped worker stays registered until the dispatcher's worker timeout passes; a new worker on its
# port under the other name (localhost vs 127.0.0.1) would be sent its tasks and refuse them ("does not
# match worker's address"), so a port is not given to a new local worker for this long after its worker ended.
RETIRED_PORT_S = 60
# far more than the workers one service starts in RETIRED_PORT_S, and few enough for a command line
RETIRED_PORTS_MAX = 4096


def port_free(port):
    """Whether a server can listen on `port` (connections of a stopped one in TIME_WAIT do not count,
    as gRPC servers bind with SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _address_port(address):
    """The port of a `host:port` address (0 to 65535), or None."""
    port = re.fullmatch(r".+:(\d{1,5})", address)
    return int(port[1]) if port and int(port[1]) <= 65535 else None


def _fresh(status_path, pid):
    """The status a process reported within STATUS_FRESH_S, or None."""
    status = read_record(status_path)
    if not status or status.get("pid") != pid or time.time() - status.get("at", 0) > STATUS_FRESH_S:
        return None
    return status


def _worker_name(entry):
    return f"pid {entry['pid']}" + (f" on {entry['host']}" if "host" in entry else "")


def _is_report(status, pid):
    """Whether `status` is a worker's report as server.py writes it, of process `pid`."""
    return (isinstance(status, dict) and status.get("pid") == pid and isinstance(status.get("address"), str)
            and type(status.get("tasks")) is int and type(status.get("at")) in (int, float))


def _log_tail(path, lines=5):
    try:
        return " | ".join(Path(path).read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _check_record(path, where, record, keys):
    if not isinstance(record, dict):
        raise ReproError(f"{path}: {where}: expected a process record (an object), got {type(record).__name__}")
    for key, kind in keys.items():
        value = record.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ReproError(f"{path}: {where}.{key}: expected {_KINDS[kind]}, got {value!r:.60}; "
                             "not a state file the service wrote")


_KINDS = {int: "an integer", str: "a string"}
_PROCESS = {"pid": int, "start_ticks": int}


def _check_state(path, state):
    """A ReproError naming the file and the entry when `state` is not what Service writes."""
    if not isinstance(state, dict):
        raise ReproError(f"{path}: expected a JSON object (a tf.data service state), got {type(state).__name__}")
    if "dispatcher" in state:
        _check_record(path, "dispatcher", state["dispatcher"], {**_PROCESS, "address": str, "status": str})
        if _address_port(state["dispatcher"]["address"]) is None:
            raise ReproError(f"{path}: dispatcher.address: expected host:port (a port from 0 to 65535), "
                             f"got {state['dispatcher']['address']!r:.60}")
    workers = state.get("workers", [])
    if not isinstance(workers, list):
        raise ReproError(f"{path}: workers: expected a list of process records, got {type(workers).__name__}")
    for i, worker in enumerate(workers):
        _check_record(path, f"workers[{i}]", worker, {**_PROCESS, "status": str, "kind": str, "slot": int})
        if "host" in worker:
            _check_record(path, f"workers[{i}]", worker, {"host": str})
            if not state.get("ssh_workers"):
                raise ReproError(f"{path}: workers[{i}].host: a worker on host {worker['host']!r:.60}, but no worker "
                                 "hosts (ssh_workers) are recorded; not a state file the service wrote")
    if not isinstance(state.get("started", 0), int):
        raise ReproError(f"{path}: started: expected an integer, got {state['started']!r:.60}")
    if state.get("ssh_workers") is not None:  # as `tfdata start --worker-hosts` checks them, before any is used
        from repro.pecan.tfdata.remote import check_worker_hosts

        check_worker_hosts(f"{path}: ssh_workers", state["ssh_workers"])
    retired = state.get("retired_ports", {})
    if not isinstance(retired, dict) or len(retired) > RETIRED_PORTS_MAX or not all(
            re.fullmatch(r"\d{1,5}", port) and isinstance(at, (int, float)) and not isinstance(at, bool)
            for port, at in retired.items()):
        raise ReproError(f"{path}: retired_ports: expected an object of at most {RETIRED_PORTS_MAX} port numbers to "
                         f"times, got {retired!r:.60}")
    if "dispatcher" not in state:  # every state the service writes records its dispatcher
        raise ReproError(f"{path}: lacks key 'dispatcher'; not a state file the service wrote")


class Service:
    """The dispatcher and workers recorded in `directory`/state.json."""

    def __init__(self, directory, owned=False):
        """owned: the processes it starts end with this process (a run's own service)."""
        self.directory, self.owned = Path(directory), owned
        self.state_path = self.directory / "state.json"
        self._children = {}  # pid -> Popen, to reap the processes this object started
        self._ended = []  # the records of workers found no longer running, as they were dropped
        self._remote = None
        if os.path.lexists(self.state_path):
            self.state = read_json(self.state_path, "a tf.data service state file")
        else:
            self.state = None
        if self.state is not None:
            _check_state(self.state_path, self.state)

    def ours(self, record):
        """Whether the recorded process runs and belongs to this state directory."""
        return matches(record, self.directory)

    @property
    def remote(self):
        """The worker hosts its remote workers run on (repro.pecan.tfdata.remote.SshWorkers), or None."""
        if self._remote is None and self.state and self.state.get("ssh_workers"):
            from repro.pecan.tfdata.remote import SshWorkers

            self._remote = SshWorkers(self.state["ssh_workers"])
        return self._remote

    def close(self):
        """Close the connections to the worker hosts (the processes go on)."""
        if self._remote is not None:
            self._remote.close()

    # -- starting and stopping -------------------------------------------------------------

    @classmethod
    def start(cls, directory, port=0, owned=False, ssh_workers=None, then=None):
        """Start a dispatcher (fault-tolerant, journal in `directory`/work_dir) unless one runs there.

        ssh_workers: the worker hosts its remote workers run on, over ssh (see
        repro.pecan.tfdata.remote.SshWorkers), recorded in its state.
        then(service, started): run once the dispatcher serves, in the same turn (`started`: this
        start started it). A start that tops the workers up counts them there: two starts at once
        would each count the same workers missing and each start them.

        A dispatcher that died is restarted on its recorded port (when free) from its journal: the
        workers still running reconnect to it and its jobs go on. One start at a time: a second one
        in the same directory finds the dispatcher the first started (else both would run, one unrecorded).
        """
        cls(directory)  # a malformed state is named before anything is made there
        Path(directory).mkdir(parents=True, exist_ok=True)
        with open_lock(Path(directory) / "start.lock", str(Path(directory) / "start.lock")) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the process dies
            was_running = cls(directory).dispatcher_running()
            service = cls._start(directory, port, owned, ssh_workers)
            if then is not None:
                then(service, not was_running)
            return service

    @classmethod
    def _start(cls, directory, port, owned, ssh_workers):
        service = cls(directory, owned)
        if service.dispatcher_running():
            if ssh_workers is not None and service.state.get("ssh_workers") != ssh_workers:
                service.state["ssh_workers"] = ssh_workers
                service._save()
            return service
        workers = []
        if service.state and service.state.get("dispatcher"):
            recorded = int(service.address.rsplit(":", 1)[1])
            port = port or (recorded if port_free(recorded) else 0)
            workers = [w for w in service.state.get("workers", []) if "host" in w or service.ours(w)]  # remote: polled later
        if port and not port_free(port):
            raise ReproError(f"--port {port}: port in use; choose another port or 0 (any free port)")
        service.directory.mkdir(parents=True, exist_ok=True)
        status = service.directory / "dispatcher.status.json"

        def keep(record):
            service.state = {**(service.state or {}), "workers": workers,
                             **({"ssh_workers": ssh_workers} if ssh_workers is not None else {}),
                             "dispatcher": {**record, "address": read_record(status)["address"], "status": str(status)}}

        service._spawn("dispatcher", ["--port", str(port), "--work-dir", str(service.directory / "work_dir"),
                                      "--status", str(status)], status, "dispatcher.log", keep)
        return service

    def _spawn(self, role, arguments, status, log_name, keep, wait=True):
        """Start a server process of `role`; `keep(record)` puts its record in the state, which is then
        saved, and what keep returns is returned. Until it is saved, a stop signal (Ctrl-C, SIGTERM,
        SIGHUP) or an error stops the process too: none runs that no state records. With wait=True,
        it first waits until the process serves."""
        log = open_service_log(self.directory, role, self.directory / log_name, status)
        marks = owner_environment(self.directory)
        with log:
            parent = ["--parent", str(os.getpid())] if self.owned else []
            proc = spawn([sys.executable, "-m", "repro.pecan.tfdata.server", role, *arguments, *parent],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **marks})
        self._children[proc.pid] = proc
        try:
            record = {**describe(proc.pid, f"tfdata {role}", marks[OWNER_TOKEN]), "log": str(self.directory / log_name)}
            if wait:
                self._wait_serving(proc, role, status, log_name)
            kept = keep(record)
            self._save()
        except BaseException:
            self._children.pop(proc.pid, None)
            stop_child(proc)
            raise
        return kept

    def _wait_serving(self, proc, role, status, log_name):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ReproError(f"tf.data {role} exited with status {proc.returncode} before serving: "
                                 f"{_log_tail(self.directory / log_name)}")
            if _fresh(status, proc.pid):
                return
            time.sleep(0.1)
        raise ReproError(f"tf.data {role} did not report within {START_TIMEOUT_S} s: {_log_tail(self.directory / log_name)}")

    def _save(self):
        write_json(self.state_path, self.state)

    def dispatcher_running(self):
        return bool(self.state) and self.ours(self.state.get("dispatcher"))

    @property
    def address(self):
        return self.state["dispatcher"]["address"]

    def add_worker(self, kind, threads, wait=True):
        """Start a WorkerServer process of `kind` (local or remote) with `threads` threads; return its entry.

        With wait=False it returns once the process runs; it serves once it has imported TensorFlow
        and registered (serving() tells), and one that fails to start drops out of the records.
        """
        if kind not in HOSTS:
            raise ReproError(f"worker kind {kind!r}; expected one of {list(HOSTS)}")
        if not self.dispatcher_running():
            raise ReproError(f"{self.state_path}: no dispatcher running; start the service first")
        self.prune()
        if kind == "remote" and self.remote:
            return self._add_ssh_worker(threads, wait)
        used = {w["slot"] for w in self.state["workers"] if "host" not in w}
        slot = next(i for i in range(len(used) + 1) if i not in used)
        available = sorted(os.sched_getaffinity(0))
        cpus = [available[(slot * threads + j) % len(available)] for j in range(threads)]
        number = self.state.setdefault("started", 0)
        self.state["started"] = number + 1
        status = self.directory / f"worker-{number}.status.json"

        def keep(record):
            entry = {**record, "kind": kind, "slot": slot, "cpus": cpus, "threads": threads, "status": str(status)}
            self.state["workers"].append(entry)
            return entry

        return self._spawn("worker", ["--dispatcher", self.address, "--host", HOSTS[kind], "--threads", str(threads),
                               "--cpus", ",".join(map(str, cpus)), "--status", str(status),
                               "--avoid-ports", ",".join(map(str, self._retired_ports()))],
                           status, f"worker-{number}.log", keep, wait)

    def _add_ssh_worker(self, threads, wait, host=None):
        """A remote worker on a worker host (`host`, or the one running fewest), started over ssh."""
        ours = [w for w in self.state["workers"] if "host" in w]
        host = host or self.remote.choose(ours)
        used = {w["slot"] for w in ours if w["host"] == host["name"]}
        slot = next(i for i in range(len(used) + 1) if i not in used)
        number = self.state.setdefault("started", 0)
        self.state["started"] = number + 1
        port = int(self.address.rsplit(":", 1)[1])
        record = self.remote.start(host, port, threads, slot, number)
        entry = {**record, "kind": "remote", "slot": slot, "threads": threads}
        self.state["workers"].append(entry)
        self._save()
        if wait:
            try:
                self.remote.wait_started(entry, STATUS_FRESH_S)
            except ReproError:
                self.state["workers"].remove(entry)
                self._save()
                raise
        return entry

    def remove_worker(self, kind):
        """Stop the most recently started running worker of `kind`; return its entry (None if none runs)."""
        self.prune()
        for entry in reversed(self.state["workers"]):
            if entry["kind"] == kind:
                self._stop(entry)
                self.state["workers"].remove(entry)
                self._save()
                return entry
        return None

    def _left_alone(self, record):
        if matches(record):  # the same process, but another directory's: a state copied from there
            print(f"repro: {self.state_path}: pid {record['pid']} ({record.get('role', 'process')}) runs but was not "
                  "started for this state directory; left running", file=sys.stderr)

    def _stop(self, record):
        if "host" in record:
            self.remote.stop(record)
            return
        terminate(record, owner=self.directory)
        proc = self._children.pop(record["pid"], None)
        if proc is not None:
            proc.wait()
        if "kind" in record:  # a worker's record (the dispatcher's has no kind)
            self._retire_port(record)

    def _retire_port(self, record):
        """Keep the port the local worker of `record` reported (see RETIRED_PORT_S)."""
        status = read_record(record["status"]) or {}
        port = _address_port(str(status.get("address", "")))
        if status.get("pid") == record["pid"] and port is not None:
            self.state.setdefault("retired_ports", {})[str(port)] = time.time()

    def _retired_ports(self):
        now = time.time()
        kept = {port: at for port, at in self.state.get("retired_ports", {}).items() if now - at < RETIRED_PORT_S}
        self.state["retired_ports"] = kept
        return sorted(int(port) for port in kept)

    def prune(self):
        """Forget workers that are no longer running (killed or crashed), reaping those this object started."""
        self._forget_ended(self._poll_remote())

    def _forget_ended(self, polled):
        """Drop the workers that no longer run (`polled`: the remote ones' state), reaping those this object started."""
        for proc in self._children.values():
            proc.poll()
        running = []
        for worker in self.state["workers"]:
            if polled[id(worker)][0] if "host" in worker else self.ours(worker):
                running.append(worker)
            else:
                self._ended.append(worker)
                if "host" not in worker:
                    self._retire_port(worker)
        self.state["workers"] = running

    def _poll_remote(self):
        remote = [w for w in self.state["workers"] if "host" in w]
        return self.remote.poll(remote, STATUS_FRESH_S) if remote else {}

    def stop(self):
        """Stop every worker, then the dispatcher; returns how many processes were stopped."""
        if not self.state:
            return 0
        failed, stopped = None, 0
        try:
            stopped = self.stop_workers()
        except ReproError as exc:
            failed = exc
        if self.ours(self.state.get("dispatcher")):
            self._stop(self.state["dispatcher"])
            stopped += 1
        else:
            self._left_alone(self.state.get("dispatcher"))
        self.close()
        if failed:  # the state stays, with the workers left: another stop tries them again
            raise ReproError(f"{failed} (the dispatcher is stopped; run stop again once the host answers)")
        self.state = None
        self.state_path.unlink(missing_ok=True)
        return stopped

    def stop_workers(self):
        """Stop every recorded worker, those on worker hosts over ssh; how many were stopped. A worker
        on a host that does not answer stays recorded, and a ReproError names it after the others stopped."""
        stopped, failed, left = 0, [], []
        for record in self.state.get("workers", []):
            if "host" in record:
                try:
                    stopped += self.remote.stop(record)
                except ReproError as exc:  # stop the others, then say which one is left
                    failed.append(f"worker pid {record['pid']} on {record['host']}: {exc}")
                    left.append(record)
            elif self.ours(record):
                self._stop(record)
                stopped += 1
            else:
                self._left_alone(record)
        self.state["workers"] = left
        self._save()
        if failed:
            raise ReproError(f"{self.state_path}: stopped {stopped} worker(s); not stopped: {'; '.join(failed)}")
        return stopped

    # -- what is running -------------------------------------------------------------------

    def serving(self, idle=False):
        """Addresses of running workers that report a task (that serve the job now); idle=True: of
        every running worker that reports its address (idle or not)."""
        if not self.state:
            return []
        polled = self._poll_remote()  # one ssh command per worker host: whether each runs, and its status
        self._forget_ended(polled)
        names = []
        for entry in self.state["workers"]:
            status = polled[id(entry)][1] if "host" in entry else _fresh(entry["status"], entry["pid"])
            if status and (idle or status["tasks"] > 0):
                names.append(status["address"])
        return names

    def describe_workers(self):
        """A line per worker: those found no longer running since this object was opened, then each
        running one with what its last report says (its tasks, how old), or why there is none; what
        tells why a worker the policy asked for does not serve."""
        if not self.state:
            return []
        polled = self._poll_remote()
        self._forget_ended(polled)
        lines = [f"{_worker_name(entry)}: not running" for entry in self._ended]
        for entry in self.state["workers"]:
            name = _worker_name(entry)
            if "host" in entry:  # a worker host's poll passes on a report of the last STATUS_FRESH_S only
                status, missing = polled[id(entry)][1], f"no report within {STATUS_FRESH_S:g} s"
            else:
                status, missing = read_record(entry["status"]), "no report yet (starting, or not registered with the dispatcher)"
            if status is None or (isinstance(status, dict) and status.get("pid") != entry["pid"]):
                lines.append(f"{name}: {missing}")
            elif not _is_report(status, entry["pid"]):
                lines.append(f"{name}: its report is unreadable")
            else:
                reported = "" if "host" in entry else f", reported {time.time() - status['at']:.1f} s ago"
                lines.append(f"{status['address']} ({name}): {status['tasks']} task(s){reported}")
        return lines

    def dispatcher_status(self):
        return _fresh(self.state["dispatcher"]["status"], self.state["dispatcher"]["pid"]) if self.state else None

    def checks(self, expect_workers=None, probe=True, workers=True):
        """[(ok, text)] in the order the artifact's checks print: process, answer, workers, probe job."""
        if not self.state:
            return [(False, f"no tf.data service recorded in {self.state_path}")]
        record = self.state["dispatcher"]
        if not self.ours(record):
            why = "runs, but was not started for this state directory" if matches(record) else "is not running"
            return [(False, f"dispatcher (pid {record['pid']}) {why}")]
        lines = [(True, f"dispatcher running (pid {record['pid']})")]
        port = int(self.address.rsplit(":", 1)[1])
        status = self.dispatcher_status()
        try:
            socket.create_connection(("localhost", port), timeout=2).close()
            answers = status is not None
        except OSError:
            answers = False
        if not answers:
            return lines + [(False, f"dispatcher does not answer at {self.address}")]
        lines.append((True, f"dispatcher answers at {self.address}"))
        if workers:
            lines.append(self.registered_check(expect_workers))
        if probe and lines[-1][0]:  # as workflow_checks: a job for a worker that is gone waits out PROBE_TIMEOUT_S
            status = self.dispatcher_status()
            if workers and not (status and status["workers"]):  # the service between runs: none to serve a job
                lines.append((True, "probe job not run: no worker is registered to serve it (--probe-workers starts "
                                    "one to run it)"))
            else:
                lines.append(self.probe())
        return lines

    def registered_check(self, expect_workers=None):
        """(ok, text): the workers it expects run and are registered with the dispatcher.

        Expected: `expect_workers`, else every worker recorded (one recorded that no longer runs
        is missing). Registered: the dispatcher's count, at most the recorded workers that run
        (a worker killed a moment ago stays registered until its heartbeat times out).
        """
        recorded = list(self.state["workers"])
        try:
            self.prune()
        except ReproError as exc:  # a worker host that does not answer
            return False, f"workers not checked: {exc}"
        gone = [w for w in recorded if w not in self.state["workers"]]
        running = len(self.state["workers"])
        expected = len(recorded) if expect_workers is None else expect_workers
        status = self.dispatcher_status()
        deadline = time.monotonic() + REGISTER_WAIT_S
        # only the dispatcher's count can still grow: with fewer workers running than expected,
        # waiting cannot change the answer
        while status and status["workers"] < expected <= running and time.monotonic() < deadline:
            time.sleep(0.2)
            status = self.dispatcher_status()
        registered = min(status["workers"] if status else 0, running)
        text = f"{registered} worker(s) registered, {expected} expected"
        if gone:
            text += ": " + "; ".join(f"worker pid {w['pid']} ({w.get('host', 'this host')}) is not running" for w in gone)
        if registered < expected and not gone:
            text += f" (the dispatcher has {status['workers'] if status else 0}, {running} recorded run)"
        return registered >= expected, text

    def probe(self):
        """Run a small job through the service in a separate client process; (ok, text)."""
        code = ("import sys; from repro.pecan.tfdata import tensorflow; tf = tensorflow(); "
                "ds = tf.data.Dataset.range(8).apply(tf.data.experimental.service.distribute("
                "processing_mode='parallel_epochs', service='grpc://' + sys.argv[1])); "
                "print(sorted(set(int(x) for x in ds.take(8).as_numpy_iterator())))")
        try:
            result = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True,
                                    timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"probe job returned no elements within {PROBE_TIMEOUT_S} s (no worker serves it)"
        values = result.stdout.strip().splitlines()[-1:] if result.returncode == 0 else []
        if not values or values[0] == "[]":
            return False, f"probe job failed: {(result.stderr.strip().splitlines() or ['no output'])[-1]}"
        return True, f"probe job returned elements {values[0]}"


@contextlib.contextmanager
def exclusive(directory):
    """Hold the service in `directory` for one user at a time (a run, or a status check's probe
    worker): a worker that joined would serve another run's job and change what it measures."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    with open_lock(Path(directory) / "use.lock", str(Path(directory) / "use.lock")) as lock:  # as start.lock
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the process dies
        yield


def workflow_checks(directory):
    """The status checks of a workflow's service; [(ok, text)]: dispatcher running and answering,
    then the workers it expects registered, then a probe job served by them. The service holds no
    workers between runs, so the workers expected are probe workers the check starts and stops:
    one on every worker host (over ssh) where the service has worker hosts, else one here."""
    recorded = Service(directory)  # a malformed state is named before anything is written there
    if recorded.state is None:  # no service to hold: the lock would make a directory the start never made
        return recorded.checks(probe=False, workers=False)
    with exclusive(directory):
        service = Service(directory, owned=True)
        lines = service.checks(probe=False, workers=False)
        if not all(ok for ok, _ in lines):
            return lines
        earlier = _probed_earlier(service)
        if earlier:
            return lines + [(True, earlier)]
        failures = []
        try:
            if service.remote:
                names = [host["name"] for host in service.remote.hosts]
                where = f"one probe worker on each worker host ({', '.join(names)})"
                for host in service.remote.hosts:
                    try:
                        service._add_ssh_worker(1, True, host)
                    except ReproError as exc:
                        failures.append(str(exc) if host["name"] in str(exc) else f"{host['name']}: {exc}")
            else:
                names, where = ["this host"], "a probe worker on this host"
                try:
                    service.add_worker("remote", 1)
                except ReproError as exc:
                    failures.append(f"probe worker: {exc}")
            ok, text = service.registered_check(len(names))
            lines.append((ok and not failures, f"{text}, {where}" + "".join(f"; {f}" for f in failures)))
            if lines[-1][0]:
                lines.append(service.probe())
                if lines[-1][0]:
                    _record_probe(service, lines[-1][1], where)
            return lines
        finally:
            try:
                while service.remove_worker("remote"):
                    pass
            except ReproError as exc:
                lines.append((False, f"probe worker not stopped: {exc}"))
            service.close()


def _probe_key(service):
    """What a probe that passed stands for: this dispatcher process, its worker hosts, and the
    Snakemake invocation that checked (none outside one: every check probes)."""
    invocation = owner()
    if invocation is None:
        return None
    dispatcher = service.state["dispatcher"]
    return {"dispatcher": {key: dispatcher.get(key) for key in ("pid", "start_ticks")},
            "hosts": [host["name"] for host in service.remote.hosts] if service.remote else [],
            "invocation": {key: invocation[key] for key in ("pid", "start_ticks", "boot_id")}}


def _record_probe(service, text, where):
    key = _probe_key(service)
    if key is not None:
        write_json(service.directory / PROBED, {**key, "text": text, "where": where, "at": time.time()})


def _probed_earlier(service):
    """The text of a probe that passed for this dispatcher and these worker hosts earlier in this
    invocation, or None. A workflow checks the service before each run; the dispatcher that served a
    probe job a moment ago is the same process (pid and start time) and answers, and the workers a
    run needs are the run's own (it fails when none serves it). Each probe costs two processes that
    import TensorFlow."""
    key = _probe_key(service)
    try:
        probed = read_json(service.directory / PROBED, "the tf.data service's last probe", limit=PROBED_LIMIT)
    except ReproError:  # none yet, or unreadable: probe again
        return None
    if key is None or not isinstance(probed, dict) or {k: probed.get(k) for k in key} != key:
        return None
    at = probed.get("at")
    if type(at) not in (int, float) or not 0 <= at <= time.time():  # no time this probe could have run at
        return None
    at = time.strftime("%H:%M:%S", time.localtime(at))
    return (f"{probed.get('text')} ({probed.get('where')}, at {at}: this dispatcher, probed once in this Snakemake "
            "invocation)")


def print_checks(lines):
    """Print the checks to standard output (the command's, at the time of the call); whether all passed."""
    for ok, text in lines:
        print(("[ OK ] " if ok else "[FAILED] ") + text)
    return all(ok for ok, _ in lines)
