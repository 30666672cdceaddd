"""Rule `costs`: the artifact's cost table from each mode's training log."""

import json
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.pecan.cli import write_cost_table
from repro.pecan.costs import cost_row
from repro.pecan.logs import parse_log

sys.stdout = sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
settings = snakemake.params.settings  # noqa: F821
summary = json.loads(Path(snakemake.input.summary).read_text())  # noqa: F821
summarized = {trace.get("mode") for trace in summary["traces"]}
rows = []
for mode, log in zip(snakemake.params.modes, snakemake.input.logs):  # noqa: F821
    if mode not in summarized:
        raise ReproError(f"{snakemake.input.summary}: no summarized trace for mode {mode!r}")  # noqa: F821
    rows.append(cost_row(parse_log(log), mode, settings["model_name"], settings["model"], settings["tpu_price"],
                         settings["worker_price"]))
write_cost_table(rows, snakemake.output[0])  # noqa: F821
print(f"{snakemake.output[0]}: {len(rows)} modes")  # noqa: F821
