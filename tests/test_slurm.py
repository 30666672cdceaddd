"""The fig8 workflow through a real single-node SLURM (munged, slurmctld, slurmd) with profiles/slurm.

Needs Debian's slurm-wlm and munge (.ci/run installs them) and root (the daemons run as root and
the config goes to /etc/slurm/slurm.conf, where job steps look for it; an existing one is put
back afterwards). Without them the tests are skipped, unless REPRO_REQUIRE_SLURM=1 (as in CI).
"""

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BINARIES = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch")
CONF = Path("/etc/slurm/slurm.conf")

missing = [b for b in BINARIES if not Path(b).exists()]
if missing or os.geteuid() != 0:
    why = f"missing {missing}" if missing else "not root"
    if os.environ.get("REPRO_REQUIRE_SLURM") == "1":
        raise RuntimeError(f"SLURM tests cannot run: {why} (apt-get install slurm-wlm munge)")
    pytest.skip(f"SLURM tests need slurm-wlm and munge as root: {why}", allow_module_level=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "ReturnToService=2",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "MinJobAge=600", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SlurmUser=root", f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    pids = []
    try:
        subprocess.run(["/usr/sbin/munged", "--force", f"--socket={socket_path}", f"--pid-file={root / 'munged.pid'}",
                        f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munge.seed'}"], check=True)
        pids.append(int((root / "munged.pid").read_text()))
        for daemon in ("slurmctld", "slurmd"):
            pids.append(subprocess.Popen([f"/usr/sbin/{daemon}", "-D"], stdout=subprocess.DEVNULL,
                                         stderr=open(root / f"{daemon}.out", "w")).pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"SLURM node never became idle: {(root / 'slurmctld.log').read_text()[-2000:]}")
        yield root
    finally:
        for pid in reversed(pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if backup is None:
            CONF.unlink(missing_ok=True)
        else:
            CONF.write_bytes(backup)


def workflow_copy(target):
    target.mkdir()
    for item in ("Snakefile", "rules", "workflow", "config", "envs", "profiles"):
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / item)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["calibration"].update(elements=2, repeats=1)
    (target / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return target


def snakemake(workdir, *args):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "SLURM_PARTITION": "debug"}
    return subprocess.run([str(Path(sys.executable).parent / "snakemake"), *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=1500)


def test_fig8_through_slurm_matches_a_local_run(slurm, tmp_path):
    local, cluster = workflow_copy(tmp_path / "local"), workflow_copy(tmp_path / "cluster")
    target = "plots/fig8_ResNet50_v2-8.pdf"
    try:
        assert snakemake(local, target, "--cores", "1").returncode == 0
        shutil.copytree(local / "results" / "calibration", cluster / "results" / "calibration")  # same costs
        proc = snakemake(cluster, target, "--profile", "profiles/slurm", "--seconds-between-status-checks", "2",
                         "--slurm-init-seconds-before-status-checks", "1")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        jobs = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True).stdout
        ran = {line.split("Comment=")[1].split()[0] for line in jobs.splitlines()
               if "Comment=rule_run_wildcards_ResNet50_v2-8" in line and "JobState=COMPLETED" in line}
        assert ran == {f"rule_run_wildcards_ResNet50_v2-8_{m}" for m in ("collocated", "cachew", "pecan")}
        assert "rule_plot" not in jobs and "rule_cluster_status" not in jobs  # local rules stay local
        tables = [list(csv.reader(open(w / "results" / "tables" / "ResNet50_v2-8.csv"))) for w in (local, cluster)]
        assert tables[0] == tables[1]
        assert (cluster / "plots" / "fig8_ResNet50_v2-8.png").exists()
    finally:
        for workdir in (local, cluster):
            for state in (workdir / "results" / "cluster").glob("*/state.json"):
                subprocess.run([str(Path(sys.executable).parent / "repro"), "cluster", "stop", "--state", str(state)],
                               capture_output=True, timeout=60)


def test_a_missing_partition_fails_with_the_schedulers_message(slurm, tmp_path):
    work = workflow_copy(tmp_path / "w")
    try:
        proc = snakemake(work, "results/calibration/resnet.json", "--profile", "profiles/slurm",
                         "--default-resources", "slurm_partition=nosuchpartition", "--seconds-between-status-checks", "2",
                         "--slurm-init-seconds-before-status-checks", "1")
        assert proc.returncode != 0
        assert "invalid partition" in (proc.stdout + proc.stderr).lower()
    finally:
        for state in (work / "results" / "cluster").glob("*/state.json"):
            subprocess.run([str(Path(sys.executable).parent / "repro"), "cluster", "stop", "--state", str(state)],
                           capture_output=True, timeout=60)
