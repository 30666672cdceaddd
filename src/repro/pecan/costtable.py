"""The cost table: the artifact's CSV columns from the run.log of repeat 0, then every column's
mean and 95% interval over the run's repeats (repro.stats.mean_interval)."""

import csv
import math
import sys
from types import SimpleNamespace

from repro.errors import ReproError
from repro.fsutil import atomic_path, first_repeated, read_json
from repro.pecan.costs import COLUMNS, MAX_DOLLARS, cost_row
from repro.pecan.logs import parse_log
from repro.pecan.presets import PRESETS
from repro.stats import mean_interval

SPREAD_OF = ["tpu_cost", "worker_cost", "total_cost", "remote_workers", "local_workers", "epoch_time", "batches_sec"]
SPREAD_COLUMNS = ["repeats"] + [f"{c}_{s}" for c in SPREAD_OF for s in ("mean", "ci_low", "ci_high")]
# Beside the artifact's columns: whose runs the rows are (the experiment, the calibration preset; none
# for the tf.data engine, which measures), so a figure or a comparison drawn from the table can refuse
# a table of another workload or preset than its caption names
RUN_COLUMNS = ["workload", "preset"]
TABLE_COLUMNS = COLUMNS + RUN_COLUMNS + SPREAD_COLUMNS


def with_spread(row, repeats, mode, model_name, model, tpu_price, worker_price):
    """`row` (repeat 0) plus mean and interval per column over `repeats` (metrics.json's parsed logs)."""
    rows = [cost_row(SimpleNamespace(**r), mode, model_name, model, tpu_price, worker_price) for r in repeats]
    for r in rows:
        r["total_cost"] = r["tpu_cost"] + r["worker_cost"]
    spread = {"repeats": len(rows)}
    for column in SPREAD_OF:
        mean, low, high = mean_interval([r[column] for r in rows])
        # every column is a cost, count, time or rate: none is below 0, where the t-interval of a few
        # spread-out repeats may reach (which the figures and comparisons then refused)
        spread[f"{column}_mean"], spread[f"{column}_ci_low"], spread[f"{column}_ci_high"] = mean, max(low, 0.0), high
    return {**row, **spread}


_REPEAT_KEYS = {"throughput", "remote_workers", "local_workers"}
MAX_REPEAT_VALUE = 1e12  # examples/second or workers: far above any run's, below where the costs overflow


def _repeat_value(value):
    """Whether a repeat's throughput or worker count is a number the cost table can price."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_REPEAT_VALUE


def _check_log_is_the_runs(log, parsed, metrics, first):
    """ReproError where the log reads otherwise than the run read its own run.log (repeats[0] of its
    metrics.json): a log cut short, or edited, since. A log cut after any of its lines parses."""
    if first.get("log") != "run.log":
        return
    read = {key: getattr(parsed, key) for key in sorted(_REPEAT_KEYS)}
    recorded = {key: first[key] for key in sorted(_REPEAT_KEYS)}
    if read != recorded:
        shown = ", ".join(f"{key} {value:g}" for key, value in read.items())
        was = ", ".join(f"{key} {value:g}" for key, value in recorded.items())
        raise ReproError(f"{log}: reads {shown}, where the run read its log as {was} ({metrics}: repeats[0]); "
                         "expected the log as the run wrote it (cut short or edited since?): rerun the run")


def mode_row(log, metrics, mode, settings):
    """One mode's row with spread, from its training log and metrics.json, priced by `settings`
    (repro.rulesettings.cost_settings)."""
    prices = (settings["model_name"], settings["model"], settings["tpu_price"], settings["worker_price"])
    data = read_json(metrics, "a run's metrics.json")
    repeats = data.get("repeats") if isinstance(data, dict) else None
    if not isinstance(repeats, list) or not all(isinstance(r, dict) and _REPEAT_KEYS <= set(r) for r in repeats):
        raise ReproError(f"{metrics}: no 'repeats' list of parsed logs ({', '.join(sorted(_REPEAT_KEYS))}); "
                         "rerun the run")
    if not repeats:
        raise ReproError(f"{metrics}: no 'repeats' list (written by an older version; rerun the run)")
    for index, repeat in enumerate(repeats):
        key = next((k for k in sorted(_REPEAT_KEYS) if not _repeat_value(repeat[k])), None)
        if key is not None:
            raise ReproError(f"{metrics}: repeats[{index}].{key}: expected a number from 0 to {MAX_REPEAT_VALUE:g}, "
                             f"got {repr(repeat[key])[:40]}; rerun the run")
    scale = None
    if data.get("engine") == "tfdata":  # its miniature scale, derived per run unless configured
        scale = data["spec"].get("time_scale") if isinstance(data.get("spec"), dict) else None
        if not _repeat_value(scale) or not scale > 0:
            raise ReproError(f"{metrics}: spec.time_scale: expected a tf.data engine run's positive time scale, "
                             f"got {repr(scale)[:40]}; rerun the run")
    parsed = parse_log(log)
    for source, recorded in ((log, parsed.run.get("mode")), (metrics, data.get("mode"))):
        if recorded is not None and recorded != mode:  # another mode's numbers in this mode's row
            raise ReproError(f"{source}: a run of mode {recorded!r}, not of --mode {mode!r}")
    if data.get("experiment") != settings["experiment"]:  # priced and labelled as another experiment
        raise ReproError(f"{metrics}: a run of experiment {str(data.get('experiment'))[:100]!r}, not of the --settings "
                         f"experiment {settings['experiment']!r}; expected the runs of the experiment priced")
    for key, recorded in (("experiment", data.get("experiment")), ("seed", repeats[0].get("seed"))):
        logged = parsed.run.get(key)
        if logged is not None and recorded is not None and logged != str(recorded):  # two runs' files in one row
            raise ReproError(f"{log}: the log of a run of {key} {logged}, and {metrics} of a run of {key} {recorded}; "
                             "expected the log and the metrics of one run")
    _check_log_is_the_runs(log, parsed, metrics, repeats[0])
    spec = data.get("spec") if scale is None else None  # the model engine's: the model's own batch and epoch
    for key in ("batch_size", "steps_per_epoch") if isinstance(spec, dict) else ():
        if key in spec and spec[key] != settings["model"].get(key):  # another model's prices on this run
            raise ReproError(f"{metrics}: a run of {key} {spec[key]!r}, not the --settings model's "
                             f"{settings['model'].get(key)!r}; expected the settings of the run's model")
    preset = ""  # the tf.data engine's runs measure: they name no preset
    if scale is None:
        preset = data.get("calibration")
        if preset not in PRESETS:  # copied into the table, where the figures and comparisons read it
            raise ReproError(f"{metrics}: calibration: {str(preset)[:40]!r}; expected the calibration preset of the "
                             f"run, one of {list(PRESETS)}; rerun the run")
    row = with_spread(cost_row(parsed, mode, *prices), repeats, mode, *prices)
    row.update(workload=settings["experiment"], preset=preset)
    if scale is not None:
        row["time_scale"] = round(scale, 3)
    return row


def named_preset(row):
    """The calibration preset a table row's runs name, or None: the tf.data engine's derive their scale
    and name none (""), so they stand under any preset."""
    return row["preset"] or None


def check_table_runs(rows, table, workload, preset=None):
    """ReproError unless every row of the cost table `table` holds runs of `workload` (where given:
    a comparison's table holds several) and of the calibration `preset` (where given and the row names
    one): a figure labels its bars by them."""
    for index, row in enumerate(rows, start=1):
        missing = next((column for column in ("workload", "preset") if column not in row), None)
        if missing:
            raise ReproError(f"{table}: no {missing!r} column (a table written by an older version); rebuild it "
                             "(snakemake --forcerun cost_table)")
        short = next((column for column in ("workload", "preset") if row[column] is None), None)
        if short:  # csv's value for a field the row lacks
            raise ReproError(f"{table}: row {index} has no {short!r} field (shorter than the header); expected a "
                             "cost table's rows")
        if workload is not None and row["workload"] != workload:
            raise ReproError(f"{table}: row {index} holds runs of {row['workload'][:100]!r}, not of {workload!r}; "
                             f"expected {workload}'s cost table")
        if preset is not None and named_preset(row) not in (None, preset):
            raise ReproError(f"{table}: row {index} holds runs of calibration preset {row['preset'][:100]!r}, not of "
                             f"{preset!r}; expected the table of the preset the caption names")


def cost_table(settings, modes, logs, metrics, summary):
    """The rows of an experiment's cost table, one per mode (the modes' logs and metrics in the same
    order), each mode checked to have a trace in the experiment's trace `summary`."""
    traces = read_json(summary, "an experiment's trace summary")
    traces = traces.get("traces") if isinstance(traces, dict) else None
    if not isinstance(traces, list) or not all(isinstance(t, dict) for t in traces):
        raise ReproError(f"{summary}: not a trace summary (expected 'traces', a list of objects, as "
                         "`repro trace summarize` writes)")
    modes_summarized = [trace.get("mode") for trace in traces]
    odd = next((i for i, mode in enumerate(modes_summarized) if isinstance(mode, (list, dict))), None)
    if odd is not None:  # `trace summarize` writes run fields as text, numbers or nothing: an edited summary
        raise ReproError(f"{summary}: traces[{odd}].mode: expected a mode's name, got {str(modes_summarized[odd])[:60]}")
    summarized = set(modes_summarized)
    if not len(modes) == len(logs) == len(metrics):
        raise ReproError(f"cost table: {len(modes)} modes, {len(logs)} logs and {len(metrics)} metrics files; "
                         "expected one of each per mode, in the same order")
    repeated = first_repeated(modes)
    if repeated is not None:  # two rows of one mode: the figure and the comparison tables refuse such a table
        raise ReproError(f"--mode: {repeated!r} given twice; expected each mode once (one row per mode)")
    rows = []
    for mode, log, metrics_path in zip(modes, logs, metrics):
        if mode not in summarized:
            raise ReproError(f"{summary}: no summarized trace for mode {mode!r}")
        rows.append(mode_row(log, metrics_path, mode, settings))
        if rows[-1]["preset"] != rows[0]["preset"]:  # one table, one figure: costs of one calibration
            raise ReproError(f"{metrics_path}: a run of calibration preset {rows[-1]['preset']!r}, and "
                             f"{metrics[0]} of {rows[0]['preset']!r}; expected the runs of one preset: rerun the runs")
    return rows


def write_table(rows, output, columns=COLUMNS, header=True):
    """CSV rows (the cost table's columns unless told) to `output` atomically, or to standard output.
    A NaN or an infinity is refused, naming its row and column: no reader of the table can use one."""
    for index, row in enumerate(rows):
        for column, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ReproError(f"{output or 'standard output'}: row {index + 1} ({row.get('mode', row.get('number', ''))}) "
                                 f"{column} is {value}, not a finite number; CSV output holds no NaN or infinity")

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


ROUNDING = 0.005  # dollars: what a table rounded to its labels' cents may be off by


def spread_of(row, column, path, unit="dollars", most=MAX_DOLLARS):
    """(mean, ci_low, ci_high) of a column of a table row: numbers of `unit` from 0 to `most`, the mean
    inside its interval; else ReproError naming the table `path`, the mode and the column."""
    names = [f"{column}_{s}" for s in ("mean", "ci_low", "ci_high")]
    if any(row.get(name) is None for name in names):
        raise ReproError(f"{path}: no mean and interval for {column!r} (a table written before repeats; rerun costs)")
    values = []
    for name in names:
        try:
            values.append(float(row[name]))
        except ValueError:
            raise ReproError(f"{path}: mode {row.get('mode')!r}: {name} is {row[name][:40]!r}; expected a number of "
                             f"{unit}") from None
    if not all(math.isfinite(v) and 0 <= v <= most for v in values):
        raise ReproError(f"{path}: mode {row.get('mode')!r}: {column} {values} (mean, interval); expected "
                         f"non-negative {unit}, at most {most:g}")
    if values[1] > values[2]:
        raise ReproError(f"{path}: mode {row.get('mode')!r}: {column} interval [{values[1]:g}, {values[2]:g}]; expected "
                         "ci_low at most ci_high")
    if not values[1] - ROUNDING <= values[0] <= values[2] + ROUNDING:  # a t-interval is centred on its mean
        raise ReproError(f"{path}: mode {row.get('mode')!r}: {column} mean {values[0]:g} outside its interval "
                         f"[{values[1]:g}, {values[2]:g}]; expected the mean inside its 95% t-interval")
    return values



def check_total(row, spread, path):
    """The total's mean is the TPU's plus the workers' (a mean is linear), within rounding."""
    tpu, worker, total = (spread[c][0] for c in ("tpu_cost", "worker_cost", "total_cost"))
    if abs(total - (tpu + worker)) > max(ROUNDING, 1e-3 * total):
        raise ReproError(f"{path}: mode {row.get('mode')!r}: total_cost_mean {total:g}, but tpu_cost_mean + "
                         f"worker_cost_mean is {tpu + worker:g}; expected the total of the two")


MAX_REPEATS = 10_000  # the config's `repeats` at most (its schema's maximum, tested to agree)


def repeat_counts(rows, path):
    """The sorted repeat counts of a table's rows (the caption's N): each a whole number of at least 1."""
    counts = set()
    for row in rows:
        try:
            count = float(row.get("repeats"))
        except (TypeError, ValueError):
            count = math.nan
        if not (1 <= count <= MAX_REPEATS and count.is_integer()):
            raise ReproError(f"{path}: mode {row.get('mode')!r}: repeats is {str(row.get('repeats'))[:40]!r}; expected a "
                             f"whole number from 1 to {MAX_REPEATS} (the runs behind the mean)")
        counts.add(int(count))
    return sorted(counts)
