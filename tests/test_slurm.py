"""The fig8 workflow through a real single-node SLURM (munged, slurmctld, slurmd) with profiles/slurm.

Needs Debian's slurm-wlm and munge (.ci/run installs them) and root (the daemons run as root and
the config goes to /etc/slurm/slurm.conf, where job steps look for it; an existing one is put
back afterwards). Without them the tests are skipped, unless REPRO_REQUIRE_SLURM=1 (as in CI).
"""

import contextlib
import csv
import os
import shlex
import shutil
import signal
import sys
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from support import (BIN, REPO, configfiles, copy_workflow, experiment_modes, free_port, path_env, run_stopped_as_by_ctrl_c,
                     skip_unless_installed, stop_clusters)

BINARIES = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch")
CONF = Path("/etc/slurm/slurm.conf")

pytestmark = pytest.mark.workflow

skip_unless_installed(BINARIES, "REPRO_REQUIRE_SLURM", "apt-get install slurm-wlm munge; run as root")


class Daemons:
    """The SLURM daemons of the test cluster, by pid."""

    def __init__(self, root):
        self.root, self.pids = root, {}

    def start(self, daemon):
        self.pids[daemon] = subprocess.Popen([f"/usr/sbin/{daemon}", "-D"], stdout=subprocess.DEVNULL,
                                             stderr=open(self.root / f"{daemon}.out", "a")).pid

    def stop(self, daemon):
        pid = self.pids.pop(daemon, None)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                os.waitpid(pid, os.WNOHANG)
                time.sleep(0.1)
        except (ProcessLookupError, ChildProcessError):
            pass

    def stop_all(self):
        for daemon in ("slurmd", "slurmctld", "munged"):
            self.stop(daemon)

    def wait_idle(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.2)
        pytest.fail(f"SLURM node never became idle: {(self.root / 'slurmctld.log').read_text()[-2000:]}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    for name in ("state", "spool", "munge"):
        (root / name).mkdir()
    host = socket.gethostname()
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20) - 1024
    socket_path = root / "munge" / "munge.socket.2"
    backup = CONF.read_bytes() if CONF.exists() else None
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text("\n".join([
        "ClusterName=repro", f"SlurmctldHost={host}", f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
        "AuthType=auth/munge", f"AuthInfo=socket={socket_path}",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
        # a job's processes by process group (clusters use cgroups): following the process tree
        # (proctrack/linuxproc) lost a job's Snakemake once scancel's SIGTERM had ended its shell
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "ReturnToService=2",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "MinJobAge=600", "KillWait=5", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SlurmUser=root", f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    daemons = Daemons(root)
    try:
        subprocess.run(["/usr/sbin/munged", "--force", f"--socket={socket_path}", f"--pid-file={root / 'munged.pid'}",
                        f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munge.seed'}"], check=True)
        daemons.pids["munged"] = int((root / "munged.pid").read_text())
        daemons.start("slurmctld")
        daemons.start("slurmd")
        daemons.wait_idle()
        yield daemons
    finally:
        daemons.stop_all()
        if backup is None:
            CONF.unlink(missing_ok=True)
        else:
            CONF.write_bytes(backup)


def workflow_copy(target):
    return copy_workflow(target)


SLURM_FLAGS = ("--profile", "profiles/slurm", "--seconds-between-status-checks", "2",
               "--slurm-init-seconds-before-status-checks", "1")


def snakemake(workdir, *args):
    """Snakemake in `workdir` with the tiny test config (and any override files already written there)."""
    return run_stopped_as_by_ctrl_c([str(BIN / "snakemake"), *args, *configfiles(workdir)], 1500, cwd=workdir,
                                    env=path_env(SLURM_PARTITION="debug"))


def test_fig8_through_slurm_matches_a_local_run(slurm, tiny_build, tmp_path):
    local, cluster = tiny_build, workflow_copy(tmp_path / "cluster")  # local: the session's build, read only
    target = "plots/fig8_ResNet50_v2-8.pdf"
    try:
        assert (local / target).stat().st_size > 1000
        shutil.copytree(local / "results" / "calibration", cluster / "results" / "calibration")  # same costs
        proc = snakemake(cluster, target, *SLURM_FLAGS)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        jobs = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True).stdout
        ran = {line.split("Comment=")[1].split()[0] for line in jobs.splitlines()
               if "Comment=rule_run_wildcards_ResNet50_v2-8" in line and "JobState=COMPLETED" in line}
        assert ran == {f"rule_run_wildcards_ResNet50_v2-8_{m}" for m in experiment_modes()}
        assert "rule_plot" not in jobs and "rule_cluster_status" not in jobs  # local rules stay local
        tables = [list(csv.reader(open(w / "results" / "tables" / "ResNet50_v2-8.csv"))) for w in (local, cluster)]
        assert tables[0] == tables[1]
        assert (cluster / "plots" / "fig8_ResNet50_v2-8.png").exists()
    finally:
        stop_clusters(cluster)


def test_a_missing_partition_fails_with_the_schedulers_message(slurm, tmp_path):
    work = workflow_copy(tmp_path / "w")
    try:
        proc = snakemake(work, "results/calibration/resnet.json", "--profile", "profiles/slurm",
                         "--default-resources", "slurm_partition=nosuchpartition", "--seconds-between-status-checks", "2",
                         "--slurm-init-seconds-before-status-checks", "1")
        assert proc.returncode != 0
        assert "invalid partition" in (proc.stdout + proc.stderr).lower()
    finally:
        stop_clusters(work)


def test_a_slurm_that_is_down_fails_with_its_message(slurm, tmp_path):
    work = workflow_copy(tmp_path / "w")
    slurm.stop("slurmctld")
    try:
        proc = snakemake(work, "results/calibration/resnet.json", *SLURM_FLAGS)
        assert proc.returncode != 0
        assert "unable to contact slurm controller" in (proc.stdout + proc.stderr).lower()
    finally:
        slurm.start("slurmctld")
        slurm.wait_idle()
        stop_clusters(work)


def _job_step_processes(work):
    """Processes of jobs SLURM runs for the workflow in `work` (their command lines name its Snakefile)."""
    snakefile = str(work / "Snakefile")
    processes = []
    for process in psutil.process_iter(["cmdline"]):
        if snakefile in (process.info["cmdline"] or ()) and "slurm-jobstep" in (process.info["cmdline"] or ()):
            processes.append(process)
    return processes


def test_a_job_the_scheduler_kills_fails_and_only_it_is_redone(slurm, tmp_path):
    work = workflow_copy(tmp_path / "w")
    slow = configfiles(work, {"pecan": {"modes": {"pecan": {"epochs": 3000}}}})  # long enough to be cancelled
    targets = [f"results/runs/ResNet50_v2-8/{m}/metrics.json" for m in ("collocated", "cachew", "pecan")]
    try:
        runner = subprocess.Popen([str(BIN / "snakemake"), *targets, *SLURM_FLAGS, *slow], cwd=work,
                                  env=path_env(SLURM_PARTITION="debug"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline, job = time.monotonic() + 600, None
        while time.monotonic() < deadline and job is None:
            out = subprocess.run(["squeue", "-h", "-o", "%i %k %T"], capture_output=True, text=True).stdout
            job = next((line.split()[0] for line in out.splitlines()
                        if "ResNet50_v2-8_pecan" in line and line.endswith("RUNNING")), None)
            time.sleep(0.2)
        assert job, "the pecan run never started"
        # the rule's command under way (the job step its Snakemake starts), not only the allocation
        while time.monotonic() < deadline and f"{job}.0" not in subprocess.run(
                ["squeue", "-h", "-s", "-j", job, "-o", "%i"], capture_output=True, text=True).stdout.split():
            time.sleep(0.2)
        subprocess.run(["scancel", job], check=True)
        out, _ = runner.communicate(timeout=900)
        # the job's own Snakemake outlives SIGTERM; the scheduler kills it after KillWait
        deadline = time.monotonic() + 60
        while _job_step_processes(work) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _job_step_processes(work), "the cancelled job's processes still run"
        assert runner.returncode != 0
        assert "CANCELLED" in out
        assert (work / "results/runs/ResNet50_v2-8/collocated/metrics.json").exists()  # keep-going: the rest ran
        dry = subprocess.run([str(BIN / "snakemake"), *targets, "--dry-run", "--profile", "profiles/slurm", *slow],
                             cwd=work, env=path_env(SLURM_PARTITION="debug"), capture_output=True, text=True).stdout
        planned = {line.split()[1].rstrip(":") for line in dry.splitlines() if line.startswith(("rule ", "localrule "))}
        assert planned <= {"run", "cluster_status"} and "wildcards: experiment=ResNet50_v2-8, mode=pecan" in dry
        assert "mode=collocated" not in dry and "mode=cachew" not in dry
    finally:
        for process in _job_step_processes(work):  # where the scheduler's kill missed one: this test's, by its Snakefile
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()  # psutil checks it is still that process
        stop_clusters(work)


def test_cluster_generic_status_script_follows_jobs_out_of_the_queue(slurm, tmp_path):
    status = REPO / "profiles" / "cluster-generic" / "status.py"
    ok = subprocess.run(["sbatch", "--parsable", "--wrap", "true", f"--output={tmp_path}/%j.out"], capture_output=True,
                        text=True, check=True).stdout.strip()
    bad = subprocess.run(["sbatch", "--parsable", "--wrap", "exit 3", f"--output={tmp_path}/%j.out"],
                         capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-j", f"{ok},{bad}"], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "test jobs did not finish"
        time.sleep(0.2)

    def state(job):
        return subprocess.run([sys.executable, str(status), job], capture_output=True, text=True, check=True).stdout.strip()

    assert state(ok) == "success"  # no longer in squeue: found through scontrol
    assert state(bad) == "failed"
    assert state("999999") == "failed"  # unknown everywhere: failed, not running forever


def test_a_cancelled_jobs_process_that_outlives_its_shell_is_killed(slurm, tmp_path):
    """As a job's Snakemake does: its batch script's shell dies of scancel's SIGTERM, the process it
    started goes on (here it ignores SIGTERM). The test cluster's process tracking must still find
    it (by its process group; following the process tree loses it once its parent is gone) and kill
    it after KillWait."""
    pid_file = tmp_path / "child.pid"
    child = (f"import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)")
    job = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/%j.out", "--wrap",
                          f"{shlex.quote(sys.executable)} -c {shlex.quote(child)}; true"],
                         capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.2)
    process = psutil.Process(int(pid_file.read_text()))
    try:
        subprocess.run(["scancel", job], check=True)
        gone, _ = psutil.wait_procs([process], timeout=30)  # KillWait is 5 s
        assert gone, "the cancelled job's process still runs"
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()  # psutil checks it is still that process
