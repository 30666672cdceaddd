"""The cost table: the artifact's CSV columns from the run.log of repeat 0, then every column's
mean and 95% interval over the run's repeats (repro.stats.mean_interval)."""

import csv
import sys
from types import SimpleNamespace

from repro.fsutil import atomic_path
from repro.pecan.costs import COLUMNS, cost_row
from repro.stats import mean_interval

SPREAD_OF = ["tpu_cost", "worker_cost", "total_cost", "remote_workers", "local_workers", "epoch_time", "batches_sec"]
SPREAD_COLUMNS = ["repeats"] + [f"{c}_{s}" for c in SPREAD_OF for s in ("mean", "ci_low", "ci_high")]


def with_spread(row, repeats, mode, model_name, model, tpu_price, worker_price):
    """`row` (repeat 0) plus mean and interval per column over `repeats` (metrics.json's parsed logs)."""
    rows = [cost_row(SimpleNamespace(**r), mode, model_name, model, tpu_price, worker_price) for r in repeats]
    for r in rows:
        r["total_cost"] = r["tpu_cost"] + r["worker_cost"]
    spread = {"repeats": len(rows)}
    for column in SPREAD_OF:
        spread[f"{column}_mean"], spread[f"{column}_ci_low"], spread[f"{column}_ci_high"] = mean_interval(
            [r[column] for r in rows])
    return {**row, **spread}


def write_table(rows, output, columns=COLUMNS, header=True):
    """CSV rows (the cost table's columns unless told) to `output` atomically, or to standard output."""
    def emit(fh):
        writer = csv.DictWriter(fh, fieldnames=columns)
        if header:
            writer.writeheader()
        writer.writerows(rows)

    if output is None:
        emit(sys.stdout)
        return
    with atomic_path(output) as tmp, open(tmp, "w", newline="") as fh:
        emit(fh)
