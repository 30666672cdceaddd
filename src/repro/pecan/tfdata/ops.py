"""The input pipelines in TensorFlow ops, one `map` per op (each pipeline record names its ops' TF forms).

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
import hashlib
import os
from pathlib import Path

import numpy as np

from repro.errors import ReproError
from repro.fsutil import atomic_path, open_regular, read_json, sha256_file, write_json
from repro.pecan.pipelines import (
    BLUR_TAPS,
    FRAME,
    HANN,
    IMAGENET_MEAN,
    IMAGENET_STD,
    LUMA,
    MEL,
    NFFT,
    STEP,
    YIQ,
    YIQ_INVERSE,
    synthetic_jpegs,
)
from repro.pecan.pipelines import PIPELINES as PILLOW_PIPELINES
from repro.pecan.policies import autoorder
from repro.pecan.tfdata import tensorflow

tf = tensorflow()

ORDERS = ("declared", "autoorder")
INFLATION_PROBE_ELEMENTS = 4


# -- the data ------------------------------------------------------------------------------


# a synthetic JPEG is tens to hundreds of KiB: a file far larger is no image of a data set
MAX_IMAGE_BYTES = 64 << 20


def write_data(pipeline, count, directory, seed=0):
    """Write `count` synthetic JPEGs (and RetinaNet's boxes) under `directory` once; return its manifest.

    The manifest is written last, so a directory without one (an interrupted write) is redone.
    """
    names = [name for name, record in PILLOW_PIPELINES.items() if record.tf_form]
    if pipeline not in names:
        raise ReproError(f"unknown pipeline {pipeline!r}; expected one of {names}")
    if count < 1:
        raise ReproError(f"data: {count} images; expected at least 1")
    directory = Path(directory) / f"{pipeline}-{count}-seed{seed}"
    manifest_path = directory / "manifest.json"
    if manifest_path.exists():
        return _checked_manifest(read_json(manifest_path, "a synthetic data set's manifest"), manifest_path,
                                 pipeline, count, seed)
    elements = synthetic_jpegs(pipeline, count, seed=seed)
    paths = [directory / f"{i:05d}{PILLOW_PIPELINES[pipeline].suffix}" for i in range(count)]
    for path, element in zip(paths, elements):  # an interrupted write's images are these bytes: a file else is not
        if os.path.lexists(path) and not _holds(path, element["image"]):
            raise ReproError(f"{path}: not image {path.stem} of this data set (pipeline {pipeline}, seed {seed}), and "
                             f"no manifest in {directory} says what it is; it may be yours: move it, or name "
                             "another data directory")
    files = []
    for path, element in zip(paths, elements):
        with atomic_path(path) as tmp:
            tmp.write_bytes(element["image"])
        files.append(str(path.resolve()))
    manifest = {"pipeline": pipeline, "count": count, "seed": seed, "files": files,
                "sha256": [hashlib.sha256(e["image"]).hexdigest() for e in elements],
                "boxes": [e["boxes"].tolist() for e in elements] if PILLOW_PIPELINES[pipeline].boxes else None}
    write_json(manifest_path, manifest)
    return manifest


def _holds(path, content):
    """Whether `path` is a regular file (not a link) holding exactly `content`."""
    try:
        with open_regular(path, str(path), "an image") as fh:
            return not path.is_symlink() and fh.read(len(content) + 1) == content
    except (OSError, ReproError):
        return False


def _checked_manifest(manifest, path, pipeline, count, seed):
    """`manifest` where it lists this data set's `count` images, regular files beside it (the pipeline
    reads each whole: a FIFO would hang it, /dev/zero fill the memory) holding what it wrote (their
    checksums: a damaged JPEG failed inside TensorFlow's decode); else ReproError naming `path`."""
    directory = path.parent.resolve()
    files = manifest.get("files") if isinstance(manifest, dict) else None
    boxes = manifest.get("boxes") if isinstance(manifest, dict) else None
    sums = manifest.get("sha256") if isinstance(manifest, dict) else None
    wanted = {"pipeline": pipeline, "count": count, "seed": seed}
    anew = f"remove {directory} to write the data set anew"
    if (not isinstance(files, list) or len(files) != count or any(manifest.get(k) != v for k, v in wanted.items())
            or not all(isinstance(f, str) and "\0" not in f and Path(f).parent == directory and Path(f).is_file()
                       and not Path(f).is_symlink() for f in files)
            or not isinstance(sums, list) or len(sums) != count
            or (boxes is not None if not PILLOW_PIPELINES[pipeline].boxes else
                not isinstance(boxes, list) or len(boxes) != count)):
        raise ReproError(f"{path}: not the manifest of {count} images of pipeline {pipeline!r} (seed {seed}), each a "
                         f"file in {directory} with its checksum; {anew}")
    for file, expected in zip(files, sums):
        if Path(file).stat().st_size > MAX_IMAGE_BYTES or sha256_file(file, MAX_IMAGE_BYTES) != expected:
            raise ReproError(f"{file}: not the image {path} lists (its checksum differs: damaged or replaced since); "
                             f"{anew}")
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


# -- SimCLR (repro.pecan.pipelines says what it follows): each op on both views ------------------


def _views(fn):
    @tf.autograph.experimental.do_not_convert  # plain Python over the two views: nothing to convert
    def op(element):
        return {**element, "image": tuple(fn(view, element, k) for k, view in enumerate(element["image"]))}

    op.__name__ = fn.__name__
    return op


def two_views(element):
    return {**element, "image": (element["image"], element["image"])}


def _view_seed(element, salt, view):
    return _seed(element, 100 * salt + view)


def _resize_bicubic(image, height, width):
    resized = tf.image.resize(image, [height, width], method="bicubic")
    if image.dtype == tf.uint8:
        return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    return resized


def _crop(view, element, k):
    return random_resized_crop({**element, "image": view, "index": element["index"] * 2 + k})["image"]


def _jitter_one(view, which, factor):
    if which == 0:
        out = view * factor
    elif which == 1:
        mean = tf.reduce_mean(view, axis=[0, 1], keepdims=True)
        out = (view - mean) * factor + mean
    elif which == 2:
        gray = tf.tensordot(view, tf.constant(LUMA), 1)[..., None]
        out = gray + (view - gray) * factor
    else:
        angle = 2 * np.pi * factor
        c, s = tf.cos(angle), tf.sin(angle)
        rot = tf.stack([tf.stack([1.0, 0.0, 0.0]), tf.stack([0.0, c, -s]), tf.stack([0.0, s, c])])
        matrix = tf.constant(YIQ_INVERSE) @ rot @ tf.constant(YIQ)
        out = tf.tensordot(view, tf.transpose(matrix), 1)
    return tf.clip_by_value(out, 0.0, 1.0)


def _color_jitter(view, element, k, strength=1.0):
    seed = _view_seed(element, 3, k)
    apply = tf.random.stateless_uniform([], seed=seed) < 0.8
    draws = tf.random.stateless_uniform([4], seed=seed + 1)
    factors = tf.stack([1 + 0.8 * strength * (2 * draws[0] - 1), 1 + 0.8 * strength * (2 * draws[1] - 1),
                        1 + 0.8 * strength * (2 * draws[2] - 1), 0.2 * strength * (2 * draws[3] - 1)])
    order = tf.argsort(tf.random.stateless_uniform([4], seed=seed + 2))

    def jitter():
        out = view
        for i in range(4):
            which = order[i]
            out = tf.switch_case(which, [lambda w=w: _jitter_one(out, w, factors[w]) for w in range(4)])
        return out

    return tf.cond(apply, jitter, lambda: view)


def _grayscale(view, element, k):
    gray = tf.repeat(tf.tensordot(view, tf.constant(LUMA), 1)[..., None], 3, axis=-1)
    return tf.cond(tf.random.stateless_uniform([], seed=_view_seed(element, 4, k)) < 0.2, lambda: gray, lambda: view)


def _blur(view, element, k):
    seed = _view_seed(element, 5, k)
    sigma = tf.random.stateless_uniform([], seed=seed, minval=0.1, maxval=2.0)
    x = tf.range(BLUR_TAPS, dtype=tf.float32) - BLUR_TAPS // 2
    kernel = tf.exp(-(x**2) / (2 * sigma**2))
    kernel = kernel / tf.reduce_sum(kernel)

    def blurred():
        image = view[None]
        vertical = tf.tile(tf.reshape(kernel, [BLUR_TAPS, 1, 1, 1]), [1, 1, 3, 1])
        horizontal = tf.tile(tf.reshape(kernel, [1, BLUR_TAPS, 1, 1]), [1, 1, 3, 1])
        image = tf.nn.depthwise_conv2d(image, vertical, [1, 1, 1, 1], "SAME")
        image = tf.nn.depthwise_conv2d(image, horizontal, [1, 1, 1, 1], "SAME")
        return tf.clip_by_value(image[0], 0.0, 1.0)

    return tf.cond(tf.random.stateless_uniform([], seed=seed + 1) < 0.5, blurred, lambda: view)


view_to_float = _views(lambda view, element, k: tf.cast(view, tf.float32) / 255.0)
view_crop = _views(_crop)
view_resize_224 = _views(lambda view, element, k: _resize_bicubic(view, 224, 224))
view_flip = _views(lambda view, element, k: random_flip({**element, "image": view, "index": element["index"] * 2 + k})["image"])
view_color_jitter = _views(_color_jitter)
view_grayscale = _views(_grayscale)
view_blur = _views(_blur)


def concat_views(element):
    return {**element, "image": tf.clip_by_value(tf.concat(element["image"], axis=-1), 0.0, 1.0)}


# -- ASR (TensorFlowASR's features, repro.pecan.pipelines says which) ---------------------------------


def decode_pcm16(element):
    return {**element, "image": tf.io.decode_raw(element["image"], tf.int16, little_endian=True)}


def pcm_to_float(element):
    return {**element, "image": tf.cast(element["image"], tf.float32) / 32768.0}


def pre_emphasis(element, coefficient=0.97):
    x = element["image"]
    return {**element, "image": tf.concat([x[:1], x[1:] - coefficient * x[:-1]], 0)}


def frame_window(element):
    return {**element, "image": tf.signal.frame(element["image"], FRAME, STEP) * tf.constant(HANN)}


def power_spectrum(element):
    return {**element, "image": tf.square(tf.abs(tf.signal.rfft(element["image"], [NFFT])))}


def mel_filterbank(element):
    return {**element, "image": tf.matmul(element["image"], tf.constant(MEL))}


def log_mel(element):
    return {**element, "image": tf.math.log(element["image"] + 1e-6)}


def normalize_features(element):
    mean, variance = tf.nn.moments(element["image"], axes=[0])
    return {**element, "image": (element["image"] - mean) / tf.sqrt(variance + 1e-9)}


def spec_augment(element, freq_masks=2, freq_width=27, time_masks=5, time_ratio=0.05):
    x = element["image"]
    frames, bins = tf.shape(x)[0], tf.shape(x)[1]
    keep_bins, keep_frames = tf.ones([bins]), tf.ones([frames])
    for i in range(freq_masks):
        seed = _seed(element, 10 + i)
        width = tf.random.stateless_uniform([], seed=seed, maxval=freq_width, dtype=tf.int32)
        start = tf.random.stateless_uniform([], seed=seed + 1, maxval=bins - width + 1, dtype=tf.int32)
        positions = tf.range(bins)
        keep_bins *= tf.cast((positions < start) | (positions >= start + width), tf.float32)
    for i in range(time_masks):
        seed = _seed(element, 20 + i)
        limit = tf.cast(time_ratio * tf.cast(frames, tf.float32), tf.int32) + 1
        width = tf.random.stateless_uniform([], seed=seed, maxval=limit, dtype=tf.int32)
        start = tf.random.stateless_uniform([], seed=seed + 1, maxval=frames - width + 1, dtype=tf.int32)
        positions = tf.range(frames)
        keep_frames *= tf.cast((positions < start) | (positions >= start + width), tf.float32)
    return {**element, "image": x * keep_frames[:, None] * keep_bins[None, :]}


TF_OPS = {name: value for name, value in globals().items() if callable(value) and not name.startswith("_")}


def tf_pipeline(name):
    """The same ops, constraints and declared order as the Pillow pipeline, each with the TF function
    its record gives (Op.tf: a function of this module by name, or the function itself)."""
    return [dataclasses.replace(op, fn=TF_OPS[op.tf] if isinstance(op.tf, str) else op.tf)
            for op in PILLOW_PIPELINES[name].ops]


# -- orders and datasets --------------------------------------------------------------------


def _element_bytes(element):
    images = element["image"] if isinstance(element["image"], tuple) else (element["image"],)
    size = sum(len(image.numpy()) if image.dtype.name == "string" else int(np.prod(image.shape)) * image.dtype.size
               for image in images)
    return size + (int(np.prod(element["boxes"].shape)) * 4 if "boxes" in element else 0)


def traced_map(dataset, fn, **options):
    """dataset.map(fn, **options), `fn` traced as written: its graph code has no Python control flow
    on tensors, and AutoGraph's conversion would leave a generated source file in the temporary
    directory for each function in each process (TensorFlow never removes them)."""
    return dataset.map(tf.autograph.experimental.do_not_convert(fn), **options)


def _source(manifest):
    files = tf.data.Dataset.from_tensor_slices(manifest["files"])
    if manifest["boxes"] is not None:
        boxes = tf.data.Dataset.from_tensor_slices(tf.constant(manifest["boxes"], tf.float32))
        pairs = traced_map(tf.data.Dataset.zip(files, boxes), lambda f, b: {"file": f, "boxes": b})
    else:
        pairs = traced_map(files, lambda f: {"file": f})
    return pairs


def _read(index, element):
    out = {"index": index, "image": tf.io.read_file(element.pop("file"))}
    return {**out, **element}


def inflation(manifest):
    """{op name: bytes out / bytes in} of the declared order, measured eagerly on a few elements."""
    ops = tf_pipeline(manifest["pipeline"])
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
    ops = tf_pipeline(manifest["pipeline"])
    if order == "declared":
        return ops, []
    return autoorder(ops, inflation(manifest))


def dataset(manifest, order, batch_size, threads, batched=True):
    """The endless, batched pipeline (images only, plus boxes for RetinaNet) on a private threadpool
    of `threads` threads, each map `threads`-way parallel and each op at most `threads`-way
    parallel inside. Returns (dataset, op names in order). batched=False: its elements, before the
    batching (`batch` makes the batches of such a dataset, as here)."""
    ops, _ = ordered_ops(manifest, order)
    ds = traced_map(_source(manifest).repeat().enumerate(), _read)
    for op in ops:
        ds = traced_map(ds, op.fn, num_parallel_calls=threads, deterministic=False)
    ds = traced_map(ds, lambda e: {k: v for k, v in e.items() if k != "index"})
    if batched:
        ds = batch(ds, manifest, batch_size)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = threads  # decode and resize kernels would use every core
    options.autotune.cpu_budget = threads
    return ds.with_options(options), [op.name for op in ops]


def batch(elements, manifest, batch_size):
    """The pipeline's batches of `elements` (padded where its elements differ in length)."""
    if PILLOW_PIPELINES[manifest["pipeline"]].padded:
        return elements.padded_batch(batch_size, drop_remainder=True).prefetch(1)
    return elements.batch(batch_size, drop_remainder=True).prefetch(1)
