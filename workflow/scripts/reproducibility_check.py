"""Rule `reproducibility_check`: two fresh chains of the configured figures, compared number by number."""

import sys

from repro.pecan.reproducibility import CHECK_COLUMNS, check
from repro.pecan.costtable import write_table

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
config = snakemake.config
rows = check(config, config["reproducibility"]["figures"], snakemake.params.scratch)
write_table(rows, snakemake.output[0], CHECK_COLUMNS)
for row in rows:
    print(", ".join(str(row[c]) for c in CHECK_COLUMNS))
print(f"{sum(r['within'] == 'yes' for r in rows)} of {len(rows)} numbers within tolerance")
