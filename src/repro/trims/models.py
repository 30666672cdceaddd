"""Real image-classification models as ONNX graphs with seeded weights in a separate params file.

Each model directory holds ``model.onnx`` (the graph; its initializers are external data) and
``model.params`` (all weights, float32, one file, like the original ``model.params``), plus
``manifest.json`` (the tensor layout inside model.params and sha256 checksums).

The layer shapes are the published architectures (batch-norm folded into the convolutions, as
inference runtimes do): SqueezeNet 1.1, AlexNet, ResNet-18/50 v1, VGG-16/19, and the "large"
AlexNet/VGG-16 variants of the TrIMS paper with 454x454 / 448x448 inputs.
"""

import json
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import atomic_path, sha256_file, write_json

GRAPH, PARAMS, MANIFEST = "model.onnx", "model.params", "manifest.json"


# numpy and onnx are imported where models are built or viewed, not with the module: the
# workflow's config check imports it for ARCHITECTURES at every Snakemake start.
class _Builder:
    def __init__(self, seed):
        import numpy as np
        from onnx import helper

        self.np, self.node = np, helper.make_node
        self.rng = np.random.default_rng(seed)
        self.nodes, self.weights = [], {}
        self.count = 0

    def _name(self, kind):
        self.count += 1
        return f"{kind}{self.count}"

    def _weight(self, name, shape, fan_in):
        # He initialisation keeps activations finite through deep stacks
        np = self.np
        self.weights[name] = (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in)))
        return name

    def conv(self, x, cin, cout, k, stride=1, pad=0, relu=True):
        name = self._name("conv")
        w = self._weight(f"{name}_W", (cout, cin, k, k), cin * k * k)
        b = self._weight(f"{name}_B", (cout,), cin * k * k)
        self.nodes.append(self.node("Conv", [x, w, b], [name], kernel_shape=[k, k], strides=[stride, stride],
                                    pads=[pad] * 4))
        return self.relu(name) if relu else name

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


VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]

# name: (input side, builder)
ARCHITECTURES = {
    "squeezenet_1.1": (224, _squeezenet),
    "resnet18_v1": (224, _resnet([2, 2, 2, 2], bottleneck=False)),
    "resnet50_v1": (224, _resnet([3, 4, 6, 3], bottleneck=True)),
    "bvlc_alexnet": (227, _alexnet),
    "vgg16": (224, _vgg(VGG16)),
    "vgg19": (224, _vgg(VGG19)),
    "large_alexnet_454": (454, _alexnet),
    "large_vgg16_448": (448, _vgg(VGG16)),
}


def generate(name, directory, seed=0):
    """Write model.onnx, model.params and manifest.json for `name` into `directory`."""
    import onnx
    from onnx import TensorProto, helper

    if name not in ARCHITECTURES:
        raise ReproError(f"unknown model {name!r}; expected one of {sorted(ARCHITECTURES)}")
    side, build = ARCHITECTURES[name]
    builder = _Builder(seed)
    output = build(builder, "data", side)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
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


def load_manifest(directory, verify=False):
    """The manifest of a generated model; with verify, raise if a file's checksum does not match."""
    directory = Path(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ReproError(f"{directory / MANIFEST}: cannot read model manifest ({exc})") from None
    if verify:
        for file_name, expected in manifest["sha256"].items():
            actual = sha256_file(directory / file_name)
            if actual != expected:
                raise ReproError(f"{directory / file_name}: checksum mismatch (expected sha256 {expected}, got {actual}); "
                                 "the model file is corrupt: fetch or generate it again")
    return manifest


def params_view(buffer, manifest):
    """numpy arrays over `buffer` (bytes-like, e.g. shared memory) for each tensor: no copy."""
    import numpy as np

    return {
        t["name"]: np.frombuffer(buffer, dtype=np.float32, count=t["nbytes"] // 4, offset=t["offset"]).reshape(t["shape"])
        for t in manifest["tensors"]
    }
