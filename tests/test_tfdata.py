"""The tf.data service engine (repro.pecan.tfdata): TF pipelines, real dispatcher and worker
processes, miniature runs whose logs the artifact's parser reads.

Needs the 'tfdata' extra (TensorFlow); without it these tests are skipped, unless
REPRO_REQUIRE_TFDATA=1 (as in CI), where that is a failure.
"""

import copy
import csv
import dataclasses
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from repro.config import load_config, validate_config
from repro.errors import ReproError
from repro.pecan.logs import parse_log
from repro.pecan.pipelines import IMAGENET_MEAN, IMAGENET_STD
from repro.processes import alive, matches

from support import TINY, copy_workflow, hide_modules, run_repro, snakemake

REPO = Path(__file__).resolve().parents[1]
REPRO = Path(sys.executable).parent / "repro"


@pytest.fixture(scope="module")
def pecan_config():
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())["pecan"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


# Python code that makes `import tensorflow` fail, as where the extra is not installed
HIDE_TENSORFLOW = ("import sys\nfrom importlib.abc import MetaPathFinder\n"
                   "class Missing(MetaPathFinder):\n"
                   "    def find_spec(self, name, path=None, target=None):\n"
                   "        if name == 'tensorflow' or name.startswith('tensorflow.'):\n"
                   "            raise ModuleNotFoundError(name)\n"
                   "sys.meta_path.insert(0, Missing())\n")


@pytest.mark.fault
def test_without_tensorflow_the_engine_names_the_extra(tmp_path):
    code = HIDE_TENSORFLOW + "from repro.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    for command in (["start", "--state-dir", str(tmp_path / "service")],
                    ["run", "--experiment", "ResNet50_v2-8", "--mode", "collocated", "--out", str(tmp_path / "run")]):
        result = subprocess.run([sys.executable, "-c", code, "pecan", "tfdata", *command], capture_output=True,
                                text=True, cwd=REPO)
        assert result.returncode == 1, command
        assert "needs the 'tfdata' extra (pip install -e '.[tfdata]')" in result.stderr, command
    assert not (tmp_path / "service").exists() and not (tmp_path / "run").exists()


@pytest.mark.fault
@pytest.mark.workflow
def test_engine_tfdata_without_tensorflow_fails_at_config_check(tmp_path):
    """Snakemake's parse (the Snakefile's config check) names the extra; nothing runs."""
    copy_workflow(tmp_path)
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_TENSORFLOW)
    result = snakemake(tmp_path, "--dry-run", "--configfile", str(TINY), "--config", "pecan={engine: tfdata}",
                       check=False, env={"PYTHONPATH": str(tmp_path / "hide")})
    assert result.returncode != 0
    assert "config: pecan.engine: needs the 'tfdata' extra (pip install -e '.[tfdata]')" in result.stderr + result.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.fault
def test_validation_refuses_runs_of_the_model(tmp_path):
    from repro.pecan.validation import validation_rows

    with pytest.raises(ReproError, match=r"m.json: not a tf.data engine run \(engine 'model'\); .*pecan.engine: tfdata"):
        validation_rows({"experiment": "E", "mode": "pecan"}, {}, 32, "m.json")


def _engine_metrics(mode="cachew", windows=(), pipeline_cost=True, cpus=2, worker_hosts=(), send=0.0, receive=0.0):
    """A tf.data engine run's metrics.json as the validation reads it (no TensorFlow needed); `send`
    and `receive`: the transfer probe's CPU seconds per byte."""
    spec = {"experiment": "E", "mode": mode, "placement": "cachew" if mode == "cachew" else "autoplacement",
            "autoorder": mode == "pecan", "pipeline": "resnet", "batch_size": 10, "decision_steps": 4,
            "accelerator_examples_per_s": 1000.0, "time_scale": 10.0, "worker_threads": 1, "collocated_threads": 1,
            "max_remote_workers": 3, "max_local_workers": 2, "fixed_remote_workers": 0, "fixed_local_workers": 0,
            "cachew_threshold_up": 0.0, "client_cost": 4.96, "worker_cost": 0.43, "max_windows": 20, "seed": 0}
    metrics = {"engine": "tfdata", "spec": spec, "remote_workers": 2, "local_workers": 0, "worker_hosts": list(worker_hosts),
               "windows": [{"steps": 4, "seconds": s, "workers": w, "workers_after": a} for w, a, s in windows]}
    if pipeline_cost:  # 25 ms per element: one 1-CPU worker 40 examples/s, the bound 100
        metrics.update(cpus=cpus, pipeline_cost={"order": "autoorder" if spec["autoorder"] else "declared",
                                                 "cpu_s_per_element": 0.025, "bytes_per_element": 1000.0},
                       transfer_cost={"send_s_per_byte": send, "receive_s_per_byte": receive,
                                      "worker_s_per_element": send * 1000, "client_s_per_element": receive * 1000})
    return metrics


def test_validation_counts_the_cpu_that_moving_each_element_costs():
    """Sending 1000 bytes costs the worker 5 ms besides its 25 ms pipeline (one worker: 33.3
    examples/s), receiving costs the client 10 ms on the same 2 CPUs (at most 2 / 40 ms = 50/s);
    collocated moves nothing."""
    from repro.pecan.validation import caption_text, validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)], send=5e-6, receive=1e-5)
    rows = {(r["remote_workers"], r["local_workers"]): r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert rows[1, 0]["model_tf_examples_per_s"] == pytest.approx(33.33)
    assert rows[2, 0]["model_tf_examples_per_s"] == 50
    assert rows[1, 0]["model_examples_per_s"] == 100  # the Pillow-fed model has no such cost
    assert "as each run's probe measured it: 5.00 ms CPU sending, 10.00 ms receiving" in caption_text(
        list(rows.values()), [metrics])
    collocated = _engine_metrics("collocated", windows=[([], [], 1.0)], send=5e-6, receive=1e-5)
    collocated["spec"]["placement"] = "collocated"
    del collocated["transfer_cost"]  # a collocated run has no service to probe
    assert validation_rows(collocated, CALIBRATION, 32)[0]["model_tf_examples_per_s"] == 40


def test_validation_of_a_run_without_its_transfer_probe_asks_for_a_rerun():
    from repro.pecan.validation import validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 1.0)])
    del metrics["transfer_cost"]
    with pytest.raises(ReproError, match=r"m.json: no transfer_cost .* run it again"):
        validation_rows(metrics, CALIBRATION, 32, "m.json")


def _window(**fields):
    return lambda m: m["windows"][0].update(fields)


def _spec(**fields):
    return lambda m: m["spec"].update(fields)


@pytest.mark.fault
@pytest.mark.parametrize("edit, message", [
    (_window(seconds=-1.0), r"windows\[0\].seconds: expected a positive number"),
    (_window(steps=True), r"windows\[0\].steps: expected a whole number of steps, at least 1"),
    (_window(workers="ab", workers_after="ba"), r"windows\[0\].workers: expected a list of worker addresses"),
    (_window(workers_after=None), r"windows\[0\].workers_after: expected a list of worker addresses"),
    (_window(cpu_share={"127.0.0.1:1": -5.0}), r"windows\[0\].cpu_share: expected each process's CPU share, a fraction"),
    (lambda m: m["windows"].insert(0, 7), r"windows\[0\]: expected an object \(a decision window\)"),
    (_spec(batch_size=-10), r"spec.batch_size: expected a positive number"),
    (_spec(time_scale=-10.0), r"spec.time_scale: expected a positive number"),
    (lambda m: m["pipeline_cost"].update(cpu_s_per_element=-0.025), r"pipeline_cost.cpu_s_per_element: expected a "
                                                                       "positive number"),
], ids=["negative-seconds", "steps-true", "workers-a-string", "workers-after-null", "negative-cpu-share",
        "window-a-number", "negative-batch", "negative-time-scale", "negative-pipeline-cost"])
def test_validation_refuses_measurements_no_engine_writes(tmp_path, capsys, edit, message):
    """A window or spec value the throughput or bound is computed from, malformed, is named and
    nothing is written; a negative one was drawn as a negative throughput, bound or share, and
    workers given as a string were counted by its characters."""
    from repro.cli import main

    metrics = _engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)])
    edit(metrics)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(metrics))
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"pipeline": "resnet", "autoorder_saving": 0.1, **CALIBRATION["resnet"]}))
    code = main(["pecan", "validation", "E", "--metrics", str(path), "--calibration", str(calibration),
                 "--network-gbps", "32", "--style", "{}", "--output", str(tmp_path / "v.pdf"), str(tmp_path / "v.png"),
                 "--table", str(tmp_path / "v.csv")])
    err = capsys.readouterr().err
    assert code == 1 and re.fullmatch(rf"repro: error: {re.escape(str(path))}: {message}.*\n", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json", "m.json"]


@pytest.mark.fault
def test_validation_refuses_a_run_of_another_experiment(tmp_path, capsys):
    """The figure would be titled, and the verdict given, as the named experiment's."""
    from repro.cli import main

    path = tmp_path / "m.json"
    path.write_text(json.dumps(_engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)])))  # experiment E
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"pipeline": "resnet", "autoorder_saving": 0.1, **CALIBRATION["resnet"]}))
    code = main(["pecan", "validation", "X", "--metrics", str(path), "--calibration", str(calibration),
                 "--network-gbps", "32", "--style", "{}", "--output", str(tmp_path / "v.pdf"), str(tmp_path / "v.png"),
                 "--table", str(tmp_path / "v.csv")])
    assert code == 1 and capsys.readouterr().err == f"repro: error: --metrics {path}: a run of experiment 'E'; expected X's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json", "m.json"]


@pytest.mark.fault
def test_validation_refuses_a_run_named_twice(tmp_path, capsys):
    """The same metrics.json named twice (in another spelling too) is refused naming it: its
    deployments were counted twice in the verdict (2 of 4 deployments where the run has 2). The first
    spelling goes through the `repro` program (its exit code and stderr), the other through main()."""
    runs = [_engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)])]
    _validate(tmp_path, runs, capsys)
    (tmp_path / "v.csv").unlink()
    for again, program in ((tmp_path / "m0.json", True), (f"{tmp_path}/./m0.json", False)):
        argv = ["pecan", "validation", "E", "--metrics", str(tmp_path / "m0.json"), str(again), "--calibration",
                str(tmp_path / "calibration.json"), "--network-gbps", "32", "--style", "{}", "--output",
                str(tmp_path / "v.pdf"), str(tmp_path / "v.png"), "--table", str(tmp_path / "v.csv")]
        result = (subprocess.run([str(REPRO), *argv], capture_output=True, text=True) if program
                  else _repro(capsys, *argv))
        assert (result.returncode, result.stderr) == (1, f"repro: error: --metrics {again}: the file {tmp_path / 'm0.json'} "
                                                         "named already; expected each run's metrics.json once\n")
        assert not (tmp_path / "v.csv").exists()


# the Pillow calibration: 5 ms per element, so one worker (200 examples/s) reaches the bound (100)
CALIBRATION = {"resnet": {order: {"cpu_s_per_element": 0.005, "bytes_out_per_element": 1000.0}
                          for order in ("declared", "autoorder")}}
ONE, TWO, THREE = ["127.0.0.1:1"], ["127.0.0.1:1", "127.0.0.1:2"], ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]


def test_validation_predicts_each_deployment_from_both_sets_of_inputs():
    from repro.pecan.validation import validation_rows

    # measured: one worker 40 examples/s, two 80, three 80 (the third has no CPU of its own); the first
    # window after the change to two (100 examples/s, draining what was buffered) is not the deployment's
    metrics = _engine_metrics(windows=[(ONE, ONE, 1.0), (ONE, TWO, 0.7), (TWO, TWO, 0.4), (TWO, TWO, 0.5),
                                       (TWO, TWO, 0.5), (THREE, THREE, 0.5)])
    rows = {(r["remote_workers"], r["local_workers"]): r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert sorted(rows) == [(1, 0), (2, 0), (3, 0)]  # the window whose worker set changed is left out
    assert rows[1, 0]["engine_examples_per_s"] == 40 and rows[1, 0]["windows"] == 1
    assert rows[2, 0]["engine_examples_per_s"] == 80 and rows[2, 0]["windows"] == 2  # and the one after it
    # Pillow-fed: every deployment at the bound; engine-fed: 1/0.025 per CPU, at most the machine's 2
    assert [rows[k]["model_examples_per_s"] for k in sorted(rows)] == [100, 100, 100]
    assert [rows[k]["model_tf_examples_per_s"] for k in sorted(rows)] == [40, 80, 80]
    assert rows[1, 0]["model_vs_engine"] == 1.5 and rows[3, 0]["model_tf_vs_engine"] == 0
    # converged: the Pillow-fed model needs one worker; the engine-fed one stops at the CPUs (Cachew
    # adds a third, which gains nothing, and steps back)
    assert rows[1, 0]["model_converged"] == "1+0" and rows[1, 0]["model_tf_converged"] == "2+0"
    assert rows[1, 0]["engine_converged"] == "2+0"


def test_validation_gives_each_worker_the_cpu_share_it_measured():
    """A worker that got half its CPU (other work on the machine) delivers half: the engine-fed
    model predicts from the share each window measured, a worker not measured (on another host)
    counts a whole CPU."""
    from repro.pecan.validation import validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 2.0), (TWO, TWO, 1.0), (TWO, TWO, 1.0)])
    metrics["windows"][0]["cpu_share"] = {ONE[0]: 0.5}
    metrics["windows"][1]["cpu_share"] = {TWO[0]: 0.5, TWO[1]: 0.5}
    metrics["windows"][2]["cpu_share"] = {TWO[0]: 0.5}  # TWO[1] on another host: a whole CPU
    rows = {(r["remote_workers"], r["local_workers"]): r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert rows[1, 0]["cpu_share"] == 0.5 and rows[1, 0]["model_tf_examples_per_s"] == 20
    assert rows[2, 0]["cpu_share"] == 0.625 and rows[2, 0]["model_tf_examples_per_s"] == 50
    assert rows[1, 0]["model_tf_vs_engine"] == 0 and rows[1, 0]["model_examples_per_s"] == 100  # Pillow-fed: whole CPUs


def test_a_processes_share_counts_every_thread_it_ran_over_the_time_its_pipeline_wanted_a_cpu(tf):
    """A worker whose pipeline thread ran 0.5 s and waited 0.3 s, while its sending thread ran 0.2 s:
    it got 0.7 s of the 0.8 s it wanted its CPU (its own threads taking turns are not a loss); two
    CPUs halve it; a share never exceeds 1; a process that is gone, or another process under the
    same name, is not measured."""
    from repro.pecan.tfdata.engine import Sharing

    zero = {"1": (0.0, 0.0), "2": (0.0, 0.0)}
    after = {"1": (0.5, 0.3), "2": (0.2, 0.1)}
    assert Sharing.shares({"w": (7, 1, zero)}, {"w": (7, 1, after)}) == {"w": 0.875}
    assert Sharing.shares({"w": (7, 2, zero)}, {"w": (7, 2, after)}) == {"w": 0.4375}
    assert Sharing.shares({"w": (7, 1, zero)}, {"w": (7, 1, {"1": (0.5, 0.0), "2": (0.4, 0.0)})}) == {"w": 1.0}
    assert Sharing.shares({"w": (7, 1, zero)}, {"w": (8, 1, after)}) == {}
    assert Sharing.shares({"w": (7, 1, zero)}, {"w": (7, 1, None)}) == {}


def test_validation_predicts_each_fastflow_phase_as_the_model_runs_it(tmp_path):
    """FastFlow keeps its two workers; its rows are per phase: the client's own pipeline (one CPU), the
    accelerator alone, the workers, and the decided split."""
    from repro.pecan.validation import COLUMNS, validation_rows
    from repro.plots import plot_validation

    metrics = _engine_metrics("fastflow", windows=[(TWO, TWO, 1.0)] * 6)
    metrics["spec"].update(placement="fastflow", fixed_remote_workers=2)
    phases = ["PROFILE_LTHP", "PROFILE_GTHP", "PROFILE_RTHP_ELEMENT", "PROFILE_RTHP_BATCH", "OFFLOADED", "OFFLOADED"]
    for window, phase in zip(metrics["windows"], phases):
        window["phase"] = phase
    metrics["fastflow"] = {"decision": {"offload": True, "cut": "BATCH", "ratio_local": 0.25}}
    rows = validation_rows(metrics, CALIBRATION, 32)
    assert [(r["remote_workers"], r["local_workers"], r["phase"], r["windows"]) for r in rows] == [
        (2, 0, "OFFLOADED", 2), (2, 0, "PROFILE_GTHP", 1), (2, 0, "PROFILE_LTHP", 1), (2, 0, "PROFILE_RTHP_BATCH", 1),
        (2, 0, "PROFILE_RTHP_ELEMENT", 1)]
    assert set(rows[0]) == set(COLUMNS)
    # engine-fed (25 ms per element, 2 CPUs shared): the client's pipeline 40/s, the workers 80/s; the
    # split: a quarter local at 40/s sets the pace (160/s) but the bound is 100; GTHP: only the bound
    tf = {r["phase"]: r["model_tf_examples_per_s"] for r in rows}
    assert tf == {"PROFILE_LTHP": 40, "PROFILE_GTHP": 100, "PROFILE_RTHP_ELEMENT": 80, "PROFILE_RTHP_BATCH": 80,
                  "OFFLOADED": 100}
    metrics["fastflow"]["decision"]["ratio_local"] = 0.75  # three quarters local: 40 / 0.75 = 53.3/s
    assert {r["phase"]: r["model_tf_examples_per_s"] for r in validation_rows(metrics, CALIBRATION, 32)}["OFFLOADED"] \
        == pytest.approx(53.33)
    plot_validation(rows, [tmp_path / "v.png"], "Validation", "caption",
                    {"font_size": 8, "width_in": 6, "height_in": 4, "dpi": 80})
    assert (tmp_path / "v.png").stat().st_size > 1000


def test_fastflow_phases_take_the_share_of_the_pipeline_they_read():
    """The client's own pipeline got half its CPU, the workers whole ones: the phase reading the
    client's pipeline is predicted at half (20/s), the workers' phases at theirs (80/s)."""
    from repro.pecan.validation import validation_rows

    metrics = _engine_metrics("fastflow", windows=[(TWO, TWO, 1.0)] * 3)
    metrics["spec"].update(placement="fastflow", fixed_remote_workers=2)
    for window, phase in zip(metrics["windows"], ["PROFILE_LTHP", "PROFILE_RTHP_ELEMENT", "OFFLOADED"]):
        window.update(phase=phase, cpu_share={"collocated": 0.5, TWO[0]: 1.0, TWO[1]: 1.0})
    metrics["fastflow"] = {"decision": {"offload": True, "cut": "ELEMENT", "ratio_local": 0.5}}
    rows = {r["phase"]: r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert rows["PROFILE_LTHP"]["cpu_share"] == 0.5 and rows["PROFILE_LTHP"]["model_tf_examples_per_s"] == 20
    assert rows["PROFILE_RTHP_ELEMENT"]["cpu_share"] == 1 and rows["PROFILE_RTHP_ELEMENT"]["model_tf_examples_per_s"] == 80
    assert rows["OFFLOADED"]["cpu_share"] == pytest.approx(0.8333, abs=1e-4)


def test_validation_caps_by_the_machines_cpus_only_where_the_workers_share_it():
    from repro.pecan.validation import engine_job

    local = engine_job(_engine_metrics(cpus=2), CALIBRATION["resnet"], 32)
    assert local.host_cpus == 2 and local.cost_per_element == 0.025
    assert engine_job(_engine_metrics(worker_hosts=["w1"]), CALIBRATION["resnet"], 32).host_cpus == 0


def test_validation_of_a_run_without_its_measured_pipeline_asks_for_a_rerun():
    from repro.pecan.validation import validation_rows

    with pytest.raises(ReproError, match=r"m.json: no pipeline_cost .* run it again"):
        validation_rows(_engine_metrics(pipeline_cost=False, windows=[(ONE, ONE, 1.0)]), CALIBRATION, 32, "m.json")


def test_validation_summary_and_caption_count_each_model_column(tmp_path):
    from repro.pecan.validation import caption_text, summary, validation_rows
    from repro.plots import plot_validation

    runs = [_engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 0.5)]),
            _engine_metrics("pecan", windows=[(TWO, TWO, 0.5)])]
    rows = [row for metrics in runs for row in validation_rows(metrics, CALIBRATION, 32)]
    # the Pillow-fed model predicts the bound everywhere: nothing of it is tested
    assert summary(rows, model="model").startswith("no deployment below the bound; 3 at the bound (not counted)")
    tf_summary = summary(rows, model="model_tf")
    assert tf_summary.startswith("3 of 3 deployments below the bound within ±15%; largest gap +0%")
    assert tf_summary.endswith("converged within ±1 worker in 2 of 2 modes")
    caption = caption_text(rows, runs)
    assert caption.startswith("validated: 3 of 3 deployments below the bound within ±15%")
    assert "Pillow calibration, a CPU per worker: no deployment below the bound" in caption
    assert "one CPU (autoorder 25.00, declared 25.00 ms CPU per element), the 2 CPUs" in caption
    assert "the share of its CPU each worker measured (1.00-1.00)" in caption
    plot_validation(rows, [tmp_path / "v.png"], "Validation", caption,
                    {"font_size": 8, "width_in": 6, "height_in": 4, "dpi": 80})
    assert (tmp_path / "v.png").stat().st_size > 1000


def _repro(capsys, *argv):
    """`repro ARGV` run in this process (repro.cli.main), as subprocess.run gives a program's result."""
    code, out, err = run_repro(argv, capsys)
    return subprocess.CompletedProcess(["repro", *argv], code, out, err)


def _validate(tmp_path, runs, capsys):
    """`repro pecan validation` on engine runs' metrics (files in tmp_path): the result, the table."""
    paths = []
    for i, metrics in enumerate(runs):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(metrics))
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"pipeline": "resnet", "autoorder_saving": 0.1, **CALIBRATION["resnet"]}))
    style = json.dumps({"font_size": 8, "width_in": 6, "height_in": 4, "dpi": 60})
    result = _repro(capsys, "pecan", "validation", "E", "--metrics", *map(str, paths), "--calibration", str(calibration),
                    "--network-gbps", "32", "--style", style, "--output", str(tmp_path / "v.pdf"),
                    str(tmp_path / "v.png"), "--table", str(tmp_path / "v.csv"))
    with open(tmp_path / "v.csv") as fh:
        return result, list(csv.DictReader(fh))


@pytest.mark.fault
def test_validation_with_every_deployment_at_the_bound_is_not_validated(tmp_path, capsys):
    """Runs that never leave the accelerator's bound (the issue's nine deployments at 172-177
    examples/s, the model at its bound): agreement there tests nothing, so the validation fails."""
    fast = ["127.0.0.1:1", "127.0.0.1:2"]
    runs = [_engine_metrics(windows=[(fast, fast, 0.4)]), _engine_metrics("pecan", windows=[(fast, fast, 0.41)])]
    for metrics in runs:  # 5 ms per element: two workers deliver 400 examples/s, the bound is 100
        metrics["pipeline_cost"]["cpu_s_per_element"] = 0.005
    result, table = _validate(tmp_path, runs, capsys)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == ("repro: error: E: not validated: accelerator-bound everywhere "
                                                      "(0 of 2 deployments below the bound, 3 needed)")
    assert [r["model_tf_below_bound"] for r in table] == ["False", "False"]  # the table shows why
    assert "not validated: accelerator-bound everywhere" in result.stdout


@pytest.mark.fault
def test_validation_with_a_deployment_far_off_the_model_fails(tmp_path, capsys):
    """Three deployments below the bound, one measured at half what the model predicts: 2 of 3
    agree, under the 80% needed."""
    runs = [_engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)]), _engine_metrics("pecan", windows=[(TWO, TWO, 0.5)])]
    result, table = _validate(tmp_path, runs, capsys)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == ("repro: error: E: validation failed: 2 of 3 deployments below the bound "
                                                      "within ±15% (80% needed)")
    assert sorted(float(r["model_tf_vs_engine"]) for r in table) == [0.0, 0.0, 1.0]
    runs[0]["windows"][1]["seconds"] = 0.5  # measured as predicted: validated
    result, _ = _validate(tmp_path, runs, capsys)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("validated: 3 of 3 deployments below the bound within ±15%")


def test_every_run_of_a_pipeline_takes_one_scale_from_its_calibration(tf, pecan_config):
    """The scale is derived from the pipeline's calibrated TF cost (beside a Pillow calibration, or a
    TF one), the same for every mode; a configured scale, or a calibration without the TF cost, gives
    none (the run derives its own)."""
    from repro.pecan.tfdata import cpus_available
    from repro.pecan.tfdata.engine import derive_scale, scale_from_calibration, spec_from_config

    beside = {"ops_measured": "pillow", "tf_ops": {"declared": {"cpu_s_per_element": 0.004}}}
    specs = [spec_from_config(pecan_config, "ResNet50_v2-8", mode) for mode in ("collocated", "cachew", "pecan")]
    expected = derive_scale(0.004, specs[0].accelerator_examples_per_s, 1, 1, cpus_available())["time_scale"]
    assert {scale_from_calibration(spec, beside)["time_scale"] for spec in specs} == {expected}
    assert scale_from_calibration(specs[0], {"ops_measured": "tf", "declared": {"cpu_s_per_element": 0.004}}) == {
        **derive_scale(0.004, specs[0].accelerator_examples_per_s, 1, 1, cpus_available()),
        "source": "the calibration's TF cost of the declared order"}
    assert scale_from_calibration(specs[0], {"ops_measured": "pillow"}) is None
    assert scale_from_calibration(specs[0], None) is None
    configured = spec_from_config(pecan_config, "ResNet50_v2-8", "cachew", time_scale=5.0)
    assert scale_from_calibration(configured, beside) is None


@pytest.mark.fault
@pytest.mark.parametrize("tf_ops", [{"declared": {"cpu_s_per_element": 0}}, {"declared": {}}, [], {"declared": 5},
                                    {"declared": {"cpu_s_per_element": 1e300}}, {"declared": {"cpu_s_per_element": 1e-320}}])
def test_a_calibration_whose_tf_cost_is_not_a_positive_number_is_refused(tmp_path, tf_ops):
    from repro.pecan.run import load_calibrations

    path = tmp_path / "resnet.json"
    path.write_text(json.dumps({"pipeline": "resnet", "autoorder_saving": 0.1, "tf_ops": tf_ops, **CALIBRATION["resnet"]}))
    with pytest.raises(ReproError, match=rf"^--calibration {path}: tf_ops.declared.cpu_s_per_element: expected a "
                                         "positive number of CPU seconds, 1e-09 to 3600$"):
        load_calibrations([path])


def test_the_derived_scale_puts_collocated_below_the_bound_and_the_largest_deployment_at_it():
    from repro.pecan.tfdata.scale import derive_scale  # no TensorFlow needed

    # 4 ms per element: one CPU delivers 250 examples/s, two 500
    two = derive_scale(0.004, 3234.0, 1, 1, 2)
    assert two["collocated_share"] <= 0.6 and two["largest_share"] >= 1
    assert two["demand_examples_per_s"] == pytest.approx((250 / 0.6 * 500) ** 0.5)
    assert two["time_scale"] == pytest.approx(3234.0 / two["demand_examples_per_s"])
    # the same rule on 16 CPUs: a higher demand, so more workers before the bound (a longer curve)
    sixteen = derive_scale(0.004, 3234.0, 1, 1, 16)
    assert sixteen["largest_share"] >= 1 and sixteen["collocated_share"] < two["collocated_share"]
    assert math.ceil(sixteen["demand_examples_per_s"] / 250) >= 3 * math.ceil(two["demand_examples_per_s"] / 250)
    # workers of 2 threads on 3 CPUs: the largest deployment is one worker, 2 CPUs
    assert derive_scale(0.004, 3234.0, 1, 2, 3)["preprocessing_cpus"] == 2


@pytest.mark.fault
@pytest.mark.parametrize("collocated, workers, cpus", [(1, 1, 1), (2, 1, 3), (1, 2, 1)])
def test_too_few_cpus_for_an_input_bound_miniature_is_one_line(collocated, workers, cpus):
    from repro.pecan.tfdata.scale import derive_scale

    with pytest.raises(ReproError, match=rf"^{cpus} CPU\(s\) available \(os.sched_getaffinity\): too few for an "
                                         r"input-bound miniature.*; expected at least \d+ CPUs, or set pecan.tfdata.time_scale$"):
        derive_scale(0.004, 3234.0, collocated, workers, cpus)


@pytest.mark.fault
def test_a_run_on_one_cpu_is_refused_before_it_writes_anything(tf, tmp_path):
    """On one CPU collocated and the largest deployment are the same CPU: no scale makes one
    input-bound and the other reach the bound, and the run says so instead of passing vacuously."""
    result = subprocess.run(["taskset", "-c", "0", str(REPRO), "pecan", "tfdata", "run", "--experiment", "ResNet50_v2-8",
                             "--mode", "cachew", "--out", str(tmp_path / "run"), "--data", str(tmp_path / "data")],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "repro: error: 1 CPU(s) available (os.sched_getaffinity): too few for an input-bound miniature")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_engine_is_checked_against_the_registry(pecan_config):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["pecan"]["engine"] = "simulator"
    with pytest.raises(ReproError, match=r"config: pecan.engine: 'simulator' is not one of \['model', 'tfdata'\]"):
        validate_config(config)


@pytest.mark.fault
def test_a_sweep_beyond_the_cpus_is_refused_at_config_check_naming_the_key(tf):
    cpus = len(os.sched_getaffinity(0))
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["pecan"].update(engine="tfdata", tfdata={"sweep": [0, 1, cpus + 1]})
    with pytest.raises(ReproError, match=rf"^config: pecan.tfdata.sweep: {cpus + 1} remote worker\(s\) of 1 thread\(s\) "
                                         rf"need {cpus + 1} CPUs; {cpus} available \(os.sched_getaffinity\); "
                                         rf"expected at most {cpus}$"):
        validate_config(config)
    config["pecan"]["tfdata"] = {"sweep": [0, 1, -1]}
    with pytest.raises(ReproError, match=r"pecan.tfdata.sweep"):
        validate_config(config)
    config["pecan"]["tfdata"] = {"sweep": [0, 1], "worker_threads": cpus}  # 1 worker of every CPU: fits
    assert validate_config(config)["pecan"]["tfdata"]["sweep"] == [0, 1]
    config["pecan"]["tfdata"] = {}
    assert validate_config(config)["pecan"]["tfdata"]["sweep"] == []  # the default: no sweep


@pytest.mark.fault
@pytest.mark.parametrize("change, expected", [
    (lambda s: s["pecan"]["tfdata"].update(sweep=[0, 4097]), r"--settings: pecan\.tfdata\.sweep\.1: 4097 is greater than"),
    (lambda s: s["pecan"]["tfdata"].update(sweep=[0, "1"]), r"--settings: pecan\.tfdata\.sweep\.1: '1' is not of type"),
    (lambda s: s["pecan"]["tfdata"].update(sweep=[]), r"--settings: pecan\.tfdata\.sweep is empty; expected remote worker"),
    (lambda s: s.pop("pecan"), r"--settings: lacks key 'pecan'"),
    (lambda s: s["pecan"]["modes"].update(other=s["pecan"]["modes"].pop("cachew")), r"unknown mode 'cachew'"),
], ids=["beyond-bound", "string", "empty", "no-pecan", "no-mode"])
def test_the_sweep_rules_settings_are_checked_before_anything_runs(tf, tmp_path, change, expected):
    """`repro pecan tfdata sweep --settings` as the sweep rule passes them, one value broken: one line
    naming the key, exit 1, nothing written."""
    from repro.rulesettings import sweep_settings

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["pecan"].update(engine="tfdata", tfdata={"sweep": [0, 1], "images": 16})
    settings = json.loads(json.dumps(sweep_settings(validate_config(config), "ResNet50_v2-8")))
    change(settings)
    result = subprocess.run([str(REPRO), "pecan", "tfdata", "sweep", "--settings", json.dumps(settings), "--experiment",
                             "ResNet50_v2-8", "--out", str(tmp_path / "sweep")], capture_output=True, text=True)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and re.search(expected, lines[0]), result.stderr
    assert not (tmp_path / "sweep").exists()


@pytest.mark.fault
def test_a_status_check_without_its_dispatcher_says_how_to_start_it_again(tf, tmp_path):
    from repro.pecan.engines import RESTART, engine_service_checks

    checks = engine_service_checks({"engine_service": {"engine": "tfdata", "directory": str(tmp_path / "tfdata")}})
    assert [check["ok"] for check in checks] == [False]
    assert checks[0]["detail"] == f"no tf.data service recorded in {tmp_path / 'tfdata' / 'state.json'}; {RESTART}"
    assert RESTART.startswith("start it again: snakemake cluster_start --forcerun cluster_start")


@pytest.mark.fault
def test_a_sweep_given_no_calibration_of_its_pipeline_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """A calibration of another pipeline would be read for nothing (the first run would derive the
    scale instead of the one the modes' runs share): one line naming the flag and the pipeline."""
    other = tmp_path / "simclr.json"
    other.write_text(json.dumps({"pipeline": "simclr", "autoorder_saving": 0.1, **CALIBRATION["resnet"]}))
    monkeypatch.chdir(REPO)
    result = _repro(capsys, "pecan", "tfdata", "sweep", "--experiment", "ResNet50_v2-8", "--counts", "0",
                    "--calibration", str(other), "--out", str(tmp_path / "sweep"))
    assert result.returncode == 1 and result.stderr == (
        f"repro: error: --calibration {other}: no calibration of pipeline 'resnet', the one ResNet50_v2-8 runs; "
        "expected its calibration JSON\n"), result.stderr
    assert not (tmp_path / "sweep").exists()


@pytest.mark.fault
def test_calibration_ops_is_pillow_or_tf_and_tf_names_the_extra_without_tensorflow(tmp_path, monkeypatch):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert validate_config(copy.deepcopy(config))["calibration"]["ops"] == "pillow"  # the default: as before
    config["calibration"]["ops"] = "cuda"
    with pytest.raises(ReproError, match=r"calibration.ops: 'cuda' is not one of \['pillow', 'tf'\]"):
        validate_config(copy.deepcopy(config))
    config["calibration"]["ops"] = "tf"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    hide_modules(monkeypatch, "tensorflow")  # as where the extra is not installed
    with pytest.raises(ReproError, match=re.escape("calibration.ops: needs the 'tfdata' extra (pip install -e '.[tfdata]')")):
        load_config(tmp_path / "c.yaml")


def test_calibration_in_tf_ops_feeds_the_local_preset(tf, tmp_path):
    """`repro pecan calibrate --ops tf` writes the record the Pillow calibration writes, from the
    TF ops the engine runs, and the local preset relates the pipelines by it."""
    from repro.pecan.presets import pipeline_costs
    from repro.pecan.run import load_calibrations

    out = [tmp_path / "resnet.json", tmp_path / "retinanet.json"]
    result = subprocess.run([str(REPRO), "pecan", "calibrate", "--ops", "tf", "--pipeline", "resnet", "retinanet",
                             "--elements", "4", "--repeats", "3", "-o", *map(str, out)],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    calibrations = load_calibrations(out)
    resnet, retinanet = calibrations["resnet"], calibrations["retinanet"]
    assert resnet["ops_measured"] == "tf" and resnet["declared"]["ops"][0] == "decode"
    assert resnet["declared"]["bytes_out_per_element"] == 224 * 224 * 3 * 4
    for record in (resnet, retinanet):
        for order in ("declared", "autoorder"):
            cost = record[order]
            assert 1e-4 < cost["cpu_s_per_element"] < 1 and len(cost["element_cpu_s"]) == 3
            assert cost["per_reference_kernel"] == pytest.approx(cost["cpu_s_per_element"] / record["reference_kernel"]["cpu_s"])
    # the larger, boxed RetinaNet images cost more than ResNet's crops in TF ops too
    assert retinanet["declared"]["cpu_s_per_element"] > resnet["declared"]["cpu_s_per_element"]
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    costs = pipeline_costs("local", config["pecan"]["cluster"], calibrations)
    assert costs["retinanet"]["declared"] / costs["resnet"]["declared"] == pytest.approx(
        retinanet["declared"]["per_reference_kernel"] / resnet["declared"]["per_reference_kernel"])


def test_the_sweep_is_no_part_of_a_runs_settings(tf):
    """Setting pecan.tfdata.sweep reruns no run: only `repro pecan tfdata sweep` reads it."""
    from repro.rulesettings import run_settings

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["pecan"].update(engine="tfdata", tfdata={"images": 16})
    before = str(run_settings(validate_config(copy.deepcopy(config)), "ResNet50_v2-8", "cachew"))
    config["pecan"]["tfdata"]["sweep"] = [0, 1]
    assert str(run_settings(validate_config(copy.deepcopy(config)), "ResNet50_v2-8", "cachew")) == before


# -- pipelines ---------------------------------------------------------------------------------


def _batches(manifest, order, count=2):
    from repro.pecan.tfdata import ops

    dataset, names = ops.dataset(manifest, order, 4, threads=1)
    return [b for b in dataset.take(count).as_numpy_iterator()], names


def test_resnet_pipeline_in_both_orders_gives_the_same_images(tf, data):
    from repro.pecan.tfdata import ops

    manifest = ops.write_data("resnet", 8, data)
    declared, declared_names = _batches(manifest, "declared")
    reordered, autoorder_names = _batches(manifest, "autoorder")
    assert declared_names == ["decode", "to_float", "random_resized_crop", "resize_224", "random_flip", "normalize"]
    # the float conversion moves after the crop and resize: a different graph
    assert autoorder_names.index("to_float") > autoorder_names.index("resize_224")
    for a, b in zip(declared, reordered):
        assert a["image"].shape == (4, 224, 224, 3) and a["image"].dtype == np.float32
        # same crops and flips (seeded per element); the resize rounds to uint8 in the AutoOrder
        # order, so pixels differ by at most about one grey level (1/255 / std ~ 0.02)
        assert np.abs(a["image"] - b["image"]).max() < 0.05
        assert np.abs(a["image"]).max() > 1.0  # normalised, not still in [0, 1]


def test_retinanet_pipeline_flips_and_scales_the_boxes(tf, data):
    from repro.pecan.tfdata import ops

    manifest = ops.write_data("retinanet", 8, data)
    (batch, *_), names = _batches(manifest, "autoorder", count=1)
    assert batch["image"].shape == (4, 640, 640, 3) and batch["boxes"].shape == (4, 4, 4)
    assert names.index("to_float") < names.index("resize_and_pad_640")  # resize-and-pad inflates: to_float stays before
    source = np.array(manifest["boxes"][:4], np.float32)
    heights = source[:, :, 2] - source[:, :, 0]
    # 640x480 images: the long side fills 640, the short side 480/640 of it
    assert np.allclose(batch["boxes"][:, :, 2] - batch["boxes"][:, :, 0], heights * 0.75, atol=1e-5)
    # the padding (zeros, then normalised) sits below the image
    assert np.allclose(batch["image"][:, 480:], -IMAGENET_MEAN / IMAGENET_STD, atol=1e-5)
    assert not np.allclose(batch["image"][:, 479], -IMAGENET_MEAN / IMAGENET_STD, atol=1e-5)


def test_generated_data_is_written_once_and_deterministic(tf, data):
    from repro.pecan.tfdata import ops

    first = ops.write_data("resnet", 3, data / "again", seed=5)
    mtime = Path(first["files"][0]).stat().st_mtime_ns
    assert ops.write_data("resnet", 3, data / "again", seed=5) == first
    assert Path(first["files"][0]).stat().st_mtime_ns == mtime
    other = ops.write_data("resnet", 3, data / "other", seed=5)
    assert [Path(f).read_bytes() for f in other["files"]] == [Path(f).read_bytes() for f in first["files"]]


# -- the service -------------------------------------------------------------------------------


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
    finally:
        stopped = subprocess.run([str(REPRO), "pecan", "tfdata", "stop", "--state-dir", str(state)],
                                 capture_output=True, text=True, timeout=120)
    assert "stopped 2 process(es)" in stopped.stdout
    assert not any(alive(r["pid"]) and matches(r) for r in records)
    down = _status(state)
    assert down.returncode == 1 and "[FAILED]" in down.stdout


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
    finally:
        service.stop()


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


# -- runs --------------------------------------------------------------------------------------


def _spec(pecan_config, mode, **overrides):
    from repro.pecan.tfdata.engine import spec_from_config

    settings = {"decision_steps": 8, "settle_windows": 3, "max_windows": 40, "images": 16, **overrides}
    return spec_from_config(pecan_config, "ResNet50_v2-8", mode, **settings)


@pytest.mark.fault
def test_a_run_against_a_stopped_dispatcher_does_not_start(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import run

    with pytest.raises(ReproError, match=r"\[FAILED\] no dispatcher running; no run started"):
        run(_spec(pecan_config, "cachew"), tmp_path / "run", data, service_dir=tmp_path / "no-service")
    assert not (tmp_path / "run" / "run.log").exists()


def test_collocated_run_writes_the_artifacts_log(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import run

    spec = _spec(pecan_config, "collocated", settle_windows=4)
    metrics = run(spec, tmp_path / "run", data)
    parsed = parse_log(tmp_path / "run" / "run.log")
    assert (parsed.remote_workers, parsed.local_workers, parsed.samples) == (0, 0, 4)
    # the emulated accelerator bounds it: never faster than one step per step time
    assert 0 < parsed.throughput <= spec.batch_size / metrics["step_time_s"] * 1.05
    assert metrics["throughput"] == parsed.throughput
    assert "ClientHeartbeat" not in (tmp_path / "run" / "run.log").read_text()
    # the run measured its own pipeline before it started: the model's inputs for this run
    cost = metrics["pipeline_cost"]
    assert cost["order"] == "declared" and cost["ops"] == metrics["order"] and cost["threads"] == 1
    assert cost["cpu_s"]["n"] == cost["batches"] and cost["cpu_s"]["q1"] <= cost["cpu_s_per_element"] <= cost["cpu_s"]["q3"]
    assert 0 < cost["cpu_s_min"] <= cost["cpu_s_per_element"] < 1
    assert cost["bytes_per_element"] == 224 * 224 * 3 * 4  # a float32 image
    assert metrics["cpus"] == len(os.sched_getaffinity(0))
    # the share of its CPU the pinned client got, per window (the engine-fed model's CPUs)
    assert all(0 < w["cpu_share"]["collocated"] <= 1 for w in metrics["windows"])
    assert metrics["scale"]["collocated_share"] <= 0.6 <= 1 <= metrics["scale"]["largest_share"]


def test_cachew_starts_real_workers_and_the_parser_reads_the_worker_set(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import run

    metrics = run(_spec(pecan_config, "cachew", max_remote_workers=2), tmp_path / "run", data)
    log = (tmp_path / "run" / "run.log").read_text()
    parsed = parse_log(tmp_path / "run" / "run.log")
    # Cachew scales up from one worker: a second one joins, with its own address
    assert metrics["decisions"][0]["remote"] == 2
    assert len({line.split("Worker Address: ")[1].split(";")[0] for line in log.splitlines()
                if "Worker Address" in line}) >= 2
    assert parsed.converged and parsed.remote_workers in (1, 2) and parsed.local_workers == 0
    assert metrics["remote_workers"] == parsed.remote_workers
    # the transfer probe: a float32 image per element, sent and received at some CPU per byte
    transfer = metrics["transfer_cost"]
    assert transfer["bytes_per_element"] == metrics["pipeline_cost"]["bytes_per_element"] == 224 * 224 * 3 * 4
    assert transfer["batches"] >= 8 and 0 < transfer["send_s_per_byte"] < 1e-7 and 0 < transfer["receive_s_per_byte"] < 1e-7
    for window in metrics["windows"]:  # each serving worker's CPU share, measured on this machine
        assert set(window["cpu_share"]) <= set(window["workers"]) | set(window["workers_after"])
        assert all(0 < share <= 1 for share in window["cpu_share"].values())
    assert any(window["cpu_share"] for window in metrics["windows"])
    # every worker the run started has been stopped
    service_log_dir = tmp_path / "run" / "service"
    assert not (service_log_dir / "state.json").exists()


def test_a_sweep_holds_each_count_of_remote_workers_at_one_scale(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import sweep
    from repro.pecan.validation import validation_rows

    spec = dataclasses.replace(_spec(pecan_config, "cachew", settle_windows=2, max_windows=6), decision_steps=0)
    runs = sweep(spec, [0, 2], tmp_path / "sweep", data)
    assert [(m["spec"]["placement"], m["remote_workers"]) for m in runs] == [("collocated", 0), ("fixed", 2)]
    assert runs[0]["spec"]["time_scale"] == runs[1]["spec"]["time_scale"] == runs[0]["scale"]["time_scale"]
    assert runs[1]["scale"] == runs[0]["scale"]  # the first count's derived scale, recorded by each
    held = [w for w in runs[1]["windows"] if sorted(w["workers"]) == sorted(w["workers_after"])]
    assert held and all(len(w["workers"]) == 2 for w in held)
    assert not (tmp_path / "sweep" / "2" / "service" / "state.json").exists()  # its service stopped
    rows = validation_rows(runs[1], {"resnet": {o: {"cpu_s_per_element": 0.005, "bytes_out_per_element": 1.0}
                                                for o in ("declared", "autoorder")}}, 32)
    assert [(r["mode"], r["remote_workers"]) for r in rows] == [("sweep", 2)]


@pytest.mark.fault
def test_a_worker_killed_mid_run_leaves_the_run_going_on_the_others(tf, tmp_path, pecan_config, data):
    """On a service started beforehand (as the workflow's cluster_start will): the run starts its
    workers there, one is killed, the run goes on; afterwards the dispatcher still runs and the
    run's workers are gone."""
    from repro.pecan.tfdata.engine import run
    from repro.pecan.tfdata.service import Service

    spec = _spec(pecan_config, "short", max_remote_workers=2, max_local_workers=0, max_windows=12,
                 settle_windows=12)
    assert (spec.fixed_remote_workers, spec.fixed_local_workers) == (2, 0)
    killed = []

    def kill_one(window):
        if len(window.workers_after) == 2 and not killed:
            victim = Service(tmp_path / "service").state["workers"][0]
            assert matches(victim)
            os.kill(victim["pid"], signal.SIGKILL)
            killed.append(victim)

    service = Service.start(tmp_path / "service")
    try:
        metrics = run(spec, tmp_path / "run", data, service_dir=tmp_path / "service", on_window=kill_one)
        after = Service(tmp_path / "service")
        assert after.dispatcher_running() and after.state["workers"] == []
    finally:
        service.stop()
    assert killed, "both workers never served together"
    assert len(metrics["windows"]) == 12  # the run went on to its end
    parsed = parse_log(tmp_path / "run" / "run.log")
    assert (parsed.remote_workers, parsed.local_workers) == (1, 0)
    assert metrics["windows"][-1]["workers_after"] != []


@pytest.mark.fault
@pytest.mark.parametrize("flag, value, message", [
    ("--batch-size", "0", "--batch-size 0: expected a positive whole number"),
    ("--max-windows", "0", "--max-windows 0: expected a positive whole number"),
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


# -- FastFlow on the engine --------------------------------------------------------------------

FASTFLOW_PROFILES = ["PROFILE_LTHP", "PROFILE_GTHP", "PROFILE_RTHP_ELEMENT", "PROFILE_RTHP_BATCH"]


def test_fastflows_split_reads_its_share_from_the_clients_pipeline(tf):
    from repro.pecan.tfdata.engine import local_share

    for ratio, local in ((0.3, 30), (0.0, 0), (1.0, 100), (4 / 7, 57)):
        choices = list(local_share(ratio).take(100).as_numpy_iterator())
        assert choices.count(0) == local and set(choices) <= {0, 1}, ratio
    # evenly spread: every 10 items hold 3 of the client's own at 0.3
    choices = list(local_share(0.3).take(100).as_numpy_iterator())
    assert all(choices[i:i + 10].count(0) == 3 for i in range(0, 100, 10))


@pytest.mark.parametrize("time_scale, decided", [(3.0, "OFFLOADED"), (60.0, "LOCAL_ONLY")])
def test_fastflow_profiles_once_decides_once_and_keeps_its_workers(tf, tmp_path, pecan_config, data, time_scale, decided):
    """A bound far above what the client's one CPU makes (time scale 3): FastFlow offloads and the
    client reads both its own pipeline and the service's; a bound the client keeps up with (60): it
    does not. Either way its two workers run, and are billed, from start to end."""
    from repro.pecan.costs import cost_row
    from repro.pecan.policies import fastflow_decide
    from repro.pecan.tfdata.engine import run

    spec = _spec(pecan_config, "fastflow", time_scale=time_scale)
    assert (spec.placement, spec.fixed_remote_workers) == ("fastflow", 2)
    metrics = run(spec, tmp_path / "run", data)
    assert [d["state"] for d in metrics["decisions"]] == FASTFLOW_PROFILES[1:] + [decided]
    phases = [w["phase"] for w in metrics["windows"]]
    assert phases[:4] == FASTFLOW_PROFILES and set(phases[4:]) == {decided} and len(phases) >= 4 + spec.settle_windows
    assert all(len(w["workers"]) == len(w["workers_after"]) == 2 for w in metrics["windows"])
    # the decision is FastFlow's rule on what the engine measured: throughput and the client's CPU per profile
    ff = metrics["fastflow"]
    profiles, cycles = ff["profiles"], ff["cycles"]
    assert set(profiles) == set(FASTFLOW_PROFILES) and set(cycles) == set(FASTFLOW_PROFILES)
    expected = fastflow_decide(profiles["PROFILE_LTHP"], profiles["PROFILE_GTHP"],
                               {cut: (profiles[f"PROFILE_RTHP_{cut}"], cycles[f"PROFILE_RTHP_{cut}"])
                                for cut in ("ELEMENT", "BATCH")}, cycles["PROFILE_LTHP"])
    assert ff["decision"]["offload"] == expected.offload == (decided == "OFFLOADED")
    assert ff["decision"]["ratio_local"] == pytest.approx(expected.ratio_local)
    if decided == "OFFLOADED":
        assert 0 < expected.ratio_local < 1 and expected.cut in ("ELEMENT", "BATCH")
        # the host makes batches itself only in the local profile
        assert cycles["PROFILE_RTHP_BATCH"] < cycles["PROFILE_LTHP"]
    # the log: the profiles as info lines, training throughput only after the decision, two workers
    log = (tmp_path / "run" / "run.log").read_text()
    assert [line.split("FastFlow profile ")[1].split(":")[0] for line in log.splitlines()
            if "FastFlow profile" in line] == FASTFLOW_PROFILES
    parsed = parse_log(tmp_path / "run" / "run.log")
    assert (parsed.remote_workers, parsed.local_workers, parsed.converged) == (2, 0, True)
    assert parsed.samples == len(phases) - 4
    assert metrics["throughput"] <= spec.accelerator_examples_per_s / spec.time_scale * 1.05
    row = cost_row(parsed, "fastflow", "resnet", pecan_config["models"]["resnet"], 4.96, 0.427319)
    assert row["worker_cost"] == pytest.approx(2 * row["epoch_time"] / 3600 * 0.427319)
    assert not (tmp_path / "run" / "service" / "state.json").exists()  # every worker stopped
