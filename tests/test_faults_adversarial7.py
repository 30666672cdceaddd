"""Fault injection: model files far larger than a model's, and the trims-tools and pecan commands
given hostile files and environments.

Each ends with nothing outside the command's own files written to or deleted, no unbounded copy or
read; a command that refuses says so in one line naming the file, key or flag.
"""

import shutil

import pytest
from support import run_forked, run_repro


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
