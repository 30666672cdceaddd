"""Rule `validation`: the engine's measured throughput per deployment next to the cluster model's."""

import json
import sys
from pathlib import Path

from repro.pecan.costtable import write_table
from repro.pecan.run import load_calibrations
from repro.pecan.validation import COLUMNS, summary, validation_rows
from repro.plots import plot_validation

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
calibrations = load_calibrations(snakemake.input.calibration)
rows = []
for path in snakemake.input.metrics:
    rows += validation_rows(json.loads(Path(path).read_text()), calibrations, snakemake.params.network_gbps, path)
write_table(rows, snakemake.output.table, COLUMNS)
spec = json.loads(Path(snakemake.input.metrics[0]).read_text())["spec"]
caption = (f"engine tfdata at miniature scale (accelerator step time x{spec['time_scale']:g}, "
           f"{spec['worker_threads']} CPU per worker) vs the cluster model of the same job, fed by this machine's "
           f"calibration (Pillow pipelines; the engine's are TF ops) and not told that workers and client share "
           f"this machine's CPUs; {summary(rows)}")
plot_validation(rows, [snakemake.output.pdf, snakemake.output.png], f"Validation: {snakemake.wildcards.experiment}",
                caption, snakemake.params.style)
print(caption)
