"""`repro pecan ...` subcommands: calibrate, run, costs."""

import json
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.pecan.tfdata.cli import add_commands as add_tfdata_commands


def add_commands(sub):
    pecan = sub.add_parser("pecan", help="Pecan input-pipeline experiments")
    psub = pecan.add_subparsers(dest="pecan_command", required=True, metavar="{calibrate,run,costs,compare-results,tfdata}")

    cal = psub.add_parser("calibrate", help="measure preprocessing pipelines on this machine",
                          description="Measure the pipelines in one interleaved loop (their cost ratio then holds "
                                      "still under changing load) and write one calibration JSON per pipeline.")
    cal.add_argument("--pipeline", required=True, nargs="+", choices=["resnet", "retinanet"])
    cal.add_argument("--elements", type=int, default=32, help="synthetic JPEGs to measure (default 32)")
    cal.add_argument("--repeats", type=int, default=10, help="passes over both orders; per element and op the fastest is kept (default 10)")
    cal.add_argument("-o", "--output", required=True, nargs="+", help="calibration JSON to write, one per --pipeline")
    cal.set_defaults(func=_calibrate)

    run = psub.add_parser("run", help="run one experiment x mode on the local cluster model")
    run.add_argument("--config", default="config/config.yaml", help="workflow config (default config/config.yaml)")
    run.add_argument("--settings", help="the run's settings as the workflow passes them (JSON), instead of --config")
    run.add_argument("--experiment", required=True)
    run.add_argument("--mode", required=True)
    run.add_argument("--calibration", nargs="+", required=True, help="calibration JSON files (resnet and retinanet)")
    run.add_argument("--out", required=True, help="run directory to create")
    run.add_argument("--backend", default="local", help="where this run executes, recorded in its metrics (default local)")
    run.set_defaults(func=_run)

    costs = psub.add_parser("costs", help="cost table (the artifact's CSV columns) from training logs")
    costs.add_argument("logs", nargs="+", help="training logs in the artifact's format")
    costs.add_argument("--config", default="config/config.yaml")
    costs.add_argument("--experiment", required=True, help="experiment whose model and accelerator apply")
    costs.add_argument("-o", "--output", help="CSV file (default: standard output)")
    costs.set_defaults(func=_costs)

    same = psub.add_parser("compare-results", help="compare the plotted numbers of two results/ directories",
                           description="Every plotted number (calibrations, each figure's bar segments) of two "
                                       "finished workflows, e.g. two fresh clones, within the configured "
                                       "reproducibility.tolerance; exits 1 if any is outside.")
    same.add_argument("first", help="a results/ directory")
    same.add_argument("second", help="another results/ directory")
    same.add_argument("--config", default="config/config.yaml")
    same.add_argument("--figure", nargs="+", help="figures to compare (default: reproducibility.figures)")
    same.add_argument("-o", "--output", help="CSV file (default: standard output)")
    same.set_defaults(func=_compare_results)

    add_tfdata_commands(psub)


def _calibrate(args):
    from repro.fsutil import write_json
    from repro.pecan.calibrate import calibrate_together

    if len(args.output) != len(args.pipeline):
        raise ReproError(f"--output: {len(args.output)} file(s) for {len(args.pipeline)} --pipeline value(s); "
                         "expected one calibration JSON per pipeline, in the same order")
    if len(set(args.pipeline)) != len(args.pipeline):
        raise ReproError(f"--pipeline: {' '.join(args.pipeline)} names a pipeline twice")
    results = calibrate_together(args.pipeline, elements=args.elements, repeats=args.repeats)
    for pipeline, output in zip(args.pipeline, args.output):
        result = results[pipeline]
        write_json(output, result)
        print(f"{output}: declared {result['declared']['cpu_s_per_element'] * 1e3:.2f} ms/element, "
              f"AutoOrder {result['autoorder']['cpu_s_per_element'] * 1e3:.2f} ms/element "
              f"({result['autoorder_saving']:.1%} saved; moves: {', '.join(result['autoorder']['moves']) or 'none'})")


def _run(args):
    from repro.config import load_config
    from repro.pecan.run import load_calibrations, run_mode

    if args.settings:
        try:
            config = json.loads(Path(args.settings).read_text())
        except (OSError, ValueError) as exc:
            raise ReproError(f"--settings {args.settings}: cannot read run settings ({exc})") from None
        missing = [key for key in ("pecan", "calibration", "seed") if not isinstance(config, dict) or key not in config]
        if missing:
            raise ReproError(f"--settings {args.settings}: not the run settings the workflow writes "
                             f"(missing {', '.join(missing)})")
    else:
        config = load_config(args.config)
    metrics = run_mode(config, args.experiment, args.mode, load_calibrations(args.calibration), args.out,
                       backend=args.backend)
    epoch = metrics["spec"]["steps_per_epoch"] * metrics["spec"]["batch_size"] / metrics["throughput"]
    print(f"{args.out}: {metrics['remote_workers']} remote + {metrics['local_workers']} local workers, "
          f"{metrics['throughput']:.0f} examples/s, {epoch:.1f} s/epoch")


def _costs(args):
    from repro.config import load_config
    from repro.pecan.costs import cost_row, lookup
    from repro.pecan.costtable import write_table
    from repro.pecan.logs import parse_log

    pecan = load_config(args.config)["pecan"]
    exp = lookup(pecan["experiments"], args.experiment, "experiment")
    accel = pecan["accelerators"][exp["accelerator"]]
    rows = [
        cost_row(parse_log(log), Path(log).stem, exp["model"], pecan["models"][exp["model"]],
                 pecan["prices"]["tpu"][accel["tpu_type"]], pecan["prices"]["worker"])
        for log in args.logs
    ]
    write_table(rows, args.output)


def _compare_results(args):
    from repro.config import load_config
    from repro.pecan.costtable import write_table
    from repro.pecan.reproducibility import CHECK_COLUMNS, check_figures, compare, results_numbers

    config = load_config(args.config)
    figures = check_figures(config, args.figure or config["reproducibility"]["figures"])
    first, second = (results_numbers(config, figures, d) for d in (args.first, args.second))
    rows = compare(first, second, config["reproducibility"]["tolerance"])
    write_table(rows, args.output, CHECK_COLUMNS)
    outside = [r["number"] for r in rows if r["within"] != "yes"]
    print(f"{len(rows) - len(outside)} of {len(rows)} numbers within tolerance", file=sys.stderr)
    return 1 if outside else 0
