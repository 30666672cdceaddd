"""`repro pecan tfdata ...`: the tf.data service engine's commands (TensorFlow imported only when run)."""

import os
import sys

from repro import stopsignals
from repro.errors import ReproError
from repro.pecan.tfdata.service import BATCH_TIMEOUT_S, MAX_BATCH_TIMEOUT_S
from repro.settings import CONFIG_HELP, settings_argument


def _port(text):
    """A TCP port, 0 (any free one) to 65535: argparse names the flag when this refuses."""
    import argparse

    try:
        port = int(text)
    except ValueError:
        port = None
    if port is None or not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 (any free port) to 65535, got {text[:40]!r}")
    return port


def add_commands(psub):
    tfdata = psub.add_parser("tfdata", help="run Pecan's modes on a real tf.data service (the 'tfdata' extra)")
    tsub = tfdata.add_subparsers(dest="tfdata_command", required=True)

    start = tsub.add_parser("start", help="start a tf.data service dispatcher (and workers) on this machine")
    start.add_argument("--state-dir", required=True, help="directory of the service's records, logs and journal")
    start.add_argument("--port", type=_port, default=0, help="dispatcher port (default 0: any free port)")
    start.add_argument("--workers", type=int, default=0,
                       help="remote workers it runs: as many are started as fall short of this (default 0)")
    start.add_argument("--threads", type=int, default=1, help="threads (and CPUs) per worker (default 1)")
    start.add_argument("--worker-hosts", metavar="FILE",
                       help="a JSON file of the hosts to run remote workers on over ssh "
                            "(repro.pecan.tfdata.remote.SshWorkers)")
    start.set_defaults(func=_start)

    status = tsub.add_parser("status", help="check the service: dispatcher, registered workers, a probe job")
    status.add_argument("--state-dir", required=True)
    status.add_argument("--expect-workers", type=int, help="workers that must be registered (default: those recorded)")
    status.add_argument("--probe-workers", action="store_true",
                        help="the workflow's check: start a probe worker on every worker host (or one here), expect "
                             "each to register, run the probe job through them, stop them")
    status.set_defaults(func=_status)

    stop = tsub.add_parser("stop", help="stop every worker and the dispatcher recorded in --state-dir")
    stop.add_argument("--state-dir", required=True)
    stop.set_defaults(func=_stop)

    run = tsub.add_parser("run", help="one experiment x mode as a real run at miniature scale",
                          description="Train against the real pipeline with an emulated accelerator; the policies "
                                      "start and stop real WorkerServer processes; writes run.log (the artifact's "
                                      "format) and metrics.json into --out.")
    run.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    run.add_argument("--experiment", required=True)
    run.add_argument("--mode", required=True)
    run.add_argument("--out", required=True, help="run directory")
    run.add_argument("--data", help="where the generated JPEGs are written once (default: <out>/../data)")
    run.add_argument("--service-dir", help="use the service started there (default: start one for this run)")
    run.add_argument("--time-scale", type=float,
                     help="accelerator step-time factor (default: derived by the run from its measured pipeline cost and CPUs)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--batch-timeout", type=float, metavar="SECONDS", default=BATCH_TIMEOUT_S,
                     help=f"fail when no batch comes for this long, e.g. the service died (default {BATCH_TIMEOUT_S})")
    for name in ("batch-size", "decision-steps", "worker-threads", "collocated-threads", "max-remote-workers",
                 "max-local-workers", "settle-windows", "max-windows", "images"):
        run.add_argument(f"--{name}", type=int)
    run.add_argument("--probe-seconds", type=float, metavar="SECONDS",
                     help="the least seconds of each phase of the run's transfer probe (default 1.0; longer is steadier)")
    run.set_defaults(func=_run)

    sweep = tsub.add_parser("sweep", help="throughput against a fixed number of remote workers, one run per count",
                            description="For each count (pecan.tfdata.sweep, or --counts) a run with that many remote "
                                        "workers held fixed (0: the client's own pipeline), at one miniature scale; "
                                        "writes <out>/<count>/run.log and metrics.json, which `repro pecan validation` "
                                        "reads as any engine run's.")
    source = sweep.add_mutually_exclusive_group()
    source.add_argument("--config", help=CONFIG_HELP)
    source.add_argument("--settings", type=settings_argument,
                        help="the sweep's settings as the workflow passes them (JSON text), instead of --config")
    sweep.add_argument("--experiment", required=True)
    sweep.add_argument("--mode", default="cachew", help="the mode whose pipeline order the sweep runs (default cachew)")
    sweep.add_argument("--counts", type=int, nargs="+", help="remote worker counts (default: pecan.tfdata.sweep)")
    sweep.add_argument("--out", required=True, help="directory of the sweep's runs")
    sweep.add_argument("--data", help="where the generated JPEGs are written once (default: <out>/data)")
    sweep.add_argument("--service-dir", help="use the service started there (default: each count starts its own)")
    sweep.add_argument("--seed", type=int, help="default: the settings' seed, else 0")
    sweep.add_argument("--calibration", nargs="+", default=(),
                       help="calibration JSON files; the pipeline's TF cost there sets the scale the modes' runs share "
                            "(default: the first count's run derives it)")
    sweep.set_defaults(func=_sweep)


MINIATURE_FLAGS = ("time_scale", "batch_size", "decision_steps", "worker_threads", "collocated_threads",
                   "max_remote_workers", "max_local_workers", "settle_windows", "max_windows", "images", "probe_seconds")


# Where the config holds what a flag sets, where that is not pecan.tfdata.<the flag's name>: worker
# counts are bounded as the config's worker caps, threads as its worker threads
FLAG_PLACES = {"seed": ("seed",), "workers": ("pecan", "tfdata", "max_remote_workers"),
               "expect_workers": ("pecan", "tfdata", "max_remote_workers"), "threads": ("pecan", "tfdata", "worker_threads")}


def _check_flags(args, names):
    """Each of the flags `names` that is given, checked against the config schema where the config holds
    its value (FLAG_PLACES, else under pecan.tfdata): bounded, as the config is."""
    from repro.config import check_settings

    for name in names:
        value = getattr(args, name)
        if value is not None:
            place = FLAG_PLACES.get(name, ("pecan", "tfdata", name))
            check_settings({name: value}, f"--{name.replace('_', '-')}", places={name: place})


def _sweep(args):
    import signal
    from pathlib import Path

    from repro.config import check_settings, load_config
    from repro.pecan.costs import lookup
    from repro.pecan.run import check_run_directory
    from repro.pecan.tfdata import check_sweep, cpus_available
    from repro.settings import settings_keys

    _check_flags(args, ("seed",))
    if args.settings is not None:
        config, source = check_settings(args.settings), "--settings"
    else:
        source = args.config or "config/config.yaml"
        config = load_config(source)
    with settings_keys():  # what the sweep reads, checked before TensorFlow is imported
        pecan = config["pecan"]
        lookup(pecan["experiments"], args.experiment, "experiment")
        lookup(pecan["modes"], args.mode, "mode")
        miniature = dict(pecan.get("tfdata", {}))
        seed = args.seed if args.seed is not None else config.get("seed", 0)
    counts, key = (args.counts, "--counts") if args.counts else (miniature.pop("sweep", []), "pecan.tfdata.sweep")
    miniature.pop("sweep", None)
    if not counts:
        raise ReproError(f"{source}: pecan.tfdata.sweep is empty; expected remote worker counts, or --counts")
    check_sweep(counts, miniature.get("worker_threads", 1), cpus_available(), key)
    from repro.pecan.costs import experiment_pipeline
    from repro.pecan.calibration_files import load_calibrations

    calibrations = load_calibrations(args.calibration)
    with settings_keys():
        pipeline = experiment_pipeline(pecan, args.experiment)
    if args.calibration and pipeline not in calibrations:  # its scale would be derived by the first run instead
        raise ReproError(f"--calibration {' '.join(args.calibration)}: no calibration of pipeline {pipeline!r}, the one "
                         f"{args.experiment} runs; expected its calibration JSON")
    from repro.pecan.tfdata.spec import scale_from_calibration, spec_from_config

    with settings_keys():
        spec = spec_from_config(pecan, args.experiment, args.mode, seed=seed, time_scale=miniature.pop("time_scale", None),
                                decision_steps=miniature.pop("decision_steps", None), **miniature)
    scale = scale_from_calibration(spec, calibrations.get(pipeline))
    for count in counts:  # as the sweep checks them, before seconds of TensorFlow's import
        check_run_directory(Path(args.out) / str(count))
    from repro.pecan.tfdata.engine import sweep

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    runs = sweep(spec, counts, args.out, args.data or Path(args.out) / "data", args.service_dir, scale=scale)
    for count, metrics in zip(counts, runs):
        print(f"{args.out}/{count}: {count} remote worker(s): {metrics['throughput']:.0f} examples/s (miniature bound "
              f"{metrics['accelerator_bound_miniature']:.0f}, time scale x{metrics['spec']['time_scale']:.3g})")


def _start(args):
    from repro.pecan.tfdata import check_worker_memory, cpus_available, require_tensorflow
    from repro.pecan.tfdata.service import Service, print_checks

    _check_flags(args, ("workers", "threads"))
    require_tensorflow()  # the dispatcher's process imports it
    ssh_workers = None
    if args.worker_hosts:
        from repro.fsutil import read_json
        from repro.pecan.tfdata.remote import check_worker_hosts

        ssh_workers = read_json(args.worker_hosts, "the worker hosts as JSON", f"--worker-hosts {args.worker_hosts}")
        check_worker_hosts(f"--worker-hosts {args.worker_hosts}", ssh_workers)
    else:  # the workers run here, each pinned to its own CPUs (more threads than CPUs would share them)
        check_worker_memory(args.workers, f"--workers {args.workers}")
        cpus = cpus_available()
        if args.threads > cpus:
            raise ReproError(f"--threads {args.threads}: more than the {cpus} CPU(s) this machine lets a worker run on "
                             "(os.sched_getaffinity); expected at most that many")

    def top_up(service, started_dispatcher):
        service.prune()  # a start again on a running service tops its workers up, not adds as many again
        running = sum(worker["kind"] == "remote" for worker in service.state["workers"])
        _add_workers(service, max(0, args.workers - running), args.threads, started_dispatcher)

    service = Service.start(args.state_dir, port=args.port, ssh_workers=ssh_workers, then=top_up)
    print(f"{args.state_dir}: dispatcher at {service.address}")
    return 0 if print_checks(service.checks(probe=False)) else 1


def _add_workers(service, count, threads, started_dispatcher):
    """`count` remote workers added to `service`. Where one fails to start or the command is stopped
    (Ctrl-C, SIGTERM) meanwhile, what this start started is stopped again: the dispatcher where it
    started it (the whole service), else the workers it added so far."""
    added = 0
    try:
        for _ in range(count):
            service.add_worker("remote", threads)
            added += 1
    except BaseException:
        with stopsignals.deferred():  # a second Ctrl-C does not leave the stop half done
            if started_dispatcher:
                service.stop()
            else:
                for _ in range(added):
                    service.remove_worker("remote")
        raise


def _status(args):
    from repro.pecan.tfdata.service import Service, print_checks, workflow_checks

    _check_flags(args, ("expect_workers",))
    _check_state_dir(args.state_dir)
    if args.probe_workers:
        return 0 if print_checks(workflow_checks(args.state_dir)) else 1
    service = Service(args.state_dir)
    try:
        return 0 if print_checks(service.checks(args.expect_workers)) else 1
    finally:
        service.close()


def _check_state_dir(state_dir):
    if os.path.lexists(state_dir) and not os.path.isdir(state_dir):
        raise ReproError(f"--state-dir {state_dir}: not a directory; expected the directory `tfdata start` was given")


def _stop(args):
    from repro.pecan.tfdata.service import Service

    _check_state_dir(args.state_dir)
    service = Service(args.state_dir)
    if service.state is None:  # nothing to stop: as idempotent as a second stop, but said
        print(f"{args.state_dir}: no tf.data service recorded there (no state.json); nothing stopped")
        return
    print(f"{args.state_dir}: stopped {service.stop()} process(es)")


def _run(args):
    import signal
    from pathlib import Path

    from repro.config import load_config
    from repro.pecan.run import check_run_directory
    from repro.pecan.tfdata.spec import spec_from_config

    if not 0 < args.batch_timeout <= MAX_BATCH_TIMEOUT_S:
        raise ReproError(f"--batch-timeout {args.batch_timeout}: expected a positive, finite number of seconds, "
                         f"at most {MAX_BATCH_TIMEOUT_S}")
    miniature = {key: getattr(args, key) for key in MINIATURE_FLAGS if key != "time_scale"}
    _check_flags(args, ("seed", *miniature))  # before the spec divides by them (--worker-threads 0)
    spec = spec_from_config(load_config(args.config)["pecan"], args.experiment, args.mode, seed=args.seed,
                            time_scale=args.time_scale, **miniature)  # which bounds the time scale by its step time
    check_run_directory(args.out)  # as the run checks it, before seconds of TensorFlow's import
    from repro.pecan.tfdata.engine import run  # TensorFlow: after the settings are checked

    def progress(window):
        print(f"  steps {window.first_step}-{window.first_step + window.steps}: "
              f"{window.steps * spec.batch_size / window.seconds:.0f} examples/s, workers {window.workers_after}",
              file=sys.stderr)

    # a terminated run still stops the workers it started (the `finally` in run)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    metrics = run(spec, args.out, args.data or Path(args.out).parent / "data", args.service_dir, on_window=progress,
                  batch_timeout_s=args.batch_timeout)
    print(f"{args.out}: {metrics['remote_workers']} remote + {metrics['local_workers']} local workers, "
          f"{metrics['throughput']:.0f} examples/s (miniature bound {metrics['accelerator_bound_miniature']:.0f}), "
          f"{metrics['wall_s']:.0f} s; its pipeline {metrics['pipeline_cost']['cpu_s_per_element'] * 1e3:.2f} ms CPU "
          f"per element on one CPU ({metrics['pipeline_cost']['order']} order)")
