"""The real input pipelines, built from Pillow and numpy, op by op.

ResNet-50 ImageNet training preprocessing and RetinaNet COCO preprocessing, written the way a
user commonly writes them: the image is converted to float32 right after decoding (as
``tf.image.convert_image_dtype`` is often used), so every later op touches 4x more bytes.
AutoOrder (repro.pecan.policies.autoorder) finds the better order from measured sizes.

An element is a dict: ``image`` (JPEG bytes, then an HxWx3 array) and, for detection, ``boxes``
(N x 4 float32, normalised [ymin, xmin, ymax, xmax]).
"""

import io
from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


@dataclass(frozen=True)
class Op:
    """One map of a pipeline.

    keep_position: the op must stay where it is (decode).
    shape_preserving: output shape equals input shape (only such maps may be moved by AutoOrder).
    requires: ops that must run before this one (normalize expects the float image).
    """

    name: str
    fn: Callable
    keep_position: bool = False
    shape_preserving: bool = False
    requires: tuple = ()


def element_bytes(element):
    image = element["image"]
    size = len(image) if isinstance(image, bytes) else image.nbytes
    return size + (element["boxes"].nbytes if "boxes" in element else 0)


# -- ops --------------------------------------------------------------------------------


def decode(element, rng):
    image = np.asarray(Image.open(io.BytesIO(element["image"])).convert("RGB"))
    return {**element, "image": image}


def to_float(element, rng):
    return {**element, "image": element["image"].astype(np.float32) / 255.0}


def _resize(image, height, width):
    """Bilinear resize of a uint8 or float32 HxWx3 array (Pillow resizes float images per channel)."""
    if image.dtype == np.uint8:
        return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))
    channels = [np.asarray(Image.fromarray(image[..., c], mode="F").resize((width, height), Image.BILINEAR))
                for c in range(image.shape[2])]
    return np.stack(channels, axis=-1)


def random_resized_crop(element, rng, area=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """Inception-style crop: random area fraction and aspect ratio, falling back to the centre."""
    image = element["image"]
    height, width = image.shape[:2]
    for _ in range(10):
        target = rng.uniform(*area) * height * width
        aspect = np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1])))
        w, h = int(round(np.sqrt(target * aspect))), int(round(np.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top, left = rng.integers(0, height - h + 1), rng.integers(0, width - w + 1)
            return {**element, "image": image[top : top + h, left : left + w]}
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    return {**element, "image": image[top : top + side, left : left + side]}


def resize_224(element, rng):
    return {**element, "image": _resize(element["image"], 224, 224)}


def random_flip(element, rng):
    if rng.random() < 0.5:
        return element
    flipped = {**element, "image": np.ascontiguousarray(element["image"][:, ::-1])}
    if "boxes" in element:
        boxes = element["boxes"].copy()
        boxes[:, [1, 3]] = 1.0 - element["boxes"][:, [3, 1]]
        flipped["boxes"] = boxes
    return flipped


def normalize(element, rng):
    return {**element, "image": (element["image"] - IMAGENET_MEAN) / IMAGENET_STD}


def resize_and_pad_640(element, rng, side=640):
    """Scale the longer side to 640 and pad to 640x640; boxes follow the scale and padding."""
    image = element["image"]
    height, width = image.shape[:2]
    scale = side / max(height, width)
    new_h, new_w = int(round(height * scale)), int(round(width * scale))
    resized = _resize(image, new_h, new_w)
    padded = np.zeros((side, side, 3), image.dtype)
    padded[:new_h, :new_w] = resized
    boxes = element["boxes"] * np.array([new_h / side, new_w / side, new_h / side, new_w / side], np.float32)
    return {**element, "image": padded, "boxes": boxes}


def batch(elements):
    """Stack a list of processed elements (kept apart from the per-element maps)."""
    return np.stack([e["image"] for e in elements])


@dataclass(frozen=True)
class Pipeline:
    """A registered input pipeline: its maps in declared order and the synthetic input it is measured on.

    image_size: (width, height) of the synthetic source images.
    boxes: elements carry detection boxes (which flips and resizes must follow).
    """

    ops: tuple
    image_size: tuple
    boxes: bool = False


# The registry: a model's `pipeline` in the config, `repro pecan calibrate --pipeline` and the
# calibrate rule's wildcard take their names from here. Source image sizes: ImageNet's typical
# 500x375 and COCO's typical 640x480.
PIPELINES = {
    "resnet": Pipeline(
        ops=(
            Op("decode", decode, keep_position=True),
            Op("to_float", to_float, shape_preserving=True),
            Op("random_resized_crop", random_resized_crop),
            Op("resize_224", resize_224),
            Op("random_flip", random_flip, shape_preserving=True),
            Op("normalize", normalize, shape_preserving=True, requires=("to_float",)),
        ),
        image_size=(500, 375),
    ),
    "retinanet": Pipeline(
        ops=(
            Op("decode", decode, keep_position=True),
            Op("to_float", to_float, shape_preserving=True),
            Op("random_flip", random_flip, shape_preserving=True),
            Op("resize_and_pad_640", resize_and_pad_640),
            Op("normalize", normalize, shape_preserving=True, requires=("to_float",)),
        ),
        image_size=(640, 480),
        boxes=True,
    ),
}


def synthetic_jpegs(pipeline, count, seed=0, quality=90):
    """Deterministic textured JPEGs (smooth gradients, shapes and noise, so they do not compress to nothing)."""
    spec = PIPELINES[pipeline]
    width, height = spec.image_size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    elements = []
    for i in range(count):
        fx, fy, phase = rng.uniform(0.01, 0.08, 2).tolist() + [rng.uniform(0, 6.28)]
        base = np.stack([np.sin(x * fx + phase), np.cos(y * fy - phase), np.sin((x + y) * (fx + fy) / 2)], -1)
        image = (base * 60 + 128 + rng.normal(0, 25, (height, width, 3))).clip(0, 255).astype(np.uint8)
        for _ in range(6):
            cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(10, 80)
            image[max(0, cy - r) : cy + r, max(0, cx - r) : cx + r] = rng.integers(0, 256, 3)
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, "JPEG", quality=quality)
        element = {"image": buf.getvalue()}
        if spec.boxes:
            lo = rng.uniform(0, 0.6, (4, 2))
            hi = lo + rng.uniform(0.1, 0.4, (4, 2))
            element["boxes"] = np.concatenate([lo, np.minimum(hi, 1.0)], 1).astype(np.float32)
        elements.append(element)
    return elements
