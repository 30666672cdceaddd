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
    tf: the name of its TF form in repro.pecan.tfdata.ops, None where it has none.
    """

    name: str
    fn: Callable
    keep_position: bool = False
    shape_preserving: bool = False
    requires: tuple = ()
    tf: str | None = ""  # its TF function in repro.pecan.tfdata.ops ("": the same name; None: no TF form)

    def __post_init__(self):
        if self.tf == "":
            object.__setattr__(self, "tf", self.name)


def element_bytes(element):
    image = element["image"]
    if isinstance(image, tuple):  # SimCLR's two views
        size = sum(view.nbytes for view in image)
    else:
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
    """Stack a list of processed elements (kept apart from the per-element maps); elements of
    different lengths (utterances) are zero-padded to the longest, as padded_batch does."""
    images = [e["image"] for e in elements]
    lengths = {image.shape[0] for image in images if isinstance(image, np.ndarray) and image.ndim}
    longest = max(lengths, default=0)
    if len(lengths) > 1:
        images = [np.pad(image, [(0, longest - image.shape[0])] + [(0, 0)] * (image.ndim - 1)) for image in images]
    return np.stack(images)


@dataclass(frozen=True)
class Pipeline:
    """A registered input pipeline, the one record of it: its maps in declared order (each with its
    TF form's name), the synthetic input it is measured on, and what the tf.data engine and the
    artifact preset need of it.

    image_size: (width, height) of the synthetic source images.
    boxes: elements carry detection boxes (which flips and resizes must follow).
    synthetic: (count, seed) -> source elements; by default JPEGs of image_size (`synthetic_jpegs`).
    time_scale: the tf.data engine's accelerator step-time factor (repro.pecan.tfdata): the one that
        puts the miniature bound of the pipeline's experiment on its first accelerator midway between
        what one and two 1-vCPU workers deliver, as `benchmarks/tfdata.py --experiment E` measures and
        prints it (docs/BENCHMARKS.md); None where none was measured (the engine then asks for
        --time-scale / pecan.tfdata.time_scale). Experiments of the same pipeline on a faster
        accelerator (ResNet50_v3-8) keep its factor, so their miniature bound stays that much higher.
    suffix: the source files' suffix when the tf.data engine writes them.
    source: the public pipeline this one follows (for captions).
    """

    ops: tuple
    image_size: tuple = None
    boxes: bool = False
    synthetic: Callable = None
    time_scale: float = None
    suffix: str = ".jpg"
    source: str = ""
    padded: bool = False  # elements differ in length: batches are padded (padded_batch)

    @property
    def tf_form(self):
        """Every op has a TF form (repro.pecan.tfdata.ops names it), so the tf.data engine can run it."""
        return all(op.tf for op in self.ops)

    def elements(self, count, seed=0):
        if self.synthetic is not None:
            return self.synthetic(count, seed)
        return _jpegs(self, count, seed)


# -- SimCLR: google-research/simclr (commit 383d414), tf2/data.py and tf2/data_util.py -------------
# Per image, the pretraining preprocessing runs twice, independently, and the two views are
# concatenated on the channel axis. Per view, as data_util.preprocess_for_train: float conversion
# first, random resized crop (area 8-100%, aspect 3/4-4/3) with a bicubic resize to 224, a flip
# (p 0.5), colour jitter with p 0.8 (brightness, contrast, saturation, hue at strength 1.0, in a
# random order per view, clipped after each), grayscale with p 0.2. The Gaussian blur (sigma
# U[0.1, 2], 23 taps, p 0.5) runs in SimCLR's model; the Pecan artifact's SimCLR recipe
# (ml_input_processing/README_Oto.md) sets blur_in_model=false, so here it is a map, per image.
# Saturation is a blend with the luma image (as Pillow's ImageEnhance.Color) and hue a rotation of
# the YIQ chroma plane: SimCLR uses TF's HSV versions; the work is of the same kind, not bit-identical.

LUMA = np.array([0.299, 0.587, 0.114], np.float32)
YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], np.float32)
YIQ_INVERSE = np.linalg.inv(YIQ).astype(np.float32)
BLUR_TAPS = 23  # kernel_size = image_size // 10 = 22 -> radius 11


def _per_view(fn):
    def op(element, rng):
        return {**element, "image": tuple(fn(view, rng) for view in element["image"])}

    op.__name__ = fn.__name__
    return op


def two_views(element, rng):
    return {**element, "image": (element["image"], element["image"])}


def _crop(view, rng):
    return random_resized_crop({"image": view}, rng)["image"]


def _resize_bicubic(image, height, width):
    if image.dtype == np.uint8:
        return np.asarray(Image.fromarray(image).resize((width, height), Image.BICUBIC))
    return np.stack([np.asarray(Image.fromarray(image[..., c], mode="F").resize((width, height), Image.BICUBIC))
                     for c in range(image.shape[2])], axis=-1)


def _flip(view, rng):
    return view if rng.random() < 0.5 else np.ascontiguousarray(view[:, ::-1])


def _view_float(view, rng):
    return view.astype(np.float32) / 255.0


def _color_jitter(view, rng, strength=1.0):
    """The four jitters in a random order with p 0.8, each clipped to [0, 1] (data_util.color_jitter_rand)."""
    if rng.random() >= 0.8:
        rng.random(4)  # the same draws either way: an element's later ops see the same stream
        rng.permutation(4)
        return view
    b, c, s, h = rng.random(4)
    factors = (1 + 0.8 * strength * (2 * b - 1), 1 + 0.8 * strength * (2 * c - 1), 1 + 0.8 * strength * (2 * s - 1),
               0.2 * strength * (2 * h - 1))
    for which in rng.permutation(4):
        f = factors[which]
        if which == 0:  # brightness (simclrv2): a factor in [0.2, 1.8]
            view = view * np.float32(f)
        elif which == 1:  # contrast about each channel's mean
            mean = view.mean(axis=(0, 1), keepdims=True)
            view = (view - mean) * np.float32(f) + mean
        elif which == 2:  # saturation: blend with the luma image
            gray = (view @ LUMA)[..., None]
            view = gray + (view - gray) * np.float32(f)
        else:  # hue: rotate the chroma plane by f turns
            angle = np.float32(2 * np.pi * f)
            rot = np.array([[1, 0, 0], [0, np.cos(angle), -np.sin(angle)], [0, np.sin(angle), np.cos(angle)]], np.float32)
            view = view @ (YIQ_INVERSE @ rot @ YIQ).T.astype(np.float32)
        view = np.clip(view, 0.0, 1.0).astype(np.float32)
    return view


def _grayscale(view, rng):
    if rng.random() >= 0.2:
        return view
    return np.repeat((view @ LUMA)[..., None], 3, axis=-1).astype(np.float32)


def blur_kernel(sigma, taps=BLUR_TAPS):
    x = np.arange(taps, dtype=np.float32) - taps // 2
    kernel = np.exp(-(x**2) / (2 * np.float32(sigma) ** 2))
    return (kernel / kernel.sum()).astype(np.float32)


def _blur(view, rng):
    """Separable Gaussian blur with SAME (zero) padding, p 0.5 (data_util.random_blur)."""
    sigma = rng.uniform(0.1, 2.0)
    if rng.random() >= 0.5:
        return view
    kernel, r = blur_kernel(sigma), BLUR_TAPS // 2
    out = view
    for axis in (0, 1):
        pad = [(0, 0)] * 3
        pad[axis] = (r, r)
        padded = np.pad(out, pad)
        n = out.shape[axis]
        acc = np.zeros_like(out)
        for k, w in enumerate(kernel):
            acc += w * np.take(padded, range(k, k + n), axis=axis)
        out = acc
    return np.clip(out, 0.0, 1.0)


def concat_views(element, rng):
    """The views on the channel axis, each clipped to [0, 1] (preprocess_for_train's finish)."""
    return {**element, "image": np.clip(np.concatenate(element["image"], axis=-1), 0.0, 1.0)}


view_to_float = _per_view(_view_float)
view_crop = _per_view(_crop)
view_resize_224 = _per_view(lambda v, rng: _resize_bicubic(v, 224, 224))
view_flip = _per_view(_flip)
view_color_jitter = _per_view(_color_jitter)
view_grayscale = _per_view(_grayscale)
view_blur = _per_view(_blur)


# -- ASRTrans: TensorSpeech/TensorFlowASR (commit f092d39) -------------------------------------
# Which ASR pipeline the paper's ASRTrans used is not public; this one is TensorFlowASR's
# LibriSpeech Transformer configuration (examples/models/ctc/transformer/base.yml.j2, defaults in
# tensorflow_asr/models/layers/feature_extraction.py and augmentations/methods/specaugment.py):
# 16 kHz audio, pre-emphasis 0.97, 25 ms Hann frames every 10 ms, a 512-point FFT, 80 log-mel bins
# over 0-8000 Hz (natural log, eps 1e-6), per-bin normalisation over the utterance, SpecAugment
# (2 frequency masks of width < 27 bins, 5 time masks of up to 5% of the frames, zero-filled). In
# TensorFlowASR these are layers of the model; here they are the input pipeline's maps, on the host.
# The source: synthetic 16-bit PCM utterances of 4-17 s (lingvo's LibriSpeech buckets, 639-1710
# frames of 10 ms, span about that).

SAMPLE_RATE = 16000
FRAME, STEP, NFFT, MELS = 400, 160, 512, 80
UTTERANCE_S = (4.0, 17.0)


def mel_matrix(sample_rate=SAMPLE_RATE, nfft=NFFT, mels=MELS, low=0.0, high=8000.0):
    """(nfft // 2 + 1) x mels triangular HTK-mel filters (as tf.signal.linear_to_mel_weight_matrix)."""
    def to_mel(f):
        return 1127.0 * np.log1p(np.asarray(f, np.float64) / 700.0)

    bins = np.linspace(0, sample_rate / 2, nfft // 2 + 1)
    edges = np.linspace(to_mel(low), to_mel(high), mels + 2)
    spectrum = to_mel(bins)[:, None]
    lower = (spectrum - edges[None, :-2]) / (edges[1:-1] - edges[:-2])
    upper = (edges[None, 2:] - spectrum) / (edges[2:] - edges[1:-1])
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights[0] = 0.0  # no DC
    return weights.astype(np.float32)


MEL = mel_matrix()
HANN = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(FRAME) / FRAME)).astype(np.float32)  # periodic, as tf.signal


def decode_pcm16(element, rng):
    return {**element, "image": np.frombuffer(element["image"], "<i2").copy()}


def pcm_to_float(element, rng):
    return {**element, "image": element["image"].astype(np.float32) / 32768.0}


def pre_emphasis(element, rng, coefficient=0.97):
    x = element["image"]
    return {**element, "image": np.concatenate([x[:1], x[1:] - np.float32(coefficient) * x[:-1]]).astype(np.float32)}


def frame_window(element, rng):
    x = element["image"]
    count = 1 + (len(x) - FRAME) // STEP
    frames = np.lib.stride_tricks.sliding_window_view(x, FRAME)[: count * STEP : STEP]
    return {**element, "image": (frames * HANN).astype(np.float32)}


def power_spectrum(element, rng):
    return {**element, "image": (np.abs(np.fft.rfft(element["image"], NFFT)) ** 2).astype(np.float32)}


def mel_filterbank(element, rng):
    return {**element, "image": element["image"] @ MEL}


def log_mel(element, rng):
    return {**element, "image": np.log(element["image"] + np.float32(1e-6))}


def normalize_features(element, rng):
    x = element["image"]
    return {**element, "image": ((x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + np.float32(1e-9))).astype(np.float32)}


def spec_augment(element, rng, freq_masks=2, freq_width=27, time_masks=5, time_ratio=0.05):
    x = element["image"].copy()
    frames, bins = x.shape
    for _ in range(freq_masks):
        width = rng.integers(0, freq_width)
        start = rng.integers(0, bins - width + 1)
        x[:, start : start + width] = 0.0
    for _ in range(time_masks):
        width = rng.integers(0, int(time_ratio * frames) + 1)
        start = rng.integers(0, frames - width + 1)
        x[start : start + width] = 0.0
    return {**element, "image": x}


def synthetic_utterances(count, seed=0):
    """Deterministic speech-like 16 kHz 16-bit PCM: a voiced source with a drifting pitch and its
    harmonics, syllable-rate amplitude envelope and noise, 4-17 s long."""
    rng = np.random.default_rng(seed)
    elements = []
    for _ in range(count):
        n = int(rng.uniform(*UTTERANCE_S) * SAMPLE_RATE)
        t = np.arange(n) / SAMPLE_RATE
        pitch = rng.uniform(90, 220) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.2, 1.0) * t))
        phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
        voiced = sum(np.sin(k * phase) / k for k in range(1, 9))
        envelope = np.clip(np.sin(2 * np.pi * rng.uniform(3, 5) * t + rng.uniform(0, 6.28)), 0, None)
        signal = 0.25 * voiced * envelope + rng.normal(0, 0.02, n)
        elements.append({"image": (np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes()})
    return elements


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
        time_scale=18.0,
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
        time_scale=6.0,
    ),
    "simclr": Pipeline(
        ops=(
            Op("decode", decode, keep_position=True),
            Op("two_views", two_views),
            Op("to_float", view_to_float, shape_preserving=True, tf="view_to_float"),
            Op("random_resized_crop", view_crop, tf="view_crop"),
            Op("resize_224_bicubic", view_resize_224, tf="view_resize_224"),
            Op("random_flip", view_flip, shape_preserving=True, tf="view_flip"),
            Op("color_jitter", view_color_jitter, shape_preserving=True, requires=("to_float",), tf="view_color_jitter"),
            Op("grayscale", view_grayscale, shape_preserving=True, requires=("to_float",), tf="view_grayscale"),
            Op("gaussian_blur", view_blur, shape_preserving=True, requires=("to_float",), tf="view_blur"),
            Op("concat_views", concat_views, keep_position=True),
        ),
        image_size=(500, 375),
        source="google-research/simclr tf2/data_util.py pretraining preprocessing, two views, blur in the pipeline",
        time_scale=21.0,  # SimCLR on the v2-8
    ),
    "asr": Pipeline(
        ops=(
            Op("decode", decode_pcm16, keep_position=True, tf="decode_pcm16"),
            Op("to_float", pcm_to_float, shape_preserving=True, tf="pcm_to_float"),
            Op("pre_emphasis", pre_emphasis, shape_preserving=True, requires=("to_float",)),
            Op("frame_window", frame_window),
            Op("power_spectrum", power_spectrum),
            Op("mel_filterbank", mel_filterbank),
            Op("log_mel", log_mel, shape_preserving=True),
            Op("normalize_features", normalize_features, shape_preserving=True),
            Op("spec_augment", spec_augment, shape_preserving=True),
        ),
        synthetic=synthetic_utterances,
        suffix=".pcm",
        padded=True,
        source="TensorSpeech/TensorFlowASR LibriSpeech Transformer features (log-mel, normalised, SpecAugment)",
        time_scale=3.0,  # ASRTrans on the v3-8
    ),
}


def synthetic_jpegs(pipeline, count, seed=0, quality=90):
    """The pipeline's synthetic source elements: deterministic textured JPEGs (smooth gradients,
    shapes and noise, so they do not compress to nothing), or what its record generates instead."""
    return PIPELINES[pipeline].elements(count, seed)


def _jpegs(spec, count, seed, quality=90):
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
