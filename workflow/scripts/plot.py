"""Rule `plot`: one figure of cost per epoch per mode, and the reference values' verdicts."""

import sys

from repro.pecan.costtable import write_table
from repro.pecan.presets import REFERENCE_PLOTS
from repro.pecan.reproducibility import VERDICT_COLUMNS, reference_verdicts
from repro.pecan.run import load_calibrations
from repro.plots import plot_costs, read_table
from repro.rulesettings import caption

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
settings = snakemake.params.settings
reference = REFERENCE_PLOTS.get(settings["reference"]) if settings["reference"] else None
text = caption(settings["backend"], settings["preset"], load_calibrations(snakemake.input.calibration),
               settings["engine_caption"])
figures = [snakemake.output.pdf, snakemake.output.png]
plot_costs(snakemake.input.table, figures, settings["experiment"], text, settings["style"], reference)
verdicts = reference_verdicts(snakemake.wildcards.figure, read_table(snakemake.input.table), reference)
write_table(verdicts, snakemake.output.verdicts, VERDICT_COLUMNS)
print(f"wrote {', '.join(figures)}; {sum(v['verdict'] == 'inside' for v in verdicts)} of {len(verdicts)} "
      "reference values inside the measured 95% interval")
