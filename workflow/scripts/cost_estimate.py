"""Rule `cost_estimate`: dollars the configured experiments would cost on the real cluster."""

import sys

from repro.fsutil import write_text
from repro.pecan.estimate import estimate, format_estimate
from repro.pecan.run import load_calibrations

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
table = format_estimate(estimate(snakemake.config, load_calibrations(snakemake.input.calibration)))
write_text(snakemake.output[0], table + "\n")
print(table)
