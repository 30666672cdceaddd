"""Figures over several workloads: the Pecan paper's Fig 6 (collocated, Cachew, FastFlow and Pecan's
AutoPlacement alone) and Fig 7 (Cachew and Pecan's AutoOrder alone), the artifact's
plotting-scripts/fig8.py options `autoplacement` and `autoorder` (github.com/eth-easl/pecan-experiments).

The table: one row per workload and mode, from each workload's cost table (repro.pecan.costtable),
with the spread over repeats. The figure: workloads on x, one bar per mode at fig8.py's offsets and
colours, the TPU cost solid and the remote-worker cost stacked and hatched, whiskers for the 95%
intervals, and the paper's values (fig8.py's literals, repro.pecan.presets.PAPER_COSTS) as markers.
fig8.py builds its x positions from the one `-m` model, so its five-workload series land on one x
position; here every workload has its own.
"""

import math

from repro.errors import ReproError
from repro.fsutil import read_csv
from repro.pecan.costtable import check_table_runs, check_total, named_preset, repeat_counts, spread_of
from repro.stats import verdict

LABEL_ROUNDING = 0.005  # fig8.py labels cents: a labelled value stands for any within half a cent

# fig8.py's per-option settings (bar width, offsets in bar widths, label size, y ticks, legend place)
OPTIONS = {
    "autoplacement": {"figure": "Fig 6", "basename": "Cachew_AP_FF", "modes": ["collocated", "cachew", "fastflow", "autoplacement"],
                      "width": 0.23, "offsets": [-1.5, -0.5, 0.5, 1.5], "label_size": 10, "legend": "upper left"},
    "autoorder": {"figure": "Fig 7", "basename": "AutoOrder_Cost", "modes": ["cachew", "autoorder"],
                  "width": 0.33, "offsets": [-0.5, 0.5], "label_size": 12, "legend": "upper right"},
}
# fig8.py's colours: TPU segment, remote-worker segment, legend
STYLE = {
    "collocated": ("#1f77b4", None, "tf.data collocated"),
    "cachew": ("#ff7f0e", "#ffaf18", "Cachew"),
    "fastflow": ("#7f7f7f", "#cfcfcf", "FastFlow"),
    "autoplacement": ("#2ca02c", "#52b04c", "Pecan AutoPlacement"),
    "autoorder": ("#9467bd", "#c9b0ed", "Pecan AutoOrder"),
}
QUANTITIES = ["tpu_cost", "worker_cost", "total_cost", "remote_workers", "local_workers", "epoch_time"]
UNITS = {"remote_workers": "workers", "local_workers": "workers", "epoch_time": "seconds"}  # the others: dollars
NUMBER_COLUMNS = ["repeats"] + [f"{q}_{s}" for q in QUANTITIES for s in ("mean", "ci_low", "ci_high")]
COLUMNS = ["workload", "preset", "mode", *NUMBER_COLUMNS]  # preset: the calibration preset of the runs
VERDICT_COLUMNS = ["figure", "workload", "mode", "quantity", "paper", "reference_rounding", "mean", "ci_low", "ci_high",
                   "repeats", "verdict", "outside_by", "deviation_pct", "within_15pct"]


def check_comparison(name, spec, experiments, source="config"):
    """The comparison's option is known and its workloads are experiments listing every mode the option
    draws; else one line naming the key."""
    if spec["option"] not in OPTIONS:
        raise ReproError(f"{source}: plots.comparisons.{name}.option: unknown option {spec['option']!r}; "
                         f"expected one of {sorted(OPTIONS)}")
    option = OPTIONS[spec["option"]]
    for workload in spec["workloads"]:
        if workload not in experiments:
            raise ReproError(f"{source}: plots.comparisons.{name}.workloads: unknown workload {workload!r}; "
                             f"expected experiments of pecan.experiments ({', '.join(sorted(experiments))})")
        missing = [m for m in option["modes"] if m not in experiments[workload]["modes"]]
        if missing:
            raise ReproError(f"{source}: plots.comparisons.{name}: workload {workload!r} has no mode(s) {missing}; "
                             f"option {spec['option']!r} needs pecan.experiments.{workload}.modes to list {option['modes']}")
    return option


def read_rows(path, what="a cost table"):
    return read_csv(path, str(path), what)


def not_a_cost(numbers, limit=math.inf):
    """The first key of `numbers` ({column: float}) whose value is no cost in dollars (negative, not
    finite, above `limit`), or None."""
    return next((k for k, v in numbers.items() if not (math.isfinite(v) and 0 <= v <= limit)), None)


def comparison_rows(option, workloads, tables):
    """One row per workload (in order) and option mode (in fig8.py's order) from the workloads' cost
    tables (`tables`: paths in the order of `workloads`)."""
    modes = OPTIONS[option]["modes"]
    if len(workloads) != len(tables):
        raise ReproError(f"{len(workloads)} workloads but {len(tables)} cost tables; expected one table per workload")
    rows, presets = [], {}  # preset -> the first table of its runs
    for workload, table in zip(workloads, tables):
        by_mode, table_rows = {}, read_rows(table)
        check_table_runs(table_rows, table, workload)  # paired by position: another workload's bars under its name
        for preset in {named_preset(row) for row in table_rows} - {None}:
            presets.setdefault(preset, table)
        if len(presets) > 1:  # drawn side by side under one caption that names one preset
            (first, earlier), (second, later) = presets.items()
            raise ReproError(f"{later}: runs of calibration preset {second!r}, and {earlier} of {first!r}; expected the "
                             "tables of one preset")
        for row in table_rows:
            if row.get("mode") in by_mode:  # which of two rows the figure would draw is anyone's guess
                raise ReproError(f"{table}: two rows for mode {row['mode']!r}; expected one row per mode")
            by_mode[row.get("mode")] = row
        for mode in modes:
            if mode not in by_mode:
                raise ReproError(f"{table}: no row for mode {mode!r} (workload {workload!r}); expected modes {modes}")
            row = by_mode[mode]
            # checked as the cost figure checks its rows: what the comparison draws is what that draws
            spread = {q: spread_of(row, q, table, UNITS.get(q, "dollars")) for q in QUANTITIES}
            check_total(row, spread, table)
            [repeats] = repeat_counts([row], table)
            numbers = {f"{q}_{s}": value for q in QUANTITIES for s, value in zip(("mean", "ci_low", "ci_high"), spread[q])}
            rows.append({"workload": workload, "preset": row["preset"], "mode": mode, "repeats": repeats, **numbers})
    return rows


def paper_verdicts(name, rows, paper):
    """Each paper value (`paper`: {mode: {workload: [tpu, worker]}}) against the rows' interval: inside or
    outside (within the labels' rounding), and how far the mean lies from it in percent (the ±15% goal)."""
    verdicts = []
    for row in rows:
        value = paper.get(row["mode"], {}).get(row["workload"])
        if value is None:
            continue
        for quantity, ref, rounding in (("tpu_cost", value[0], LABEL_ROUNDING), ("worker_cost", value[1], LABEL_ROUNDING),
                                        ("total_cost", sum(value), 2 * LABEL_ROUNDING)):
            mean, low, high = (row[f"{quantity}_{s}"] for s in ("mean", "ci_low", "ci_high"))
            inside, distance = verdict(ref, low, high, rounding)
            deviation = 100 * (mean - ref) / ref if ref else None
            verdicts.append({
                "figure": name, "workload": row["workload"], "mode": row["mode"], "quantity": quantity,
                "paper": round(ref, 4), "reference_rounding": rounding, "mean": round(mean, 4), "ci_low": round(low, 4),
                "ci_high": round(high, 4), "repeats": row["repeats"], "verdict": "inside" if inside else "outside",
                "outside_by": round(distance, 4), "deviation_pct": "" if deviation is None else round(deviation, 1),
                "within_15pct": "" if deviation is None else ("yes" if abs(deviation) <= 15 else "no"),
            })
    return verdicts


# The price per worker-hour the paper's worker costs are billed at: the artifact's policy setting
# (its FastFlow bars price exactly 2 workers at it)
PAPER_WORKER_PRICE = 0.427319


def paper_workers(tpu_cost, worker_cost, tpu_price_per_s, worker_price=PAPER_WORKER_PRICE):
    """The remote workers a paper bar bills on average: its worker cost over the worker-hours of its
    epoch, the epoch being its TPU cost at the TPU's price (dollars per second)."""
    epoch_h = tpu_cost / tpu_price_per_s / 3600
    return worker_cost / worker_price / epoch_h


def missed_bars(rows, verdicts, paper, worker_price=PAPER_WORKER_PRICE):
    """Each bar whose total lies more than 15% from the paper's, with the workers behind both: the
    mean remote and local workers here, and the remote workers the paper's bar bills over its epoch
    (its worker cost / price per worker-hour / its epoch, the epoch its TPU cost at this row's TPU price)."""
    by_bar = {(r["workload"], r["mode"]): r for r in rows}
    missed = []
    for v in verdicts:
        if v["quantity"] != "total_cost" or v["within_15pct"] != "no":
            continue
        row = by_bar[v["workload"], v["mode"]]
        billed = paper_workers(*paper[v["mode"]][v["workload"]], row["tpu_cost_mean"] / row["epoch_time_mean"], worker_price)
        missed.append(f"{v['workload']} {v['mode']} {v['deviation_pct']:+.0f}% (here {row['remote_workers_mean']:.1f} "
                      f"remote + {row['local_workers_mean']:.1f} local workers; the paper's bar bills {billed:.1f} remote)")
    return missed


def ordering_notes(option, rows):
    """What the paper's orderings say, checked on the means: Fig 6, AutoPlacement cheapest of the four;
    Fig 7, AutoOrder below Cachew. One line per workload where it does not hold."""
    notes = []
    by = {(r["workload"], r["mode"]): r["total_cost_mean"] for r in rows}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        if option == "autoplacement":
            cheapest = min(OPTIONS[option]["modes"], key=lambda m: by[workload, m])
            if cheapest != "autoplacement":
                notes.append(f"{workload}: {STYLE[cheapest][2]} ({by[workload, cheapest]:.2f} $) below "
                             f"Pecan AutoPlacement ({by[workload, 'autoplacement']:.2f} $)")
        elif by[workload, "autoorder"] >= by[workload, "cachew"]:
            notes.append(f"{workload}: Pecan AutoOrder ({by[workload, 'autoorder']:.2f} $) not below Cachew "
                         f"({by[workload, 'cachew']:.2f} $)")
    return notes
