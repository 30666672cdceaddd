"""End-to-end tests of the Snakemake workflow on a tiny config: dry-run, a real run, partial reruns."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import yaml
from support import BIN, REPO, copy_workflow, emulator, path_env, planned_jobs, snakemake, stop_clusters  # noqa: F401

pytestmark = pytest.mark.workflow

SNAKEMAKE = BIN / "snakemake"
TINY = {
    "calibration": {"elements": 2, "repeats": 1},
    "trims": {
        "models": {"small": ["squeezenet_1.1", "resnet18_v1"]},
        "server": {"memory_mb": 50},  # less than both models together: evictions happen
        "compare": {"iterations": 2},
        "distributions": {"iterations": 6, "concurrency": [1, 2]},
    },
}


def write_config(workdir, overrides):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())

    def merge(base, extra):
        for key, value in extra.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merge(base[key], value)
            else:
                base[key] = value

    merge(config, TINY)
    merge(config, overrides)
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture
def workdir(tmp_path):
    """A copy of the workflow (not of results) with the tiny config."""
    copy_workflow(tmp_path)
    write_config(tmp_path, {})
    yield tmp_path
    stop_clusters(tmp_path)


@pytest.fixture
def built(workdir):
    snakemake(workdir)
    return workdir


def test_dry_run_shows_the_whole_chain(workdir):
    jobs = planned_jobs(workdir)
    rules = {job.split("[")[0] for job in jobs}
    assert rules == {"all", "calibrate", "cluster_start", "cluster_status", "run", "download_traces", "combine",
                     "summarize", "costs", "plot", "provenance", "trims_generate", "trims_fetch", "trims_compare",
                     "trims_distribution", "trims_combine", "trims_summary", "trims_plot"}
    assert sum(job.startswith("run[") for job in jobs) == 7  # 1 + 3 + 3 experiment x mode runs


def test_full_run_then_nothing_to_do(built):
    for figure in ("Getting_started", "fig8_ResNet50_v2-8", "RetinaNet", "trims_model_load", "trims_distributions"):
        for ext in ("pdf", "png"):
            assert (built / "plots" / f"{figure}.{ext}").stat().st_size > 1000
    table = (built / "results" / "tables" / "ResNet50_v2-8.csv").read_text().splitlines()
    assert table[0].startswith("experiment,model,tpu_cost,worker_cost,remote_workers,local_workers,epoch_time,batches_sec")
    assert len(table) == 4
    summary = json.loads((built / "results" / "summary" / "ResNet50_v2-8.json").read_text())
    assert {g["group"]["mode"] for g in summary["groups"]} == {"collocated", "cachew", "pecan"}
    combined = json.loads((built / "results" / "traces" / "ResNet50_v2-8" / "combined.json").read_text())
    assert len(combined["otherData"]["inputs"]) == 3
    assert not list((built / "results" / "cluster" / "local" / "status").rglob("*.json"))  # temp(): removed after use
    trims = json.loads((built / "results" / "summary" / "trims.json").read_text())
    assert {r["model"] for r in trims["compare"]} == {"squeezenet_1.1", "resnet18_v1"}
    assert all(r["original_load_ms"] > r["shared_load_ms"] for r in trims["compare"])
    assert {(r["distribution"], r["concurrency"]) for r in trims["distributions"]} == {
        (d, c) for d in ("pareto", "uniform", "exponential") for c in (1, 2)}
    assert planned_jobs(built) == []
    snakemake(built, "--report", "report.html")
    report = (built / "report.html").read_text(errors="replace")
    assert "fig8_ResNet50_v2-8.png" in report and "provenance.json" in report and "ResNet50_v2-8.csv" in report


def test_changing_a_mode_parameter_reruns_that_mode_and_downstream_only(built):
    write_config(built, {"pecan": {"modes": {"pecan": {"epochs": 3}}}})
    jobs = planned_jobs(built)
    assert jobs == sorted([
        "all", "cluster_status[ResNet50_v2-8/pecan]", "cluster_status[RetinaNet/pecan]",
        "run[ResNet50_v2-8,pecan]", "run[RetinaNet,pecan]",
        "download_traces[ResNet50_v2-8,pecan]", "download_traces[RetinaNet,pecan]",
        "combine[ResNet50_v2-8]", "combine[RetinaNet]", "summarize[ResNet50_v2-8]", "summarize[RetinaNet]",
        "costs[ResNet50_v2-8]", "costs[RetinaNet]", "plot[fig8_ResNet50_v2-8]", "plot[RetinaNet]",
    ])


def test_changing_plot_style_reruns_only_plotting(built):
    write_config(built, {"plots": {"style": {"font_size": 11}}})
    assert planned_jobs(built) == ["all", "plot[Getting_started]", "plot[RetinaNet]", "plot[fig8_ResNet50_v2-8]",
                                   "trims_plot[trims_distributions]", "trims_plot[trims_model_load]"]


def test_deleting_a_run_recomputes_that_run_and_downstream(built):
    shutil.rmtree(built / "results" / "runs" / "Getting_started")
    jobs = planned_jobs(built)
    assert jobs == sorted(["all", "cluster_status[Getting_started/short]", "run[Getting_started,short]", "download_traces[Getting_started,short]",
                           "combine[Getting_started]", "summarize[Getting_started]", "costs[Getting_started]",
                           "plot[Getting_started]"])
    snakemake(built)
    assert planned_jobs(built) == []


def test_failed_status_check_stops_before_any_run(built):
    state = json.loads((built / "results" / "cluster" / "local" / "state.json").read_text())
    os.kill(state["pid"], signal.SIGKILL)
    shutil.rmtree(built / "results" / "runs" / "Getting_started")
    proc = snakemake(built, check=False)
    assert proc.returncode != 0
    assert "[FAILED] dispatcher process running" in proc.stderr + proc.stdout
    assert not (built / "results" / "runs" / "Getting_started" / "short" / "metrics.json").exists()
    snakemake(built, "cluster_start", "--forcerun", "cluster_start")  # restart the cluster, then go on
    snakemake(built)
    assert (built / "results" / "runs" / "Getting_started" / "short" / "metrics.json").exists()


def test_interrupted_run_is_redone(workdir):
    # a long run (many epochs) so the workflow can be killed while it executes
    write_config(workdir, {"pecan": {"modes": {"short": {"epochs": 3000}}}})
    target = "results/runs/Getting_started/short/metrics.json"
    proc = subprocess.Popen([str(SNAKEMAKE), "--cores", "1", target], cwd=workdir, env=path_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = workdir / "results" / "runs" / "Getting_started" / "short"
    deadline = time.monotonic() + 120
    while not (run_dir.exists() and (workdir / "results" / "logs" / "run").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (workdir / target).exists()
    # whatever the kill left behind is either a hidden temporary file or a complete output
    for leftover in (p for p in run_dir.rglob("*") if p.is_file()):
        assert leftover.name.startswith(".") and leftover.name.endswith(".tmp") or leftover.name == "run.log"
        if leftover.name == "run.log":
            assert "Training finished" in leftover.read_text()
    snakemake(workdir, "--unlock")  # a killed Snakemake leaves its lock behind
    jobs = planned_jobs(workdir, target)
    assert "run[Getting_started,short]" in jobs
    snakemake(workdir, target, timeout=600)
    assert json.loads((workdir / target).read_text())["mode"] == "short"


def test_invalid_config_fails_at_parse_time_naming_the_key(workdir):
    write_config(workdir, {"pecan": {"prices": {"worker": -1}}})
    proc = snakemake(workdir, "--dry-run", check=False)
    assert proc.returncode != 0 and "worker" in proc.stdout and "minimum" in proc.stdout
    write_config(workdir, {"backend": "k8s"})
    proc = snakemake(workdir, "--dry-run", check=False)
    assert proc.returncode != 0 and "backend" in proc.stdout
    write_config(workdir, {"pecan": {"experiments": {"RetinaNet": {"modes": ["turbo"]}}}})
    proc = snakemake(workdir, "--dry-run", check=False)
    assert proc.returncode != 0 and "unknown mode 'turbo'" in proc.stdout


def test_results_in_a_bucket_with_snakemakes_gcs_storage(workdir, emulator, monkeypatch):
    """Snakemake's own default storage (snakemake-storage-plugin-gcs) against the GCS emulator: every
    file the workflow writes lands in the bucket, and the next invocation finds nothing to do."""
    from repro.store import _gcs_client

    env = {"STORAGE_EMULATOR_HOST": emulator, "GOOGLE_CLOUD_PROJECT": "repro-test"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = _gcs_client()
    client.create_bucket("workflow")
    args = ("plots/Getting_started.pdf", "--default-storage-provider", "gcs", "--default-storage-prefix",
            "gs://workflow/run", "--storage-gcs-project", "repro-test")
    snakemake(workdir, *args, env=env)
    stored = {blob.name for blob in client.list_blobs("workflow")}
    assert {"run/plots/Getting_started.pdf", "run/results/tables/Getting_started.csv",
            "run/results/traces/Getting_started/combined.json", "run/results/cluster/local/state.json"} <= stored
    assert not (workdir / "plots" / "Getting_started.pdf").exists()  # the bucket holds the results
    again = snakemake(workdir, *args, "--dry-run", env=env)
    assert "Nothing to be done" in again.stdout + again.stderr
