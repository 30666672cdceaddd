"""The ResNet-50 and RetinaNet input pipelines in TensorFlow ops, one `map` per op.

They mirror repro.pecan.pipelines op for op (decode, the early float conversion, the Inception
crop, resize, flip, normalise; RetinaNet's resize-and-pad with its boxes) and read the same
deterministic JPEGs (repro.pecan.pipelines.synthetic_jpegs), written once to a data directory.
Resizes keep the dtype they are given (as Pillow's do), so the float conversion can move.

The AutoOrder order is a real reordering of the graph: the bytes each op consumes and produces
are measured on a few elements, repro.pecan.policies.autoorder picks the order from them, and the
maps are chained in that order. Random ops are stateless, seeded by the element's position in
the (repeated) stream and the op, so both orders draw the same crops and flips.
"""

import dataclasses
import json
from pathlib import Path

import numpy as np

from repro.errors import ReproError
from repro.fsutil import atomic_path, write_json
from repro.pecan.pipelines import IMAGENET_MEAN, IMAGENET_STD, synthetic_jpegs
from repro.pecan.pipelines import PIPELINES as PILLOW_PIPELINES
from repro.pecan.policies import autoorder
from repro.pecan.tfdata import tensorflow

tf = tensorflow()

PIPELINES = ("resnet", "retinanet")
ORDERS = ("declared", "autoorder")
INFLATION_PROBE_ELEMENTS = 4


# -- the data ------------------------------------------------------------------------------


def write_data(pipeline, count, directory, seed=0):
    """Write `count` synthetic JPEGs (and RetinaNet's boxes) under `directory` once; return its manifest.

    The manifest is written last, so a directory without one (an interrupted write) is redone.
    """
    if pipeline not in PIPELINES:
        raise ReproError(f"unknown pipeline {pipeline!r}; expected one of {list(PIPELINES)}")
    if count < 1:
        raise ReproError(f"data: {count} images; expected at least 1")
    directory = Path(directory) / f"{pipeline}-{count}-seed{seed}"
    manifest_path = directory / "manifest.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    elements = synthetic_jpegs(pipeline, count, seed=seed)
    files = []
    for i, element in enumerate(elements):
        path = directory / f"{i:05d}.jpg"
        with atomic_path(path) as tmp:
            tmp.write_bytes(element["image"])
        files.append(str(path.resolve()))
    manifest = {"pipeline": pipeline, "count": count, "seed": seed, "files": files,
                "boxes": [e["boxes"].tolist() for e in elements] if pipeline == "retinanet" else None}
    write_json(manifest_path, manifest)
    return manifest


# -- ops (element: {"index": int64, "image": tensor, ["boxes": N x 4]}) ---------------------


def _seed(element, salt):
    return tf.stack([element["index"], tf.constant(salt, tf.int64)])


def decode(element):
    return {**element, "image": tf.io.decode_jpeg(element["image"], channels=3)}


def to_float(element):
    return {**element, "image": tf.cast(element["image"], tf.float32) / 255.0}


def _resize(image, height, width):
    """Bilinear resize that keeps uint8 images uint8 (tf.image.resize always returns float32)."""
    resized = tf.image.resize(image, [height, width], method="bilinear")
    if image.dtype == tf.uint8:
        return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    return resized


def random_resized_crop(element):
    """Inception-style crop: area 8-100%, aspect 3/4-4/3, the whole image when no draw fits."""
    image = element["image"]
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=_seed(element, 1),
        area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3), max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    return {**element, "image": tf.slice(image, begin, size)}


def resize_224(element):
    return {**element, "image": _resize(element["image"], 224, 224)}


def random_flip(element):
    flip = tf.random.stateless_uniform([], seed=_seed(element, 2)) < 0.5
    out = {**element, "image": tf.cond(flip, lambda: tf.reverse(element["image"], [1]), lambda: element["image"])}
    if "boxes" in element:
        boxes = element["boxes"]
        mirrored = tf.stack([boxes[:, 0], 1.0 - boxes[:, 3], boxes[:, 2], 1.0 - boxes[:, 1]], axis=1)
        out["boxes"] = tf.cond(flip, lambda: mirrored, lambda: boxes)
    return out


def normalize(element):
    return {**element, "image": (element["image"] - tf.constant(IMAGENET_MEAN)) / tf.constant(IMAGENET_STD)}


def resize_and_pad_640(element, side=640):
    image = element["image"]
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = side / tf.reduce_max(shape)
    new = tf.cast(tf.round(shape * scale), tf.int32)
    resized = _resize(image, new[0], new[1])
    padded = tf.image.pad_to_bounding_box(resized, 0, 0, side, side)
    ratio = tf.cast(new, tf.float32) / side
    boxes = element["boxes"] * tf.stack([ratio[0], ratio[1], ratio[0], ratio[1]])
    return {**element, "image": padded, "boxes": boxes}


# The same ops, constraints and declared order as the Pillow pipelines, each with its TF function.
TF_OPS = {f.__name__: f for f in (decode, to_float, random_resized_crop, resize_224, random_flip, normalize,
                                  resize_and_pad_640)}
TF_PIPELINES = {name: [dataclasses.replace(op, fn=TF_OPS[op.name]) for op in PILLOW_PIPELINES[name].ops]
                for name in PIPELINES}


# -- orders and datasets --------------------------------------------------------------------


def _element_bytes(element):
    image = element["image"]
    size = len(image.numpy()) if image.dtype.name == "string" else int(np.prod(image.shape)) * image.dtype.size
    return size + (int(np.prod(element["boxes"].shape)) * 4 if "boxes" in element else 0)


def _source(manifest):
    files = tf.data.Dataset.from_tensor_slices(manifest["files"])
    if manifest["boxes"] is not None:
        boxes = tf.data.Dataset.from_tensor_slices(tf.constant(manifest["boxes"], tf.float32))
        pairs = tf.data.Dataset.zip(files, boxes).map(lambda f, b: {"file": f, "boxes": b})
    else:
        pairs = files.map(lambda f: {"file": f})
    return pairs


def _read(index, element):
    out = {"index": index, "image": tf.io.read_file(element.pop("file"))}
    return {**out, **element}


def inflation(manifest):
    """{op name: bytes out / bytes in} of the declared order, measured eagerly on a few elements."""
    ops = TF_PIPELINES[manifest["pipeline"]]
    totals = {op.name: [0, 0] for op in ops}
    for index, element in _source(manifest).take(INFLATION_PROBE_ELEMENTS).enumerate():
        element = _read(index, dict(element))
        for op in ops:
            before = _element_bytes(element)
            element = op.fn(element)
            totals[op.name][0] += before
            totals[op.name][1] += _element_bytes(element)
    return {name: out / inp for name, (inp, out) in totals.items()}


def ordered_ops(manifest, order):
    """(ops, moves): the pipeline's maps in the declared order or the order AutoOrder picks."""
    if order not in ORDERS:
        raise ReproError(f"order {order!r}; expected one of {list(ORDERS)}")
    ops = TF_PIPELINES[manifest["pipeline"]]
    if order == "declared":
        return ops, []
    return autoorder(ops, inflation(manifest))


def dataset(manifest, order, batch_size, threads):
    """The endless, batched pipeline (images only, plus boxes for RetinaNet) on a private threadpool
    of `threads` threads, each map `threads`-way parallel and each op at most `threads`-way
    parallel inside. Returns (dataset, op names in order)."""
    ops, _ = ordered_ops(manifest, order)
    ds = _source(manifest).repeat().enumerate().map(_read)
    for op in ops:
        ds = ds.map(op.fn, num_parallel_calls=threads, deterministic=False)
    ds = ds.map(lambda e: {k: v for k, v in e.items() if k != "index"})
    ds = ds.batch(batch_size, drop_remainder=True).prefetch(1)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = threads  # decode and resize kernels would use every core
    options.autotune.cpu_budget = threads
    return ds.with_options(options), [op.name for op in ops]
