"""Rule `trims_plot`: the TrIMS figures."""

import json
import sys
from pathlib import Path

from repro.machine import machine_description
from repro.plots import plot_distributions, plot_model_load

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
summary = json.loads(Path(snakemake.input[0]).read_text())
machine = machine_description()
caption = (f"local backend: onnxruntime on {machine['cpu_model']}, {machine['logical_cpus']} CPUs; "
           "weights shared through POSIX shared memory by the model store; whiskers: 95% percentile-bootstrap "
           "intervals over the requests")
if snakemake.wildcards.figure == "trims_model_load":
    rows = summary["compare"]
    counts = sorted({r[f"{mode}_requests"] for r in rows for mode in ("original", "shared")})
    caption += f" (N={'/'.join(map(str, counts))} per bar; shared excludes the request that loads the store)"
    plot_model_load(rows, snakemake.output, caption, snakemake.params.style)
else:
    rows = summary["distributions"]
    caption += f" (N={'/'.join(map(str, sorted({r['requests'] for r in rows})))} per point)"
    plot_distributions(rows, snakemake.output, caption, snakemake.params.style)
