"""Rule `costs`: the artifact's cost table from each mode's training log, with the spread over repeats."""

import json
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.pecan.costs import COLUMNS, cost_row
from repro.pecan.costtable import SPREAD_COLUMNS, with_spread, write_table
from repro.pecan.logs import parse_log

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
settings = snakemake.params.settings
summary = json.loads(Path(snakemake.input.summary).read_text())
summarized = {trace.get("mode") for trace in summary["traces"]}
prices = (settings["model_name"], settings["model"], settings["tpu_price"], settings["worker_price"])
rows = []
for mode, log, metrics in zip(snakemake.params.modes, snakemake.input.logs, snakemake.input.metrics):
    if mode not in summarized:
        raise ReproError(f"{snakemake.input.summary}: no summarized trace for mode {mode!r}")
    repeats = json.loads(Path(metrics).read_text()).get("repeats")
    if not repeats:
        raise ReproError(f"{metrics}: no 'repeats' list (written by an older version; rerun the run)")
    rows.append(with_spread(cost_row(parse_log(log), mode, *prices), repeats, mode, *prices))
write_table(rows, snakemake.output[0], COLUMNS + SPREAD_COLUMNS)
print(f"{snakemake.output[0]}: {len(rows)} modes, {rows[0]['repeats']} repeats each")
