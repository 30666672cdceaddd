"""Real image-classification models as ONNX graphs with seeded weights in a separate params file.

Each model directory holds ``model.onnx`` (the graph; its initializers are external data) and
``model.params`` (all weights, float32, one file, like the original ``model.params``), plus
``manifest.json`` (the tensor layout inside model.params and sha256 checksums).

The layer shapes are the published architectures (batch-norm folded into the convolutions, as
inference runtimes do): SqueezeNet 1.1, AlexNet, ResNet-18/50 v1, VGG-16/19, and the "large"
AlexNet/VGG-16 variants of the TrIMS paper with 454x454 / 448x448 inputs.
"""

import contextlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from repro import fsutil
from repro.errors import ReproError
from repro.fsutil import DIRECTORY_MODE, atomic_path, read_at_most, sha256_file, write_json

GRAPH, PARAMS, MANIFEST = "model.onnx", "model.params", "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20  # the largest model here lists a few hundred tensors: a few tens of KiB
MAX_PARAMS_BYTES = 1 << 40
MAX_GRAPH_BYTES = 64 << 20  # the graph holds no weights (they lie in model.params): the largest here is about 50 KiB
MAX_SIDE = 4096  # input side in pixels: the largest published input here is 454
MAX_NAME_BYTES = 255  # a directory name (NAME_MAX)
_SHA256 = re.compile(r"[0-9a-f]{64}")


# numpy and onnx are imported where models are built or viewed, not with the module: the
# workflow's config check imports it for ARCHITECTURES at every Snakemake start.
class _Builder:
    def __init__(self, seed, dry=False):
        self.dry, self.nodes, self.weights = dry, [], {}
        self.count = 0
        if dry:  # the shapes only: no graph, no weights, and no second's import of onnx (the config check counts them)
            self.node = lambda *args, **kwargs: None
            return
        import numpy as np
        from onnx import helper

        self.np, self.node = np, helper.make_node
        self.rng = np.random.default_rng(seed)

    def _name(self, kind):
        self.count += 1
        return f"{kind}{self.count}"

    def _weight(self, name, shape, fan_in):
        # He initialisation keeps activations finite through deep stacks
        if self.dry:  # only the shapes: what model_sizes counts
            self.weights[name] = shape
            return name
        np = self.np
        self.weights[name] = (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in)))
        return name

    def conv(self, x, cin, cout, k, stride=1, pad=0, relu=True):
        """A convolution (k and pad: one number, or (height, width) for the asymmetric kernels of Inception v3)."""
        name = self._name("conv")
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        w = self._weight(f"{name}_W", (cout, cin, kh, kw), cin * kh * kw)
        b = self._weight(f"{name}_B", (cout,), cin * kh * kw)
        self.nodes.append(self.node("Conv", [x, w, b], [name], kernel_shape=[kh, kw], strides=[stride, stride],
                                    pads=[ph, pw, ph, pw]))
        return self.relu(name) if relu else name

    def avgpool(self, x, k, stride, pad=0):
        name = self._name("avgpool")
        self.nodes.append(self.node("AveragePool", [x], [name], kernel_shape=[k, k], strides=[stride, stride],
                                    pads=[pad] * 4, count_include_pad=0))
        return name

    def relu(self, x):
        name = self._name("relu")
        self.nodes.append(self.node("Relu", [x], [name]))
        return name

    def maxpool(self, x, k, stride, pad=0):
        name = self._name("pool")
        self.nodes.append(self.node("MaxPool", [x], [name], kernel_shape=[k, k], strides=[stride, stride],
                                    pads=[pad] * 4))
        return name

    def global_pool(self, x):
        name = self._name("gap")
        self.nodes.append(self.node("GlobalAveragePool", [x], [name]))
        flat = self._name("flatten")
        self.nodes.append(self.node("Flatten", [name], [flat]))
        return flat

    def flatten(self, x):
        name = self._name("flatten")
        self.nodes.append(self.node("Flatten", [x], [name]))
        return name

    def fc(self, x, fin, fout, relu=True):
        name = self._name("fc")
        w = self._weight(f"{name}_W", (fin, fout), fin)
        b = self._weight(f"{name}_B", (fout,), fin)
        self.nodes.append(self.node("Gemm", [x, w, b], [name]))
        return self.relu(name) if relu else name

    def add_relu(self, a, b):
        name = self._name("add")
        self.nodes.append(self.node("Add", [a, b], [name]))
        return self.relu(name)

    def concat(self, xs):
        name = self._name("concat")
        self.nodes.append(self.node("Concat", xs, [name], axis=1))
        return name


def _alexnet(b, x, side):
    x = b.maxpool(b.conv(x, 3, 64, 11, 4, 2), 3, 2)
    x = b.maxpool(b.conv(x, 64, 192, 5, 1, 2), 3, 2)
    x = b.conv(b.conv(b.conv(x, 192, 384, 3, 1, 1), 384, 256, 3, 1, 1), 256, 256, 3, 1, 1)
    x = b.maxpool(x, 3, 2)
    spatial = side
    for k, s, p in ((11, 4, 2), (3, 2, 0), (3, 2, 0), (3, 2, 0)):
        spatial = (spatial + 2 * p - k) // s + 1
    x = b.fc(b.fc(b.flatten(x), 256 * spatial * spatial, 4096), 4096, 4096)
    return b.fc(x, 4096, 1000, relu=False)


def _vgg(layers):
    def build(b, x, side):
        cin = 3
        for v in layers:
            if v == "M":
                x = b.maxpool(x, 2, 2)
                side //= 2
            else:
                x = b.conv(x, cin, v, 3, 1, 1)
                cin = v
        x = b.fc(b.fc(b.flatten(x), 512 * side * side, 4096), 4096, 4096)
        return b.fc(x, 4096, 1000, relu=False)

    return build


def _squeezenet(b, x, side):
    def fire(x, cin, squeeze, expand):
        s = b.conv(x, cin, squeeze, 1)
        return b.concat([b.conv(s, squeeze, expand, 1), b.conv(s, squeeze, expand, 3, 1, 1)])

    x = b.maxpool(b.conv(x, 3, 64, 3, 2), 3, 2)
    x = b.maxpool(fire(fire(x, 64, 16, 64), 128, 16, 64), 3, 2)
    x = b.maxpool(fire(fire(x, 128, 32, 128), 256, 32, 128), 3, 2)
    x = fire(fire(x, 256, 48, 192), 384, 48, 192)
    x = fire(fire(x, 384, 64, 256), 512, 64, 256)
    return b.global_pool(b.conv(x, 512, 1000, 1))


def _resnet(blocks, bottleneck):
    def build(b, x, side):
        x = b.maxpool(b.conv(x, 3, 64, 7, 2, 3), 3, 2, 1)
        cin = 64
        for stage, count in enumerate(blocks):
            width = 64 * 2**stage
            cout = width * 4 if bottleneck else width
            for i in range(count):
                stride = 2 if i == 0 and stage > 0 else 1
                if bottleneck:
                    y = b.conv(b.conv(x, cin, width, 1, 1), width, width, 3, stride, 1)
                    y = b.conv(y, width, cout, 1, relu=False)
                else:
                    y = b.conv(b.conv(x, cin, width, 3, stride, 1), width, cout, 3, 1, 1, relu=False)
                shortcut = b.conv(x, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else x
                x = b.add_relu(y, shortcut)
                cin = cout
        return b.fc(b.global_pool(x), cin, 1000, relu=False)

    return build


def _squeezenet_1_0(b, x, side):
    """SqueezeNet 1.0 (Iandola et al. 2016, table 1): a 7x7 stem of 96 and pools after fire4 and fire8."""
    def fire(x, cin, squeeze, expand):
        s = b.conv(x, cin, squeeze, 1)
        return b.concat([b.conv(s, squeeze, expand, 1), b.conv(s, squeeze, expand, 3, 1, 1)])

    x = b.maxpool(b.conv(x, 3, 96, 7, 2), 3, 2)
    x = fire(fire(fire(x, 96, 16, 64), 128, 16, 64), 128, 32, 128)
    x = b.maxpool(x, 3, 2)
    x = fire(fire(fire(fire(x, 256, 32, 128), 256, 48, 192), 384, 48, 192), 384, 64, 256)
    x = fire(b.maxpool(x, 3, 2), 512, 64, 256)
    return b.global_pool(b.conv(x, 512, 1000, 1))


# GoogLeNet (Szegedy et al. 2015, table 1): per inception module #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj
GOOGLENET = [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "M", (192, 96, 208, 16, 48, 64),
             (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
             (256, 160, 320, 32, 128, 128), "M", (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]


def _googlenet(b, x, side):
    x = b.maxpool(b.conv(x, 3, 64, 7, 2, 3), 3, 2, 1)
    x = b.maxpool(b.conv(b.conv(x, 64, 64, 1), 64, 192, 3, 1, 1), 3, 2, 1)
    cin = 192
    for module in GOOGLENET:
        if module == "M":
            x = b.maxpool(x, 3, 2, 1)
            continue
        c1, r3, c3, r5, c5, proj = module
        x = b.concat([b.conv(x, cin, c1, 1), b.conv(b.conv(x, cin, r3, 1), r3, c3, 3, 1, 1),
                      b.conv(b.conv(x, cin, r5, 1), r5, c5, 5, 1, 2), b.conv(b.maxpool(x, 3, 1, 1), cin, proj, 1)])
        cin = c1 + c3 + c5 + proj
    return b.fc(b.global_pool(x), cin, 1000, relu=False)


def _resnet_v2(blocks):
    """ResNet v2 (He et al. 2016, "Identity mappings"): pre-activation basic blocks, the shortcut taken
    from the activated input; batch norms folded away, as for v1."""
    def build(b, x, side):
        x = b.maxpool(b.conv(x, 3, 64, 7, 2, 3, relu=False), 3, 2, 1)
        cin = 64
        for stage, count in enumerate(blocks):
            cout = 64 * 2**stage
            for i in range(count):
                stride = 2 if i == 0 and stage > 0 else 1
                act = b.relu(x)
                y = b.conv(b.conv(act, cin, cout, 3, stride, 1), cout, cout, 3, 1, 1, relu=False)
                shortcut = b.conv(act, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else x
                name = b._name("add")
                b.nodes.append(b.node("Add", [y, shortcut], [name]))
                x, cin = name, cout
        return b.fc(b.global_pool(b.relu(x)), cin, 1000, relu=False)

    return build


def _inception_v3(b, x, side):
    """Inception v3 (Szegedy et al. 2016, "Rethinking the Inception architecture", table 1 and figures
    5-7), without the auxiliary classifier (inference only)."""
    def branch(x, cin, *convs):
        for cout, k, stride, pad in convs:
            x, cin = b.conv(x, cin, cout, k, stride, pad), cout
        return x

    def block_a(x, cin, pool):
        return b.concat([branch(x, cin, (64, 1, 1, 0)), branch(x, cin, (48, 1, 1, 0), (64, 5, 1, 2)),
                         branch(x, cin, (64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 1, 1)),
                         b.conv(b.avgpool(x, 3, 1, 1), cin, pool, 1)]), 224 + pool

    def block_c(x, c7):
        n = 768
        return b.concat([branch(x, n, (192, 1, 1, 0)),
                         branch(x, n, (c7, 1, 1, 0), (c7, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0))),
                         branch(x, n, (c7, 1, 1, 0), (c7, (7, 1), 1, (3, 0)), (c7, (1, 7), 1, (0, 3)),
                                (c7, (7, 1), 1, (3, 0)), (192, (1, 7), 1, (0, 3))),
                         b.conv(b.avgpool(x, 3, 1, 1), n, 192, 1)])

    def block_e(x, cin):
        a = branch(x, cin, (384, 1, 1, 0))
        d = branch(x, cin, (448, 1, 1, 0), (384, 3, 1, 1))
        return b.concat([branch(x, cin, (320, 1, 1, 0)), b.conv(a, 384, 384, (1, 3), 1, (0, 1)),
                         b.conv(a, 384, 384, (3, 1), 1, (1, 0)), b.conv(d, 384, 384, (1, 3), 1, (0, 1)),
                         b.conv(d, 384, 384, (3, 1), 1, (1, 0)), b.conv(b.avgpool(x, 3, 1, 1), cin, 192, 1)])

    x = branch(x, 3, (32, 3, 2, 0), (32, 3, 1, 0), (64, 3, 1, 1))
    x = branch(b.maxpool(x, 3, 2), 64, (80, 1, 1, 0), (192, 3, 1, 0))
    x, cin = block_a(b.maxpool(x, 3, 2), 192, 32)
    x, cin = block_a(x, cin, 64)
    x, cin = block_a(x, cin, 64)
    x = b.concat([branch(x, cin, (384, 3, 2, 0)), branch(x, cin, (64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 2, 0)),
                  b.maxpool(x, 3, 2)])
    for c7 in (128, 160, 160, 192):
        x = block_c(x, c7)
    x = b.concat([branch(x, 768, (192, 1, 1, 0), (320, 3, 2, 0)),
                  branch(x, 768, (192, 1, 1, 0), (192, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0)), (192, 3, 2, 0)),
                  b.maxpool(x, 3, 2)])
    x = block_e(block_e(x, 1280), 2048)
    return b.fc(b.global_pool(x), 2048, 1000, relu=False)


VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]

# name: (input side, builder). The TrIMS paper's model zoo (Dakkak et al., "TrIMS: Transparent and
# Isolated Model Sharing for Low Latency Deep Learning Inference in Function as a Service", 2019,
# its table of regular and large models, from the MXNet model zoo), plus resnet18_v1.
ARCHITECTURES = {
    "squeezenet_1.1": (224, _squeezenet),
    "squeezenet_1.0": (224, _squeezenet_1_0),
    "bvlc_googlenet": (224, _googlenet),
    "resnet18_v1": (224, _resnet([2, 2, 2, 2], bottleneck=False)),
    "resnet18_v2": (224, _resnet_v2([2, 2, 2, 2])),
    "resnet34_v2": (224, _resnet_v2([3, 4, 6, 3])),
    "resnet50_v1": (224, _resnet([3, 4, 6, 3], bottleneck=True)),
    "inception_v3": (299, _inception_v3),
    "resnet101_v1": (224, _resnet([3, 4, 23, 3], bottleneck=True)),
    "bvlc_alexnet": (227, _alexnet),
    "resnet152_v1": (224, _resnet([3, 8, 36, 3], bottleneck=True)),
    "vgg16": (224, _vgg(VGG16)),
    "vgg19": (224, _vgg(VGG19)),
    "large_alexnet_454": (454, _alexnet),
    "large_vgg16_448": (448, _vgg(VGG16)),
}


def parameter_count(name):
    """The number of weights `name` has, counted from its layer shapes without generating them."""
    import math as _math

    if name not in ARCHITECTURES:
        raise ReproError(f"unknown model {name!r}; expected one of {sorted(ARCHITECTURES)}")
    side, build = ARCHITECTURES[name]
    builder = _Builder(0, dry=True)
    build(builder, "data", side)
    return sum(_math.prod(shape) for shape in builder.weights.values())


@contextlib.contextmanager
def staged_model(directory):
    """A hidden directory beside `directory` to build a model in, put in place once the build is
    complete: renamed to `directory` where there is none, else its files moved in (the old manifest
    removed first and the new one moved in last: a directory without one is no model). Removed
    when the build fails or is interrupted, so that nothing is left that looks like a model, not
    even an empty directory; a model being rebuilt stays as it was. A symbolic link in its place is
    refused: the files would be moved to wherever it points."""
    if directory.is_symlink() or os.path.lexists(directory) and not directory.is_dir():
        kind = "a symbolic link" if directory.is_symlink() else "not a directory"
        raise ReproError(f"{directory}: is {kind}; expected a model's directory (or nothing) there: remove it, "
                         "or name another base path")
    not_a_model = _not_a_model(directory) if directory.is_dir() and any(directory.iterdir()) else None
    if not_a_model:  # the user's (the original tools' weights are model.params too): its files were replaced
        raise ReproError(f"{directory}: holds files but {not_a_model}; expected a model's directory (or nothing) "
                         "there: move the files away, or name another base path")
    directory.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
    try:
        yield stage
        os.chmod(stage, DIRECTORY_MODE)
        if not os.path.lexists(directory):
            os.rename(stage, directory)
            return
        (directory / MANIFEST).unlink(missing_ok=True)
        for name in (GRAPH, PARAMS, MANIFEST):
            os.replace(stage / name, directory / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _not_a_model(directory):
    """Why `directory` holds no model this package wrote (no manifest there that loads as one), or None."""
    if not os.path.lexists(directory / MANIFEST):
        return f"no model manifest ({MANIFEST})"
    try:
        load_manifest_file(directory / MANIFEST)
    except (ReproError, OSError) as exc:
        reason = str(exc).removeprefix(f"{directory / MANIFEST}: ")
        return f"a {MANIFEST} that is no model manifest ({reason})"
    return None


def generate(name, directory, seed=0):
    """Write model.onnx, model.params and manifest.json for `name` into `directory` (built beside it
    and moved into place when complete, see staged_model)."""
    if name not in ARCHITECTURES:
        raise ReproError(f"unknown model {name!r}; expected one of {sorted(ARCHITECTURES)}")
    with staged_model(Path(directory)) as stage:
        return _build(name, stage, seed)


def _build(name, directory, seed):
    """The files of model `name`, weights drawn with `seed`, written into `directory`; its manifest."""
    import onnx
    from onnx import TensorProto, helper

    side, build = ARCHITECTURES[name]
    builder = _Builder(seed)
    output = build(builder, "data", side)
    layout, offset = [], 0
    with atomic_path(directory / PARAMS) as tmp, open(tmp, "wb") as fh:
        for tensor_name, array in builder.weights.items():
            fh.write(array.tobytes())
            layout.append({"name": tensor_name, "shape": list(array.shape), "offset": offset, "nbytes": array.nbytes})
            offset += array.nbytes
    initializers = []
    for entry in layout:
        tensor = TensorProto(name=entry["name"], data_type=TensorProto.FLOAT, dims=entry["shape"])
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", PARAMS), ("offset", str(entry["offset"])), ("length", str(entry["nbytes"]))):
            item = tensor.external_data.add()
            item.key, item.value = key, value
        initializers.append(tensor)
    graph = helper.make_graph(
        builder.nodes, name,
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, 1000])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="repro", ir_version=9)
    with atomic_path(directory / GRAPH) as tmp:
        onnx.save_model(model, str(tmp))
    manifest = {
        "model": name, "input": {"name": "data", "shape": [1, 3, side, side]}, "output": output, "seed": seed,
        "params_bytes": offset, "tensors": layout,
        "sha256": {GRAPH: sha256_file(directory / GRAPH), PARAMS: sha256_file(directory / PARAMS)},
    }
    write_json(directory / MANIFEST, manifest)
    return manifest


def check_model_name(model):
    """`model` if it can name a model directory: one path component (so no two names lead to one
    directory, which the store would load twice), without NUL bytes, UTF-8 (or bytes a file name
    decodes to), at most 255 bytes."""
    if not isinstance(model, str) or not model:
        raise ReproError(f"model name must be a non-empty string, got {model!r}")
    if "/" in model or model in (".", ".."):
        raise ReproError(f"model name {model[:80]!r}: expected a directory name, one path component "
                         "(no '/', not '.' or '..')")
    try:
        encoded = model.encode("utf-8", "surrogateescape")  # a file name's undecodable bytes come back as they were
    except UnicodeEncodeError:
        raise ReproError(f"model name {model[:80]!r}: not UTF-8 (a lone surrogate); expected a directory name") from None
    if "\0" in model or len(encoded) > MAX_NAME_BYTES:
        raise ReproError(f"model name {model[:80]!r}: expected a directory name (no NUL byte, at most "
                         f"{MAX_NAME_BYTES} bytes)")
    return model


def _resolve(path):
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte
        raise ReproError(f"{path}: cannot resolve ({exc})") from None


def confined(root, path, what):
    """`path` resolved (every symlink followed), refused unless it lies strictly inside `root` (resolved)."""
    root, resolved = _resolve(root), _resolve(path)
    if resolved == root or not resolved.is_relative_to(root):
        raise ReproError(f"{what} is outside the store's base path {root} ({path} leads to {resolved})")
    return resolved


def model_directory(base_path, model):
    """base_path/model, resolved; refused unless it lies inside base_path (no '..', absolute names or
    symlinks leading out)."""
    check_model_name(model)
    return confined(base_path, Path(base_path) / model, f"model {model!r}")


def model_file(base_path, model, name):
    """The model's file `name` (GRAPH, PARAMS, MANIFEST), resolved and confined to base_path, a regular file."""
    path = confined(base_path, model_directory(base_path, model) / name, f"{model}/{name}")
    try:
        info = path.stat()
    except OSError as exc:
        raise ReproError(f"{path}: cannot read model file ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ReproError(f"{path}: not a regular file (expected the model's {name})")
    if name == GRAPH:
        check_graph_size(path, info.st_size)
    return path


def check_graph_size(path, size):
    """ReproError where a model graph of `size` bytes is larger than any graph without its weights: a
    sparse file of gigabytes was read whole (parsed, tens of GB of memory) before it was found no graph."""
    if size > MAX_GRAPH_BYTES:
        raise ReproError(f"{path}: {size} bytes, larger than {MAX_GRAPH_BYTES >> 20} MiB; expected the model's "
                         f"{GRAPH}, a graph whose weights lie in {PARAMS}")


def open_regular(path, what):
    """A binary file object for the regular file `path` (never blocking on a FIFO or device), or
    ReproError naming it and `what` it should be."""
    try:
        return fsutil.open_regular(path, path, what)
    except OSError as exc:
        raise ReproError(f"{path}: cannot read {what} ({exc.strerror})") from None


def _is_count(value, low=0, high=None):
    return isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)


def check_manifest(manifest, where, complete=True):
    """`manifest` if it describes a model this package can load, else ReproError naming the key.

    Every field a store or client reads is checked here, once, so that a hostile or damaged
    manifest is refused with one line instead of failing inside shared memory or the runtime.
    The store reads only params_bytes, tensors and the weights' checksum: complete=False checks those."""
    def bad(key, expected):
        return ReproError(f"{where}: {key}: expected {expected}")

    if not isinstance(manifest, dict):
        raise ReproError(f"{where}: expected a JSON object (a model manifest)")
    size = manifest.get("params_bytes")
    if not _is_count(size, 0, MAX_PARAMS_BYTES):
        raise bad("params_bytes", f"a whole number of bytes, 0 to {MAX_PARAMS_BYTES}")
    tensors = manifest.get("tensors")
    if not isinstance(tensors, list):
        raise bad("tensors", "a list")
    for i, tensor in enumerate(tensors):
        if not (isinstance(tensor, dict) and isinstance(tensor.get("name"), str) and isinstance(tensor.get("shape"), list)
                and all(_is_count(d, 0, MAX_PARAMS_BYTES) for d in tensor["shape"]) and _is_count(tensor.get("offset"))
                and _is_count(tensor.get("nbytes"))):
            raise bad(f"tensors[{i}]", "an object with name, shape (whole numbers), offset and nbytes")
        if tensor["nbytes"] != 4 * math.prod(tensor["shape"]) or tensor["offset"] % 4:
            raise bad(f"tensors[{i}].nbytes", f"4 bytes per float32 element of shape {tensor['shape'][:8]}, aligned")
        if tensor["offset"] + tensor["nbytes"] > size:
            raise bad(f"tensors[{i}]", f"to lie within params_bytes ({size})")
    sums = manifest.get("sha256")
    files = {GRAPH, PARAMS} if complete else {PARAMS}
    if not isinstance(sums, dict) or not files <= set(sums) <= {GRAPH, PARAMS} or not all(
            isinstance(v, str) and _SHA256.fullmatch(v) for v in sums.values()):
        raise bad("sha256", f"the sha256 (64 hex digits) of {' and '.join(sorted(files))}, and of no other file")
    if not complete:
        return manifest
    for key in ("model", "output"):
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise bad(key, "a non-empty string")
    data = manifest.get("input")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise bad("input.name", "a non-empty string")
    shape = data.get("shape")
    if not (isinstance(shape, list) and len(shape) == 4 and shape[:2] == [1, 3]
            and all(_is_count(side, 1, MAX_SIDE) for side in shape[2:])):
        raise bad("input.shape", f"[1, 3, height, width], sides 1 to {MAX_SIDE}")
    return manifest


def load_manifest(directory, verify=False, complete=True):
    """The manifest of a generated model, checked (check_manifest); with verify, raise if a file's
    checksum does not match."""
    directory = Path(directory)
    manifest = load_manifest_file(directory / MANIFEST, complete)
    if verify:
        for file_name, expected in manifest["sha256"].items():
            actual = sha256_file(directory / file_name)
            if actual != expected:
                raise ReproError(f"{directory / file_name}: checksum mismatch (expected sha256 {expected}, got {actual}); "
                                 "the model file is corrupt: fetch or generate it again")
    return manifest


def check_file_size(label, name, size, manifest):
    """`size` where the model file `name` (named `label` in errors) may be that large: model.params
    exactly params_bytes, model.onnx a graph without weights. A sparse file of terabytes was copied
    whole, filling the disk, before its checksum was found wrong."""
    if name == PARAMS and size != manifest["params_bytes"]:
        raise ReproError(f"{label}: {size} bytes; expected the {manifest['params_bytes']} bytes of weights its manifest "
                         "records (params_bytes)")
    if name == GRAPH:
        check_graph_size(label, size)
    return size


def check_manifest_size(path, size):
    if size > MAX_MANIFEST_BYTES:
        raise ReproError(f"{path}: larger than {MAX_MANIFEST_BYTES >> 20} MiB; not a model manifest")


def load_manifest_file(path, complete=True):
    """The model manifest in the file `path`, checked (check_manifest)."""
    with open_regular(path, "a model manifest") as fh:
        text = read_at_most(fh, MAX_MANIFEST_BYTES)
    check_manifest_size(path, len(text))
    try:
        manifest = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ReproError(f"{path}: cannot read model manifest ({type(exc).__name__}: {str(exc)[:200]})") from None
    return check_manifest(manifest, path, complete)


def check_model(base_path, model):
    """The manifest of base_path/model once its files are there and agree: manifest checked, model.onnx
    and model.params regular files inside base_path, the graph's input and weights those the manifest
    lists, every weight read from model.params (whose bytes each request checks). A client checks this before its first request."""
    import onnx

    directory = model_directory(base_path, model)
    manifest = load_manifest(directory)
    graph_path = model_file(base_path, model, GRAPH)
    model_file(base_path, model, PARAMS)  # its size and checksum are checked as each request reads it
    try:
        with open_regular(graph_path, "an ONNX graph") as fh:
            graph = onnx.load_model_from_string(read_at_most(fh, MAX_GRAPH_BYTES)).graph
    except ReproError:
        raise
    except Exception as exc:  # protobuf's DecodeError and friends: the file is not an ONNX model
        raise ReproError(f"{graph_path}: not an ONNX model ({type(exc).__name__})") from None
    inconsistent = f"{directory / MANIFEST}: does not describe {graph_path}"
    if manifest["input"]["name"] not in [value.name for value in graph.input]:
        raise ReproError(f"{inconsistent} (input {manifest['input']['name']!r} is not the graph's)")
    listed = {t["name"]: t["shape"] for t in manifest["tensors"]}
    weights = {t.name: list(t.dims) for t in graph.initializer}
    if weights != listed:
        raise ReproError(f"{inconsistent} (its tensors differ from the graph's weights)")
    for tensor in graph.initializer:
        location = {item.key: item.value for item in tensor.external_data}.get("location")
        if tensor.data_location != onnx.TensorProto.EXTERNAL or location != PARAMS:
            raise ReproError(f"{graph_path}: weight {tensor.name!r} is not read from {PARAMS}")
    return manifest


def params_view(buffer, manifest):
    """numpy arrays over `buffer` (bytes-like, e.g. shared memory) for each tensor: no copy."""
    import numpy as np

    return {
        t["name"]: np.frombuffer(buffer, dtype=np.float32, count=t["nbytes"] // 4, offset=t["offset"]).reshape(t["shape"])
        for t in manifest["tensors"]
    }
