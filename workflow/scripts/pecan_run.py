"""Rule `run`: one experiment x mode on the configured backend."""

import json
import sys
from pathlib import Path

from repro.backends import get_backend

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)
state = json.loads(Path(snakemake.input.state).read_text())  # noqa: F821
metrics = get_backend(state["backend"]).execute(
    snakemake.params.settings,  # noqa: F821
    snakemake.wildcards.experiment,  # noqa: F821
    snakemake.wildcards.mode,  # noqa: F821
    snakemake.input.calibration,  # noqa: F821
    Path(snakemake.output.log).parent,  # noqa: F821
    state,
    snakemake.output.receipt,  # noqa: F821
)
print(json.dumps({k: metrics[k] for k in ("throughput", "remote_workers", "local_workers", "simulated_seconds")}))
