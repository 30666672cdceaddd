"""Rule `download_traces`: fetch a run's traces from the trace store, checksums verified."""

import sys
from pathlib import Path

from repro.store import download_traces, open_store

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
store = open_store(snakemake.params.store)  # noqa: F821
for entry in download_traces(store, snakemake.input.receipt, Path(snakemake.output[0]).parent):  # noqa: F821
    print(f"{entry['key']}: sha256 {entry['sha256']} verified")
