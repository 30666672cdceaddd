"""Rule `trims_summary`: trace summaries and the tables the TrIMS figures show."""

import json
import sys
from pathlib import Path

from repro.fsutil import write_json
from repro.traces import summarize
from repro.trims.experiments import compare_table, distribution_table

sys.stdout = sys.stderr = open(snakemake.log[0], "w")


def load(path):
    return json.loads(Path(path).read_text())


compare = [load(p) for p in snakemake.input.compare]
distributions = [load(p) for p in snakemake.input.distributions]
traces = summarize([Path(p).parent / "traces" for p in snakemake.input.compare],
                   group_by=("model_name", "upr_enabled"))
write_json(snakemake.output[0], {
    "compare": compare_table(compare),
    "distributions": distribution_table(distributions),
    "trace_statistics": traces["groups"],
})
