"""The tf.data service engine (repro.pecan.tfdata): TF pipelines, real dispatcher and worker
processes, miniature runs whose logs the artifact's parser reads.

Needs the 'tfdata' extra (TensorFlow); without it these tests are skipped, unless
REPRO_REQUIRE_TFDATA=1 (as in CI), where that is a failure.
"""

import copy
import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from repro.config import load_config, validate_config
from repro.errors import ReproError
from repro.pecan.pipelines import IMAGENET_MEAN, IMAGENET_STD

from support import TINY, copy_workflow, hide_modules, run_repro, sleeper, snakemake

REPO = Path(__file__).resolve().parents[1]
REPRO = Path(sys.executable).parent / "repro"


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
def test_tensorflow_is_imported_without_keras_which_stays_importable(tf):
    """The engine's processes skip Keras' eager load inside TensorFlow's import (it never uses it);
    Keras still imports afterwards for whatever asks for it."""
    code = ("import sys; from repro.pecan.tfdata import tensorflow; tf = tensorflow(); "
            "print('keras.src' in sys.modules, any(type(f).__name__ == '_WithoutKeras' for f in sys.meta_path)); "
            "import keras; print(hasattr(keras, 'layers'), len(list(tf.data.Dataset.range(3))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False", "True", "3"], out.stdout


SERVERS = ("import sys, time; from repro.pecan.tfdata import service_servers; s = service_servers(); "
           "d = s.DispatchServer(s.DispatcherConfig(port=0)); port = d._server.bound_port(); "
           "w = s.WorkerServer(s.WorkerConfig(dispatcher_address=f'localhost:{port}', port=0, heartbeat_interval_ms=100)); "
           "deadline = time.monotonic() + 30\n"
           "while d._num_workers() < 1 and time.monotonic() < deadline: time.sleep(0.05)\n"
           "print(d._num_workers(), 'tensorflow.python.eager.context' in sys.modules, 'keras' in sys.modules)")


@pytest.mark.parametrize("layout", ["as installed", "another"])
def test_the_service_servers_load_without_the_rest_of_tensorflow(tf, layout):
    """A dispatcher and a worker from service_servers(): the worker registers, and neither TensorFlow's
    eager runtime nor Keras was loaded (the servers' processes spend 0.3 s of CPU on it, not 2.5).
    Where the servers' module is not where TensorFlow 2.21 keeps it, the whole of TensorFlow is
    imported instead. Pipelines served this way: test_tfdata_runs, test_tfdata_service."""
    hide = "import sys; sys.modules['tensorflow.python.data.experimental.service.server_lib'] = None; " \
        if layout == "another" else ""
    out = subprocess.run([sys.executable, "-c", hide + SERVERS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == (["1", "False", "False"] if layout == "as installed" else ["1", "True", "False"])


@pytest.mark.parametrize("pipeline", ["resnet", "retinanet"])
def test_a_pipeline_leaves_no_generated_source_in_the_temporary_directory(tf, tmp_path, pipeline):
    """Every map of a pipeline (either order) and of the engine's datasets is traced as written: AutoGraph
    wrote about a dozen __autograph_generated_file*.py per process to the temporary directory, removed
    at a normal exit only, so every engine process ended by a signal left them behind."""
    code = ("from repro.pecan.tfdata import engine, ops; import os, sys, tempfile; "
            f"m = ops.write_data({pipeline!r}, 4, sys.argv[1]); "
            "[next(iter(ops.dataset(m, order, 2, 1)[0])) for order in ('declared', 'autoorder')]; "
            "next(iter(engine.local_share(0.5))); print(sorted(os.listdir(tempfile.gettempdir())))")
    temp = tmp_path / "temp"
    temp.mkdir()
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "data")], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TMPDIR": str(temp)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "[]\n"


@pytest.mark.fault
def test_more_workers_than_the_memory_holds_are_refused_before_any_starts(tf, tmp_path, monkeypatch, capsys):
    """`repro pecan tfdata start --workers 4096` on this machine: each worker holds about 500 MB once
    TensorFlow is loaded, and they were started one after another until memory ran out."""
    from repro.pecan.tfdata import WORKER_MEMORY_MB, check_worker_memory

    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: 4096000 kB\nMemAvailable: {3 * WORKER_MEMORY_MB * 1024} kB\n")
    check_worker_memory(3, "--workers 3", meminfo)
    with pytest.raises(ReproError, match=rf"^--workers 4: 4 worker process\(es\) need about {4 * WORKER_MEMORY_MB} MB "
                                         rf".*; {3 * WORKER_MEMORY_MB} MB available \(MemAvailable\); expected at most 3$"):
        check_worker_memory(4, "--workers 4", meminfo)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["pecan", "tfdata", "start", "--state-dir", "sd", "--workers", "4096"], capsys)
    assert (code, out) == (1, "") and err.startswith("repro: error: --workers 4096: 4096 worker process(es) need"), err
    assert not (tmp_path / "sd").exists()


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


SETTLING_S = 60.0  # the seconds of the windows _engine_metrics adds to be left out


def _given(metrics):
    """The windows a test gave _engine_metrics, without the ones it added to be left out."""
    return [window for window in metrics["windows"] if window["seconds"] != SETTLING_S]


def _engine_metrics(mode="cachew", windows=(), pipeline_cost=True, cpus=2, worker_hosts=(), send=0.0, receive=0.0,
                    served=None, settle=True):
    """A tf.data engine run's metrics.json as the validation reads it (no TensorFlow needed); `send`
    and `receive`: the transfer probe's CPU seconds per byte; `served`: its worker's CPU seconds per
    element serving the pipeline (none: a run from before the probe measured it). `windows`: (workers,
    workers_after, seconds[, FastFlow's phase]). `settle`: a slow window (a minute) comes first and
    after each change between windows, of workers or phase, as the validation leaves out (the
    pipeline's warm-up, or a stopped worker's buffer drained)."""
    windows = [(*window, "")[:4] for window in windows]
    if settle:
        settled, before = [], None
        for window in windows:
            if before is None or (window[0], window[3]) != (before[1], before[3]):
                settled.append((window[0], window[0], SETTLING_S, window[3]))
            settled.append(before := window)
        windows = settled
    spec = {"experiment": "E", "mode": mode, "placement": "cachew" if mode == "cachew" else "autoplacement",
            "autoorder": mode == "pecan", "pipeline": "resnet", "batch_size": 10, "decision_steps": 4,
            "accelerator_examples_per_s": 1000.0, "time_scale": 10.0, "worker_threads": 1, "collocated_threads": 1,
            "max_remote_workers": 3, "max_local_workers": 2, "fixed_remote_workers": 0, "fixed_local_workers": 0,
            "cachew_threshold_up": 0.0, "client_cost": 4.96, "worker_cost": 0.43, "max_windows": 20, "seed": 0}
    metrics = {"engine": "tfdata", "spec": spec, "remote_workers": 2, "local_workers": 0, "worker_hosts": list(worker_hosts),
               "windows": [{"steps": 4, "seconds": s, "workers": w, "workers_after": a, **({"phase": p} if p else {})}
                           for w, a, s, p in windows]}
    if pipeline_cost:  # 25 ms per element: one 1-CPU worker 40 examples/s, the bound 100
        metrics.update(cpus=cpus, pipeline_cost={"order": "autoorder" if spec["autoorder"] else "declared",
                                                 "cpu_s_per_element": 0.025, "bytes_per_element": 1000.0},
                       transfer_cost={"send_s_per_byte": send, "receive_s_per_byte": receive,
                                      "worker_s_per_element": send * 1000, "client_s_per_element": receive * 1000,
                                      **({"served_s_per_element": served} if served else {})})
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


def test_a_workers_cost_measured_serving_the_pipeline_is_what_the_model_gives_it():
    """The probe's worker served the pipeline at 50 ms of CPU per element (more than the 25 ms
    pipeline plus 5 ms sending, measured apart): one worker 20 examples/s, two 40; the receiving
    client on the same 2 CPUs caps them at 2 / 60 ms = 33.3."""
    from repro.pecan.validation import caption_text, validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)], send=5e-6, receive=1e-5, served=0.05)
    rows = {(r["remote_workers"], r["local_workers"]): r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert rows[1, 0]["model_tf_examples_per_s"] == 20
    assert rows[2, 0]["model_tf_examples_per_s"] == pytest.approx(33.33)
    assert "the probe's worker serving the run's pipeline: 50.00 ms" in caption_text(list(rows.values()), [metrics])


def test_the_caption_says_what_the_machine_lets_the_modes_reach(tmp_path, capsys):
    """The demand is 100 examples/s, collocated's one CPU at 25 ms per element delivers 40 (40%).
    On 2 CPUs a worker serving at 50 ms and the client receiving at 10 ms deliver at most
    2 / 60 ms = 33.3 (33%): no mode can beat collocated, and the regime does not fit. On 16 CPUs at
    30 ms, 3 + 2 workers could make 166.7 but deliver the demand, 100 (2.5x collocated), and it
    does. A collocated that makes more than the demand (2.5 ms) is not input-bound: no word of a
    regime that does not fit. Runs of machines of different sizes give no limits."""
    from repro.pecan.validation import limits_text, machine_limits

    small = _engine_metrics(windows=[(ONE, ONE, 1.0)], receive=1e-5, served=0.05)
    limits = machine_limits([small], CALIBRATION, 32)
    assert limits["collocated"] == [0.4, 0.4]
    assert limits["largest"] == [pytest.approx(1 / 3)] * 2
    text = limits_text(limits)
    assert "On these 2 CPUs the engine-fed model lets collocated deliver 40% of the accelerator's demand and the " \
           "largest deployment 33% (the pipeline 25.00 ms CPU per element in-process, a worker serving it 50.00 ms, " \
           "the client receiving it 10.00 ms): no mode delivers more than 0.83x collocated's throughput" in text
    assert "falls short of the bound while collocated is input-bound" in text
    assert "every mode with workers spends more accelerator time than collocated" in text
    large = _engine_metrics("pecan", windows=[(ONE, ONE, 1.0)], cpus=16, served=0.03)
    limits = machine_limits([large], CALIBRATION, 32)
    assert limits["largest"] == [1.0, 1.0]
    text = limits_text(limits)
    assert "the largest deployment 100%" in text and "more than 2.50x collocated's" in text
    assert "falls short" not in text and "collocated costs at most that multiple" in text
    assert machine_limits([small, large], CALIBRATION, 32) is None  # 2 and 16 CPUs: neither machine's
    swept = _engine_metrics("sweep", windows=[(ONE, ONE, 1.0)], receive=1e-5, served=0.05)
    swept["spec"].update(placement="fixed", max_remote_workers=1, max_local_workers=0, fixed_remote_workers=1)
    assert machine_limits([small, swept], CALIBRATION, 32) == machine_limits([small], CALIBRATION, 32)  # its count only
    cheap = _engine_metrics(windows=[(ONE, ONE, 1.0)], receive=1e-5, served=0.5)
    cheap["pipeline_cost"]["cpu_s_per_element"] = 0.0025
    limits = machine_limits([cheap], CALIBRATION, 32)
    assert limits["collocated"] == [1.0, 1.0] and limits["largest"] == [pytest.approx(2 / 0.51 / 100)] * 2
    text = limits_text(limits)
    assert "collocated deliver 100%" in text and "falls short" not in text
    assert "every mode with workers spends more accelerator time than collocated" in text
    # collocated alone probes no worker; workers on other hosts are not this machine's
    collocated = _engine_metrics("collocated", windows=[([], [], 1.0)])
    del collocated["transfer_cost"]
    assert machine_limits([collocated, _engine_metrics(worker_hosts=["w1"], served=0.05)], CALIBRATION, 32) is None
    assert limits_text(None) == ""
    # `repro pecan validation` prints it and captions the figure with it
    result, _ = _validate(tmp_path, [small], capsys)
    assert "falls short of the bound while collocated is input-bound" in result.stdout


@pytest.mark.fault
@pytest.mark.parametrize("edit, error", [
    (lambda m: m.update(cpus=0), r"m.json: cpus: expected the whole number of CPUs the run used, from 1 to 65536"),
    (lambda m: m.update(cpus=True), r"m.json: cpus: expected the whole number"),
    (lambda m: m.update(cpus="2"), r"m.json: cpus: expected the whole number"),
    (lambda m: m["transfer_cost"].update(receive_s_per_byte=-1e-5),
     r"m.json: transfer_cost.receive_s_per_byte: expected a number of seconds from 0 to 60"),
    (lambda m: m["transfer_cost"].update(served_s_per_element=1e300),
     r"m.json: transfer_cost.served_s_per_element: expected a number of seconds from 0 to 60"),
    (lambda m: m["transfer_cost"].update(served_s_per_element=True), r"m.json: transfer_cost.served_s_per_element"),
    (lambda m: m.update(transfer_cost=[1]), r"m.json: transfer_cost: expected an object"),
    (lambda m: m["transfer_cost"].pop("worker_s_per_element"), r"m.json: transfer_cost.worker_s_per_element"),
    (lambda m: m["pipeline_cost"].update(cpu_s_per_element=1e300),
     r"m.json: pipeline_cost.cpu_s_per_element: expected a positive number of seconds, at most 60"),
    (lambda m: m["pipeline_cost"].update(bytes_per_element=0), r"m.json: pipeline_cost.bytes_per_element"),
    (lambda m: m["spec"].update(worker_threads=0), r"m.json: spec.worker_threads: expected a whole number from 1"),
    (lambda m: m["spec"].update(max_remote_workers="3"), r"m.json: spec.max_remote_workers: expected a whole number"),
], ids=["cpus-0", "cpus-bool", "cpus-text", "receive-negative", "served-huge", "served-bool", "transfer-list",
        "transfer-field-missing", "cost-huge", "bytes-0", "threads-0", "max-remote-text"])
def test_a_run_whose_measurements_are_impossible_is_named_not_captioned(edit, error):
    """Hand-edited metrics.json: a CPU count of 0 or True, a negative or 10^300 cost per element or
    byte, a boolean cost, or a count given as text reached the caption's machine limits ("On these
    0 CPUs", "the client receiving it -10.00 ms", a 300-digit multiple) or a TypeError."""
    from repro.pecan.validation import validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 1.0)], receive=1e-5, served=0.05)
    edit(metrics)
    with pytest.raises(ReproError, match=error):
        validation_rows(metrics, CALIBRATION, 32, "m.json")


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


@pytest.mark.fault
def test_validation_refuses_a_copy_of_a_run(tmp_path, capsys):
    """Copies of one run's metrics.json (not the same file) each counted as deployments: four copies met
    the minimum of three deployments from one run. Runs of one mode with other seeds are other runs."""
    run = _engine_metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 1.0)])
    other_seed = {**run, "spec": {**run["spec"], "seed": 1}}
    result, rows = _validate(tmp_path, [run, other_seed], capsys)
    assert len(rows) == 4
    (tmp_path / "v.csv").unlink()
    (tmp_path / "m2.json").write_bytes((tmp_path / "m0.json").read_bytes())
    result = _repro(capsys, "pecan", "validation", "E", "--metrics", str(tmp_path / "m0.json"), str(tmp_path / "m2.json"),
                    "--calibration", str(tmp_path / "calibration.json"), "--network-gbps", "32", "--style", "{}",
                    "--output", str(tmp_path / "v.pdf"), str(tmp_path / "v.png"), "--table", str(tmp_path / "v.csv"))
    assert (result.returncode, result.stderr) == (1, f"repro: error: --metrics {tmp_path / 'm2.json'}: the same run as "
                                                     f"{tmp_path / 'm0.json'} (the same spec: mode 'cachew', seed 0); "
                                                     "expected each run once\n")
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


def test_validation_leaves_out_a_runs_first_window_and_the_one_after_a_change_between_windows():
    """RetinaNet's Pecan run: its first window (the pipeline warming up) ran at 40 of the 50 examples/s
    its worker gave later, and the window after a decision stopped a worker at 1.4x the settled rate
    (the client drained that worker's buffer); both were the only windows of their deployments."""
    from repro.pecan.validation import validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 2.0), (ONE, ONE, 1.0), (THREE, THREE, 0.5), (TWO, TWO, 0.3),
                                       (TWO, TWO, 0.5)], settle=False)
    rows = {(r["remote_workers"], r["local_workers"]): r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert sorted(rows) == [(1, 0), (2, 0)]  # three workers: one window, the first after a change
    assert (rows[1, 0]["windows"], rows[1, 0]["engine_examples_per_s"]) == (1, 40)
    assert (rows[2, 0]["windows"], rows[2, 0]["engine_examples_per_s"]) == (1, 80)
    # a run none of whose windows is left: the caption names its mode, which the figure leaves out
    from repro.pecan.validation import caption_text

    changing = _engine_metrics("pecan", windows=[(ONE, TWO, 1.0), (TWO, THREE, 1.0)], settle=False)
    assert validation_rows(changing, CALIBRATION, 32) == []
    text = caption_text(list(rows.values()), [metrics, changing])
    assert text.endswith(" No settled deployment in the run(s) of pecan: each window was a run's first, or in or after "
                         "a change of its workers or FastFlow phase.")
    assert "No settled deployment" not in caption_text(list(rows.values()), [metrics])


def test_validation_gives_each_worker_the_cpu_share_it_measured():
    """A worker that got half its CPU (other work on the machine) delivers half: the engine-fed
    model predicts from the share each window measured, a worker not measured (on another host)
    counts a whole CPU."""
    from repro.pecan.validation import validation_rows

    metrics = _engine_metrics(windows=[(ONE, ONE, 2.0), (TWO, TWO, 1.0), (TWO, TWO, 1.0)])
    given = _given(metrics)
    given[0]["cpu_share"] = {ONE[0]: 0.5}
    given[1]["cpu_share"] = {TWO[0]: 0.5, TWO[1]: 0.5}
    given[2]["cpu_share"] = {TWO[0]: 0.5}  # TWO[1] on another host: a whole CPU
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


class _ShortService:
    """A service of which one remote worker serves, whatever the deployment asks for."""

    state = {"workers": []}

    def serving(self):
        return ["127.0.0.1:1"]

    def describe_workers(self):
        return ["127.0.0.1:1 (pid 1): 1 task(s)", "pid 2: no report yet"]


class _Deployment:
    def __init__(self):
        self.target = (0, 0)

    def apply(self, remote, local, wait=False):
        self.target = remote, local


def test_the_service_says_of_each_worker_whether_it_serves_and_if_not_why(tmp_path):
    """What a run that ends short of its deployment says of the workers: one reports a task, one runs
    without any (its last report 10 s old), one has not reported yet, one's report is damaged, one has
    ended; the one that ended is named although serving(), which the run calls each window, has
    dropped its record."""
    import time

    from repro.pecan.tfdata.service import Service
    from repro.processes import OWNER_TOKEN, describe, owner_environment, write_record

    directory = tmp_path / "service"
    directory.mkdir()
    procs, entries = [], []
    try:
        for slot in range(5):
            marks = owner_environment(directory)
            procs.append(sleeper(env={**os.environ, **marks}))
            entries.append({**describe(procs[-1].pid, "tfdata worker", marks[OWNER_TOKEN]), "kind": "remote",
                            "slot": slot, "status": str(directory / f"worker-{slot}.status.json")})
        for slot, tasks, age in ((0, 1, 0.0), (1, 0, 10.0), (4, 1, 0.0)):
            write_record(entries[slot]["status"], {"role": "worker", "address": f"localhost:500{slot}", "tasks": tasks,
                                                   "pid": procs[slot].pid, "at": time.time() - age})
        write_record(entries[3]["status"], {"role": "worker", "address": "localhost:5003", "pid": procs[3].pid})
        procs[4].kill()
        procs[4].wait()
        (directory / "state.json").write_text(json.dumps({
            "dispatcher": {**entries[0], "address": "localhost:4999"}, "workers": entries}))
        service = Service(directory)
        serving = service.serving()
        lines = service.describe_workers()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert serving == ["localhost:5000"]
    assert len(lines) == 5
    assert lines[0] == f"pid {procs[4].pid}: not running"
    assert lines[1].startswith(f"localhost:5000 (pid {procs[0].pid}): 1 task(s), reported 0.")
    assert re.fullmatch(rf"localhost:5001 \(pid {procs[1].pid}\): 0 task\(s\), reported 1\d\.\d s ago", lines[2])
    assert lines[3] == f"pid {procs[2].pid}: no report yet (starting, or not registered with the dispatcher)"
    assert lines[4] == f"pid {procs[3].pid}: its report is unreadable"


@pytest.mark.parametrize("asked, ends", [((2, 0), "waits, then ends"), ((1, 0), "settles")])
def test_a_run_waits_for_the_deployment_its_policy_asked_for_at_most_a_while(tf, pecan_config, monkeypatch, capsys,
                                                                            tmp_path, asked, ends):
    """A policy asks for 2 workers and only 1 ever serves (a worker that runs but is never given the
    job's task): the run no longer waits to its last window (80) but ends once DEPLOYMENT_WAIT_S
    have passed, at the deployment that served, and says so; where the deployment is the one asked
    for, the run settles as before."""
    import itertools
    from datetime import datetime

    from repro.pecan.logs import parse_log
    from repro.pecan.policies import FixedPlacement
    from repro.pecan.tfdata import engine
    from support import engine_spec

    monkeypatch.setattr(engine, "DEPLOYMENT_WAIT_S", 0.3)
    spec = engine_spec(pecan_config, "cachew", time_scale=20, decision_steps=1, max_windows=80, batch_size=16)  # 0.1 s windows
    windows, decisions = engine.train(spec, itertools.repeat(None), _ShortService(), FixedPlacement(*asked),
                                      _Deployment())
    if ends == "settles":
        assert len(windows) == 1 + spec.settle_windows and "note" not in decisions[-1]  # the first applies it
        return
    assert 2 < len(windows) < 80
    assert decisions[-1]["note"].startswith("1 + 0 workers served for 0 s after the policy asked for 2 + 0: the run "
                                            "ends at the deployment that served")
    assert decisions[-1]["note"].endswith("(workers: 127.0.0.1:1 (pid 1): 1 task(s); pid 2: no report yet)")
    assert capsys.readouterr().err.startswith("repro: ResNet50_v2-8 cachew: 1 + 0 workers served for")
    # the run's log says so too, and still reads as the artifact's
    log = tmp_path / "run.log"
    engine.write_log(spec, windows, log, datetime.now(), ["decode"], [decisions[-1]["note"]])
    assert f"repro tfdata engine: {decisions[-1]['note']}" in log.read_text().splitlines()[-2]
    assert parse_log(log).remote_workers == 1


def test_validation_predicts_each_fastflow_phase_as_the_model_runs_it(tmp_path):
    """FastFlow keeps its two workers; its rows are per phase: the client's own pipeline (one CPU), the
    accelerator alone, the workers, and the decided split. Each phase makes the client's dataset
    anew: its first window is left out (as the engine runs them, a profile is one window)."""
    from repro.pecan.validation import COLUMNS, validation_rows
    from repro.plots import plot_validation

    phases = ["PROFILE_LTHP", "PROFILE_GTHP", "PROFILE_RTHP_ELEMENT", "PROFILE_RTHP_BATCH", "OFFLOADED", "OFFLOADED"]
    metrics = _engine_metrics("fastflow", windows=[(TWO, TWO, 1.0, phase) for phase in phases])
    metrics["spec"].update(placement="fastflow", fixed_remote_workers=2)
    metrics["fastflow"] = {"decision": {"offload": True, "cut": "BATCH", "ratio_local": 0.25}}
    rows = validation_rows(metrics, CALIBRATION, 32)
    assert [(r["remote_workers"], r["local_workers"], r["phase"], r["windows"]) for r in rows] == [
        (2, 0, "OFFLOADED", 2), (2, 0, "PROFILE_GTHP", 1), (2, 0, "PROFILE_LTHP", 1), (2, 0, "PROFILE_RTHP_BATCH", 1),
        (2, 0, "PROFILE_RTHP_ELEMENT", 1)]
    unsettled = _engine_metrics("fastflow", windows=[(TWO, TWO, 1.0, phase) for phase in phases], settle=False)
    unsettled["spec"].update(placement="fastflow", fixed_remote_workers=2)
    unsettled["fastflow"] = metrics["fastflow"]
    assert [(r["phase"], r["windows"]) for r in validation_rows(unsettled, CALIBRATION, 32)] == [("OFFLOADED", 1)]
    assert set(rows[0]) == set(COLUMNS)
    # engine-fed (25 ms per element, 2 CPUs shared): the client's pipeline 40/s, the workers 80/s; the
    # split: a quarter local at 40/s would allow 160/s, three quarters remote at 80/s 107/s, but the
    # client's pipeline and the workers share the 2 CPUs: 80/s; GTHP: only the bound (100)
    tf = {r["phase"]: r["model_tf_examples_per_s"] for r in rows}
    assert tf == {"PROFILE_LTHP": 40, "PROFILE_GTHP": 100, "PROFILE_RTHP_ELEMENT": 80, "PROFILE_RTHP_BATCH": 80,
                  "OFFLOADED": 80}
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

    metrics = _engine_metrics("fastflow", windows=[(TWO, TWO, 1.0, phase) for phase in
                                                   ("PROFILE_LTHP", "PROFILE_RTHP_ELEMENT", "OFFLOADED")])
    metrics["spec"].update(placement="fastflow", fixed_remote_workers=2)
    for window in _given(metrics):
        window.update(cpu_share={"collocated": 0.5, TWO[0]: 1.0, TWO[1]: 1.0})
    metrics["fastflow"] = {"decision": {"offload": True, "cut": "ELEMENT", "ratio_local": 0.5}}
    rows = {r["phase"]: r for r in validation_rows(metrics, CALIBRATION, 32)}
    assert rows["PROFILE_LTHP"]["cpu_share"] == 0.5 and rows["PROFILE_LTHP"]["model_tf_examples_per_s"] == 20
    assert rows["PROFILE_RTHP_ELEMENT"]["cpu_share"] == 1 and rows["PROFILE_RTHP_ELEMENT"]["model_tf_examples_per_s"] == 80
    assert rows["OFFLOADED"]["cpu_share"] == pytest.approx(0.8333, abs=1e-4)


def test_fastflows_offload_keeps_both_sources_running_ahead_of_its_split(tf):
    """Offloaded, the client reads its own pipeline and the service's in a fixed split; each source
    keeps making items into a buffer of its own meanwhile (as FastFlow's client fetches from both at
    once), not only when the split asks for its next item: read in step, each idles while the
    other's item is awaited, and the pair delivers less than the model's split of the two rates."""
    import time

    from repro.pecan.tfdata import engine

    made = {"local": 0, "remote": 0}

    def source(name):
        def make(item):
            made[name] += 1
            return item
        return tf.data.Dataset.range(1 << 20).map(lambda item: tf.py_function(make, [item], tf.int64))

    items = iter(engine.offloaded(source("local"), source("remote"), 0.5, ahead=4))
    assert sorted(int(next(items)) for _ in range(4)) == [0, 0, 1, 1]  # two of each, evenly spread
    deadline = time.monotonic() + 20
    while min(made.values()) < 2 + 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    # each at least 4 ahead of what was read, and bounded (the buffer's threads may hold a few more
    # made items, waiting for room, as the machine schedules them)
    assert all(2 + 4 <= count <= 2 + 2 * 4 for count in made.values()), made


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
    from repro.pecan.validation import verdict  # two below the bound: too few, and the headline says which

    rows = [{"model_tf_below_bound": below, "model_tf_vs_engine": 0.0} for below in (True, True, False)]
    assert verdict(rows) == (False, "not validated: accelerator-bound everywhere but 2 of 3 deployments (3 below the "
                                    "bound needed)")


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
    _given(runs[0])[1]["seconds"] = 0.5  # measured as predicted: validated
    result, _ = _validate(tmp_path, runs, capsys)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("validated: 3 of 3 deployments below the bound within ±15%")


def test_every_run_of_a_pipeline_takes_one_scale_from_its_calibration(pecan_config):
    """The scale is derived from the pipeline's calibrated TF cost (beside a Pillow calibration, or a
    TF one), the same for every mode; a configured scale, or a calibration without the TF cost, gives
    none (the run derives its own)."""
    from repro.pecan.tfdata import cpus_available
    from repro.pecan.tfdata.spec import derive_scale, scale_from_calibration, spec_from_config

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
    from repro.pecan.calibration_files import load_calibrations

    path = tmp_path / "resnet.json"
    path.write_text(json.dumps({"pipeline": "resnet", "autoorder_saving": 0.1, "tf_ops": tf_ops, **CALIBRATION["resnet"]}))
    with pytest.raises(ReproError, match=rf"^--calibration {path}: tf_ops.declared.cpu_s_per_element: expected a "
                                         "positive number of CPU seconds, 1e-09 to 3600$"):
        load_calibrations([path])


def test_the_derived_scale_puts_collocated_below_the_bound_and_the_largest_deployment_at_it():
    from repro.pecan.tfdata.spec import derive_scale  # no TensorFlow needed

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
    from repro.pecan.tfdata.spec import derive_scale

    with pytest.raises(ReproError, match=rf"^{cpus} CPU\(s\) available \(os.sched_getaffinity\): too few for an "
                                         r"input-bound miniature.*; expected at least \d+ CPUs, "
                                         + ("fewer threads per worker, " if workers > 1 else "")
                                         + r"or set pecan.tfdata.time_scale$"):
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
    from repro.pecan.calibration_files import load_calibrations

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



def test_a_data_set_without_its_manifest_is_written_again_over_its_own_images_only(tf, data):
    """A data set directory without a manifest (a write cut short) is written again; an image of the
    user's under one of its names was overwritten with no warning."""
    from repro.errors import ReproError
    from repro.pecan.tfdata import ops

    first = ops.write_data("resnet", 3, data / "cut", seed=2)
    directory = Path(first["files"][0]).parent
    (directory / "manifest.json").unlink()  # cut before the manifest
    Path(first["files"][2]).unlink()
    assert ops.write_data("resnet", 3, data / "cut", seed=2) == first
    (directory / "manifest.json").unlink()
    Path(first["files"][1]).write_bytes(b"MY PHOTO")
    with pytest.raises(ReproError, match=rf"^{re.escape(first['files'][1])}: not image 00001 of this data set "
                                         r"\(pipeline resnet, seed 2\), and no manifest in .* says what it is; it may "
                                         "be yours"):
        ops.write_data("resnet", 3, data / "cut", seed=2)
    assert Path(first["files"][1]).read_bytes() == b"MY PHOTO"
    assert not (directory / "manifest.json").exists()


@pytest.mark.fault
@pytest.mark.parametrize("probe", [0, -1.0, 61, float("nan"), True, "1"])
def test_a_transfer_probe_length_outside_its_bounds_is_refused_by_the_spec(pecan_config, probe):
    """Settings that reach a spec without the config check (a caller of spec_from_config) are
    checked there too: the probe's seconds, a number above 0 and at most 60."""
    from repro.pecan.tfdata.spec import spec_from_config

    assert spec_from_config(pecan_config, "ResNet50_v2-8", "cachew").probe_seconds == 1.0
    assert spec_from_config(pecan_config, "ResNet50_v2-8", "cachew", probe_seconds=60).probe_seconds == 60.0
    with pytest.raises(ReproError, match=r"^--probe-seconds .*: expected a number of seconds above 0, at most 60$"):
        spec_from_config(pecan_config, "ResNet50_v2-8", "cachew", probe_seconds=probe)
