"""WorkerServer processes on other hosts, started and stopped over ssh (the ssh backend's workers).

A service started with worker hosts (Service.start(..., ssh_workers=...), recorded in its
state.json) runs its `remote` workers there: `SshWorkers` opens one ssh connection per worker
host (fabric, the host keys checked against known_hosts as the ssh backend does) and runs this
module's helper on it:

    python -m repro.pecan.tfdata.remote start --dir D --dispatcher HOST:PORT --host ADDRESS ...
    python -m repro.pecan.tfdata.remote stop --dir D --record JSON

`start` spawns `python -m repro.pecan.tfdata.server worker` in its own session on that host and
prints its process record (pid, start ticks, boot id: repro.processes.describe); `stop` signals
that recorded process only when the record still matches and the process was started for D. Whether a worker runs and what it
reports is read over the same connection from /proc and its status file, each age measured by
that host's own clock. A worker registers under its host's configured address, and the
dispatcher's address it gets is the accelerator host's configured one.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from repro.errors import ReproError

START_TIMEOUT_S = 90  # as repro.pecan.tfdata.service: the worker imports TensorFlow before it serves
# A file read on a worker host (a status file, a log's tail): at most this many bytes, within this
# many seconds on that host, its reader killed there at the deadline
READ_LIMIT, READ_TIMEOUT_S = 1 << 16, 5


# -- on the worker host ------------------------------------------------------------------------

def _start(args):
    from repro.pecan.tfdata.servicelog import open_service_log
    from repro.processes import OWNER_TOKEN, describe, owner_environment

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    available = sorted(os.sched_getaffinity(0))
    cpus = [available[(args.slot * args.threads + j) % len(available)] for j in range(args.threads)]
    status = directory / f"worker-{args.number}.status.json"
    log_path = directory / f"worker-{args.number}.log"
    log = open_service_log(directory, "worker", log_path, status)
    status.unlink(missing_ok=True)  # an earlier worker's (open_service_log has told it by its content)
    marks = owner_environment(directory)
    with log:
        proc = subprocess.Popen([sys.executable, "-m", "repro.pecan.tfdata.server", "worker",
                                 "--dispatcher", args.dispatcher, "--host", args.host, "--threads", str(args.threads),
                                 "--cpus", ",".join(map(str, cpus)), "--status", str(status)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **marks})
    record = {**describe(proc.pid, "tfdata worker", marks[OWNER_TOKEN]), "log": str(log_path), "status": str(status), "cpus": cpus}
    print(json.dumps(record), flush=True)
    return 0


def _stop(args):
    from repro.processes import terminate

    print("stopped" if terminate(json.loads(args.record), owner=args.dir) else "not running")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m repro.pecan.tfdata.remote")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a WorkerServer on this host; print its process record")
    start.add_argument("--dir", required=True)
    start.add_argument("--dispatcher", required=True)
    start.add_argument("--host", required=True)
    start.add_argument("--threads", type=int, required=True)
    start.add_argument("--slot", type=int, required=True)
    start.add_argument("--number", type=int, required=True)
    start.set_defaults(func=_start)
    stop = sub.add_parser("stop", help="stop the recorded process if it still is the one recorded")
    stop.add_argument("--dir", required=True, help="the worker directory the process must have been started for")
    stop.add_argument("--record", required=True)
    stop.set_defaults(func=_stop)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ReproError as exc:  # one line, which the accelerator host's error quotes
        print(f"error: {exc}", file=sys.stderr)
        return 1


# -- on the accelerator host -------------------------------------------------------------------

def check_worker_hosts(flag, hosts):
    """Refuse worker hosts that are not what the ssh backend writes (SshWorkers' config): recorded in the
    state, they made every later status and stop fail, the dispatcher left running. `flag`: where
    they come from (a flag, or a state file's key)."""
    listed = hosts.get("hosts") if isinstance(hosts, dict) else None
    if not (isinstance(listed, list) and listed
            and all(isinstance(h, dict) and isinstance(h.get("name"), str) and isinstance(h.get("address"), str)
                    for h in listed)
            and all(isinstance(hosts.get(key), str) for key in ("python", "worker_dir", "dispatcher_host"))):
        raise ReproError(f"{flag}: expected an object with hosts (a list of objects with a name and an address), "
                         "python, worker_dir and dispatcher_host, as the ssh backend writes; got "
                         f"{json.dumps(hosts)[:80]}")



def _read_command(path, reader):
    """A shell command running `reader` (`head -c N`, `tail -c N`) on `path` on a worker host where it
    is a regular file (a FIFO there waited for ever, /dev/zero never ended), killed after
    READ_TIMEOUT_S: nothing of it runs on after the ssh command, however that ends."""
    quoted = shlex.quote(path)
    return f"test -f {quoted} && timeout -s KILL {READ_TIMEOUT_S} {reader} {quoted} 2>/dev/null"


def _poll_command(entries):
    """A shell command that prints, per entry, `W <index> <state> <start ticks>` from /proc and
    `S <index> <status file>` (its first READ_LIMIT bytes, on one line), then `T <now>` and `B <boot id>`."""
    parts = []
    for i, entry in enumerate(entries):
        pid = int(entry["pid"])
        parts.append(f"echo \"W {i} $(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f1,20)\"")
        parts.append(f"echo \"S {i} $({_read_command(entry['status'], f'head -c {READ_LIMIT}')} | tr '\\n' ' ')\"")
    parts += ['echo "T $(date +%s.%N)"', 'echo "B $(cat /proc/sys/kernel/random/boot_id)"']
    return "; ".join(parts)


class SshWorkers:
    """Start, poll and stop workers on the hosts of `config`: {hosts: [host, ...], known_hosts,
    accept_new_host_keys, connect_timeout_s, python, worker_dir, dispatcher_host}."""

    def __init__(self, config):
        self.config = config
        self.hosts = config["hosts"]
        self._connections = {}

    def _connection(self, name):
        from repro.sshconnect import open_checked

        if name not in self._connections:
            host = next(h for h in self.hosts if h["name"] == name)
            self._connections[name] = open_checked(host, self.config)
        return self._connections[name]

    def _run(self, name, command):
        from repro.sshconnect import describe_host

        host = next(h for h in self.hosts if h["name"] == name)
        try:
            result = self._connection(name).run(command, hide=True, warn=True, in_stream=False)
        except ReproError:
            raise
        except Exception as exc:  # a connection that broke mid-run: paramiko, socket or EOF errors
            self._connections.pop(name, None)
            raise ReproError(f"{describe_host(host)}: ssh failed: {exc}") from None
        if result.exited != 0:
            raise ReproError(f"{describe_host(host)}: `{command[:120]}` exited with {result.exited}: "
                             f"{result.stderr.strip()[-500:]}")
        return result.stdout

    def close(self):
        for connection in self._connections.values():
            connection.close()
        self._connections = {}

    def choose(self, entries):
        """The worker host for a new worker: the one running fewest of `entries`, in config order."""
        counts = {h["name"]: 0 for h in self.hosts}
        for entry in entries:
            counts[entry["host"]] = counts.get(entry["host"], 0) + 1
        return min(self.hosts, key=lambda h: counts[h["name"]])

    def start(self, host, dispatcher_port, threads, slot, number):
        """Start a worker on `host` (an entry of hosts); return its entry (the remote process record)."""
        words = [self.config["python"], "-m", "repro.pecan.tfdata.remote", "start", "--dir", self.config["worker_dir"],
                 "--dispatcher", f"{self.config['dispatcher_host']}:{dispatcher_port}", "--host", host["address"],
                 "--threads", str(threads), "--slot", str(slot), "--number", str(number)]
        out = self._run(host["name"], " ".join(shlex.quote(w) for w in words))
        try:
            record = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ReproError(f"{host['name']}: the worker start printed no process record: {out[-300:]!r}") from None
        return {**record, "host": host["name"], "address_host": host["address"]}

    def stop(self, entry):
        words = [self.config["python"], "-m", "repro.pecan.tfdata.remote", "stop", "--dir", self.config["worker_dir"],
                 "--record", json.dumps(
            {k: entry[k] for k in ("pid", "start_ticks", "boot_id", "role", "token") if k in entry})]
        return self._run(entry["host"], " ".join(shlex.quote(w) for w in words)).strip() == "stopped"

    def poll(self, entries, fresh_s):
        """{id(entry): (running, fresh status or None)} for `entries`, one ssh command per host."""
        result = {}
        by_host = {}
        for entry in entries:
            by_host.setdefault(entry["host"], []).append(entry)
        for name, group in by_host.items():
            out = self._run(name, _poll_command(group))
            procs, statuses, now, boot = {}, {}, time.time(), ""
            for line in out.splitlines():
                kind, _, rest = line.partition(" ")
                if kind == "T":
                    now = float(rest)
                elif kind == "B":
                    boot = rest.strip()
                elif kind in ("W", "S"):
                    index, _, value = rest.partition(" ")
                    (procs if kind == "W" else statuses)[int(index)] = value.strip()
            for i, entry in enumerate(group):
                fields = procs.get(i, "").split()
                running = (len(fields) == 2 and fields[0] != "Z" and int(fields[1]) == entry["start_ticks"]
                           and boot == entry["boot_id"])
                status = None
                try:
                    status = json.loads(statuses.get(i) or "null")
                except ValueError:
                    pass
                if not (running and isinstance(status, dict) and status.get("pid") == entry["pid"]
                        and now - status.get("at", 0) <= fresh_s):
                    status = None
                result[id(entry)] = (running, status)
        return result

    def wait_started(self, entry, fresh_s, timeout_s=START_TIMEOUT_S):
        """Wait until the worker reports; a ReproError with its log's tail when it exits or never does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            running, status = self.poll([entry], fresh_s)[id(entry)]
            if status:
                return status
            if not running:
                tail = self._run(entry["host"], f"{_read_command(entry['log'], f'tail -c {READ_LIMIT}')} || true")
                raise ReproError(f"{entry['host']}: tf.data worker exited before serving: "
                                 f"{' | '.join(tail.strip().splitlines()[-5:])}")
            time.sleep(0.3)  # each poll is an ssh command on the worker host
        self.stop(entry)
        raise ReproError(f"{entry['host']}: tf.data worker did not report within {timeout_s} s")


if __name__ == "__main__":
    sys.exit(main())
