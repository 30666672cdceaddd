"""Inference runtimes for the clients: onnxruntime on the CPU, or the same ONNX graph on a GPU.

Both take weights without copying them when they already live where inference runs (a mapped
shared memory segment for the CPU, device memory opened from the store for the GPU), and both
record the same phases. The GPU runtime runs the graph's operators with PyTorch on CUDA tensors:
PyTorch is optional (not a dependency of this package) and is what GPU machines usually carry,
with CUDA libraries that match their driver. Its operator set is the one the generated models use.
"""

import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from repro.errors import ReproError
from repro.trims.models import params_view


class _Once:
    """A process-wide set-up done once, possibly in a background thread."""

    def __init__(self, setup):
        self._setup, self._done, self._lock = setup, threading.Event(), threading.Lock()

    def initialise(self):
        with self._lock:
            if not self._done.is_set():
                self._setup()
                self._done.set()

    def initialise_in_background(self):
        thread = threading.Thread(target=self.initialise, daemon=True)
        thread.start()
        return thread


def _ort_setup():
    # a one-node session creates onnxruntime's environment and thread pools
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "init",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


class CpuRuntime(_Once):
    device = "cpu"
    # every error onnxruntime raises (NoSuchFile, InvalidGraph, InvalidArgument, ...), not only Fail
    errors = tuple(e for e in vars(ort.capi.onnxruntime_pybind11_state).values()
                   if isinstance(e, type) and issubclass(e, Exception))

    def __init__(self):
        super().__init__(_ort_setup)

    def host_weights(self, buffer, manifest):
        """onnxruntime values over the host buffer (a mapped segment or the file's bytes): no copy."""
        return {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in params_view(buffer, manifest).items()}

    def predictor(self, graph_path, weights):
        options = ort.SessionOptions()
        options.add_session_config_entry("session.disable_prepacking", "1")  # no packed copies of the weights
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        for name, value in weights.items():
            options.add_initializer(name, value)
        session = ort.InferenceSession(str(graph_path), options, providers=["CPUExecutionProvider"])
        return lambda name, data: session.run(None, {name: data})[0]


class _DeviceArray:
    """float32 device memory described by the CUDA array interface, which PyTorch wraps without a copy."""

    def __init__(self, pointer, count):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<f4", "data": (pointer, False),
                                         "version": 3, "strides": None}


def _torch_operators(torch):
    functional = torch.nn.functional

    def pads(attrs):
        p = attrs.get("pads", [0, 0, 0, 0])
        if p[:2] != p[2:]:
            raise ReproError(f"asymmetric pads {p} are not supported on the GPU runtime")
        return p[:2]

    return {
        "Conv": lambda x, attrs: functional.conv2d(x[0], x[1], x[2] if len(x) > 2 else None,
                                                   stride=attrs.get("strides", [1, 1]), padding=pads(attrs)),
        "Relu": lambda x, attrs: torch.relu(x[0]),
        "MaxPool": lambda x, attrs: functional.max_pool2d(x[0], attrs["kernel_shape"], attrs.get("strides", [1, 1]),
                                                          pads(attrs)),
        "GlobalAveragePool": lambda x, attrs: functional.adaptive_avg_pool2d(x[0], 1),
        "Flatten": lambda x, attrs: torch.flatten(x[0], attrs.get("axis", 1)),
        "Gemm": lambda x, attrs: torch.addmm(x[2], x[0], x[1]),
        "Add": lambda x, attrs: x[0] + x[1],
        "Concat": lambda x, attrs: torch.cat(x, dim=attrs["axis"]),
    }


def _gemm_is_plain(attrs):
    return all(attrs.get(key, default) == default for key, default in
               (("alpha", 1.0), ("beta", 1.0), ("transA", 0), ("transB", 0)))


class GpuRuntime(_Once):
    device = "gpu"
    errors = (RuntimeError,)  # what PyTorch raises, out-of-memory included

    def __init__(self):
        try:
            import torch
        except ImportError:
            raise ReproError("--device gpu needs PyTorch with CUDA in this environment (import torch failed)") from None
        if not torch.cuda.is_available():
            raise ReproError("--device gpu: PyTorch sees no CUDA device")
        self.torch, self.operators = torch, _torch_operators(torch)
        super().__init__(self._setup)

    def _setup(self):
        # creates the CUDA context and loads the convolution and matrix kernels
        torch = self.torch
        x = torch.ones((1, 3, 8, 8), device="cuda")
        torch.nn.functional.conv2d(x, torch.ones((4, 3, 3, 3), device="cuda")).sum().item()
        torch.addmm(torch.ones(4, device="cuda"), torch.ones((2, 3), device="cuda"), torch.ones((3, 4), device="cuda"))
        torch.cuda.synchronize()

    def _views(self, flat, manifest):
        return {t["name"]: flat[t["offset"] // 4 : (t["offset"] + t["nbytes"]) // 4].view(t["shape"])
                for t in manifest["tensors"]}

    def host_weights(self, buffer, manifest):
        """Copy host weights to the GPU in one transfer (what a cold load pays)."""
        flat = np.frombuffer(buffer, dtype=np.float32, count=manifest["params_bytes"] // 4)
        flat = self.torch.from_numpy(flat).to("cuda")
        self.torch.cuda.synchronize()
        return self._views(flat, manifest)

    def device_weights(self, pointer, manifest):
        """Tensors over the store's device memory: no copy."""
        flat = self.torch.as_tensor(_DeviceArray(pointer, manifest["params_bytes"] // 4), device="cuda")
        return self._views(flat, manifest)

    def predictor(self, graph_path, weights):
        import onnx

        graph = onnx.load(str(graph_path), load_external_data=False).graph
        steps = []
        for node in graph.node:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if node.op_type not in self.operators or (node.op_type == "Gemm" and not _gemm_is_plain(attrs)):
                raise ReproError(f"{graph_path}: operator {node.op_type} is not supported on the GPU runtime")
            steps.append((self.operators[node.op_type], list(node.input), node.output[0], attrs))
        torch = self.torch

        def run(name, data):
            values = dict(weights)
            values[name] = torch.from_numpy(data).to("cuda")
            with torch.inference_mode():
                for operator, inputs, output, attrs in steps:
                    values[output] = operator([values[i] for i in inputs], attrs)
            return values[output].cpu().numpy()  # the copy back waits for the GPU

        return run
