"""Rule `trims_fetch`: copy a model from the asset store into the base path, checksums verified."""

import sys
from pathlib import Path

from repro.trims.experiments import fetch_model

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
manifest = fetch_model(snakemake.params.asset_store, snakemake.wildcards.model,
                       Path(snakemake.output[0]).parent.parent)
print(f"{manifest['model']}: {manifest['params_bytes']} bytes of weights, checksums verified")
