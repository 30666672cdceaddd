"""The TrIMS model zoo: the published architectures' parameter counts, and `trims models` (what
`trims-tools download assets` runs) leaving models whose checksums match alone."""

import pytest

from repro.cli import main
from repro.trims.models import ARCHITECTURES, parameter_count

# Published parameter counts, in millions: SqueezeNet (Iandola et al. 2016), GoogLeNet (Szegedy et al.
# 2015, without auxiliary classifiers), ResNet (He et al. 2016; v2 has v1's shapes), Inception v3
# (Szegedy et al. 2016, without the auxiliary classifier), AlexNet (Krizhevsky et al. 2012, the
# single-tower BVLC layout), VGG (Simonyan and Zisserman 2015); as the MXNet and torchvision model
# zoos list them.
PUBLISHED_M = {
    "squeezenet_1.1": 1.235, "squeezenet_1.0": 1.248, "bvlc_googlenet": 6.99, "resnet18_v1": 11.69,
    "resnet18_v2": 11.69, "resnet34_v2": 21.80, "resnet50_v1": 25.56, "inception_v3": 23.83, "resnet101_v1": 44.55,
    "bvlc_alexnet": 61.10, "resnet152_v1": 60.19, "vgg16": 138.36, "vgg19": 143.67,
}
ZOO = ["squeezenet_1.1", "squeezenet_1.0", "bvlc_googlenet", "resnet18_v2", "resnet34_v2", "resnet50_v1", "inception_v3",
       "resnet101_v1", "bvlc_alexnet", "resnet152_v1", "vgg16", "vgg19", "large_alexnet_454", "large_vgg16_448"]


def test_the_zoo_is_complete():
    assert set(ZOO) <= set(ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(PUBLISHED_M))
def test_parameter_counts_are_the_published_ones(name):
    assert parameter_count(name) / 1e6 == pytest.approx(PUBLISHED_M[name], rel=0.02)


def test_models_whose_checksums_match_are_not_rebuilt(tmp_path, capsys):
    argv = ["trims", "models", "squeezenet_1.0", "--base-path", str(tmp_path), "--seed", "3"]
    assert main(argv) == 0
    params = tmp_path / "squeezenet_1.0" / "model.params"
    before = params.stat().st_mtime_ns, params.stat().st_ino
    capsys.readouterr()
    assert main(argv) == 0
    assert "up to date" in capsys.readouterr().out
    assert (params.stat().st_mtime_ns, params.stat().st_ino) == before
    # a damaged file, or another seed, is built again
    data = bytearray(params.read_bytes())
    data[100] ^= 0xFF
    params.write_bytes(bytes(data))
    assert main(argv) == 0
    assert "up to date" not in capsys.readouterr().out
    assert main([*argv[:-1], "4"]) == 0
    assert "up to date" not in capsys.readouterr().out
