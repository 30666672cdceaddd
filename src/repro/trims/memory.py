"""How much memory a model needs: measured when it runs, and computed from its ONNX graph.

The original TRIMS tools measured this by summing the cudaMalloc calls its MXNet fork traced
(`client memory_usage`, `trace memoryinfo`). Here the memory is measured on the CPU in a fresh
process (`measure`): the growth of its resident set (RSS) and proportional set (PSS, shared pages
divided among the processes mapping them) from before the inference session is created to after
the first inference, with the weights already read. The figure computed from the graph (parameter
and activation bytes per layer, shapes inferred for one input, float32) is kept beside it, with
what the model store allocates for the weights.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.trims.models import GRAPH, load_manifest

FORMATS = ("table", "csv", "tsv", "cpp")


def layer_memory(model_dir):
    """Per layer (ONNX node, in graph order): name, op, parameter bytes, activation bytes."""
    import onnx
    from onnx import shape_inference

    model_dir = Path(model_dir)
    try:
        graph = shape_inference.infer_shapes(onnx.load(str(model_dir / GRAPH), load_external_data=False)).graph
    except Exception as exc:  # missing, not ONNX (protobuf's DecodeError), shapes that cannot be inferred
        raise ReproError(f"{model_dir / GRAPH}: cannot read the model graph ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    params = {t.name: 4 * math.prod(t.dims) for t in graph.initializer}
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*graph.value_info, *graph.output]}
    layers = []
    for node in graph.node:
        activation = sum(4 * math.prod(shapes[o]) for o in node.output if o in shapes)
        layers.append({"name": node.name or node.output[0], "op": node.op_type,
                       "param_bytes": sum(params.get(i, 0) for i in node.input), "activation_bytes": activation})
    return layers


def _footprint():
    import psutil

    info = psutil.Process().memory_full_info()
    return info.rss, info.pss


def _measure_here(model_dir):
    """In this (fresh) process: RSS and PSS growth around session creation and the first inference."""
    import numpy as np

    from repro.trims.client import _input
    from repro.trims.models import PARAMS
    from repro.trims.runtimes import CpuRuntime

    manifest = load_manifest(model_dir)
    runtime = CpuRuntime()
    runtime.initialise()  # onnxruntime's environment and thread pools: not the model's memory
    params = np.fromfile(Path(model_dir) / PARAMS, dtype=np.uint8)
    data = _input(manifest, 0)
    before = _footprint()
    predict = runtime.predictor(Path(model_dir) / GRAPH, runtime.host_weights(params.data, manifest))
    session = _footprint()
    predict(manifest["input"]["name"], data)
    inference = _footprint()
    return {"session_rss_bytes": session[0] - before[0], "session_pss_bytes": session[1] - before[1],
            "first_inference_rss_bytes": inference[0] - session[0],
            "first_inference_pss_bytes": inference[1] - session[1],
            "measured_rss_bytes": inference[0] - before[0], "measured_pss_bytes": inference[1] - before[1]}


def measure(model_dir, timeout_s=600):
    """Measure a model's memory on the CPU in a process of its own (what a client process grows by)."""
    from repro.fsutil import check_regular
    from repro.trims.models import PARAMS

    for name in (PARAMS, GRAPH):  # a FIFO would hold the measuring process until the timeout
        check_regular(Path(model_dir) / name, str(Path(model_dir) / name), "the model's file, as trims models writes it")
    try:
        proc = subprocess.run([sys.executable, "-m", "repro.trims.memory", str(model_dir)], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ReproError(f"{model_dir}: measuring its memory took more than {timeout_s} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReproError(f"{model_dir}: measuring its memory failed ({last[:300]})")
    return json.loads(proc.stdout)


def model_memory(model_dir, store_status=None, measured=True):
    """A model's totals: measured RSS/PSS growth (with `measured`), parameter and activation bytes
    computed from the graph, and what a running store holds for it."""
    manifest = load_manifest(model_dir)
    layers = layer_memory(model_dir)
    resident = (store_status or {}).get("models", {}).get(manifest["model"], {}).get("bytes")
    row = {"model_name": manifest["model"]}
    if measured:
        row.update(measure(model_dir))
    return {**row, "param_bytes": sum(layer["param_bytes"] for layer in layers),
            "activation_bytes": sum(layer["activation_bytes"] for layer in layers),
            "store_bytes": resident, "layers": layers}


def check_format(fmt):
    """`fmt` where it is one of FORMATS; a ReproError naming --format otherwise."""
    if fmt not in FORMATS:
        raise ReproError(f"--format: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return fmt


def format_report(rows, fmt):
    """The models' memory as the original's formats: an ASCII table, CSV, TSV, or a C++ map initializer."""
    check_format(fmt)
    columns = ["model_name", "param_bytes", "activation_bytes", "store_bytes"]
    if rows and "measured_rss_bytes" in rows[0]:  # measured first; the computed figures stay beside it
        columns[1:1] = ["measured_rss_bytes", "measured_pss_bytes"]
    if fmt == "cpp":
        # the original's table of memory a model needs beyond its weights
        entries = ",\n".join(f'  {{"{r["model_name"]}", {r.get("measured_rss_bytes", r["activation_bytes"])}}}'
                              for r in rows)
        return f"static const std::map<std::string, size_t> model_internal_memory_usage{{\n{entries}\n}};"
    cells = [columns] + [["" if r[c] is None else str(r[c]) for c in columns] for r in rows]
    if fmt in ("csv", "tsv"):
        return "\n".join(("," if fmt == "csv" else "\t").join(row) for row in cells)
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)


if __name__ == "__main__":
    print(json.dumps(_measure_here(sys.argv[1])))
