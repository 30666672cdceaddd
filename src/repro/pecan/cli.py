"""`repro pecan ...` subcommands: calibrate, run, costs, plot, compare-results, tfdata; and the steps
the workflow's rules run: cost-table, figure, validation, estimate, check-reproducibility."""

import argparse
import json
import contextlib
import math
import os
import re
import stat
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import file_kind
from repro.pecan.costs import MAX_DOLLARS
from repro.pecan.tfdata.cli import add_commands as add_tfdata_commands
from repro.settings import CONFIG_HELP, figure_file, settings_argument, settings_keys, utf8_text

MAX_ELEMENTS, MAX_REPEATS = 10_000, 1_000  # `pecan calibrate`: as the config schema bounds calibration.*
MAX_TPUS = 4096  # `pecan costs --tpu-count`: the chips of the largest TPU pod (v4), so more is a typo


def add_commands(sub):
    from repro.backends import backend_names
    from repro.pecan.calibrate import REPEATS
    from repro.pecan.pipelines import PIPELINES

    pecan = sub.add_parser("pecan", help="Pecan input-pipeline experiments")
    psub = pecan.add_subparsers(dest="pecan_command", required=True)

    cal = psub.add_parser("calibrate", help="measure preprocessing pipelines on this machine",
                          description="Measure the pipelines in one interleaved loop (their cost ratio then holds "
                                      "still under changing load) and write one calibration JSON per pipeline.")
    cal.add_argument("--pipeline", required=True, nargs="+", choices=list(PIPELINES))
    cal.add_argument("--elements", type=int, default=32, help="synthetic JPEGs to measure (default 32)")
    cal.add_argument("--repeats", type=int, default=REPEATS,
                     help=f"passes over both orders; per element and op the fastest is kept (default {REPEATS})")
    cal.add_argument("--ops", choices=("pillow", "tf"), default="pillow",
                     help="measure the Pillow functions (default) or the TF ops the tf.data engine runs (calibration.ops)")
    cal.add_argument("--engine", choices=("model", "tfdata"), default="model",
                     help="the engine the runs use (pecan.engine); tfdata with --ops pillow also measures the TF ops "
                          "(`tf_ops`), from which the engine derives its miniature scale")
    cal.add_argument("-o", "--output", required=True, nargs="+", help="calibration JSON to write, one per --pipeline")
    cal.set_defaults(func=_calibrate, writes={"output": "-o/--output"})

    run = psub.add_parser("run", help="run one experiment x mode on the local cluster model")
    run.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    run.add_argument("--settings", metavar="FILE",
                     help="a JSON file of the run's settings as the ssh backend writes them, instead of --config")
    run.add_argument("--experiment", required=True)
    run.add_argument("--mode", required=True)
    run.add_argument("--calibration", nargs="+", required=True,
                     help="calibration JSON files: one per pipeline the experiment or the preset fit needs")
    run.add_argument("--out", required=True, help="run directory to create")
    run.add_argument("--backend", default="local", choices=backend_names(),
                     help="the backend that started this run, recorded in its metrics (default local; the ssh "
                          "backend's hosts pass ssh): the run executes here either way")
    run.add_argument("--service-dir", help="the engine's service to run on (tf.data: its state directory; default: "
                                           "a service of the run's own)")
    run.set_defaults(func=_run, reads=("config", "settings", "calibration"))

    costs = psub.add_parser("costs", help="cost table (the artifact's CSV columns) from training logs")
    costs.add_argument("logs", nargs="*", help="training logs in the artifact's format")
    costs.add_argument("--path", action="append", default=[], help="a training log (extract_costs.py's spelling)")
    costs.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    costs.add_argument("--experiment", help="experiment whose model and accelerator apply")
    costs.add_argument("--model", help="the model (of the config's pecan.models: extract_costs.py's resnet or retinanet), "
                       "instead of --experiment")
    costs.add_argument("--accelerator", choices=["v2", "v3"],
                       help="TPU type whose price applies (default: the experiment's; v2 with --model)")
    costs.add_argument("--worker", choices=["n2-8"], default="n2-8", help="remote worker type (the only one priced)")
    costs.add_argument("--tpu-count", "--tpu_count", type=int, default=1, dest="tpu_count",
                       help="training clients (TPUs) paid for (default 1)")
    costs.add_argument("--worker-matches", "--worker_matches", type=int, default=3, dest="worker_matches",
                       help="identical worker sets in a row that make the converged deployment (default 3)")
    _absl_bool(costs, "infer_workers", True, "read the converged worker counts from the log (else 0 workers)")
    _absl_bool(costs, "header", True, "write the CSV header line (extract_costs.py's default: off)")
    costs.add_argument("--experiment-type", "--experiment_type", dest="experiment_type", type=utf8_text,
                       help="the value of the experiment column for every row (the artifact's free label; "
                       "default: <model>_<log name>)")
    costs.add_argument("-o", "--output", help="CSV file (default: standard output)")
    costs.set_defaults(func=_costs, writes={"output": "-o/--output"}, reads=("logs", "path", "config"))

    plot = psub.add_parser("plot", help="draw the cost figure from cost numbers (the artifact's fig8.py options)")
    plot.add_argument("-e", "--experiment", default="final", choices=["final", "autoplacement", "autoorder"],
                      help="the figure: final (collocated, Cachew, Pecan, from -t/-c); autoplacement (Fig 6) and "
                      "autoorder (Fig 7) over every workload of a comparison table (--table), written to "
                      "plots/Cachew_AP_FF and plots/AutoOrder_Cost as fig8.py does, or to -o")
    plot.add_argument("--table", help="autoplacement/autoorder: the comparison table "
                      "(default results/tables/Cachew_AP_FF.csv or results/tables/AutoOrder_Cost.csv)")
    plot.add_argument("-m", "--model", default="ResNet50_v2-8", type=utf8_text, help="the workload, the figure's title")
    plot.add_argument("-o", "--out_file", "--out-file", dest="out_file",
                      help="output basename: BASE.pdf and BASE.png are written (default plots/ResNet50_v2-8, "
                      "plots/Cachew_AP_FF or plots/AutoOrder_Cost); a name ending in .pdf or .png: that file only")
    plot.add_argument("-t", "--tpu_costs", "--tpu-costs", dest="tpu_costs", nargs=3, type=float,
                      metavar=("COLLOCATED", "CACHEW", "PECAN"), help="TPU cost per epoch ($) of each mode")
    plot.add_argument("-c", "--cpu_costs", "--cpu-costs", dest="cpu_costs", nargs=3, type=float,
                      default=[0.0, 0.0, 0.0], metavar=("COLLOCATED", "CACHEW", "PECAN"),
                      help="remote worker cost per epoch ($) of each mode (default 0)")
    plot.add_argument("-r", "--repeats", type=int, default=1, help="accepted for fig8.py's command lines; unused there too")
    plot.set_defaults(func=_plot, reads=("table",))

    same = psub.add_parser("compare-results", help="compare the plotted numbers of two results/ directories",
                           description="Every plotted number (calibrations, each figure's bar segments) of two "
                                       "finished workflows, e.g. two fresh clones, within the configured "
                                       "reproducibility.tolerance; exits 1 if any is outside.")
    same.add_argument("first", help="a results/ directory")
    same.add_argument("second", help="another results/ directory")
    same.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    same.add_argument("--figure", action="append", metavar="NAME",
                      help="a figure to compare, repeated for more (default: reproducibility.figures)")
    same.add_argument("-o", "--output", help="CSV file (default: standard output)")
    same.set_defaults(func=_compare_results, writes={"output": "-o/--output"}, reads=("config",))

    add_tfdata_commands(psub)
    _workflow_commands(psub)


def _workflow_commands(psub):
    """The steps the workflow's rules run, with the settings the rules pass as JSON."""
    table = psub.add_parser("cost-table", help="an experiment's cost table with the spread over repeats, "
                            "from each mode's training log and metrics")
    table.add_argument("--settings", required=True, type=settings_argument,
                       help="prices and model as JSON (repro.rulesettings.cost_settings)")
    table.add_argument("--mode", nargs="+", required=True, dest="modes", help="the experiment's modes")
    table.add_argument("--log", nargs="+", required=True, dest="logs", help="each mode's run.log, in --mode order")
    table.add_argument("--metrics", nargs="+", required=True, help="each mode's metrics.json, in --mode order")
    table.add_argument("--summary", required=True, help="the experiment's trace summary (every mode must be in it)")
    table.add_argument("-o", "--output", required=True, help="CSV file to write")
    table.set_defaults(func=_cost_table, writes={"output": "-o/--output"}, reads=("logs", "metrics", "summary"))

    figure = psub.add_parser("figure", help="a configured figure of cost per epoch per mode, and the reference "
                             "values' verdicts")
    figure.add_argument("figure", help="the figure's name (plots.figures)")
    figure.add_argument("--table", required=True, help="the experiment's cost table")
    figure.add_argument("--calibration", nargs="+", required=True, help="calibration JSON files")
    figure.add_argument("--metrics", nargs="*", default=[],
                        help="the experiment's tf.data engine runs' metrics.json: the caption says what this machine "
                             "let the modes reach (settings: network_gbps)")
    figure.add_argument("--settings", required=True, type=settings_argument,
                        help="the figure's settings as JSON (repro.rulesettings.figure_settings)")
    figure.add_argument("--output", nargs=2, required=True, type=figure_file, metavar=("PDF", "PNG"),
                        help="the figure files")
    figure.add_argument("--verdicts", required=True, help="CSV of the reference values' verdicts to write")
    figure.set_defaults(func=_figure, writes={"output": "--output", "verdicts": "--verdicts"},
                        reads=("table", "calibration", "metrics"))

    both = psub.add_parser("comparison-table", help="a figure over several workloads: one row per workload and "
                           "mode from the workloads' cost tables (repro.pecan.comparisons)")
    both.add_argument("--option", required=True, help="the artifact's fig8.py option: autoplacement or autoorder")
    both.add_argument("--workload", nargs="+", required=True, dest="workloads", help="the workloads (experiments), on x")
    both.add_argument("--table", nargs="+", required=True, dest="tables", help="each workload's cost table, in order")
    both.add_argument("-o", "--output", required=True, help="CSV file to write")
    both.set_defaults(func=_comparison_table, writes={"output": "-o/--output"}, reads=("tables",))

    comparison = psub.add_parser("comparison", help="a figure over several workloads (plots.comparisons) and the "
                                 "paper's values' verdicts")
    comparison.add_argument("comparison", help="the figure's name (plots.comparisons)")
    comparison.add_argument("--table", required=True, help="its comparison table")
    comparison.add_argument("--calibration", nargs="+", required=True, help="calibration JSON files")
    comparison.add_argument("--settings", required=True, type=settings_argument,
                            help="the figure's settings as JSON (repro.rulesettings.comparison_settings)")
    comparison.add_argument("--output", nargs=2, required=True, type=figure_file, metavar=("PDF", "PNG"),
                        help="the figure files")
    comparison.add_argument("--verdicts", required=True, help="CSV of the paper values' verdicts to write")
    comparison.set_defaults(func=_comparison, writes={"output": "--output", "verdicts": "--verdicts"},
                            reads=("table", "calibration"))

    valid = psub.add_parser("validation", help="the engine's measured throughput per deployment next to the "
                            "cluster model's (repro.pecan.validation)")
    valid.add_argument("experiment")
    valid.add_argument("--metrics", nargs="+", required=True, help="the experiment's runs' metrics.json")
    valid.add_argument("--calibration", nargs="+", required=True, help="calibration JSON files")
    valid.add_argument("--network-gbps", type=float, required=True, help="pecan.cluster.network_gbps")
    valid.add_argument("--style", required=True, type=settings_argument, help="plots.style as JSON")
    valid.add_argument("--output", nargs=2, required=True, type=figure_file, metavar=("PDF", "PNG"),
                        help="the figure files")
    valid.add_argument("--table", required=True, help="CSV file to write")
    valid.set_defaults(func=_validation, writes={"output": "--output", "table": "--table"}, reads=("metrics", "calibration"))

    est = psub.add_parser("estimate", help="hours, worker-hours and dollars the configured experiments would cost "
                          "on the real cluster (the cluster model's estimate)")
    where = est.add_mutually_exclusive_group()
    where.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    where.add_argument("--settings", type=settings_argument, help="pecan, seed and calibration.preset as JSON, "
                     "instead of --config (repro.rulesettings.estimate_settings; the workflow passes its merged config's)")
    est.add_argument("--calibration", nargs="+", required=True, help="calibration JSON files")
    est.add_argument("-o", "--output", help="text file to write (also printed)")
    est.set_defaults(func=_estimate, writes={"output": "-o/--output"}, reads=("config", "calibration"))

    check = psub.add_parser("check-reproducibility", help="the figures' chains run twice from empty scratch "
                            "directories, every plotted number compared within reproducibility.tolerance")
    check.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    check.add_argument("--settings", type=settings_argument,
                       help="the whole checked config as JSON, instead of --config (the workflow passes its own)")
    check.add_argument("--scratch", required=True,
                       help="directory for the two chains, run-1 and run-2 (emptied first where an earlier check "
                       "made them)")
    check.add_argument("-o", "--output", required=True, help="CSV file to write")
    check.set_defaults(func=_check_reproducibility, writes={"output": "-o/--output"}, reads=("config",))


def _calibration_records(args):
    """Each pipeline's calibration record, in the ops `--ops` names; under `--engine tfdata` a Pillow record
    also carries the TF ops' measure (`tf_ops`), from which the engine derives its time scale."""
    from repro.pecan.calibrate import calibrate_together

    tf_records = None
    if args.ops == "tf" or args.engine == "tfdata":
        from repro.pecan.tfdata.calibrate import calibrate_tf

        tf_records = calibrate_tf(args.pipeline, elements=args.elements, repeats=args.repeats)
    if args.ops == "tf":
        return tf_records
    records = calibrate_together(args.pipeline, elements=args.elements, repeats=args.repeats)
    if tf_records:
        for pipeline, record in records.items():
            record["tf_ops"] = {key: tf_records[pipeline][key] for key in ("declared", "autoorder", "statistic")}
    return records


def _calibrate(args):
    from repro.fsutil import atomic_path, json_text

    if len(args.output) != len(args.pipeline):
        raise ReproError(f"--output: {len(args.output)} file(s) for {len(args.pipeline)} --pipeline value(s); "
                         "expected one calibration JSON per pipeline, in the same order")
    for flag, value, most in (("--elements", args.elements, MAX_ELEMENTS), ("--repeats", args.repeats, MAX_REPEATS)):
        if not 1 <= value <= most:  # each element's images are held in memory through every pass
            raise ReproError(f"{flag}: expected 1 to {most}, got {value}")
    if len(set(args.pipeline)) != len(args.pipeline):
        raise ReproError(f"--pipeline: {' '.join(args.pipeline)} names a pipeline twice")
    records = _calibration_records(args)
    with contextlib.ExitStack() as stack:  # all or none: one output that cannot be written leaves no other
        for pipeline, output in zip(args.pipeline, args.output):
            stack.enter_context(atomic_path(output)).write_text(json_text(output, records[pipeline]))
    for pipeline, output in zip(args.pipeline, args.output):
        result = records[pipeline]
        orders = {order: result[order] for order in ("declared", "autoorder")}
        print(f"{output}: " + ", ".join(f"{order} {o['cpu_s_per_element'] * 1e3:.2f} ms/element "
                                        f"({o['per_reference_kernel']:.2f} reference kernels)"
                                        for order, o in orders.items())
              + f"; reference kernel {result['reference_kernel']['cpu_s'] * 1e3:.2f} ms; "
              f"{result['autoorder_saving']:.1%} saved; moves: {', '.join(result['autoorder']['moves']) or 'none'}"
              + (f"; TF ops (the engine's scale) {result['tf_ops']['declared']['cpu_s_per_element'] * 1e3:.2f} ms/element"
                 if "tf_ops" in result else ""))


def _run(args):
    from repro.config import check_settings, load_config
    from repro.pecan.engines import engine_of, run_engine
    from repro.pecan.calibration_files import load_calibrations

    if args.settings:
        from repro.fsutil import read_json

        config = read_json(args.settings, "the run settings the workflow writes", f"--settings {args.settings}")
        missing = [key for key in ("pecan", "calibration", "seed") if not isinstance(config, dict) or key not in config]
        if missing:
            raise ReproError(f"--settings {args.settings}: not the run settings the workflow writes "
                             f"(missing {', '.join(missing)})")
        check_settings(config, f"--settings {args.settings}")
    else:
        config = load_config(args.config)
    with settings_keys(f"--settings {args.settings}") if args.settings else contextlib.nullcontext():
        metrics = run_engine(config, args.experiment, args.mode, load_calibrations(args.calibration), args.out,
                             backend=args.backend, service_dir=args.service_dir)
    print(f"{args.out}: {engine_of(config)} engine, {metrics['remote_workers']} remote + "
          f"{metrics['local_workers']} local workers, {metrics['throughput']:.0f} examples/s")


def _costs(args):
    from repro.config import load_config
    from repro.fsutil import check_text_name, first_named_twice
    from repro.pecan.costs import cost_row, lookup
    from repro.pecan.costtable import write_table
    from repro.pecan.logs import parse_log

    logs = [*args.logs, *args.path]
    if not logs:
        raise ReproError("pecan costs: no training log given (positional, or --path LOG)")
    twice = first_named_twice(logs)
    if twice is not None:  # its row twice: one run counted as two
        raise ReproError(f"{twice}: named twice among the logs; expected each training log once")
    if (args.experiment is None) == (args.model is None):
        raise ReproError("pecan costs: give --experiment NAME or --model NAME (from the config)")
    if not 1 <= args.tpu_count <= MAX_TPUS or args.worker_matches < 1:
        raise ReproError(f"--tpu-count (1 to {MAX_TPUS}) and --worker-matches (at least 1): got {args.tpu_count} and "
                         f"{args.worker_matches}")
    pecan = load_config(args.config)["pecan"]
    if args.model:
        model, tpu_type = args.model, args.accelerator or "v2"
        if model not in pecan["models"]:
            raise ReproError(f"--model: unknown model {model!r}; expected one of {sorted(pecan['models'])} (pecan.models)")
    else:
        exp = lookup(pecan["experiments"], args.experiment, "experiment")
        model, tpu_type = exp["model"], args.accelerator or pecan["accelerators"][exp["accelerator"]]["tpu_type"]
    tpu_price = lookup(pecan["prices"]["tpu"], tpu_type, "TPU type (pecan.prices.tpu)")
    rows = []
    for log in logs:
        check_text_name(log, "it names the log's row (experiment and mode)")
        parsed = parse_log(log, worker_matches=args.worker_matches, infer_workers=args.infer_workers)
        if not parsed.converged:  # the deployment never settled: the row stands for the last one, which a user must know
            print(f"note: {log}: no worker set is seen {args.worker_matches} times in a row (--worker-matches); the row "
                  f"prices the last one, {parsed.remote_workers} remote and {parsed.local_workers} local", file=sys.stderr)
        recorded = parsed.run.get("experiment")  # a log this package wrote names its run; the artifact's do not
        if recorded is not None and (recorded != args.experiment if args.experiment else
                                     pecan["experiments"].get(recorded, {}).get("model", model) != model):
            raise ReproError(f"{log}: a run of experiment {recorded!r}, not of "
                             + (f"--experiment {args.experiment!r}" if args.experiment else f"--model {model!r}"))
        cluster = pecan["cluster"]  # a deployment beyond the cluster's caps is no run of it: a damaged log
        for kind in ("remote", "local"):
            count, cap = getattr(parsed, f"{kind}_workers"), cluster[f"max_{kind}_workers"]
            if count > cap:
                raise ReproError(f"{log}: {count} {kind} workers in its last deployment; the cluster holds at most {cap} "
                                 f"(pecan.cluster.max_{kind}_workers of --config {args.config})")
        # the mode: the run's, or the artifact's log names it (resnet_colloc.log)
        row = cost_row(parsed, parsed.run.get("mode", Path(log).stem), model, pecan["models"][model], tpu_price, pecan["prices"]["worker"],
                       tpu_count=args.tpu_count)
        rows.append({**row, "experiment": args.experiment_type or row["experiment"]})
    write_table(rows, args.output, header=args.header)


def _absl_bool(parser, name, default, text):
    """--NAME, --NAME=true|false (and --noNAME), as absl flags read booleans, with the dashed spelling too."""
    def value(word):
        if word.lower() in ("true", "1", "t", "yes"):
            return True
        if word.lower() in ("false", "0", "f", "no"):
            return False
        raise ValueError(word)

    value.__name__ = "true or false"
    dashed = name.replace("_", "-")
    parser.add_argument(f"--{dashed}", f"--{name}", dest=name, nargs="?", const=True, default=default, type=value,
                        help=f"{text} (default {'on' if default else 'off'})")
    parser.add_argument(f"--no{name}", f"--no-{dashed}", dest=name, action="store_false", help=argparse.SUPPRESS)


MAX_TITLE = 2000  # characters of pecan plot's title (a workload's name)


def _plot(args):
    import tempfile

    from repro.pecan.costtable import SPREAD_OF, write_table
    from repro.plots import plot_costs

    if args.experiment != "final":
        return _plot_comparison(args)
    if args.tpu_costs is None:
        raise ReproError("-t/--tpu_costs: required with -e final (the TPU cost of collocated, Cachew and Pecan)")
    if len(args.model) > MAX_TITLE:  # the title is laid out, wrapped, character by character: 100,000 took 50 s
        raise ReproError(f"-m/--model: {len(args.model)} characters; expected a workload's name, the figure's title, "
                         f"of at most {MAX_TITLE}")
    costs = [*args.tpu_costs, *args.cpu_costs]
    if any(not math.isfinite(c) or c < 0 or c > MAX_DOLLARS for c in costs):
        raise ReproError(f"-t/-c: costs must be non-negative numbers of dollars, at most {MAX_DOLLARS:g}, got {costs}")
    rows = []
    for mode, tpu, worker in zip(("collocated", "cachew", "pecan"), args.tpu_costs, args.cpu_costs):
        values = {"tpu_cost": tpu, "worker_cost": worker, "total_cost": tpu + worker}
        row = {"mode": mode, "repeats": 1}
        for column in SPREAD_OF:
            value = values.get(column, 0)
            row.update({f"{column}_mean": value, f"{column}_ci_low": value, f"{column}_ci_high": value})
        rows.append(row)
    outputs = _plot_outputs(args.out_file, "plots/ResNet50_v2-8")
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "costs.csv"
        write_table(rows, table, columns=list(rows[0]))
        plot_costs(table, outputs, args.model, "cost numbers given on the command line",
                   {"font_size": 9, "width_in": 5.0, "height_in": 3.6, "dpi": 150, "show_reference": False})
    print(f"{', '.join(outputs)}: collocated, Cachew, Pecan")


def _plot_outputs(out_file, default):
    """The files `-o out_file` (`default` where not given) names (their directory is made as each is written)."""
    if out_file == "":  # as every other -o refuses it; `or default` drew the default figure over plots/
        raise ReproError("-o/--out_file '': expected a file name or a basename, not an empty one")
    if out_file is None:  # the default replaces a figure drawn before, not a user's file of that name
        from repro.fsutil import check_default_output
        from repro.plots import is_figure

        return [check_default_output(f"{default}.{kind}", "-o/--out_file", is_figure, "a figure this command drew")
                for kind in ("pdf", "png")]
    if out_file.endswith(os.sep) or Path(out_file).name in ("", ".", ".."):  # 'sub/' made sub/.pdf and sub/.png
        raise ReproError(f"-o/--out_file {out_file!r}: expected a file name or a basename, not a directory")
    if Path(out_file).suffix.lower() in (".pdf", ".png"):  # a file named in full: that file, nothing else
        return [out_file]
    try:  # a basename that names a device, FIFO or socket meant that node, not a prefix
        kind = os.stat(out_file).st_mode
    except (OSError, ValueError):
        kind = None
    if kind is not None and not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
        raise ReproError(f"-o/--out_file {out_file!r}: is {file_kind(kind)}; expected a basename for the figure's "
                         ".pdf and .png, or a file name ending in .pdf or .png")
    return [f"{out_file}.pdf", f"{out_file}.png"]  # a basename, as fig8.py takes it


def _plot_comparison(args):
    """fig8.py's autoplacement/autoorder options, drawn from a comparison table: each workload at its own
    x position (fig8.py puts all five on the one -m model's) with the paper's values as markers."""
    from repro.fsutil import refuse_overwriting
    from repro.pecan.comparisons import OPTIONS
    from repro.pecan.presets import PAPER_COSTS
    from repro.plots import plot_comparison

    table = args.table or f"results/tables/{OPTIONS[args.experiment]['basename']}.csv"
    outputs = _plot_outputs(args.out_file, f"plots/{OPTIONS[args.experiment]['basename']}")
    flag = "-o/--out_file" if args.out_file else f"-e {args.experiment}"
    refuse_overwriting([(flag, output) for output in outputs], [table])
    rows = _comparison_rows(table)
    if {r["mode"] for r in rows} != set(OPTIONS[args.experiment]["modes"]):
        raise ReproError(f"{table}: modes {sorted({r['mode'] for r in rows})}; -e {args.experiment} draws "
                         f"{OPTIONS[args.experiment]['modes']}")
    plot_comparison(rows, args.experiment, outputs, f"cost numbers from {table}",
                    {"font_size": 9, "width_in": 8.0, "height_in": 4.0, "dpi": 150, "show_reference": True}, PAPER_COSTS)
    print(f"{', '.join(outputs)}: {', '.join(OPTIONS[args.experiment]['modes'])}")


def _compare_results(args):
    from repro.config import load_config
    from repro.fsutil import refuse_overwriting
    from repro.pecan.costtable import write_table
    from repro.pecan.reproducibility import (CHECK_COLUMNS, check_figures, check_same_numbers, compare, outside,
                                             results_files, results_numbers)

    with contextlib.suppress(OSError):  # one missing is named where its numbers are read
        if os.path.samefile(args.first, args.second):  # a directory against itself always agrees
            raise ReproError(f"{args.second}: the same directory as {args.first}; expected two results/ directories")
    config = load_config(args.config)
    figures = (check_figures(config, args.figure, "--figure") if args.figure
               else check_figures(config, config["reproducibility"]["figures"]))
    # a table or a calibration of either results directory, written over with the comparison
    refuse_overwriting([("-o/--output", args.output)],
                       [path for results in (args.first, args.second) for path in results_files(config, figures, results)])
    first, second = (results_numbers(config, figures, d) for d in (args.first, args.second))
    check_same_numbers(first, second, args.first, args.second)
    rows = compare(first, second, config["reproducibility"]["tolerance"])
    write_table(rows, args.output, CHECK_COLUMNS)
    held, missed = outside(rows)
    print(f"{len(held) - len(missed)} of {len(held)} numbers within tolerance", file=sys.stderr)
    return 1 if missed else 0


@settings_keys()
def _cost_table(args):
    from repro.config import check_settings
    from repro.pecan.costtable import TABLE_COLUMNS, cost_table, write_table

    check_settings(args.settings, places={"experiment": ("plots", "figures", "f", "experiment"),
                                          "model_name": ("pecan", "experiments", "e", "model"),
                                          "model": ("pecan", "models", "m"), "tpu_price": ("pecan", "prices", "tpu", "t"),
                                          "worker_price": ("pecan", "prices", "worker")})
    rows = cost_table(args.settings, args.modes, args.logs, args.metrics, args.summary)
    scales = ["time_scale"] if any("time_scale" in row for row in rows) else []  # tf.data engine runs
    write_table(rows, args.output, TABLE_COLUMNS + scales)
    print(f"{args.output}: {len(rows)} modes, {rows[0]['repeats']} repeats each")


def _check_figure_settings(settings, section, name, keys, elsewhere=None):
    """Figure settings given by hand: `keys` checked where plots.<section>.<name> holds them, preset and
    backend where the config does, engine_caption (which the workflow derives from the engine) as text,
    `elsewhere` ({key: place}) at their places (style by check_style as it is drawn; a None is a key the
    spec left out)."""
    from repro.config import check_settings

    places = {**{key: ("plots", section, name, key) for key in keys}, "preset": ("calibration", "preset"),
              "style": None, "engine_caption": {"type": "string"},
              "network_gbps": ("pecan", "cluster", "network_gbps"), **(elsewhere or {})}
    check_settings({key: value for key, value in settings.items() if value is not None}, places=places)


@settings_keys()
def _figure(args):
    from repro.config import check_style
    from repro.pecan.costtable import check_table_runs, write_table
    from repro.pecan.presets import REFERENCE_PLOTS, reference_of_another_workload
    from repro.pecan.reproducibility import VERDICT_COLUMNS, reference_verdicts
    from repro.pecan.calibration_files import load_calibrations
    from repro.plots import figure_rows, plot_costs
    from repro.rulesettings import caption

    settings = args.settings
    _check_figure_settings(settings, "figures", args.figure, ("experiment", "reference", "modes"),
                           {key: ("pecan", "experiments", "experiment", key) for key in ("model", "accelerator")})
    if settings["reference"] and settings["reference"] not in REFERENCE_PLOTS:  # as the config's check refuses it
        raise ReproError(f"--settings: reference: unknown reference {settings['reference']!r}; expected one of "
                         f"{sorted(REFERENCE_PLOTS)}")
    another = settings["reference"] and reference_of_another_workload(
        settings["reference"], settings["experiment"], settings["model"], settings["accelerator"])
    if another:
        raise ReproError(f"--settings: reference: {another}")
    reference = REFERENCE_PLOTS.get(settings["reference"]) if settings["reference"] else None
    calibrations = load_calibrations(args.calibration)
    text = caption(settings["backend"], settings["preset"], calibrations, settings["engine_caption"])
    limits = _machine_limits_text(args.metrics, settings, calibrations) if args.metrics else ""
    modes = settings.get("modes")
    rows = figure_rows(args.table, modes)
    check_table_runs(rows, args.table, settings["experiment"], settings["preset"])  # the caption names them
    scales = [(row["mode"], row.get("time_scale")) for row in rows]
    drawn = [mode for mode, _ in scales]
    if reference and not set(reference) & set(drawn):  # as the config's check refuses it: "0 of 0 inside"
        raise ReproError(f"--settings: reference: {settings['reference']!r} holds values for modes "
                         f"{', '.join(reference)}, none of them drawn ({', '.join(drawn)}); expected a reference of "
                         "the figure's modes, or none")
    if settings["engine_caption"] and all(scale for _, scale in scales):
        shown = {f"x{float(scale):.3g}" for _, scale in scales}
        text += "; time scale " + (shown.pop() if len(shown) == 1 else
                                   ", ".join(f"{mode} x{float(scale):.3g}" for mode, scale in scales))
    if limits:
        text += "." + limits.rstrip(".")  # plot_costs goes on with "; " and the bars
    verdicts = reference_verdicts(args.figure, figure_rows(args.table, modes), reference)
    plot_costs(args.table, args.output, settings["experiment"], text, check_style(settings["style"], "--settings style"),
               reference, modes)
    try:
        write_table(verdicts, args.verdicts, VERDICT_COLUMNS)
    except BaseException:  # the figure without its verdicts would look complete
        for path in args.output:
            with contextlib.suppress(OSError):
                os.remove(path)
        raise
    print(f"caption: {text}")
    print(f"wrote {', '.join(args.output)}; {sum(v['verdict'] == 'inside' for v in verdicts)} of {len(verdicts)} "
          "reference values inside the measured 95% interval")


def _comparison_table(args):
    from repro.pecan.comparisons import COLUMNS, OPTIONS, comparison_rows
    from repro.pecan.costtable import write_table

    if args.option not in OPTIONS:
        raise ReproError(f"--option {args.option!r}: expected one of {sorted(OPTIONS)}")
    _check_workload_names(args.workloads)
    _check_table_order(args.tables)
    rows = comparison_rows(args.option, args.workloads, args.tables)
    write_table(rows, args.output, COLUMNS)
    print(f"{args.output}: {len(args.workloads)} workloads x {len(OPTIONS[args.option]['modes'])} modes")


def _check_table_order(tables):
    """ReproError where a --table is named twice: one workload's numbers under two names (each table's
    rows name their workload, which comparison_rows checks)."""
    from repro.fsutil import first_named_twice

    twice = first_named_twice(tables)
    if twice is not None:
        raise ReproError(f"--table {twice}: named twice; expected each workload's own cost table once")


def _check_workload_names(workloads):
    """ReproError naming --workload where a workload is no experiment's name (as the config's schema
    has them: the table's first column, a figure's x label) or is named twice (two rows of a mode)."""
    from repro.config import schema
    from repro.fsutil import first_repeated

    name = schema()["definitions"]["name"]
    for workload in workloads:
        if not re.fullmatch(name["pattern"], workload) or len(workload) > name["maxLength"]:
            raise ReproError(f"--workload {workload[:100]!r}: expected an experiment's name (letters, digits, '_', "
                             f"'.' and '-', at most {name['maxLength']} characters)")
    twice = first_repeated(workloads)
    if twice is not None:
        raise ReproError(f"--workload {twice!r}: named twice; expected each workload once")


def comparison_caption(settings, calibrations, verdicts, rows):
    """What produced the bars, which ASR pipeline ASRTrans is, and the paper's bars the preset misses by
    over 15%, with the workers behind each."""
    from repro.pecan.comparisons import missed_bars
    from repro.pecan.presets import PAPER_COSTS
    from repro.rulesettings import caption

    text = caption(settings["backend"], settings["preset"], calibrations, settings["engine_caption"])
    if settings["preset"] == "artifact":
        text += ("; SimCLR's and ASRTrans' declared costs fitted to the paper's FastFlow bars (their AutoOrder "
                 "savings measured), ResNet50_v3-8 is ResNet's fit at the v3-8's bound")
    if "ASRTrans" in settings["workloads"]:
        text += ("; ASRTrans: TensorFlowASR's LibriSpeech log-mel features and SpecAugment run as the input "
                 "pipeline (the paper's ASR pipeline is not public)")
    missed = missed_bars(rows, verdicts, PAPER_COSTS)
    if missed:
        text += f"; totals more than 15% from the paper's: {', '.join(missed)}"
        if settings["preset"] == "artifact":  # docs/FIGURES.md, "The artifact preset's misses"
            text += (": the preset's costs follow the artifact's Cachew log (ResNet) and the paper's FastFlow bars "
                     "(SimCLR, ASRTrans), and the policies converge to the workers they need at those costs, "
                     "which are not the workers the paper's bar bills")
    return text


@settings_keys()
def _comparison(args):
    from repro.config import check_style
    from repro.pecan.comparisons import OPTIONS, VERDICT_COLUMNS, ordering_notes, paper_verdicts
    from repro.pecan.costtable import named_preset, write_table
    from repro.pecan.presets import PAPER_COSTS
    from repro.pecan.calibration_files import load_calibrations
    from repro.plots import plot_comparison

    settings = args.settings
    _check_figure_settings(settings, "comparisons", args.comparison, ("option", "workloads"))
    rows = _comparison_rows(args.table)
    tabled = list(dict.fromkeys(row["workload"] for row in rows))
    if tabled != settings["workloads"]:  # the caption and the paper's values follow the settings, the bars the table
        raise ReproError(f"--settings: workloads: {settings['workloads']}, but {args.table} holds {tabled}; expected "
                         "the workloads of the table, in its order")
    other = next((row["preset"] for row in rows if named_preset(row) not in (None, settings["preset"])), None)
    if other is not None:  # the caption names the settings' preset
        raise ReproError(f"{args.table}: runs of calibration preset {other[:100]!r}, not of {settings['preset']!r}; "
                         "expected the table of the preset the caption names")
    modes, held = OPTIONS[settings["option"]]["modes"], {(row["workload"], row["mode"]) for row in rows}
    missing = next(((workload, mode) for workload in tabled for mode in modes if (workload, mode) not in held), None)
    if missing:  # a table of the other option: the settings are not at fault
        raise ReproError(f"{args.table}: no row for {missing[0]} mode {missing[1]}; option {settings['option']} draws "
                         f"{', '.join(modes)}")
    verdicts = paper_verdicts(args.comparison, rows, PAPER_COSTS)
    text = comparison_caption(settings, load_calibrations(args.calibration), verdicts, rows)
    plot_comparison(rows, settings["option"], args.output, text, check_style(settings["style"], "--settings style"),
                    PAPER_COSTS)
    write_table(verdicts, args.verdicts, VERDICT_COLUMNS)
    totals = [v for v in verdicts if v["quantity"] == "total_cost"]
    print(f"wrote {', '.join(args.output)}; {sum(v['verdict'] == 'inside' for v in verdicts)} of {len(verdicts)} "
          f"paper values inside the measured 95% interval; {sum(v['within_15pct'] == 'yes' for v in totals)} of "
          f"{len(totals)} totals within 15%")
    for note in ordering_notes(settings["option"], rows):
        print(f"ordering: {note}")


def _comparison_rows(path):
    """A comparison table's rows with its numbers as floats: its columns, one row per workload and
    mode, each number finite, non-negative and at most MAX_DOLLARS (a bar the figure can draw)."""
    from repro.pecan.comparisons import COLUMNS, NUMBER_COLUMNS, not_a_cost, read_rows
    from repro.pecan.costtable import repeat_counts

    rows = read_rows(path, "a comparison table")
    if not rows:
        raise ReproError(f"{path}: comparison table has no rows")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        raise ReproError(f"{path}: not a comparison table (no column(s) {', '.join(missing)}); expected the "
                         "columns `pecan comparison-table` writes")
    seen, numbers = set(), []
    for index, row in enumerate(rows, start=1):
        if (row["workload"], row["mode"]) in seen:
            raise ReproError(f"{path}: row {index}: a second row for workload {row['workload']!r} and mode "
                             f"{row['mode']!r}; expected one row each")
        seen.add((row["workload"], row["mode"]))
        try:
            number = {k: float(row[k]) for k in NUMBER_COLUMNS}
        except (TypeError, ValueError):
            raise ReproError(f"{path}: row {index}: expected numbers in {', '.join(NUMBER_COLUMNS)}") from None
        bad = not_a_cost(number, MAX_DOLLARS)
        if bad:
            raise ReproError(f"{path}: row {index}: {bad} is {row[bad]}; expected a non-negative number of at "
                             f"most {MAX_DOLLARS:g}")
        numbers.append({"workload": row["workload"], "preset": row["preset"], "mode": row["mode"], **number})
    repeat_counts(rows, path)  # the caption's N
    return numbers


def _engine_runs(paths, experiment):
    """The tf.data engine runs' metrics.json of `experiment` at `paths` (--metrics), each file and each
    run once."""
    from repro.fsutil import file_identity, read_json

    runs, named, specs = [], {}, {}  # fsutil.file_identity, and each run's spec: the spelling that named it first
    for path in paths:
        metrics = read_json(path, "a tf.data engine run's metrics.json", f"--metrics {path}")
        same = file_identity(path)
        if same in named:  # its deployments would be counted twice in the verdict
            raise ReproError(f"--metrics {path}: the file {named[same]} named already; expected each run's metrics.json once")
        named[same] = path
        spec = metrics.get("spec") if isinstance(metrics, dict) else None
        run_experiment = spec.get("experiment") if isinstance(spec, dict) else None
        if run_experiment is not None and run_experiment != experiment:  # titled and judged as another experiment's
            raise ReproError(f"--metrics {path}: a run of experiment {str(run_experiment)[:80]!r}; expected {experiment}'s")
        run = json.dumps(spec, sort_keys=True, default=str)
        if spec is not None and run in specs:  # a copy of one run: its deployment counted twice towards the minimum
            raise ReproError(f"--metrics {path}: the same run as {specs[run]} (the same spec: mode "
                             f"{str(spec.get('mode'))[:80]!r}, seed {str(spec.get('seed'))[:40]}); expected each run once")
        specs.setdefault(run, path)
        runs.append(metrics)
    return runs


def _machine_limits_text(paths, settings, calibrations):
    """The figure caption's sentence of what this machine let the modes reach, from the engine runs at
    `paths` (repro.pecan.validation.machine_limits)."""
    from repro.pecan.validation import check_measured, limits_text, machine_limits

    if settings.get("network_gbps") is None:
        raise ReproError("--metrics: the settings hold no network_gbps (pecan.cluster.network_gbps), which the "
                         "machine's limits need; expected it beside the engine runs")
    runs = _engine_runs(paths, settings["experiment"])
    with _malformed_runs(f"--metrics {' '.join(paths)}: not tf.data engine runs' metrics.json"):
        for path, metrics in zip(paths, runs):
            if metrics.get("engine") != "tfdata":
                raise ReproError(f"--metrics {path}: not a tf.data engine run (engine {metrics.get('engine', 'model')!r})")
            check_measured(metrics, path)
        return limits_text(machine_limits(runs, calibrations, settings["network_gbps"]))


@contextlib.contextmanager
def _malformed_runs(what):
    """ReproError `what (the exception)` for what a metrics.json that is not an engine run's raises
    where it is read (a string where a number belongs, a key missing)."""
    try:
        yield
    except (AttributeError, LookupError, TypeError, ValueError, ArithmeticError) as exc:
        raise ReproError(f"{what} ({type(exc).__name__}: {exc})") from None


def _validation(args):
    from repro.config import check_settings, check_style
    from repro.pecan.costtable import write_table
    from repro.pecan.calibration_files import load_calibrations
    from repro.pecan.validation import COLUMNS, UNSETTLED, caption_text, machine_limits, validation_rows, verdict
    from repro.plots import plot_validation

    if not args.experiment:  # no run's spec names it: every run would be refused as another experiment's
        raise ReproError("experiment: expected the experiment's name (the runs' spec.experiment), got an empty one")
    style = check_style(args.style)
    calibrations = load_calibrations(args.calibration)
    rows = []
    check_settings({"network_gbps": args.network_gbps}, "--network-gbps",
                   places={"network_gbps": ("pecan", "cluster", "network_gbps")})  # bounded as the config's
    runs = _engine_runs(args.metrics, args.experiment)
    for path, metrics in zip(args.metrics, runs):
        with _malformed_runs(f"--metrics {path}: not a tf.data engine run's metrics.json"):
            rows += validation_rows(metrics, calibrations, args.network_gbps, path)
    # the caption reads every run's measured inputs
    with _malformed_runs(f"--metrics {' '.join(args.metrics)}: not tf.data engine runs' metrics.json"):
        text = caption_text(rows, runs, limits=machine_limits(runs, calibrations, args.network_gbps))
    if not rows:
        raise ReproError(f"--metrics {' '.join(args.metrics)}: no deployment measured (no window whose workers held "
                         f"still: each was {UNSETTLED}); expected runs that held a deployment for two windows or more")
    write_table(rows, args.table, COLUMNS)
    passed, headline = verdict(rows)
    plot_validation(rows, args.output, f"Validation: {args.experiment}" + ("" if passed else f" ({headline.split(':')[0]})"),
                    text, style)
    print(text)
    if not passed:  # the table and the figure stay: they show why
        raise ReproError(f"{args.experiment}: {headline}")


@settings_keys()
def _estimate(args):
    from repro.config import check_settings, load_config
    from repro.fsutil import write_text
    from repro.pecan.estimate import estimate, format_estimate
    from repro.pecan.calibration_files import load_calibrations

    config = check_settings(args.settings) if args.settings is not None else load_config(args.config)
    table = format_estimate(estimate(config, load_calibrations(args.calibration)))
    if args.output:
        write_text(args.output, table + "\n")
    print(table)


@settings_keys()
def _check_reproducibility(args):
    from repro.config import check_settings, load_config
    from repro.fsutil import refuse_inside
    from repro.pecan.costtable import write_table
    from repro.pecan.reproducibility import CHECK_COLUMNS, check, outside

    for chain in ("run-1", "run-2"):  # emptied as the check starts: a file in one was removed, the config read too
        for flag, path in (("--config", args.config if args.settings is None else None), ("-o/--output", args.output)):
            refuse_inside(flag, path, "--scratch", Path(args.scratch) / chain, "a chain's directory, emptied at each check")
    config = check_settings(args.settings) if args.settings is not None else load_config(args.config)
    rows = check(config, config["reproducibility"]["figures"], args.scratch)
    write_table(rows, args.output, CHECK_COLUMNS)
    for row in rows:
        print(", ".join(str(row[c]) for c in CHECK_COLUMNS))
    held, missed = outside(rows)
    print(f"{len(held) - len(missed)} of {len(held)} numbers within tolerance")
