"""Rule `plot`: one figure of cost per epoch per mode, and the reference values' verdicts."""

import sys

from repro.pecan.costtable import write_table
from repro.pecan.presets import REFERENCE_PLOTS
from repro.pecan.reproducibility import VERDICT_COLUMNS, reference_verdicts
from repro.pecan.run import load_calibrations
from repro.plots import plot_costs, read_table
from repro.workflow import caption

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
settings = snakemake.params.settings  # noqa: F821
reference = REFERENCE_PLOTS.get(settings["reference"]) if settings["reference"] else None
text = caption(settings["backend"], settings["preset"], load_calibrations(snakemake.input.calibration))  # noqa: F821
figures = [snakemake.output.pdf, snakemake.output.png]  # noqa: F821
plot_costs(snakemake.input.table, figures, settings["experiment"], text, settings["style"], reference)  # noqa: F821
verdicts = reference_verdicts(snakemake.wildcards.figure, read_table(snakemake.input.table), reference)  # noqa: F821
write_table(verdicts, snakemake.output.verdicts, VERDICT_COLUMNS)  # noqa: F821
print(f"wrote {', '.join(figures)}; {sum(v['verdict'] == 'inside' for v in verdicts)} of {len(verdicts)} "
      "reference values inside the measured 95% interval")
