"""Fault injection: model files far larger than a model's, and the trims-tools and pecan commands
given hostile files and environments.

Each ends with nothing outside the command's own files written to or deleted, no unbounded copy or
read; a command that refuses says so in one line naming the file, key or flag.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from support import REPO, run_forked, run_repro


pytestmark = pytest.mark.fault


def _copy_model(models, target, name="squeezenet_1.1"):
    shutil.copytree(models / name, target / name)
    return target / name


def test_fetch_refuses_weights_of_another_size_than_the_manifests(models, tmp_path, monkeypatch, capsys):
    """`repro trims fetch` from an asset store whose model.params is a sparse file of gigabytes (a
    store edited by hand, a file that is no model's): the whole file was copied beside the base path,
    filling the disk, before its checksum was found wrong."""
    monkeypatch.chdir(tmp_path)
    source = _copy_model(models, tmp_path / "assets")
    with open(source / "model.params", "r+b") as fh:
        fh.truncate(1 << 30)  # sparse: no disk used
    code, out, err = run_repro(["trims", "fetch", "squeezenet_1.1", "--asset-store", "assets", "--base-path", "base"],
                               capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"repro: error: assets/squeezenet_1.1/model.params: {1 << 30} bytes; expected the ")
    assert err.endswith(" bytes of weights its manifest records (params_bytes)\n")
    assert not (tmp_path / "base").exists()


def test_fetch_refuses_a_graph_larger_than_any_graph(models, tmp_path, monkeypatch, capsys):
    """The same with model.onnx a sparse file of gigabytes: copied whole too."""
    monkeypatch.chdir(tmp_path)
    source = _copy_model(models, tmp_path / "assets")
    with open(source / "model.onnx", "r+b") as fh:
        fh.truncate(1 << 30)
    code, out, err = run_repro(["trims", "fetch", "squeezenet_1.1", "--asset-store", "assets", "--base-path", "base"],
                               capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: assets/squeezenet_1.1/model.onnx: {1 << 30} bytes, larger than 64 MiB; expected the "
                   "model's model.onnx, a graph whose weights lie in model.params\n")
    assert not (tmp_path / "base").exists()


@pytest.mark.parametrize("command", [["trims", "client", "run", "--original", "--simulate"],
                                     ["trims", "memory", "--no-measure", "squeezenet_1.1"]])
def test_a_graph_of_gigabytes_is_refused_before_it_is_read(models, tmp_path, command):
    """A model.onnx in the base path that is a sparse file of gigabytes: the client's check of its
    models read and parsed it whole (22 GB of memory for a 3 GB file), as `trims memory` did."""
    model = _copy_model(models, tmp_path / "base")
    with open(model / "model.onnx", "r+b") as fh:
        fh.truncate(3 << 30)
    code, out, err = run_forked([*command, "--base-path", tmp_path / "base"], tmp_path, 120, growth=2 << 30,
                                env={"HOME": str(tmp_path)})
    assert (code, out) == (1, "")
    assert err == (f"repro: error: {model / 'model.onnx'}: {3 << 30} bytes, larger than 64 MiB; expected the model's "
                   "model.onnx, a graph whose weights lie in model.params\n")


@pytest.fixture(scope="module")
def calibrations(tmp_path_factory):
    """Calibrations of every pipeline, measured briefly."""
    directory = tmp_path_factory.mktemp("calibrations")
    pipelines = ("resnet", "retinanet", "simclr", "asr")
    from repro.cli import main

    assert main(["pecan", "calibrate", "--pipeline", *pipelines, "--elements", "2", "--repeats", "1",
                 "-o", *(str(directory / f"{p}.json") for p in pipelines)]) in (0, None)
    return {p: directory / f"{p}.json" for p in pipelines}


@pytest.mark.parametrize("value", ["x", None, -1, 1e308, 10**400, [1]],
                         ids=["text", "null", "negative", "huge", "huge-integer", "list"])
@pytest.mark.parametrize("order", ["declared", "autoorder"])
def test_a_calibrations_cost_per_reference_kernel_is_checked(calibrations, tmp_path, capsys, order, value):
    """A calibration whose `per_reference_kernel` (the local preset's cost, scaled) is no positive number:
    `repro pecan estimate` (and every run of the local preset) ended in a TypeError, ZeroDivisionError or
    OverflowError traceback, or with 1e308 printed inf and nan dollars."""
    import json

    data = json.loads(calibrations["resnet"].read_text())
    data[order]["per_reference_kernel"] = value
    edited = tmp_path / "resnet.json"
    edited.write_text(json.dumps(data))
    others = [calibrations[p] for p in ("retinanet", "simclr", "asr")]
    code, out, err = run_repro(["pecan", "estimate", "--calibration", edited, *others], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: --calibration {edited}: {order}.per_reference_kernel is {value!r:.40}; expected a "
                   "positive number of reference kernels, 2.78e-13 to 3.6e+12\n")


@pytest.mark.parametrize("value", ["x", None, True, 10**400, [1]], ids=["text", "null", "true", "huge-integer", "list"])
@pytest.mark.parametrize("key", ["per_reference_kernel", "cpu_s_per_element"])
def test_compare_results_names_a_calibration_value_that_is_no_number(calibrations, tmp_path, monkeypatch, capsys,
                                                                     key, value):
    """`repro pecan compare-results` of a results/ directory whose calibration holds text, null, a list or
    an integer past float's range: a TypeError or OverflowError traceback (per_reference_kernel is compared
    as it is held; the CPU costs are scaled to milliseconds first), and `true` was compared as 1."""
    import json

    from repro.cli import main

    monkeypatch.chdir(tmp_path)
    for results in ("first", "second"):
        (tmp_path / results / "calibration").mkdir(parents=True)
        shutil.copy(calibrations["resnet"], tmp_path / results / "calibration" / "resnet.json")
    experiment = tmp_path / "run"
    config = str(REPO / "config" / "config.yaml")
    assert main(["pecan", "run", "--config", config, "--experiment", "ResNet50_v2-8", "--mode", "pecan", "--calibration",
                 str(calibrations["resnet"]), str(calibrations["retinanet"]), "--out", str(experiment)]) in (0, None)
    capsys.readouterr()
    for results in ("first", "second"):
        table = tmp_path / results / "tables" / "ResNet50_v2-8.csv"
        assert main(["pecan", "costs", str(experiment / "run.log"), "--config", config, "--experiment", "ResNet50_v2-8",
                     "-o", str(table)]) in (0, None)
        lines = table.read_text().splitlines()
        table.write_text("\n".join([lines[0] + ",workload,preset,tpu_cost_mean,worker_cost_mean",
                                    *(f"{line},ResNet50_v2-8,local,1.0,0.5" for line in lines[1:])]) + "\n")
    edited = tmp_path / "second" / "calibration" / "resnet.json"
    data = json.loads(edited.read_text())
    data["declared"][key] = value
    edited.write_text(json.dumps(data))
    code, out, err = run_repro(["pecan", "compare-results", "first", "second", "--figure", "fig8_ResNet50_v2-8",
                                "--config", config], capsys)
    name = "per reference kernel" if key == "per_reference_kernel" else "ms/element"
    assert (code, out) == (1, "")
    assert err == ("repro: error: second: not a finished workflow's results directory for figures ['fig8_ResNet50_v2-8'] "
                   f"(ValueError: calibration resnet declared {name}: {value!r:.40} is not a finite number); build them "
                   "first (snakemake --cores 1)\n")


def _bootstrap_of(argv):
    import numpy as np

    from repro.stats import bootstrap_interval

    value, low, high = bootstrap_interval(np.arange(int(argv[0]), dtype=float))
    print(f"{value} {low < value < high}")
    return 0


@pytest.mark.large
def test_a_bootstrap_over_many_requests_holds_a_bounded_memory(tmp_path):
    """The percentile bootstrap of `repro trims summary` (a distribution run's latencies and hit rate)
    drew every resample at once: 2000 x N indices and values, 32 GB for a report of a million requests
    (a run the client allows), 3.2 GB for the 100000 here."""
    code, out, err = run_forked(["100000"], tmp_path, 300, main=_bootstrap_of, growth=1 << 30)
    assert (code, out, err) == (0, "49999.5 True\n", "")


def test_a_bootstrap_drawn_in_batches_draws_what_it_drew_at_once():
    """The batches draw the same resamples as one draw of them all: the intervals are as before."""
    import numpy as np

    from repro import stats

    samples = np.random.default_rng(1).random(37)
    rng = np.random.default_rng(0)
    at_once = np.median(samples[rng.integers(0, samples.size, (stats.BOOTSTRAP_DRAWS, samples.size))], axis=1)
    expected = (float(np.median(samples)), *map(float, np.percentile(at_once, [2.5, 97.5])))
    assert stats.bootstrap_interval(samples) == expected


def _model_load_row(**changes):
    row = {"model": "m", "speedup": 2.0}
    for mode in ("original", "shared"):
        row.update({f"{mode}_latency_ms": 10.0, f"{mode}_latency_ci_ms": [9.0, 11.0], f"{mode}_requests": 5})
    return {**row, **changes}


@pytest.mark.parametrize("rows, error", [
    ([_model_load_row(model="M" * (1 << 20))], "compare[0].model: expected a name of 1 to 255 characters, got " + "M" * 60),
    ([_model_load_row(model=f"m{i}") for i in range(20000)],
     "compare: 20000 rows; expected at most 5120 (the TrIMS summary JSON that trims summary writes)"),
], ids=["label-of-a-megabyte", "twenty-thousand-rows"])
def test_trims_plot_refuses_a_summary_no_figure_can_draw(tmp_path, monkeypatch, capsys, rows, error):
    """`repro trims plot` of a summary whose model name is a megabyte long, or that holds 20000 rows:
    matplotlib drew it for minutes (a 5 MB label: 2.3 GB and still drawing after two minutes; about 18 ms
    a row, hours for the million rows a summary file may hold)."""
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"compare": rows}))
    style = json.dumps({"width_in": 5.0, "height_in": 3.6, "dpi": 150, "font_size": 9, "show_reference": True})
    code, out, err = run_repro(["trims", "plot", "trims_model_load", "--summary", "summary.json", "--style", style,
                                "--output", "f.pdf", "f.png"], capsys)
    assert (code, out, err) == (1, "", f"repro: error: summary.json: {error}\n")
    assert not (tmp_path / "f.pdf").exists()


def _serve(models, directory, *extra):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "repro.cli", "trims", "server", "run", "--socket",
                             str(directory / "s.sock"), "--base-path", str(models), "--memory-mb", "64",
                             "--pid-file", str(directory / "s.pid"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_server_whose_info_file_cannot_be_written_at_stop_removes_its_socket(models):
    """A model store whose server info file could not be written when it stopped (replaced by a
    directory, a full disk): the error skipped the rest of the stop, and its socket and pid file were
    left behind for the next command to find."""
    import tempfile
    import time

    directory = Path(tempfile.mkdtemp(prefix="info-"))
    proc = None
    try:
        info = directory / "info.json"
        proc = _serve(models, directory, "--info-file", str(info))
        deadline = time.monotonic() + 60
        # the info file is written after the pid file: the server is up once both are there
        while not ((directory / "s.pid").exists() and info.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        info.unlink()
        info.mkdir()
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert err.endswith(f"repro: error: {info}: cannot write: it is a directory\n")
        assert sorted(os.listdir(directory)) == ["info.json"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(directory)


def test_a_server_info_file_under_a_file_is_refused_before_the_server_listens(models):
    """`trims-tools server run` with HOME a file (its server info file, ~/.micro18_server.json, under
    it): the server announced itself, then failed writing the info and left its socket behind."""
    import tempfile

    from repro.trims.originals import main

    directory = Path(tempfile.mkdtemp(prefix="info-"))
    try:
        (directory / "home").write_text("")
        (directory / "run").mkdir(mode=0o700)
        env = {"HOME": str(directory / "home"), "UPR_BASE_DIR": str(models), "XDG_RUNTIME_DIR": str(directory / "run")}
        code, out, err = run_forked(["server", "run"], directory, 60, main=main, env=env)
        info = directory / "home" / ".micro18_server.json"
        assert (code, out) == (1, "")
        # onnxruntime may warn first that it cannot keep its telemetry id under HOME
        assert err.endswith(f"trims-tools: error: {info}: cannot write: {directory / 'home'} is not a directory (the "
                            "server info file)\n")
        assert os.listdir(directory / "run" / "repro") == []
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize("command", [["trims", "models", "squeezenet_1.1"],
                                     ["trims", "fetch", "squeezenet_1.1", "--asset-store", "assets"]],
                         ids=["models", "fetch"])
@pytest.mark.parametrize("name, content, said", [
    ("model.params", "the user's weights", r"no model manifest \(manifest\.json\)"),
    ("manifest.json", '{"model": "mine"}', r"a manifest\.json that is no model manifest \([^\n]+\)")],
    ids=["no-manifest", "a-manifest-not-a-models"])
def test_a_model_directory_of_the_users_is_not_written_into(models, tmp_path, monkeypatch, capsys, command, name,
                                                            content, said):
    """`repro trims models NAME` (and `trims-tools download assets`, which runs it for every model) or
    `repro trims fetch NAME` where the base path's NAME is a directory of the user's, without a model
    manifest (the original tools' base path holds their own models, whose weights are model.params
    too): its model.params was replaced by the generated or fetched weights. One holding a manifest.json
    that is none of this package's was said to hold "no model manifest", which it plainly does."""
    monkeypatch.chdir(tmp_path)
    _copy_model(models, tmp_path / "assets")
    (tmp_path / "base" / "squeezenet_1.1").mkdir(parents=True)
    (tmp_path / "base" / "squeezenet_1.1" / name).write_text(content)
    code, out, err = run_repro([*command, "--base-path", "base"], capsys)
    assert (code, out) == (1, "")
    assert re.fullmatch(rf"repro: error: base/squeezenet_1\.1: holds files but {said}; expected a model's directory "
                        r"\(or nothing\) there: move the files away, or name another base path\n", err), err
    assert os.listdir(tmp_path / "base") == ["squeezenet_1.1"]
    assert os.listdir(tmp_path / "base" / "squeezenet_1.1") == [name]
    assert (tmp_path / "base" / "squeezenet_1.1" / name).read_text() == content


@pytest.mark.parametrize("command", [["server", "run"], ["run", "--models=squeezenet_1.1"]], ids=["server-run", "run"])
@pytest.mark.parametrize("name", ["/elsewhere", "../../elsewhere"], ids=["absolute", "dotdot"])
def test_trims_tools_server_profile_stays_under_the_profile_directory(models, tmp_path, command, name):
    """`trims-tools server run --profile --profile_output=/elsewhere` (or `run`, whose client refuses that
    name only once the store runs): the server's trace, server_<id>.json, was written wherever the name
    led, outside the profile directory the client confines its traces to."""
    import socket
    import tempfile

    from repro.trims.originals import main

    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {models}\n  profile_output_directory: {tmp_path / 'profiles'}\n")
    runtime = Path(tempfile.mkdtemp(prefix="run-"))  # the store's socket: a short path
    try:
        code, out, err = run_forked([*command, "--profile", f"--profile_output={name}", f"--config={config}"], tmp_path,
                                    30, main=main, env={"XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)})
    finally:
        shutil.rmtree(runtime)
    assert (code, out) == (1, "")
    assert err == (f"trims-tools: error: --profile_output {name!r}: expected a relative name (no '..') for a directory "
                   f"under {tmp_path / 'profiles' / socket.gethostname()}\n")
    assert sorted(os.listdir(tmp_path)) == ["carml.yml"]
