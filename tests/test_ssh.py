"""The ssh backend against real sshd instances on loopback, started and stopped by these tests.

Needs /usr/sbin/sshd (Debian's openssh-server; .ci/run installs it). Without it the tests are
skipped, unless REPRO_REQUIRE_SSHD=1 (as in CI), where that is a failure.
"""

import contextlib
import csv
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import (
    BIN,
    ENGINE_TEST_SETTINGS,
    REPO,
    configfiles,
    copy_workflow,
    free_port,
    path_env,
    planned_jobs,
    skip_unless_installed,
    snakemake,
    stop_clusters,
)

from repro.backends import RunRequest
from repro.backends import ssh as ssh_backend
from repro.errors import ReproError

SSHD = "/usr/sbin/sshd"

pytestmark = pytest.mark.workflow

skip_unless_installed([SSHD], "REPRO_REQUIRE_SSHD", "apt-get install openssh-server")


class SshHost:
    def __init__(self, root, name, client_pub):
        self.name, self.port = name, free_port()
        self.dir = root / name
        self.dir.mkdir()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / "host_key")], check=True)
        (self.dir / "authorized_keys").write_text(client_pub)
        (self.dir / "sshd_config").write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.dir / 'host_key'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}", f"PidFile {self.dir / 'sshd.pid'}",
            "UsePAM no", "StrictModes no", "PasswordAuthentication no", "PermitRootLogin yes",
            "Subsystem sftp internal-sftp", "LogLevel ERROR", ""]))
        self.proc = None

    def start(self):
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir / "sshd.log", "w"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd {self.name} did not start: {(self.dir / 'sshd.log').read_text()}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)

    def known_hosts_line(self):
        key = (self.dir / "host_key.pub").read_text().split()
        return f"[127.0.0.1]:{self.port} {key[0]} {key[1]}\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ssh")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "client_key")], check=True)
    pub = (root / "client_key.pub").read_text()
    hosts = [SshHost(root, name, pub) for name in ("accel", "worker")]
    for host in hosts:
        host.start()
    (root / "known_hosts").write_text("".join(h.known_hosts_line() for h in hosts))
    yield root, hosts
    for host in hosts:
        host.stop()


def ssh_config(root, hosts, **extra):
    def entry(host):
        return {"name": host.name, "address": "127.0.0.1", "port": host.port, "user": "root",
                "key_file": str(root / "client_key")}

    config = {
        "known_hosts": str(root / "known_hosts"), "accept_new_host_keys": False, "connect_timeout_s": 5,
        "hosts": {"accelerator": entry(hosts[0]), "workers": [entry(hosts[1])]},
        "start_commands": {"accelerator": [f"mkdir -p {root}/remote"]},
        "stop_commands": {"accelerator": [f"rm -rf {root}/remote"]},
        "checks": [{"name": "python with repro", "role": "accelerator", "command": f"{sys.executable} -c 'import repro'"},
                   {"name": "disk space", "role": "workers", "command": "test -d /tmp"}],
        "run": {"python": sys.executable, "remote_dir": f"{root}/remote/runs",
                "command": "{python} -m repro.cli pecan run --settings {settings} --experiment {experiment} "
                           "--mode {mode} --calibration {calibration} --out {out} --backend ssh",
                "env": {"USE_AUTOORDER": "{autoorder}", "EPOCHS": "{epochs}"}},
    }
    config.update(extra)
    return config


def test_status_checks_every_host_and_names_the_one_that_fails(cluster, tmp_path):
    root, hosts = cluster
    state = {"backend": "ssh", "ssh": ssh_config(root, hosts)}
    checks = ssh_backend.BACKEND("ssh").status(state)
    assert all(c["ok"] for c in checks), checks
    assert {c["name"] for c in checks} >= {"accel: python with repro", "worker: disk space"}
    hosts[1].stop()
    try:
        failed = [c for c in ssh_backend.BACKEND("ssh").status(state) if not c["ok"]]
        assert {c["name"] for c in failed} == {f"worker (root@127.0.0.1:{hosts[1].port}) reachable", "worker: disk space"}
        assert "unreachable" in failed[0]["detail"]
    finally:
        hosts[1].start()


def test_unknown_host_keys_are_refused_with_a_way_to_trust_them(cluster, tmp_path):
    root, hosts = cluster
    (tmp_path / "empty_known_hosts").write_text("")
    config = ssh_config(root, hosts, known_hosts=str(tmp_path / "empty_known_hosts"))
    host = ssh_backend.hosts_by_role(config)["accelerator"][0]
    with pytest.raises(ReproError, match="ssh-keyscan -p"):
        ssh_backend._open(host, config)
    config["accept_new_host_keys"] = True
    with ssh_backend._open(host, config) as connection:
        assert connection.run("echo ok", hide=True, in_stream=False).stdout.strip() == "ok"


@pytest.mark.fault
def test_a_new_host_key_is_appended_and_the_users_known_hosts_kept(cluster, tmp_path):
    """ssh.accept_new_host_keys with the user's own known_hosts (comments, a marker line, a line ssh skips,
    no newline at the end): paramiko rewrote the whole file, dropping the comments, through a symbolic link;
    a marker or a bad line was a traceback. Now the key is appended as one line, ssh's accept-new, and an
    @revoked line is refused, naming the file."""
    root, hosts = cluster
    users = ("# my hosts\n@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==\n"
             "badhost ssh-ed25519 !!!notbase64\n\n# the end, no newline")
    (tmp_path / "real_known_hosts").write_text(users)
    (tmp_path / "known_hosts").symlink_to(tmp_path / "real_known_hosts")
    config = ssh_config(root, hosts, known_hosts=str(tmp_path / "known_hosts"))
    config["accept_new_host_keys"] = True
    host = ssh_backend.hosts_by_role(config)["accelerator"][0]
    with ssh_backend._open(host, config) as connection:
        assert connection.run("echo ok", hide=True, in_stream=False).stdout.strip() == "ok"
    assert (tmp_path / "known_hosts").is_symlink()
    text = (tmp_path / "real_known_hosts").read_text()
    assert text.startswith(users + "\n") and len(text.splitlines()) == len(users.splitlines()) + 1
    assert text.splitlines()[-1].startswith(f"[127.0.0.1]:{host['port']} ")
    config["accept_new_host_keys"] = False  # the appended key is found again
    with ssh_backend._open(host, config) as connection:
        assert connection.run("echo ok", hide=True, in_stream=False).stdout.strip() == "ok"
    (tmp_path / "real_known_hosts").write_text(text + "@revoked * ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==\n")
    with pytest.raises(ReproError, match=rf"ssh.known_hosts {tmp_path}/known_hosts: line {len(text.splitlines()) + 1}: "
                                         r"an @revoked key"):
        ssh_backend._open(host, config)


def test_config_values_reach_the_remote_shell_quoted(cluster, tmp_path):
    root, hosts = cluster
    config = ssh_config(root, hosts)
    config["run"]["command"] = "echo {experiment} > " + str(tmp_path / "echoed") + "; printenv MARK >> " + str(tmp_path / "echoed")
    config["run"]["env"] = {"MARK": "$(touch " + str(tmp_path / "pwned") + ") {mode}"}
    experiment = "e'; touch " + str(tmp_path / "pwned") + "; '"
    settings = {"pecan": {"modes": {"m; touch x": {"autoorder": True, "epochs": 1}},
                          "experiments": {experiment: {"modes": ["m; touch x"]}}}}
    with pytest.raises(ReproError):  # the echo 'run' writes no metrics: the fetch fails, after running
        request = RunRequest(settings, experiment, "m; touch x", (), tmp_path / "run", tmp_path / "receipt.json")
        ssh_backend.BACKEND("ssh").execute(request, {"ssh": config, "trace_store": str(tmp_path / "store")})
    assert not (tmp_path / "pwned").exists()
    assert "touch" in (tmp_path / "echoed").read_text()


@pytest.mark.fault
def test_a_file_written_over_ssh_replaces_a_link_at_its_path(cluster, tmp_path):
    """The tf.data service's worker-hosts.json, written on the accelerator host: a symbolic link at its
    path was opened for writing, emptying the file it named."""
    root, hosts = cluster
    config = ssh_config(root, hosts)
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "worker-hosts.json").symlink_to(tmp_path / "notes.txt")
    with ssh_backend._open(ssh_backend.hosts_by_role(config)["accelerator"][0], config) as connection:
        ssh_backend.put_text(connection, str(tmp_path / "worker-hosts.json"), '{"hosts": []}')
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / "worker-hosts.json").is_symlink()
    assert (tmp_path / "worker-hosts.json").read_text() == '{"hosts": []}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "worker-hosts.json"]  # no staging file left


@pytest.mark.fault
def test_a_run_leaves_a_remote_directory_it_did_not_make_as_it_was(cluster, tmp_path):
    """ssh.run.remote_dir: a directory of the user's on the accelerator host (here their home) holding
    <experiment>/<mode> of their own: the run's `rm -rf` of that path deleted it."""
    root, hosts = cluster
    config = ssh_config(root, hosts)
    config["run"]["remote_dir"] = str(tmp_path / "home")
    mine = tmp_path / "home" / "E" / f"m-{ssh_backend._clone_key(tmp_path / 'run')}"
    mine.mkdir(parents=True)
    (mine / "thesis.tex").write_text("mine\n")
    settings = {"pecan": {"modes": {"m": {"autoorder": True, "epochs": 1}}, "experiments": {"E": {"modes": ["m"]}}}}
    request = RunRequest(settings, "E", "m", (), tmp_path / "run", tmp_path / "receipt.json")
    with pytest.raises(ReproError, match=rf"accel \(root@127.0.0.1:{hosts[0].port}\): {mine} holds files "
                                         r"this backend did not write \(no .repro-run\); expected a run directory of"):
        ssh_backend.BACKEND("ssh").execute(request, {"ssh": config, "trace_store": str(tmp_path / "store")})
    assert (mine / "thesis.tex").read_text() == "mine\n"
    assert not (tmp_path / "run").exists()


def test_clones_sharing_a_remote_dir_run_in_directories_of_their_own(tmp_path):
    """Two clones whose runs of one experiment and mode go to the same ssh.run.remote_dir (the default
    is one per host): the second's run removed the first's directory while it ran."""
    assert ssh_backend._clone_key(tmp_path / "a" / "run") != ssh_backend._clone_key(tmp_path / "b" / "run")
    assert ssh_backend._clone_key(tmp_path / "a" / "run") == ssh_backend._clone_key(tmp_path / "a" / "." / "run")


def test_clones_sharing_a_remote_dir_start_tf_data_services_of_their_own(tmp_path):
    """With pecan.engine tfdata the dispatcher's state and the workers' directory defaulted to
    <remote_dir>/tfdata and <remote_dir>/tfdata-workers: a second clone's cluster_stop stopped the
    first's service (its records are that state directory's own)."""
    config = {"run": {"python": "python3", "remote_dir": "/srv/runs"}, "known_hosts": None}
    first, second = (ssh_backend.tfdata_settings(config, ssh_backend._clone_key(tmp_path / clone / "results"))
                     for clone in ("a", "b"))
    assert first["state_dir"].startswith("/srv/runs/tfdata-") and first["worker_dir"].startswith("/srv/runs/tfdata-")
    assert first["state_dir"] != second["state_dir"] and first["worker_dir"] != second["worker_dir"]
    assert len({first["state_dir"], first["worker_dir"]}) == 2
    given = {**config, "tfdata": {"state_dir": "/srv/service", "worker_dir": "/srv/workers"}}
    assert ssh_backend.tfdata_settings(given, "a")["state_dir"] == "/srv/service"
    assert ssh_backend.tfdata_settings(given, "a")["worker_dir"] == "/srv/workers"


def example_args(workdir, root, hosts, home, *overrides):
    """The shipped ssh example config as a user passes it (--configfile), completed with this test's
    hosts; its `~/.ssh/...` paths resolve under `home`, the HOME the workflow runs with."""
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "known_hosts", ssh_dir / "known_hosts")
    shutil.copy(root / "client_key", ssh_dir / "id_ed25519")

    def where(host):
        return {"address": "127.0.0.1", "port": host.port, "user": "root"}

    ours = ssh_config(root, hosts)
    site = {"ssh": {"hosts": {"accelerator": where(hosts[0]),
                              "workers": [{"name": hosts[1].name, **where(hosts[1]), "key_file": "~/.ssh/id_ed25519"}]},
                    "start_commands": ours["start_commands"], "stop_commands": ours["stop_commands"],
                    "checks": ours["checks"], "run": {"python": sys.executable, "remote_dir": ours["run"]["remote_dir"]}}}
    args = configfiles(workdir, site, *overrides)
    return [args[0], args[1], str(REPO / "config" / "examples" / "ssh-cluster.yaml"), *args[2:]]


def remote_run_pids(root):
    """This test's remote runs (their command line names its own remote directory), by pid."""
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if "pecan" in (p.info["cmdline"] or ()) and any(str(root) in arg for arg in p.info["cmdline"])]


def test_fig8_over_ssh_with_the_example_config_matches_the_local_backend(cluster, tiny_build, tmp_path):
    root, hosts = cluster
    local, remote, home = tiny_build, tmp_path / "remote", tmp_path / "home"  # local: the session's build, read only
    copy_workflow(remote)
    env = {"HOME": str(home)}
    target = "plots/fig8_ResNet50_v2-8.pdf"
    try:
        assert (local / target).stat().st_size > 1000
        shutil.copytree(local / "results" / "calibration", remote / "results" / "calibration")
        args = example_args(remote, root, hosts, home)
        proc = snakemake(remote, target, *args, cores=1, env=env)
        assert "[ OK ] trainer: python with repro" in (remote / "results/logs/cluster/ssh/status/ResNet50_v2-8/pecan.log").read_text()
        state = json.loads((remote / "results" / "cluster" / "ssh" / "state.json").read_text())
        assert state["backend"] == "ssh" and state["ssh"]["known_hosts"] == str(home / ".ssh" / "known_hosts")
        metrics = json.loads((remote / "results/runs/ResNet50_v2-8/pecan/metrics.json").read_text())
        assert metrics["backend"] == "ssh"  # the run went over ssh, and says so
        assert len(metrics["repeats"]) > 1  # every repeat's log fetched, as metrics.json lists them
        assert all((remote / "results/runs/ResNet50_v2-8/pecan" / r["log"]).is_file() for r in metrics["repeats"])
        key = ssh_backend._clone_key(remote / "results/runs/ResNet50_v2-8/pecan")
        assert (root / "remote" / "runs" / "ResNet50_v2-8" / f"pecan-{key}" / "run" / "metrics.json").exists()
        rows = [list(csv.reader(open(w / "results" / "tables" / "ResNet50_v2-8.csv"))) for w in (local, remote)]
        assert rows[0] == rows[1]
        assert (remote / "plots" / "fig8_ResNet50_v2-8.png").exists(), proc.stdout[-500:]
        # the rerun rules hold over ssh as locally: nothing to do, then only what a change touches
        assert planned_jobs(remote, target, *args, env=env) == []
        changed = example_args(remote, root, hosts, home, {"pecan": {"modes": {"pecan": {"epochs": 3}}}})
        assert planned_jobs(remote, target, *changed, env=env) == sorted([
            "cluster_status[ResNet50_v2-8,pecan]", "run[ResNet50_v2-8,pecan]", "download_traces[ResNet50_v2-8,pecan]",
            "combine[ResNet50_v2-8]", "summarize[ResNet50_v2-8]", "costs[ResNet50_v2-8]", "plot[fig8_ResNet50_v2-8]"])
        # kill a remote run mid-way: the rule fails, its log is kept, the next invocation redoes it
        slow = example_args(remote, root, hosts, home, {"pecan": {"modes": {"pecan": {"epochs": 3000}}}})
        runner = subprocess.Popen([str(BIN / "snakemake"), "--cores", "1", "results/runs/ResNet50_v2-8/pecan/metrics.json",
                                   *slow], cwd=remote, env=path_env(**env),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 120
        while not remote_run_pids(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the remote run is past its start-up, writing its log
        for pid in remote_run_pids(root):
            os.kill(pid, signal.SIGKILL)
        out, _ = runner.communicate(timeout=300)
        assert runner.returncode != 0
        assert (remote / "results/logs/run/ResNet50_v2-8/pecan.log").exists()
        assert "exited with" in out
        snakemake(remote, "results/runs/ResNet50_v2-8/pecan/metrics.json", *args, cores=1, env=env)
        assert (remote / "results/runs/ResNet50_v2-8/pecan/metrics.json").exists()
    finally:
        stop_clusters(remote)


# -- the tf.data engine over ssh: dispatcher on the accelerator host, workers on the worker hosts --

needs_tensorflow = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None and
                                      os.environ.get("REPRO_REQUIRE_TFDATA") != "1",
                                      reason="tensorflow is not installed (pip install -e '.[tfdata]')")


def our_pids(*roots):
    """Processes whose command line names one of these directories (this test's remote side), by pid."""
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any(str(root) in arg for arg in (p.info["cmdline"] or ()) for root in roots)]


def tfdata_cluster_settings(root, hosts, **tfdata):
    config = ssh_config(root, hosts)
    config["tfdata"] = tfdata
    return {"backend": "ssh", "trace_store": str(root / "store"), "engine": "tfdata", "ssh": config}


@needs_tensorflow
def test_tfdata_over_ssh_runs_its_workers_on_the_worker_hosts_and_leaves_nothing_running(cluster, tmp_path):
    root, hosts = cluster
    workdir, home = tmp_path / "wf", tmp_path / "home"
    copy_workflow(workdir)
    engine = {"pecan": {"engine": "tfdata", "tfdata": {"max_windows": 6, **ENGINE_TEST_SETTINGS}}}
    args = example_args(workdir, root, hosts, home, engine)
    env = {"HOME": str(home)}
    target = "results/runs/ResNet50_v2-8/cachew/metrics.json"
    clone = ssh_backend._clone_key(workdir / "results" / "cluster" / "ssh")  # where its state.json lies
    worker_dir = root / "remote" / "runs" / f"tfdata-workers-{clone}"
    try:
        snakemake(workdir, target, *args, cores=1, env=env, timeout=500)
        state = json.loads((workdir / "results" / "cluster" / "ssh" / "state.json").read_text())
        service = state["engine_service"]
        assert service["host"] == "trainer" and service["worker_hosts"] == ["worker"]
        status = (workdir / "results/logs/cluster/ssh/status/ResNet50_v2-8/cachew.log").read_text()
        assert "[ OK ] tf.data service (trainer:" in status
        assert "1 worker(s) registered, 1 expected, one probe worker on each worker host (worker)" in status
        assert "probe job returned elements" in status
        # the run's workers were started over ssh on the worker host: their records and status files are there
        started = {json.loads(p.read_text())["address"] for p in worker_dir.glob("worker-*.status.json")}
        log = (workdir / "results/runs/ResNet50_v2-8/cachew/run.log").read_text()
        addresses = {line.split("Worker Address: ")[1].split(";")[0] for line in log.splitlines()
                     if "Worker Address: " in line}
        assert addresses and addresses <= started, (addresses, started)
        metrics = json.loads((workdir / target).read_text())
        assert metrics["backend"] == "ssh" and metrics["worker_hosts"] == ["worker"] and metrics["remote_workers"] >= 1
        # between runs only the dispatcher runs; cluster_stop stops it
        assert len(our_pids(root / "remote")) == 1
        snakemake(workdir, "cluster_stop", *args, cores=1, env=env)
        deadline = time.monotonic() + 10
        while our_pids(root / "remote") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert our_pids(root / "remote") == []
    finally:
        stop_clusters(workdir)


@needs_tensorflow
def test_tfdata_over_ssh_status_fails_for_a_worker_host_that_registers_no_worker(cluster, tmp_path):
    root, hosts = cluster
    backend = ssh_backend.BACKEND("ssh")
    settings = tfdata_cluster_settings(root, hosts, state_dir=str(tmp_path / "service"),
                                       worker_dir=str(tmp_path / "workers"))
    state = backend.start(settings, tmp_path / "state.json")
    try:
        ok = backend.checks(state)
        assert all(c["ok"] for c in ok), ok
        # the worker host's python cannot start a worker: the check names the host, nothing is left
        service = json.loads((tmp_path / "service" / "state.json").read_text())
        service["ssh_workers"]["python"] = "/nonexistent/python"
        (tmp_path / "service" / "state.json").write_text(json.dumps(service))
        failed = [c for c in backend.checks(state) if not c["ok"]]
        assert len(failed) == 1 and "0 worker(s) registered, 1 expected" in failed[0]["detail"], failed
        assert "worker (root@127.0.0.1" in failed[0]["detail"]
        assert len(our_pids(tmp_path)) == 1  # the dispatcher
    finally:
        backend.stop(state)
    assert our_pids(tmp_path) == []


@pytest.mark.fault
@needs_tensorflow
def test_tfdata_over_ssh_bad_ports_and_unreachable_worker_hosts_are_clear_errors(cluster, tmp_path):
    root, hosts = cluster
    backend = ssh_backend.BACKEND("ssh")
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        settings = tfdata_cluster_settings(root, hosts, state_dir=str(tmp_path / "service"), dispatcher_port=port)
        with pytest.raises(ReproError, match=rf"accel \(root@127.0.0.1:\d+\): .*--port {port}: port in use"):
            backend.start(settings, tmp_path / "state.json")
    assert not (tmp_path / "service" / "state.json").exists() and our_pids(tmp_path) == []
    hosts[1].stop()
    try:
        settings = tfdata_cluster_settings(root, hosts, state_dir=str(tmp_path / "service2"))
        with pytest.raises(ReproError, match=rf"worker \(root@127.0.0.1:{hosts[1].port}\): unreachable"):
            backend.start(settings, tmp_path / "state.json")
        assert not (tmp_path / "service2").exists() and our_pids(tmp_path) == []
    finally:
        hosts[1].start()


@pytest.mark.fault
@needs_tensorflow
def test_tfdata_run_with_a_worker_host_gone_names_it_and_writes_nothing(cluster, tmp_path):
    import yaml

    from repro.pecan.tfdata.engine import run
    from repro.pecan.tfdata.spec import spec_from_config

    root, hosts = cluster
    backend = ssh_backend.BACKEND("ssh")
    settings = tfdata_cluster_settings(root, hosts, state_dir=str(tmp_path / "service"),
                                       worker_dir=str(tmp_path / "workers"))
    state = backend.start(settings, tmp_path / "state.json")
    pecan = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["pecan"]
    spec = spec_from_config(pecan, "ResNet50_v2-8", "cachew", max_windows=6, **ENGINE_TEST_SETTINGS)
    hosts[1].stop()
    try:
        with pytest.raises(ReproError, match=rf"worker \(root@127.0.0.1:{hosts[1].port}\): unreachable"):
            run(spec, tmp_path / "run", tmp_path / "data", tmp_path / "service")
        assert not (tmp_path / "run" / "run.log").exists() and not (tmp_path / "run" / "metrics.json").exists()
        assert len(our_pids(tmp_path)) == 1  # the dispatcher, which cluster_stop stops
    finally:
        hosts[1].start()
        backend.stop(state)
    assert our_pids(tmp_path) == []


@pytest.mark.fault
@needs_tensorflow
def test_tfdata_status_reads_a_worker_hosts_status_files_bounded_and_leaves_nothing_there(cluster, tmp_path):
    """`repro pecan tfdata status` over a state.json (copied, edited) whose workers on a worker host
    report to a FIFO and to /dev/zero there: the poll ran `cat` on them over ssh, which waited for ever
    on the FIFO (and went on on the host after repro was killed) or filled the host's shell with zeros."""
    from repro.backends.ssh import _worker_hosts, tfdata_settings
    from repro.pecan.tfdata.service import Service

    root, hosts = cluster
    os.mkfifo(tmp_path / "fifo.status.json")
    (tmp_path / "zero.status.json").symlink_to("/dev/zero")
    service = Service.start(tmp_path / "service")
    try:
        gone = {"pid": 999999, "start_ticks": 1, "boot_id": "gone", "role": "tfdata worker", "kind": "remote",
                "host": "worker"}
        ssh = ssh_config(root, hosts)
        service.state["ssh_workers"] = _worker_hosts(ssh, tfdata_settings(ssh, "clone"))
        service.state["workers"] = [{**gone, "slot": slot, "status": str(tmp_path / name)}  # the FIFO first: it hung
                                    for slot, name in enumerate(("fifo.status.json", "zero.status.json"))]
        service._save()
        status = subprocess.run([str(BIN / "repro"), "pecan", "tfdata", "status", "--state-dir", str(tmp_path / "service")],
                                capture_output=True, text=True, timeout=40)
        assert status.returncode == 1, status.stderr
        assert ("[FAILED] 0 worker(s) registered, 2 expected: worker pid 999999 (worker) is not running; "
                "worker pid 999999 (worker) is not running\n") in status.stdout, status.stdout
        assert our_pids(tmp_path) == [service.state["dispatcher"]["pid"]]  # no reader left on the worker host
    finally:
        service.state["workers"] = []
        service.stop()
        for pid in our_pids(tmp_path):  # a reader the poll left on the worker host
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
