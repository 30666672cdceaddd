"""Rule `trims_plot`: the TrIMS figures."""

import json
import sys
from pathlib import Path

from repro.pecan.calibrate import machine_description
from repro.plots import plot_distributions, plot_model_load

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
summary = json.loads(Path(snakemake.input[0]).read_text())  # noqa: F821
machine = machine_description()
caption = (f"local backend: onnxruntime on {machine['cpu_model']}, {machine['logical_cpus']} CPUs; "
           "weights shared through POSIX shared memory by the model store")
if snakemake.wildcards.figure == "trims_model_load":  # noqa: F821
    plot_model_load(summary["compare"], snakemake.output, caption, snakemake.params.style)  # noqa: F821
else:
    plot_distributions(summary["distributions"], snakemake.output, caption, snakemake.params.style)  # noqa: F821
