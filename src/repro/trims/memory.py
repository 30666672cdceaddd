"""How much memory a model needs: parameter bytes and activation bytes per layer, from its ONNX graph.

The original TRIMS tools measured this by summing the cudaMalloc calls its MXNet fork traced
(`client memory_usage`, `trace memoryinfo`); here it is computed from the graph (shapes inferred
for one input, float32) and set beside what the model store allocates for the weights.
"""

import math
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


def model_memory(model_dir, store_status=None):
    """A model's totals: parameter and activation bytes, and what a running store holds for it."""
    manifest = load_manifest(model_dir)
    layers = layer_memory(model_dir)
    resident = (store_status or {}).get("models", {}).get(manifest["model"], {}).get("bytes")
    return {"model_name": manifest["model"], "param_bytes": sum(layer["param_bytes"] for layer in layers),
            "activation_bytes": sum(layer["activation_bytes"] for layer in layers),
            "store_bytes": resident, "layers": layers}


def format_report(rows, fmt):
    """The models' memory as the original's formats: an ASCII table, CSV, TSV, or a C++ map initializer."""
    if fmt not in FORMATS:
        raise ReproError(f"--format: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    columns = ["model_name", "param_bytes", "activation_bytes", "store_bytes"]
    if fmt == "cpp":
        # the original's table of memory a model needs beyond its weights
        entries = ",\n".join(f'  {{"{r["model_name"]}", {r["activation_bytes"]}}}' for r in rows)
        return f"static const std::map<std::string, size_t> model_internal_memory_usage{{\n{entries}\n}};"
    cells = [columns] + [["" if r[c] is None else str(r[c]) for c in columns] for r in rows]
    if fmt in ("csv", "tsv"):
        return "\n".join(("," if fmt == "csv" else "\t").join(row) for row in cells)
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)
