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
