"""The paper's further workloads' pipelines (SimCLR, ASR): each in Pillow/numpy ops and in TF ops, in the
declared order and the order AutoOrder picks, and the two orders give the same elements."""

import importlib.util

import numpy as np
import pytest

from repro.pecan.pipelines import FRAME, MELS, PIPELINES, STEP, batch, element_bytes, synthetic_jpegs
from repro.pecan.policies import autoorder

needs_tensorflow = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                      reason="TF forms need the 'tfdata' extra")


def run(ops, element, seed, i):
    rng = np.random.default_rng([seed, i])
    for op in ops:
        element = op.fn(element, rng)
    return element


def picked_order(name, elements):
    """AutoOrder's order from the sizes measured on `elements` (as the calibration does)."""
    ops = list(PIPELINES[name].ops)
    sizes = {op.name: [0, 0] for op in ops}
    for i, element in enumerate(elements):
        rng = np.random.default_rng([0, i])
        for op in ops:
            before = element_bytes(element)
            element = op.fn(element, rng)
            sizes[op.name][0] += before
            sizes[op.name][1] += element_bytes(element)
    return autoorder(ops, {name: out / inp for name, (inp, out) in sizes.items()})


def test_simclr_makes_two_augmented_views_and_autoorder_converts_to_float_after_the_crop():
    elements = synthetic_jpegs("simclr", 4, seed=2)
    order, moves = picked_order("simclr", elements)
    assert moves == ["to_float after random_resized_crop", "to_float after resize_224_bicubic",
                     "to_float after random_flip"]
    assert [op.name for op in order][:6] == ["decode", "two_views", "random_resized_crop", "resize_224_bicubic",
                                             "random_flip", "to_float"]
    for i, element in enumerate(elements):
        declared = run(PIPELINES["simclr"].ops, element, 0, i)["image"]
        reordered = run(order, element, 0, i)["image"]
        assert declared.shape == reordered.shape == (224, 224, 6) and declared.dtype == np.float32
        assert 0.0 <= declared.min() and declared.max() <= 1.0
        assert not np.allclose(declared[..., :3], declared[..., 3:])  # two independent views
        # the same crops, flips and jitters: only the resize's rounding on uint8 differs (under 2 levels on average)
        assert np.abs(declared - reordered).mean() < 2 / 255 and np.abs(declared - reordered).max() < 0.1


def test_asr_features_and_autoorder_keeps_its_order():
    elements = PIPELINES["asr"].elements(3, seed=4)
    order, moves = picked_order("asr", elements)
    assert moves == [] and order == list(PIPELINES["asr"].ops)  # pre-emphasis needs the float samples first
    outputs = []
    for i, element in enumerate(elements):
        samples = len(element["image"]) // 2
        assert 4 * 16000 <= samples <= 17 * 16000
        features = run(order, element, 0, i)["image"]
        assert features.shape == (1 + (samples - FRAME) // STEP, MELS) and features.dtype == np.float32
        assert (features == 0).any()  # SpecAugment's masks
        outputs.append({"image": features})
    padded = batch(outputs)
    assert padded.shape == (3, max(o["image"].shape[0] for o in outputs), MELS)


def test_every_pipeline_names_a_tf_form_for_every_op():
    assert all(record.tf_form for record in PIPELINES.values())
    assert PIPELINES["asr"].padded and not PIPELINES["simclr"].padded


@needs_tensorflow
@pytest.mark.service  # TensorFlow: seconds to import and trace
@pytest.mark.parametrize("name", ["simclr", "asr"])
def test_tf_forms_give_the_same_elements_in_both_orders(name, tmp_path):
    from repro.pecan.tfdata import ops

    manifest = ops.write_data(name, 4, tmp_path)
    _, moves = ops.ordered_ops(manifest, "autoorder")
    assert bool(moves) == (name == "simclr")
    batches = {}
    for order in ("declared", "autoorder"):
        dataset, names = ops.dataset(manifest, order, 4, threads=1)
        batches[order] = next(iter(dataset))["image"].numpy()
    declared, reordered = batches["declared"], batches["autoorder"]
    assert declared.shape == reordered.shape == ((4, 224, 224, 6) if name == "simclr" else declared.shape)
    assert np.abs(declared - reordered).mean() < 2 / 255 and np.abs(declared - reordered).max() < 0.1
    if name == "asr":
        assert declared.shape[2] == MELS and np.array_equal(declared, reordered)


def test_engine_tfdata_refuses_a_pipeline_without_a_tf_form_at_config_check(monkeypatch):
    import copy

    from repro.config import load_config, validate_config
    from repro.errors import ReproError
    from repro.pecan.pipelines import Op, Pipeline, decode
    from support import REPO

    monkeypatch.setitem(PIPELINES, "pillow_only", Pipeline(ops=(Op("decode", decode, keep_position=True, tf=None),),
                                                           image_size=(32, 32)))
    config = copy.deepcopy(load_config(REPO / "config" / "config.yaml"))
    config["pecan"]["models"]["resnet"]["pipeline"] = "pillow_only"
    config["pecan"]["engine"] = "tfdata"
    with pytest.raises(ReproError, match=r"^config: pecan\.models\.resnet\.pipeline: pipeline 'pillow_only' has no TF form"):
        validate_config(config)
    config["pecan"]["engine"] = "model"
    validate_config(copy.deepcopy(config))


def test_the_engine_caption_names_the_configured_scale_or_says_it_is_derived_per_pipeline():
    """Without pecan.tfdata.time_scale every run of a pipeline derives one scale from its calibrated TF
    cost (the cost table carries it); a figure of one workload or several says so, or names the one set."""
    from repro.config import load_config
    from repro.pecan.engines import ENGINES
    from support import REPO

    pecan = load_config(REPO / "config" / "config.yaml")["pecan"]
    caption = ENGINES["tfdata"].caption
    for experiments in ("ResNet50_v2-8", ["ResNet50_v2-8", "SimCLR", "RetinaNet", "ASRTrans", "ResNet50_v3-8"]):
        assert ("(accelerator step time derived from the pipeline's calibrated TF cost and the machine's CPUs, one per "
                "pipeline") in caption(pecan, experiments)
    # one workload's figure lists the scale after the caption; the comparisons do not
    assert caption(pecan, "ResNet50_v2-8").count("one per pipeline, below;") == 1
    assert "below" not in caption(pecan, ["ResNet50_v2-8", "SimCLR"])
    pecan["tfdata"]["time_scale"] = 5  # the config's one scale for every pipeline
    assert "(accelerator step time x5;" in caption(pecan, ["ResNet50_v2-8", "SimCLR"])
