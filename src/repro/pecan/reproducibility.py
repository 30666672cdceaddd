"""The pipeline checked against itself and the artifact's reference values against the measured spread.

`check`: the chain behind a figure (calibration of the pipelines, every mode's run with its
repeats, the cost table) run twice from empty scratch directories with the package's own
functions; every plotted number of the two chains compared within the configured tolerance.
`results_numbers` + `compare`: the same comparison between two finished results/ directories
(`repro pecan compare-results`), e.g. two fresh clones.
`reference_verdicts`: each reference value the figure draws as a marker, inside or outside the
95% interval the repeats give, and how far outside.
"""

import re
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import check_fresh_directory, first_repeated, fresh_directory, read_csv, read_json, write_json
from repro.pecan.calibrate import calibrate_together
from repro.pecan.comparisons import comparison_rows, read_rows
from repro.pecan.costtable import TABLE_COLUMNS, check_table_runs, mode_row, write_table
from repro.pecan.run import run_mode
from repro.rulesettings import cost_settings, experiment_pipelines
from repro.stats import verdict

CHECK_COLUMNS = ["number", "first", "second", "difference", "tolerance", "within"]
VERDICT_COLUMNS = ["figure", "mode", "quantity", "reference", "reference_rounding", "mean", "ci_low", "ci_high",
                   "repeats", "verdict", "outside_by", "outside_by_pct"]
# The artifact's plots label each cost in cents: a labelled value stands for any within half a cent
# of it, and a total of two labelled parts for any within a cent.
LABEL_ROUNDING = 0.005
PLOTTED = ("tpu_cost", "worker_cost")  # the two segments of each bar, labelled on the figure


def cost_rows(config, experiment, run_dirs):
    """The cost table's rows (with spread) for `experiment` from its run directories {mode: dir}."""
    settings = cost_settings(config, experiment)
    return [mode_row(Path(run_dir) / "run.log", Path(run_dir) / "metrics.json", mode, settings)
            for mode, run_dir in run_dirs.items()]


def plotted_numbers(figures, calibrations, rows_by_figure, comparisons=()):
    """{name: value}: the calibration results and every figure's plotted costs (bar segment means; a
    figure over several workloads, one of `comparisons`, names each bar's workload too)."""
    numbers = {}
    for pipeline, calibration in calibrations.items():
        if "reference_kernel" not in calibration:
            raise ReproError(f"calibration of {pipeline!r} has no reference kernel (an older file); "
                             "measure it again (snakemake --forcerun calibrate)")
        held = {"reference kernel ms": (calibration["reference_kernel"]["cpu_s"], 1e3)}
        for order in ("declared", "autoorder"):
            held[f"{order} ms/element"] = (calibration[order]["cpu_s_per_element"], 1e3)
            held[f"{order} per reference kernel"] = (calibration[order]["per_reference_kernel"], 1)
        held["AutoOrder saving %"] = (calibration["autoorder_saving"], 100)
        for name, (value, unit) in held.items():
            if not _finite_number(value):  # text, null or true, or 10**400: multiplied into nonsense or an exception
                raise ValueError(f"calibration {pipeline} {name}: {value!r:.40} is not a finite number")
            numbers[f"calibration {pipeline} {name}"] = value * unit
    for figure in figures:
        for row in rows_by_figure[figure]:
            bar = f"{row['workload']} {row['mode']}" if figure in comparisons else row["mode"]
            for column in PLOTTED:
                numbers[f"{figure} {bar} {column} $"] = float(row[f"{column}_mean"])
    return numbers


def figure_pipelines(config, figures):
    """The pipelines whose calibrations the figures' runs read."""
    plots = config["plots"]
    experiments = [w for f in figures for w in (plots["comparisons"][f]["workloads"] if f in plots["comparisons"]
                                                else [plots["figures"][f]["experiment"]])]
    return experiment_pipelines(config, experiments)


def scratch_files(config):
    """What run_chain writes in its scratch directory for any figure of `config`: the calibrations of
    its pipelines, the runs of its experiments' modes (as run_mode writes them), their tables."""
    pecan = config["pecan"]

    def one_of(names):
        return "(?:" + "|".join(map(re.escape, sorted(names))) + ")"

    runs = "|".join(f"{re.escape(e)}/{one_of(spec['modes'])}" for e, spec in sorted(pecan["experiments"].items()))
    return re.compile(rf"calibration/{one_of({m['pipeline'] for m in pecan['models'].values()})}\.json"
                      rf"|tables/{one_of(pecan['experiments'])}\.csv"
                      rf"|runs/(?:{runs})/(?:run\.log|metrics\.json|traces/[^/]+\.json|repeats/run-[0-9]+\.log)")


def run_chain(config, figures, scratch):
    """Calibrate, run and tabulate every figure's experiment in an empty `scratch`; return the
    plotted numbers {name: value} (calibration results included)."""
    scratch = Path(scratch)
    cal = config["calibration"]
    pipelines = figure_pipelines(config, figures)
    calibrations = calibrate_together(pipelines, elements=cal["elements"], repeats=cal["repeats"])
    for pipeline in pipelines:
        write_json(scratch / "calibration" / f"{pipeline}.json", calibrations[pipeline])
    rows_by_figure, tables = {}, {}

    def table(experiment):  # each experiment's runs once, shared by the figures that draw it
        if experiment not in tables:
            run_dirs = {}
            for mode in config["pecan"]["experiments"][experiment]["modes"]:
                run_dirs[mode] = scratch / "runs" / experiment / mode
                run_mode(config, experiment, mode, calibrations, run_dirs[mode])
            tables[experiment] = scratch / "tables" / f"{experiment}.csv"
            write_table(cost_rows(config, experiment, run_dirs), tables[experiment], TABLE_COLUMNS)
        return tables[experiment]

    for figure in figures:
        spec = config["plots"]["comparisons"].get(figure)
        if spec is None:
            rows_by_figure[figure] = read_rows(table(config["plots"]["figures"][figure]["experiment"]))
        else:
            rows_by_figure[figure] = comparison_rows(spec["option"], spec["workloads"],
                                                     [table(w) for w in spec["workloads"]])
    return plotted_numbers(figures, calibrations, rows_by_figure, config["plots"]["comparisons"])


def _check_table_of(config, figure, table, rows):
    """ReproError where a results directory's table holds another workload's rows than its name says,
    runs of another calibration preset than the config's, or two rows of one mode (of one workload):
    compared by name with the other directory's, its numbers would be judged as the named one's, and
    of two rows the last would be."""
    spec = config["plots"]["comparisons"].get(figure)
    if spec is None:
        check_table_runs(rows, table, config["plots"]["figures"][figure]["experiment"], config["calibration"]["preset"])
    elif (listed := list(dict.fromkeys(row.get("workload") for row in rows))) != spec["workloads"]:
        raise ReproError(f"{table}: holds workloads {listed}; expected {spec['workloads']} (plots.comparisons.{figure})")
    else:
        check_table_runs(rows, table, None, config["calibration"]["preset"])
    twice = first_repeated((row.get("workload"), row.get("mode")) for row in rows)
    if twice is not None:
        raise ReproError(f"{table}: two rows for mode {twice[1]!r} of {twice[0]}; expected one row per mode and workload")


def _results_table(config, figure, results):
    name = figure if figure in config["plots"]["comparisons"] else config["plots"]["figures"][figure]["experiment"]
    return Path(results) / "tables" / f"{name}.csv"


def results_files(config, figures, results):
    """The files of `results` that results_numbers reads: each pipeline's calibration, each figure's table."""
    return ([Path(results) / "calibration" / f"{pipeline}.json" for pipeline in figure_pipelines(config, figures)]
            + [_results_table(config, figure, results) for figure in figures])


def _finite_number(value):
    """A number within float's range, compared (math.isfinite raised OverflowError on 10**400, TypeError on text)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def results_numbers(config, figures, results):
    """The plotted numbers of a finished workflow's `results/` directory (its calibrations and
    cost tables), to compare two clones or two machines."""
    results = Path(results)
    calibrations, rows_by_figure = {}, {}
    try:
        for pipeline in figure_pipelines(config, figures):
            path = results / "calibration" / f"{pipeline}.json"
            if not path.exists():
                raise FileNotFoundError(2, "No such file or directory", str(path))
            calibrations[pipeline] = read_json(path, "the output of `repro pecan calibrate`")
        for figure in figures:
            table = _results_table(config, figure, results)
            if not table.exists():
                raise FileNotFoundError(2, "No such file or directory", str(table))
            rows_by_figure[figure] = read_csv(table, str(table), "a cost table")
            _check_table_of(config, figure, table, rows_by_figure[figure])
        numbers = plotted_numbers(figures, calibrations, rows_by_figure, config["plots"]["comparisons"])
    except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:  # OverflowError: 10**400 * 1e3
        raise ReproError(f"{results}: not a finished workflow's results directory for figures {list(figures)} "
                         f"({type(exc).__name__}: {exc}); build them first (snakemake --cores 1)") from None
    # a value the calibration holds as it is (per reference kernel) may be text, null, true or 10**400
    bad = next((name for name, value in numbers.items() if not _finite_number(value)), None)
    if bad is not None:  # named here, not as the comparison's output file holding it
        raise ReproError(f"{results}: {bad} is {numbers[bad]!r:.40}, not a finite number; expected a finished "
                         "workflow's results (build them again)")
    return numbers


def check_same_numbers(first, second, first_name, second_name):
    """ReproError naming a number only one of two results directories has (another mode or pipeline)."""
    for numbers, other, name, other_name in ((first, second, first_name, second_name),
                                             (second, first, second_name, first_name)):
        only = next((number for number in numbers if number not in other), None)
        if only is not None:
            raise ReproError(f"{name}: has {only!r}, which {other_name} lacks; expected results of the same "
                             "figures, modes and pipelines")


def tolerance_of(name, tolerance):
    """(kind, value) the configured tolerance for one number: relative, or absolute points; none for
    absolute CPU times, which follow the machine's speed from minute to minute (the calibration
    holds its costs per reference kernel instead, timed beside them)."""
    if name.endswith("saving %"):
        return "points", tolerance["saving_points"]
    if name.endswith((" ms", " ms/element")):
        return "none", None
    if name.startswith("calibration"):
        return "relative", tolerance["calibration_relative"]
    return "relative_or_dollars", (tolerance["cost_relative"], tolerance["cost_dollars"])


def compare(first, second, tolerance):
    """One row per number: both values, their difference and whether it is within tolerance
    (`-` for a number shown but not held to one)."""
    rows = []
    for name in first:
        a, b = first[name], second[name]
        kind, limit = tolerance_of(name, tolerance)
        difference = b - a
        scale = max(abs(a), abs(b))
        if kind == "none":
            within, text = None, "none: the machine's speed"
        elif kind == "points":
            within, text = abs(difference) <= limit, f"±{limit:g} points"
        elif kind == "relative":
            within, text = abs(difference) <= limit * scale, f"±{limit:.0%}"
        else:
            within = abs(difference) <= max(limit[0] * scale, limit[1])
            text = f"±{limit[0]:.0%} or ${limit[1]:g}"
        rows.append({"number": name, "first": round(a, 4), "second": round(b, 4), "difference": round(difference, 4),
                     "tolerance": text, "within": "-" if within is None else "yes" if within else "no"})
    return rows


def outside(rows):
    """The numbers held to a tolerance, and those of them outside it: (held, outside) name lists."""
    held = [r["number"] for r in rows if r["within"] != "-"]
    return held, [r["number"] for r in rows if r["within"] == "no"]


def check(config, figures, scratch_root):
    """Run the chain twice in scratch_root/run-1 and run-2 (emptied first where this check made
    them; refused where it did not); return the comparison rows."""
    check_figures(config, figures)
    scratches = [Path(scratch_root) / f"run-{i}" for i in (1, 2)]
    written = scratch_files(config)
    for scratch in scratches:  # both, before either is emptied
        check_fresh_directory(scratch, "--scratch", written)
    for scratch in scratches:
        fresh_directory(scratch, "--scratch", written)
    first, second = (run_chain(config, figures, scratch) for scratch in scratches)
    return compare(first, second, config["reproducibility"]["tolerance"])


def check_figures(config, figures, source="reproducibility.figures"):
    """`figures`, or a clear error naming the unknown ones and where they were given."""
    known = [*config["plots"]["figures"], *config["plots"]["comparisons"]]
    unknown = [f for f in figures if f not in known]
    if unknown:
        raise ReproError(f"{source}: unknown figure(s) {unknown}; expected some of {sorted(known)}")
    return figures


def reference_verdicts(figure, rows, reference):
    """Each reference value against the cost table's interval for its mode (total, and parts if given)."""
    verdicts = []
    for row in rows:
        value = reference.get(row["mode"]) if reference else None
        if value is None:
            continue
        labels = value if isinstance(value, list) else [value]
        parts = {"total_cost": (sum(labels), len(labels) * LABEL_ROUNDING)}
        if isinstance(value, list):
            parts.update(tpu_cost=(value[0], LABEL_ROUNDING), worker_cost=(value[1], LABEL_ROUNDING))
        for quantity, (ref, rounding) in parts.items():
            mean, low, high = (float(row[f"{quantity}_{s}"]) for s in ("mean", "ci_low", "ci_high"))
            inside, distance = verdict(ref, low, high, rounding)
            verdicts.append({
                "figure": figure, "mode": row["mode"], "quantity": quantity, "reference": round(ref, 4),
                "reference_rounding": rounding, "mean": round(mean, 4),
                "ci_low": round(low, 4), "ci_high": round(high, 4), "repeats": row["repeats"],
                "verdict": "inside" if inside else "outside", "outside_by": round(distance, 4),
                "outside_by_pct": round(100 * distance / ref, 1) if ref else "",
            })
    return verdicts
