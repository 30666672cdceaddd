"""Rule `validation`: the engine's measured throughput per deployment next to the cluster model's,
fed the Pillow calibration (`model`) and the inputs the engine's runs measured for themselves
(`model_tf`; repro.pecan.validation says which and why)."""

import json
import sys
from pathlib import Path

from repro.pecan.costtable import write_table
from repro.pecan.run import load_calibrations
from repro.pecan.validation import COLUMNS, caption_text, validation_rows
from repro.plots import plot_validation

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
calibrations = load_calibrations(snakemake.input.calibration)
rows, runs = [], []
for path in snakemake.input.metrics:
    metrics = json.loads(Path(path).read_text())
    runs.append(metrics)
    rows += validation_rows(metrics, calibrations, snakemake.params.network_gbps, path)
write_table(rows, snakemake.output.table, COLUMNS)
caption = caption_text(rows, runs)
plot_validation(rows, [snakemake.output.pdf, snakemake.output.png], f"Validation: {snakemake.wildcards.experiment}",
                caption, snakemake.params.style)
print(caption)
