"""Rule `download_traces`: fetch a run's traces from the trace store, checksums verified."""

import sys
from pathlib import Path

from repro.tracestore import download_traces, open_store

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
store = open_store(snakemake.params.store)
for entry in download_traces(store, snakemake.input.receipt, Path(snakemake.output[0]).parent):
    print(f"{entry['key']}: sha256 {entry['sha256']} verified")
