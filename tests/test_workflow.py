"""End-to-end tests of the Snakemake workflow on a tiny config: dry-run, a real run, partial reruns."""

import base64
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from repro.trims import service
from support import (
    BIN,
    configfiles,
    experiment_modes,
    path_env,
    planned_jobs,
    snakemake,
    stop_clusters,
    store_processes,
)

pytestmark = pytest.mark.workflow

SNAKEMAKE = BIN / "snakemake"


@pytest.fixture
def built(tiny_build, tmp_path):
    """A copy of the session's full build (results, plots and Snakemake's metadata, times preserved)."""
    work = tmp_path / "built"
    shutil.copytree(tiny_build, work, symlinks=True)
    yield work
    stop_clusters(work)


def test_dry_run_shows_the_whole_chain(workdir):
    jobs = planned_jobs(workdir, *configfiles(workdir))
    rules = {job.split("[")[0] for job in jobs}
    assert rules == {"all", "calibrate", "cluster_start", "cluster_status", "run", "download_traces", "combine",
                     "summarize", "costs", "plot", "provenance", "trims_generate", "trims_fetch", "trims_store_start",
                     "trims_status", "trims_compare", "trims_distribution", "trims_combine", "trims_summary",
                     "trims_plot", "comparison_table", "comparison"}
    # 1 + 6 + 6 + 5 x 3 experiment x mode runs (the paper's Fig 6 and 7 add three modes and three workloads)
    assert sum(job.startswith("run[") for job in jobs) == 28


def test_full_run_then_nothing_to_do(built):
    for figure in ("Getting_started", "fig8_ResNet50_v2-8", "RetinaNet", "trims_model_load", "trims_distributions",
                   "Cachew_AP_FF", "AutoOrder_Cost"):
        for ext in ("pdf", "png"):
            assert (built / "plots" / f"{figure}.{ext}").stat().st_size > 1000
    table = (built / "results" / "tables" / "ResNet50_v2-8.csv").read_text().splitlines()
    assert table[0].startswith("experiment,model,tpu_cost,worker_cost,remote_workers,local_workers,epoch_time,batches_sec")
    assert len(table) == 7
    summary = json.loads((built / "results" / "summary" / "ResNet50_v2-8.json").read_text())
    assert {g["group"]["mode"] for g in summary["groups"]} == {"collocated", "cachew", "pecan", "autoplacement",
                                                               "autoorder", "fastflow"}
    combined = json.loads((built / "results" / "traces" / "ResNet50_v2-8" / "combined.json").read_text())
    assert len(combined["otherData"]["inputs"]) == 6
    assert len((built / "results" / "tables" / "Cachew_AP_FF.csv").read_text().splitlines()) == 1 + 5 * 4
    assert not list((built / "results" / "cluster" / "local" / "status").rglob("*.json"))  # temp(): removed after use
    trims = json.loads((built / "results" / "summary" / "trims.json").read_text())
    assert {r["model"] for r in trims["compare"]} == {"squeezenet_1.1", "resnet18_v1"}
    # resnet18's 45 MB of weights: a cold load costs more than mapping the store's copy (squeezenet's
    # 5 MB are within the noise of a busy 2-core machine)
    loads = {r["model"]: (r["original_load_ms"], r["shared_load_ms"]) for r in trims["compare"]}
    assert loads["resnet18_v1"][0] > loads["resnet18_v1"][1]
    assert {(r["distribution"], r["concurrency"]) for r in trims["distributions"]} == {
        (d, c) for d in ("pareto", "uniform", "exponential") for c in (1, 2)}
    assert planned_jobs(built, *configfiles(built)) == []
    assert not service.running(json.loads((built / "results" / "cluster" / "local" / "trims-store.json").read_text()), built)
    assert not store_processes(built)  # the invocation that started the model store stopped it
    snakemake(built, "--report", "report.html", *configfiles(built))
    report = (built / "report.html").read_text(errors="replace")
    for item in ("fig8_ResNet50_v2-8.png", "trims_model_load.png", "ResNet50_v2-8.csv", "fig8_ResNet50_v2-8.json",
                 "local model of the artifact's cluster", "model store on the"):  # files and their captions
        assert item in report
    provenance = json.loads((built / "results" / "provenance" / "fig8_ResNet50_v2-8.json").read_text())
    assert {i["path"] for i in provenance["inputs"]} >= {"plots/fig8_ResNet50_v2-8.pdf", "results/tables/ResNet50_v2-8.csv"}
    assert provenance["settings"]["runs"]["pecan"]["pecan"]["modes"]["pecan"]["epochs"] == 8


def test_changing_a_mode_parameter_reruns_that_mode_and_downstream_only(built):
    jobs = planned_jobs(built, *configfiles(built, {"pecan": {"modes": {"pecan": {"epochs": 3}}}}))
    assert jobs == sorted([
        "all", "cluster_status[ResNet50_v2-8,pecan]", "cluster_status[RetinaNet,pecan]",
        "run[ResNet50_v2-8,pecan]", "run[RetinaNet,pecan]",
        "download_traces[ResNet50_v2-8,pecan]", "download_traces[RetinaNet,pecan]",
        "combine[ResNet50_v2-8]", "combine[RetinaNet]", "summarize[ResNet50_v2-8]", "summarize[RetinaNet]",
        "costs[ResNet50_v2-8]", "costs[RetinaNet]", "plot[fig8_ResNet50_v2-8]", "plot[RetinaNet]",
        "provenance[fig8_ResNet50_v2-8]", "provenance[RetinaNet]",
        "comparison_table[AutoOrder_Cost]", "comparison_table[Cachew_AP_FF]",
        "comparison[AutoOrder_Cost]", "comparison[Cachew_AP_FF]",
        "provenance[AutoOrder_Cost]", "provenance[Cachew_AP_FF]",
    ])


def test_adding_a_workload_plans_only_its_own_jobs(built):
    workload = {"pecan": {"accelerators": {"v3-8": {"max_batches_per_s": {"simclr": 5.4}}},
                          "experiments": {"SimCLR_v3-8": {"model": "simclr", "accelerator": "v3-8",
                                                          "modes": ["cachew", "autoorder"]}}}}
    jobs = planned_jobs(built, *configfiles(built, workload))
    # its runs (all asks for every run; no figure draws it yet); nothing of the other workloads, and no
    # calibration (its pipeline has its own, already made)
    assert jobs == sorted(["all"] + [f"{rule}[SimCLR_v3-8,{mode}]" for mode in ("cachew", "autoorder")
                                     for rule in ("cluster_status", "run")])


def test_switching_the_engine_reruns_the_calibrations_the_runs_and_downstream_only(built):
    if importlib.util.find_spec("tensorflow") is None:  # the config check needs the extra for engine tfdata
        if os.environ.get("REPRO_REQUIRE_TFDATA") == "1":
            raise RuntimeError("REPRO_REQUIRE_TFDATA=1 but tensorflow is not installed (pip install -e '.[tfdata]')")
        pytest.skip("tensorflow is not installed (pip install -e '.[tfdata]')")
    paper = ["collocated", "cachew", "autoplacement", "autoorder", "fastflow"]
    runs = {"Getting_started": ["short"], "ResNet50_v2-8": ["collocated", "cachew", "pecan", *paper[2:]],
            "RetinaNet": ["collocated", "cachew", "pecan", *paper[2:]], "SimCLR": paper, "ASRTrans": paper,
            "ResNet50_v3-8": paper}
    figures = {"Getting_started": "Getting_started", "ResNet50_v2-8": "fig8_ResNet50_v2-8", "RetinaNet": "RetinaNet"}
    # every run again; downstream, only what a figure draws: the artifact's figures and the paper's
    # Fig 6 and 7 (FastFlow included, which the tf.data engine runs too)
    drawn = {*figures, "SimCLR", "ASRTrans", "ResNet50_v3-8"}
    expected = ["all"] + [f"{rule}[{name}]" for name in ("AutoOrder_Cost", "Cachew_AP_FF")
                          for rule in ("comparison_table", "comparison", "provenance")]
    # every calibration: under the tf.data engine it also measures the TF ops, the engine's scale
    expected += [f"calibrate[{path.stem}]" for path in (built / "results" / "calibration").glob("*.json")]
    for experiment, modes in runs.items():
        expected += [f"{rule}[{experiment},{mode}]" for mode in modes for rule in ("cluster_status", "run")]
        if experiment in drawn:
            expected += [f"download_traces[{experiment},{mode}]" for mode in modes]
            expected += [f"{rule}[{experiment}]" for rule in ("combine", "summarize", "costs")]
        if experiment in figures:
            expected += [f"{rule}[{figures[experiment]}]" for rule in ("plot", "provenance")]
    assert planned_jobs(built, *configfiles(built, {"pecan": {"engine": "tfdata"}})) == sorted(expected)


def test_changing_plot_style_reruns_only_plotting(built):
    assert planned_jobs(built, *configfiles(built, {"plots": {"style": {"font_size": 11}}})) == [
        "all", "comparison[AutoOrder_Cost]", "comparison[Cachew_AP_FF]",
        "plot[Getting_started]", "plot[RetinaNet]", "plot[fig8_ResNet50_v2-8]",
        "provenance[AutoOrder_Cost]", "provenance[Cachew_AP_FF]",
        "provenance[Getting_started]", "provenance[RetinaNet]",
        "provenance[fig8_ResNet50_v2-8]", "provenance[trims_distributions]",
        "provenance[trims_model_load]", "trims_plot[trims_distributions]",
        "trims_plot[trims_model_load]"]


def test_deleting_a_run_recomputes_that_run_and_downstream_and_a_failed_status_check_stops_it_first(built):
    shutil.rmtree(built / "results" / "runs" / "Getting_started")
    jobs = planned_jobs(built, *configfiles(built))
    assert jobs == sorted(["all", "cluster_status[Getting_started,short]", "run[Getting_started,short]",
                           "download_traces[Getting_started,short]",
                           "combine[Getting_started]", "summarize[Getting_started]", "costs[Getting_started]",
                           "plot[Getting_started]", "provenance[Getting_started]"])
    # the same rerun with the trace store gone: no run can upload its traces, the status check stops it
    store = built / "results" / "store"
    shutil.rmtree(store)
    store.write_text("not a directory")
    proc = snakemake(built, *configfiles(built), check=False)
    assert proc.returncode != 0
    assert "[FAILED] trace store results/store writable" in proc.stderr + proc.stdout
    assert not (built / "results" / "runs" / "Getting_started" / "short" / "metrics.json").exists()
    store.unlink()
    snakemake(built, "cluster_start", "--forcerun", "cluster_start", *configfiles(built))  # restart, then go on
    snakemake(built, *configfiles(built))
    assert (built / "results" / "runs" / "Getting_started" / "short" / "metrics.json").exists()
    assert planned_jobs(built, *configfiles(built)) == []


def test_after_cluster_start_was_interrupted_the_target_is_planned_and_built(built):
    """An invocation killed while cluster_start wrote the state leaves Snakemake's mark of it as
    incomplete (.snakemake/incomplete/<path in URL-safe base64>, as
    test_forget_incomplete_drops_the_mark_an_interrupted_job_leaves finds it). The state is written
    whole, so the next invocation takes it as it is and builds its target; with the mark, it
    planned the start alone and exited 0 without the target."""
    (built / "plots" / "Getting_started.pdf").unlink()
    state = "results/cluster/local/state.json"
    (built / ".snakemake" / "incomplete" / base64.urlsafe_b64encode(state.encode()).decode()).touch()
    target = ["plots/Getting_started.pdf", *configfiles(built)]
    assert planned_jobs(built, *target) == ["plot[Getting_started]"]
    snakemake(built, *target)
    assert (built / "plots" / "Getting_started.pdf").stat().st_size > 1000


def test_deleting_a_trims_run_redoes_that_run_and_downstream_only(built):
    shutil.rmtree(built / "results" / "trims" / "runs" / "distribution" / "uniform-c2")
    jobs = planned_jobs(built, *configfiles(built))
    assert jobs == sorted(["all", "trims_status[uniform-c2]", "trims_distribution[uniform,2]", "trims_summary",
                           "trims_plot[trims_distributions]", "trims_plot[trims_model_load]",
                           "provenance[trims_distributions]", "provenance[trims_model_load]"])
    snakemake(built, *configfiles(built))
    assert (built / "results" / "trims" / "runs" / "distribution" / "uniform-c2" / "report.json").exists()
    assert planned_jobs(built, *configfiles(built)) == []
    assert not store_processes(built)


def test_a_forced_rerun_of_a_models_generation_and_fetch_makes_it_again(built):
    """`--forcerun trims_generate trims_fetch` (or a new trims.seed): Snakemake removed only the
    manifest, the one output the rules declared, and the model's other files made the directory one
    that `trims models` refuses as possibly the user's."""
    model = "results/trims/models/squeezenet_1.1/manifest.json"
    snakemake(built, model, "--forcerun", "trims_generate", "trims_fetch", *configfiles(built))
    for store in ("assets", "models"):
        assert sorted(p.name for p in (built / "results" / "trims" / store / "squeezenet_1.1").iterdir()) == [
            "manifest.json", "model.onnx", "model.params"]
    assert planned_jobs(built, model, *configfiles(built)) == []


def test_settings_from_the_command_line_reach_the_cluster_and_a_mismatch_is_refused(workdir):
    target = "results/runs/Getting_started/short/metrics.json"
    snakemake(workdir, target, *configfiles(workdir), "--config", "trace_store=results/elsewhere")
    state = json.loads((workdir / "results" / "cluster" / "local" / "state.json").read_text())
    assert state["trace_store"] == "results/elsewhere"
    assert list((workdir / "results" / "elsewhere" / "traces" / "Getting_started" / "short").glob("*/*.json"))
    assert not (workdir / "results" / "store").exists()
    # the same run with the default trace store: the state was started for other settings, no run starts
    shutil.rmtree(workdir / "results" / "runs")
    proc = snakemake(workdir, target, *configfiles(workdir), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "[FAILED] cluster state results/cluster/local/state.json matches the configuration" in out
    assert "snakemake cluster_start --forcerun cluster_start" in out
    assert not (workdir / target).exists()
    snakemake(workdir, "cluster_start", "--forcerun", "cluster_start", *configfiles(workdir))
    snakemake(workdir, target, *configfiles(workdir))
    assert list((workdir / "results" / "store" / "traces" / "Getting_started" / "short").glob("*/*.json"))


def test_changing_the_trace_store_as_the_readme_says_ends_with_the_figure_built(built):
    """What a user does after choosing a new trace_store: run, restart the cluster as the README says,
    run again. Finished runs' traces stay where they were uploaded (their receipts say where), and
    are downloaded from there; runs that run from then on upload to the new store. The first run is
    the session's full build (a copy)."""
    workdir = built
    figure = workdir / "plots" / "fig8_ResNet50_v2-8.pdf"
    assert figure.stat().st_size > 1000
    moved = (*configfiles(workdir), "--config", "trace_store=results/store2")
    assert planned_jobs(workdir, "plots/fig8_ResNet50_v2-8.pdf", *moved) == []  # finished runs are not redone
    snakemake(workdir, "plots/fig8_ResNet50_v2-8.pdf", *moved, cores=1)
    shutil.rmtree(workdir / "results" / "traces")  # the downloads made again, with the new store set
    snakemake(workdir, "results/traces/ResNet50_v2-8/combined.json", *moved, cores=1)
    # the README's restart, then the figure again
    snakemake(workdir, "cluster_start", "--forcerun", "cluster_start", *moved, cores=1)
    snakemake(workdir, "plots/fig8_ResNet50_v2-8.pdf", *moved, cores=1)
    assert figure.stat().st_size > 1000
    assert len(list((workdir / "results" / "traces" / "ResNet50_v2-8").glob("*/*.json"))) == len(experiment_modes())
    assert planned_jobs(workdir, "plots/fig8_ResNet50_v2-8.pdf", *moved) == []
    # a run made again now uploads to the new store, and its download reads from there
    shutil.rmtree(workdir / "results" / "runs" / "ResNet50_v2-8" / "pecan")
    run = "results/runs/ResNet50_v2-8/pecan/metrics.json"  # a figure alone does not look at runs
    snakemake(workdir, run, "plots/fig8_ResNet50_v2-8.pdf", *moved, cores=1)
    downloaded = workdir / "results" / "traces" / "ResNet50_v2-8" / "pecan" / "ResNet50_v2-8-pecan.json"
    assert downloaded.read_bytes() == (workdir / "results" / "runs" / "ResNet50_v2-8" / "pecan" / "traces"
                                       / "ResNet50_v2-8-pecan.json").read_bytes()
    receipt = json.loads((workdir / "results" / "runs" / "ResNet50_v2-8" / "pecan" / "upload.json").read_text())
    assert receipt["store"] == "results/store2"
    assert list((workdir / "results" / "store2" / "traces" / "ResNet50_v2-8" / "pecan").glob("*/ResNet50_v2-8-pecan.json"))
    assert planned_jobs(workdir, "plots/fig8_ResNet50_v2-8.pdf", *moved) == []


def test_a_run_of_a_mode_its_experiment_does_not_list_is_refused_at_planning(workdir):
    proc = snakemake(workdir, "--dry-run", "results/runs/ResNet50_v2-8/short/metrics.json", *configfiles(workdir),
                     check=False)
    assert proc.returncode != 0
    assert ("experiment 'ResNet50_v2-8' has no mode 'short' (its modes: collocated, cachew, pecan, autoplacement, "
            "autoorder, fastflow)"
            in proc.stdout + proc.stderr)
    assert "rule run:" not in proc.stdout


def test_interrupted_run_is_redone(workdir):
    # a long run (many epochs: seconds, the kill comes a second after it starts) so the workflow can
    # be killed while it executes; one repeat, so the rerun after the kill takes one such run, not twenty
    args = configfiles(workdir, {"repeats": 1, "pecan": {"modes": {"short": {"epochs": 1000}}}})
    target = "results/runs/Getting_started/short/metrics.json"
    proc = subprocess.Popen([str(SNAKEMAKE), "--cores", "1", target, *args], cwd=workdir, env=path_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = workdir / "results" / "runs" / "Getting_started" / "short"
    deadline = time.monotonic() + 120
    while not (run_dir.exists() and (workdir / "results" / "logs" / "run").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the run has begun writing its outputs: the kill leaves them half-made
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (workdir / target).exists()
    # whatever the kill left behind is either a hidden temporary file or a complete output
    for leftover in (p for p in run_dir.rglob("*") if p.is_file()):
        assert leftover.name.startswith(".") and leftover.name.endswith(".tmp") or leftover.name == "run.log"
        if leftover.name == "run.log":
            assert "Training finished" in leftover.read_text()
    snakemake(workdir, "--unlock", *args)  # a killed Snakemake leaves its lock behind
    jobs = planned_jobs(workdir, target, *args)
    assert "run[Getting_started,short]" in jobs
    snakemake(workdir, target, *args, timeout=600)
    assert json.loads((workdir / target).read_text())["mode"] == "short"


@pytest.mark.parametrize("override, expected", [
    ({"pecan": {"prices": {"worker": -1}}}, ["pecan.prices.worker", "minimum"]),
    ({"backend": "k8s"}, ["backend", "'k8s' is not one of"]),
    ({"pecan": {"experiments": {"RetinaNet": {"modes": ["turbo"]}}}}, ["unknown mode 'turbo'"]),
    ({"pecan": {"cluster": {"network_gbps": float("nan")}}}, ["pecan.cluster.network_gbps: nan is not a finite"]),
    ({"plots": {"figures": {"..": {"experiment": "RetinaNet"}}}}, ["plots.figures", "'..' does not match"]),
])
def test_invalid_config_fails_at_parse_time_naming_the_key(workdir, override, expected):
    proc = snakemake(workdir, "--dry-run", *configfiles(workdir, override), check=False)
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stdout + proc.stderr


def test_results_in_a_bucket_with_snakemakes_gcs_storage(workdir, emulator, monkeypatch):
    """Snakemake's own default storage (snakemake-storage-plugin-gcs) against the GCS emulator: every
    file the workflow writes lands in the bucket, and the next invocation finds nothing to do."""
    from repro.tracestore import _gcs_client

    env = {"STORAGE_EMULATOR_HOST": emulator, "GOOGLE_CLOUD_PROJECT": "repro-test"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = _gcs_client()
    client.create_bucket("workflow")
    args = ("plots/Getting_started.pdf", "--default-storage-provider", "gcs", "--default-storage-prefix",
            "gs://workflow/run", "--storage-gcs-project", "repro-test")
    args = (*args, *configfiles(workdir))
    snakemake(workdir, *args, env=env)
    stored = {blob.name for blob in client.list_blobs("workflow")}
    assert {"run/plots/Getting_started.pdf", "run/results/tables/Getting_started.csv",
            "run/results/traces/Getting_started/combined.json", "run/results/cluster/local/state.json"} <= stored
    assert not (workdir / "plots" / "Getting_started.pdf").exists()  # the bucket holds the results
    again = snakemake(workdir, *args, "--dry-run", env=env)
    assert "Nothing to be done" in again.stdout + again.stderr
