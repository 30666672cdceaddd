"""Rules `trims_compare` and `trims_distribution`: TrIMS clients against the running model store."""

import json
import sys
from pathlib import Path

from repro.trims.experiments import run_compare, run_distribution

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
trims = json.loads(Path(snakemake.input.store).read_text())
settings = snakemake.params.settings
out_dir = Path(snakemake.output[0]).parent
if snakemake.rule == "trims_compare":
    report = run_compare(snakemake.wildcards.model, settings, trims["base_path"], trims["socket"], out_dir)
else:
    report = run_distribution(snakemake.wildcards.distribution, snakemake.params.params,
                              int(snakemake.wildcards.concurrency), settings, snakemake.params.models,
                              trims["base_path"], trims["socket"], out_dir)
print(f"wrote {snakemake.output[0]}")
