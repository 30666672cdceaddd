"""Rule `plot`: one figure of cost per epoch per mode."""

import sys

from repro.pecan.presets import REFERENCE_PLOTS
from repro.pecan.run import load_calibrations
from repro.plots import plot_costs
from repro.workflow import caption

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
settings = snakemake.params.settings  # noqa: F821
reference = REFERENCE_PLOTS.get(settings["reference"]) if settings["reference"] else None
text = caption(settings["backend"], settings["preset"], load_calibrations(snakemake.input.calibration))  # noqa: F821
plot_costs(snakemake.input.table, snakemake.output, settings["experiment"], text, settings["style"], reference)  # noqa: F821
print(f"wrote {', '.join(snakemake.output)}")  # noqa: F821
