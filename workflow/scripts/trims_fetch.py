"""Rule `trims_fetch`: copy a model from the asset store into the base path, checksums verified."""

import sys
from pathlib import Path

from repro.trims.experiments import fetch_model

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
manifest = fetch_model(Path(snakemake.input[0]).parent, Path(snakemake.output[0]).parent)  # noqa: F821
print(f"{manifest['model']}: {manifest['params_bytes']} bytes of weights, checksums verified")
