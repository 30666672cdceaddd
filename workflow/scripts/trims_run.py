"""Rules `trims_compare` and `trims_distribution`: TrIMS clients against the running model store."""

import json
import sys
from pathlib import Path

from repro.trims.experiments import run_compare, run_distribution

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
trims = json.loads(Path(snakemake.input.store).read_text())  # noqa: F821
settings = snakemake.params.settings  # noqa: F821
out_dir = Path(snakemake.output[0]).parent  # noqa: F821
if snakemake.rule == "trims_compare":  # noqa: F821
    report = run_compare(snakemake.wildcards.model, settings, trims["base_path"], trims["socket"], out_dir)  # noqa: F821
else:
    report = run_distribution(snakemake.wildcards.distribution, snakemake.params.params,  # noqa: F821
                              int(snakemake.wildcards.concurrency), settings, snakemake.params.models,  # noqa: F821
                              trims["base_path"], trims["socket"], out_dir)
print(f"wrote {snakemake.output[0]}")  # noqa: F821
