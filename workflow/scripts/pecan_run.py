"""Rule `run`: one experiment x mode on the configured backend."""

import json
import sys
from pathlib import Path

from repro.backends import RunRequest, get_backend

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
state = json.loads(Path(snakemake.input.state).read_text())
request = RunRequest(
    settings=snakemake.params.settings,
    experiment=snakemake.wildcards.experiment,
    mode=snakemake.wildcards.mode,
    calibration_paths=tuple(snakemake.input.calibration),
    run_dir=Path(snakemake.output.log).parent,
    receipt=Path(snakemake.output.receipt),
)
metrics = get_backend(state["backend"]).execute(request, state)
print(json.dumps({k: metrics[k] for k in ("throughput", "remote_workers", "local_workers", "simulated_seconds", "wall_s")
                  if k in metrics}))
