"""The ssh backend: the same workflow on real hosts reached with fabric.

Config (`ssh:` section, see config/examples/ssh-cluster.yaml): hosts by role (`control`,
`accelerator`, `workers`), each with address, port, user and key file; a known_hosts file;
start/stop commands per role; status checks (a name, a role, a command: exit 0 is OK); and the run
command template executed on the accelerator host. Host keys are verified against known_hosts;
unknown keys are refused unless `accept_new_host_keys` is set (then logged).

With `pecan.engine: tfdata` the cluster is a tf.data service (docs/TFDATA.md): `start` starts its
dispatcher on the accelerator host (`repro pecan tfdata start`, state in `ssh.tfdata.state_dir`
there) after checking that every worker host answers; the runs use it (`--service-dir`), and the
policies start and stop their remote workers on the worker hosts over ssh from the accelerator
host (repro.pecan.tfdata.remote); `checks` adds the service's checks with a probe worker on every
worker host; `stop` stops every worker and the dispatcher by their records.
"""

import contextlib
import hashlib
import json
import re
import shlex
import socket
import sys
import uuid
from pathlib import Path

from repro.backends import Backend, RunRequest
from repro.errors import ReproError
from repro.fsutil import atomic_path, read_json, write_json
from repro.sshconnect import describe_host as _describe, open_checked as _open

STDERR_TAIL = 40  # lines of remote stderr kept in the error of a failed run
# Written into each run directory this backend makes on the accelerator host: a directory at that
# path without it (the user's, under a remote_dir they chose) is refused, never removed
RUN_DIRECTORY_MARK = ".repro-run"
FOREIGN_RUN_DIRECTORY = 3  # the exit status of the preparing command where the directory is not ours


def hosts_by_role(ssh):
    """{role: [host, ...]} with each host's name filled in."""
    roles = {}
    for role, entry in ssh["hosts"].items():
        entries = entry if isinstance(entry, list) else [entry]
        roles[role] = [{"name": e.get("name", f"{role}{i if len(entries) > 1 else ''}"), "port": 22, **e}
                       for i, e in enumerate(entries)]
    return roles


def _run_commands(ssh, commands):
    done = []
    for role, lines in commands.items():
        for host in hosts_by_role(ssh).get(role, []):
            with _open(host, ssh) as connection:
                for line in lines:
                    result = connection.run(line, hide=True, warn=True, in_stream=False)
                    if result.exited != 0:
                        raise ReproError(f"{_describe(host)}: `{line}` exited with {result.exited}: "
                                         f"{result.stderr.strip()[-500:]}")
                    done.append({"host": host["name"], "command": line})
    return done


class SshBackend(Backend):
    needs_section = True
    extra = ("ssh", "fabric")
    path_keys = (("known_hosts",), ("hosts", "control", "key_file"), ("hosts", "accelerator", "key_file"),
                 ("hosts", "workers", "*", "key_file"))

    def start(self, settings, state_path):
        """Run the configured start commands (they must be idempotent), then start the engine's
        service when the settings name one; return what ran."""
        ssh = settings["ssh"]  # checked as a config's (repro.config.check_ssh_section) by the caller
        started = _run_commands(ssh, ssh["start_commands"])
        state = {"ssh": ssh, "trace_store": settings["trace_store"], "started": started}
        if settings.get("engine") == "tfdata":
            state["engine_service"] = _start_tfdata(ssh, _clone_key(Path(state_path).parent))
        return state

    def bind(self, state, state_path):
        if not isinstance(state.get("ssh"), dict) or not isinstance(state["ssh"].get("hosts"), dict):
            raise ReproError(f"{state_path}: ssh: expected the ssh settings the start recorded (an object with "
                             "'hosts'); run cluster start again")
        service = state.get("engine_service")
        if service is not None and not (isinstance(service, dict) and all(
                isinstance(service.get(key), str) for key in ("host", "directory", "address"))):
            raise ReproError(f"{state_path}: engine_service: expected an object with 'host', 'directory' and "
                             f"'address' strings, got {service!r:.80}; run cluster start again")
        return state

    def describe(self, state):
        hosts = [h["name"] for hosts in hosts_by_role(state["ssh"]).values() for h in hosts]
        service = state.get("engine_service")
        return (f"ssh backend on {', '.join(hosts)}: {len(state.get('started', []))} start command(s) run"
                + (f"; tf.data dispatcher on {service['host']} at {service['address']}, workers on "
                   f"{', '.join(service['worker_hosts']) or service['host']}" if service else ""))

    def checks(self, state):
        """Per host: reachable; then each configured check (exit status 0 is OK)."""
        ssh = state["ssh"]
        checks = []
        reachable = {}
        for role, hosts in hosts_by_role(ssh).items():
            for host in hosts:
                try:
                    with _open(host, ssh) as connection:
                        connection.run("true", hide=True, in_stream=False)
                    reachable[host["name"]] = True
                    checks.append({"name": f"{_describe(host)} reachable", "ok": True, "detail": ""})
                except ReproError as exc:
                    reachable[host["name"]] = False
                    checks.append({"name": f"{_describe(host)} reachable", "ok": False, "detail": str(exc)})
        for check in ssh["checks"]:
            for host in hosts_by_role(ssh).get(check["role"], []):
                name = f"{host['name']}: {check['name']}"
                if not reachable.get(host["name"]):
                    checks.append({"name": name, "ok": False, "detail": "host unreachable"})
                    continue
                with _open(host, ssh) as connection:
                    result = connection.run(check["command"], hide=True, warn=True, in_stream=False)
                checks.append({"name": name, "ok": result.exited == 0,
                               "detail": f"exit {result.exited}: {result.stderr.strip()[-300:]}"})
        if state.get("engine_service"):
            checks += _tfdata_checks(ssh, state["engine_service"], reachable)
        return checks

    def stop(self, state):
        """Stop the engine's service (every worker, then the dispatcher), then run the stop commands."""
        ssh = state["ssh"]
        stopped = []
        if state.get("engine_service"):
            stopped.append(_stop_tfdata(ssh, state["engine_service"]))
        return {"stopped": stopped + _run_commands(ssh, ssh["stop_commands"])}

    def run(self, request: RunRequest, state):
        """One per-mode run on the accelerator host: send inputs, run, stream output, fetch results."""
        ssh = state["ssh"]
        host = hosts_by_role(ssh)["accelerator"][0]
        run = ssh["run"]
        experiment, mode, calibration_paths = request.experiment, request.mode, request.calibration_paths
        remote = f"{run['remote_dir'].rstrip('/')}/{experiment}/{mode}-{_clone_key(request.run_dir)}"
        run_dir = Path(request.run_dir)
        mode_cfg = request.settings["pecan"]["modes"][mode]
        # values go to the remote shell only as quoted words or environment: never spliced in raw
        env = {key: str(value).format(autoorder=int(mode_cfg["autoorder"]), mode=mode, experiment=experiment,
                                      epochs=mode_cfg["epochs"], local_workers=mode_cfg.get("local_workers", 0))
               for key, value in run["env"].items()}
        words = {"python": run["python"], "experiment": experiment, "mode": mode, "out": f"{remote}/run",
                 "settings": f"{remote}/settings.json",
                 "calibration": " ".join(shlex.quote(f"{remote}/{Path(p).name}") for p in calibration_paths)}
        command = run["command"].format(**{k: v if k == "calibration" else shlex.quote(str(v)) for k, v in words.items()})
        if state.get("engine_service"):  # the run takes the cluster's service
            command += f" --service-dir {shlex.quote(state['engine_service']['directory'])}"
        command = _with_env(env, command)
        with _open(host, ssh) as connection:
            prepared = connection.run(_prepare_run_directory(remote), hide=True, in_stream=False, warn=True)
            if prepared.exited == FOREIGN_RUN_DIRECTORY:
                raise ReproError(f"{_describe(host)}: {remote} holds files this backend did not write (no "
                                 f"{RUN_DIRECTORY_MARK}); expected a run directory of its own: move it, or choose "
                                 "another ssh.run.remote_dir")
            if prepared.exited != 0:
                raise ReproError(f"{_describe(host)}: cannot make {remote}: {prepared.stderr.strip()[-300:]}")
            local_settings = run_dir / "settings.json"
            write_json(local_settings, request.settings)
            connection.put(str(local_settings), f"{remote}/settings.json")
            for path in calibration_paths:
                connection.put(str(path), f"{remote}/{Path(path).name}")
            stderr = _Tail(STDERR_TAIL)
            result = connection.run(command, warn=True, in_stream=False, hide=True,
                                    out_stream=sys.stdout, err_stream=_Tee(sys.stderr, stderr))
            if result.exited != 0:
                _fetch(connection, f"{remote}/run", run_dir, optional=True)
                raise ReproError(f"{_describe(host)}: run of {experiment}/{mode} exited with {result.exited}; "
                                 f"remote stderr (last lines):\n{stderr.text()}")
            _fetch(connection, f"{remote}/run", run_dir)
        return read_json(run_dir / "metrics.json", "the run's metrics.json")


def _clone_key(directory):
    """Which clone a remote directory serves: this machine and a directory of the clone here (a run's,
    the cluster state's), hashed. Clones sharing a remote_dir (the default is one per host) then never
    remove each other's runs, nor stop each other's services."""
    where = f"{socket.gethostname()}:{Path(directory).resolve()}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def _prepare_run_directory(remote):
    """A shell command that makes `remote` empty for a run, marked as this backend's: an earlier run's
    (marked) is removed first; anything else there is left as it is, with exit FOREIGN_RUN_DIRECTORY."""
    quoted, mark = shlex.quote(remote), shlex.quote(f"{remote}/{RUN_DIRECTORY_MARK}")
    return (f"if [ -e {quoted} ] || [ -L {quoted} ]; then [ -d {quoted} ] && [ ! -L {quoted} ] && [ -f {mark} ] "
            f"|| exit {FOREIGN_RUN_DIRECTORY}; rm -rf {quoted}; fi; mkdir -p {quoted} && touch {mark}")


BACKEND = SshBackend


# -- the tf.data engine's service ------------------------------------------------------------------

def tfdata_settings(ssh, clone):
    """`ssh.tfdata` with its defaults: paths on the accelerator host and on the worker hosts, the
    clone's own (`clone`: its _clone_key)."""
    run, own = ssh["run"], ssh.get("tfdata", {})
    base = run["remote_dir"].rstrip("/")
    return {"python": own.get("python", run["python"]), "state_dir": own.get("state_dir", f"{base}/tfdata-{clone}"),
            "worker_dir": own.get("worker_dir", f"{base}/tfdata-workers-{clone}"),
            "dispatcher_port": own.get("dispatcher_port", 0),
            "known_hosts": own.get("known_hosts", ssh["known_hosts"]), "key_file": own.get("key_file")}


def _worker_hosts(ssh, tfdata):
    """What the accelerator host's service needs to reach the worker hosts (SshWorkers' config);
    `tfdata`: tfdata_settings."""
    hosts = [{**host, **({"key_file": tfdata["key_file"]} if tfdata["key_file"] else {})}
             for host in hosts_by_role(ssh).get("workers", [])]
    return {"hosts": hosts, "known_hosts": tfdata["known_hosts"], "accept_new_host_keys": ssh["accept_new_host_keys"],
            "connect_timeout_s": ssh["connect_timeout_s"], "python": tfdata["python"],
            "worker_dir": tfdata["worker_dir"], "dispatcher_host": hosts_by_role(ssh)["accelerator"][0]["address"]}


def put_text(connection, path, text):
    """Write `text` to `path` on the connection's host: a new file renamed over `path`, so a symbolic
    link there is replaced, not followed (opening it for writing emptied the file it named)."""
    sftp = connection.sftp()
    staging = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with sftp.open(staging, "wx") as fh:
            fh.write(text)
        sftp.posix_rename(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            sftp.remove(staging)
        raise


def _start_tfdata(ssh, clone):
    """Check every worker host (it answers, its worker directory can be made), then start the
    dispatcher on the accelerator host; return the service's record for the cluster state."""
    tfdata = tfdata_settings(ssh, clone)
    workers = _worker_hosts(ssh, tfdata)
    for host in workers["hosts"]:
        with _open(host, ssh) as connection:
            result = connection.run(f"mkdir -p {shlex.quote(tfdata['worker_dir'])}", hide=True, warn=True, in_stream=False)
            if result.exited != 0:
                raise ReproError(f"{_describe(host)}: cannot make {tfdata['worker_dir']}: {result.stderr.strip()[-300:]}")
    accelerator = hosts_by_role(ssh)["accelerator"][0]
    directory = tfdata["state_dir"]
    with _open(accelerator, ssh) as connection:
        connection.run(f"mkdir -p {shlex.quote(directory)}", hide=True, in_stream=False)
        hosts_file = f"{directory}/worker-hosts.json"
        put_text(connection, hosts_file, json.dumps(workers, indent=1))
        words = [ssh["run"]["python"], "-m", "repro.cli", "pecan", "tfdata", "start", "--state-dir", directory,
                 "--port", str(tfdata["dispatcher_port"])] + (["--worker-hosts", hosts_file] if workers["hosts"] else [])
        result = connection.run(" ".join(shlex.quote(w) for w in words), hide=True, warn=True, in_stream=False)
        found = re.search(r"dispatcher at \S+:(\d+)", result.stdout)
        if result.exited != 0 or not found:
            raise ReproError(f"{_describe(accelerator)}: the tf.data dispatcher did not start: "
                             f"{(result.stderr.strip() or result.stdout.strip())[-500:]}")
    return {"engine": "tfdata", "host": accelerator["name"], "directory": directory,
            "address": f"{accelerator['address']}:{found.group(1)}", "worker_hosts": [h["name"] for h in workers["hosts"]]}


def _tfdata_checks(ssh, service, reachable):
    """The service's checks on the accelerator host: dispatcher running and answering, a probe worker
    registering from every worker host, a probe job served by them."""
    accelerator = hosts_by_role(ssh)["accelerator"][0]
    where = f"tf.data service ({service['host']}:{service['directory']})"
    if not reachable.get(accelerator["name"]):
        return [{"name": where, "ok": False, "detail": "accelerator host unreachable"}]
    words = [ssh["run"]["python"], "-m", "repro.cli", "pecan", "tfdata", "status", "--state-dir", service["directory"],
             "--probe-workers"]
    with _open(accelerator, ssh) as connection:
        result = connection.run(" ".join(shlex.quote(w) for w in words), hide=True, warn=True, in_stream=False)
    checks = []
    for line in result.stdout.splitlines():
        if line.startswith("[ OK ] "):
            checks.append({"name": f"{where}: {line[7:]}", "ok": True, "detail": ""})
        elif line.startswith("[FAILED] "):
            checks.append({"name": where, "ok": False, "detail": line[9:]})
    if result.exited != 0 and all(c["ok"] for c in checks):
        checks.append({"name": where, "ok": False, "detail": f"status exited with {result.exited}: "
                                                              f"{result.stderr.strip()[-300:]}"})
    return checks


def _stop_tfdata(ssh, service):
    accelerator = hosts_by_role(ssh)["accelerator"][0]
    words = [ssh["run"]["python"], "-m", "repro.cli", "pecan", "tfdata", "stop", "--state-dir", service["directory"]]
    with _open(accelerator, ssh) as connection:
        result = connection.run(" ".join(shlex.quote(w) for w in words), hide=True, warn=True, in_stream=False)
    if result.exited != 0:
        raise ReproError(f"{_describe(accelerator)}: stopping the tf.data service failed: "
                         f"{(result.stderr.strip() or result.stdout.strip())[-500:]}")
    return {"host": accelerator["name"], "command": result.stdout.strip()}


def _with_env(env, command):
    """Prefix `export NAME='value'` words (fabric's own inline env does not quote values)."""
    bad = [name for name in env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
    if bad:
        raise ReproError(f"ssh.run.env: invalid variable name(s) {bad}")
    if not env:
        return command
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items()) + " && " + command


class _NoRemoteFile(Exception):
    pass


def _get(connection, remote, local):
    """Copy the remote file `remote` to `local`, written to a new file renamed over it: a symbolic
    link at `local` is refused, never written through (paramiko's get opens the path it is given).
    False where there is no remote file (nothing written)."""
    try:
        with atomic_path(local) as tmp:
            try:
                connection.get(remote, str(tmp))
            except FileNotFoundError:
                raise _NoRemoteFile from None
    except _NoRemoteFile:
        return False
    return True


def _fetch(connection, remote_dir, run_dir, optional=False):
    """Copy run.log, metrics.json, traces/*.json and repeats/ (where there are repeats) back (run.log
    alone after a failure)."""
    sftp = connection.sftp()
    names = ["run.log"] if optional else ["run.log", "metrics.json"]
    for name in names:
        if not _get(connection, f"{remote_dir}/{name}", Path(run_dir) / name) and not optional:
            raise ReproError(f"{remote_dir}/{name} missing on the accelerator host after the run")
    if not optional:
        (Path(run_dir) / "traces").mkdir(parents=True, exist_ok=True)
        for name in sftp.listdir(f"{remote_dir}/traces"):
            _get(connection, f"{remote_dir}/traces/{name}", Path(run_dir) / "traces" / name)
        try:
            repeats = sftp.listdir(f"{remote_dir}/repeats")
        except FileNotFoundError:  # one repeat, or an engine that does not repeat
            repeats = []
        if repeats:
            (Path(run_dir) / "repeats").mkdir(exist_ok=True)
        for name in repeats:
            _get(connection, f"{remote_dir}/repeats/{name}", Path(run_dir) / "repeats" / name)


class _Tail:
    def __init__(self, lines):
        self.lines, self.buffer = lines, []

    def write(self, text):
        self.buffer.extend(text.splitlines())
        del self.buffer[: -self.lines]

    def flush(self):
        pass

    def text(self):
        return "\n".join(self.buffer)


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()
