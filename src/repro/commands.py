"""The `repro` command. Exit codes: 0 success, 1 bad input or failed step, 2 usage error, 128 + the
signal after Ctrl-C, SIGTERM or SIGHUP (each cleans up as Ctrl-C does), and quietly 141 (128 + SIGPIPE)
when the reader of its output has gone (`repro list | head -1`).

What a user can cause (bad input, an unwritable or missing file) ends in one line,
`repro: error: ...`, naming the file, key or flag; only a defect in the package shows a traceback.
"""

# The command tree (`build_parser`) and how a parsed command line runs (`run`), shared by the two
# programs: `repro` (repro.cli) and `trims-tools` (repro.trims.originals). The docstring is `repro --help`'s text.

import argparse
import contextlib
import importlib
import json
import os
import select
import signal
import sys
import threading

from repro.errors import ReproError, one_line
from repro.fsutil import file_identity, first_repeated, write_json
from repro.settings import CONFIG_HELP, settings_argument, settings_keys
from repro.stopsignals import STOP_SIGNALS, AfterImports


def _trace_commands(sub):
    trace = sub.add_parser("trace", help="Chrome trace tools: combine, summarize, validate")
    tsub = trace.add_subparsers(dest="trace_command", required=True)

    combine = tsub.add_parser("combine", help="combine traces into one, one process row per input")
    combine.add_argument("inputs", nargs="+", help="trace files or directories")
    combine.add_argument("-o", "--output", help="output file (default: combined.json)")
    combine.add_argument(
        "--adjust",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="drop 'ignore' events, close their gaps and zero each input at its first event (default: on)",
    )
    combine.add_argument("--skip-first", action="store_true", help="skip the first input")
    combine.add_argument("--lenient", action="store_true", help="skip malformed events and report how many")
    combine.set_defaults(func=_combine, writes={"output": "-o/--output"}, reads=("inputs",))

    summ = tsub.add_parser("summarize", help="summarise traces into summary JSON with group statistics")
    summ.add_argument("inputs", nargs="+", help="trace files or directories (searched recursively)")
    summ.add_argument("-o", "--output", help="output file (default: summary.json)")
    summ.add_argument("--detailed", action="store_true", help="include every event of every trace")
    summ.add_argument(
        "--group-by",
        default="model_name,upr_enabled",
        help="comma-separated run fields to group statistics by (default: model_name,upr_enabled; '' puts every "
        "trace in one group)",
    )
    summ.add_argument("--lenient", action="store_true", help="skip malformed events and unmatched pairs")
    summ.add_argument("--format", choices=["repro", "original"], default="repro",
                      help="repro: group statistics, microseconds; original: the TRIMS tools' list of records, "
                      "nanoseconds (default: repro)")
    summ.add_argument("--each-directory", action="store_true",
                      help="one summary per input directory, written to <directory>/summary.json unless -o")
    summ.set_defaults(func=_summarize, writes={"output": "-o/--output"}, reads=("inputs",))

    val = tsub.add_parser("validate", help="check that files are well-formed Chrome traces")
    val.add_argument("inputs", nargs="+", help="trace files")
    val.set_defaults(func=_validate, reads=("inputs",))

    down = tsub.add_parser("download", help="fetch the traces a run's upload receipt lists, checksums verified")
    down.add_argument("receipt", help="the run's upload receipt (upload.json)")
    down.add_argument("--store", help="the trace store to read from: a directory or gs://bucket/prefix (default: the "
                      "one the receipt records, where the run uploaded its traces)")
    down.add_argument("-o", "--output-dir", required=True, help="directory to put the traces in")
    down.set_defaults(func=_download, reads=("receipt",))


def _combine(args):
    from repro.fsutil import refuse_overwriting
    from repro.traces import combine
    from repro.traces.summarize import find_traces

    inputs = find_traces(args.inputs)
    if args.skip_first and len(inputs) < 2:  # nothing would be left to combine
        raise ReproError(f"--skip-first: expected at least two traces, got {len(inputs)} ({', '.join(map(str, inputs))})")
    if args.output is None:
        from repro.fsutil import check_default_output
        from repro.traces.combine import is_combined

        args.output = check_default_output("combined.json", "-o/--output", is_combined, "a combined trace")
    refuse_overwriting([("-o/--output", args.output)], inputs)  # also a trace found in an input directory
    report = combine(inputs, args.output, adjust=args.adjust, skip_first=args.skip_first, strict=not args.lenient)
    print(one_line(f"{args.output}: {report['events']} events from {report['inputs']} traces"  # a name with a newline: one line
                   + (f", {report['skipped']} malformed events skipped" if report["skipped"] else "")))


def _summarize(args):
    from pathlib import Path

    if not args.each_directory:
        _summarize_into(args, args.inputs, args.output or _default_output("summary.json"))
        return
    not_directories = [p for p in args.inputs if not Path(p).is_dir()]
    if not_directories:
        raise ReproError(f"--each-directory: {not_directories[0]} is not a directory")
    if args.output and len(args.inputs) > 1:
        raise ReproError("-o/--output: with --each-directory and several directories each writes its own "
                         "<directory>/summary.json; leave -o out")
    remedy = "move it, or summarize that directory alone with -o" if len(args.inputs) > 1 else None
    outputs = [args.output or _default_output(str(Path(directory) / "summary.json"), remedy) for directory in args.inputs]
    for directory, output in zip(args.inputs, outputs):
        _summarize_into(args, [directory], output)


def _default_output(path, remedy=None):
    from repro.fsutil import check_default_output
    from repro.traces.original import is_summary

    return check_default_output(path, "-o/--output", is_summary, "a trace summary", remedy)


def _summarize_into(args, inputs, output):
    from repro.fsutil import refuse_overwriting
    from repro.traces import summarize
    from repro.traces.original import original_summary
    from repro.traces.summarize import EventSpill, find_traces, write_summary

    refuse_overwriting([("-o/--output", output)], find_traces(inputs))  # also a trace found in an input directory

    if args.format == "original":
        records = original_summary(inputs, detailed=args.detailed, strict=not args.lenient)
        write_json(output, records)
        print(one_line(f"{output}: {len(records)} traces"))
        return
    group_by = [k for k in args.group_by.split(",") if k]
    if (twice := first_repeated(group_by)) is not None:
        raise ReproError(f"--group-by {args.group_by}: {twice!r} named twice; expected each field once")
    with contextlib.closing(EventSpill(output)) if args.detailed else contextlib.nullcontext() as spill:
        doc = summarize(inputs, group_by=group_by, detailed=args.detailed, strict=not args.lenient,
                        keep=spill and spill.events)
        write_summary(output, doc)
    print(one_line(f"{output}: {len(doc['traces'])} traces, {len(doc['groups'])} groups"))


def _validate(args):
    from repro.traces import validate

    failed = 0
    for path in args.inputs:
        try:
            report = validate(path)
        except ReproError as exc:  # one line per file, as the error lines: a name cannot forge another
            print(one_line(f"INVALID {exc}"), file=sys.stderr)
            failed += 1
        else:
            print(one_line(f"ok {path}: {report['events']} events ({report['form']} form) {json.dumps(report['phases'])}"))
    if failed:
        raise SystemExit(1)


def _download(args):
    from repro.tracestore import download_traces, open_store

    if args.store == "":  # `or` read it as no --store: the receipt's store, unsaid
        raise ReproError("--store '': expected a directory or gs://bucket/prefix, not an empty one (leave --store out "
                         "for the store the receipt names)")
    store = open_store(args.store) if args.store else None
    for entry in download_traces(store, args.receipt, args.output_dir):
        print(one_line(f"{entry['key']}: sha256 {entry['sha256']} verified"))


def _cluster_commands(sub):
    cluster = sub.add_parser("cluster", help="start, check and stop the backend's services")
    csub = cluster.add_subparsers(dest="cluster_command", required=True)
    start = csub.add_parser("start", help="start the backend (idempotent) and write its state JSON")
    where = start.add_mutually_exclusive_group()
    where.add_argument("--config", default="config/config.yaml", help=CONFIG_HELP)
    where.add_argument("--settings", type=settings_argument,
                       help="the cluster settings as JSON, instead of --config (the workflow passes its merged config's)")
    start.add_argument("--state", required=True, help="state JSON to write")
    start.set_defaults(func=_cluster_start, writes={"state": "--state"}, reads=("config",))
    status = csub.add_parser("status", help="run the status checks; exit 1 if any FAILED")
    status.add_argument("--state", required=True)
    status.add_argument("--expect", metavar="DIGEST",
                        help="settings digest the state must have been started with (the workflow passes it)")
    status.add_argument("--calibration", nargs="*", default=[], help="calibration files that must exist")
    status.add_argument("-o", "--output", help="status JSON to write when every check passes")
    status.set_defaults(func=_cluster_status, writes={"output": "-o/--output"}, reads=("state", "calibration"))
    run = csub.add_parser("run", help="run one experiment x mode on the started backend")
    run.add_argument("--state", required=True, help="the backend's state JSON (from cluster start)")
    run.add_argument("--settings", required=True, type=settings_argument,
                     help="the run's settings as JSON (repro.rulesettings.run_settings, as the workflow passes them)")
    run.add_argument("--experiment", required=True)
    run.add_argument("--mode", required=True)
    run.add_argument("--calibration", nargs="+", required=True, help="calibration JSON files")
    run.add_argument("--run-dir", required=True, help="directory for the run's log, metrics and traces")
    run.add_argument("--receipt", required=True, help="upload receipt JSON to write")
    run.set_defaults(func=_cluster_run, writes={"receipt": "--receipt"}, reads=("state", "calibration"))
    stop = csub.add_parser("stop", help="stop what start started, and the model store this directory started")
    stop.add_argument("--state", required=True)
    stop.set_defaults(func=_cluster_stop)


def _read_state(path):
    if not path:
        raise ReproError("--state: expected the cluster state's file name, got ''")
    from repro.fsutil import read_json

    try:
        # bounded and regular files only: a FIFO or /dev/zero as --state neither hangs nor fills the memory
        state = read_json(path, "the cluster state JSON that cluster start writes")
    except ReproError as exc:
        raise ReproError(f"{exc}; run cluster start first") from None
    if not isinstance(state, dict) or not isinstance(state.get("backend"), str):
        raise ReproError(f"{path}: not a cluster state (expected a JSON object with a 'backend'); "
                         "run cluster start first")
    from repro.backends import backend_names, get_backend

    if state["backend"] not in backend_names():
        raise ReproError(f"{path}: backend: unknown backend {state['backend']!r:.60}; expected one of {backend_names()}")
    with _state_keys(path):
        state = get_backend(state["backend"]).bind(state, path)
    try:  # a hand-edited state is checked as the config it was started from was
        _check_backend_section(state, str(path))
    except ReproError as exc:
        raise ReproError(f"{exc}; run cluster start again") from None
    return state


def _check_backend_section(settings, source):
    """The backend's own section of `settings` (a cluster start's --settings, or the state it wrote)
    checked in place as a config's is, its defaults filled in (repro.config.check_ssh_section)."""
    if settings["backend"] == "ssh":
        from repro.config import check_ssh_section

        check_ssh_section(settings["ssh"], source)


@contextlib.contextmanager
def _state_keys(path):
    """A KeyError from a state file is the file's fault: name it."""
    try:
        yield
    except KeyError as exc:
        raise ReproError(f"{path}: cluster state lacks key {exc}; run cluster start first") from None


@settings_keys()
def _cluster_start(args):
    from repro.backends import get_backend, start_cluster
    from repro.config import check_settings, check_trace_store, load_config
    from repro.rulesettings import cluster_settings

    if args.settings is not None:
        settings = check_settings(args.settings, places={"engine": ("pecan", "engine")})
        _check_backend_section(settings, "--settings")
        if isinstance(settings.get("trace_store"), str):  # where it may lie, as the config check says
            check_trace_store(settings["trace_store"], "--settings")
    else:
        settings = cluster_settings(load_config(args.config))
    state = start_cluster(settings, args.state)
    print(get_backend(state["backend"]).describe(state))


def _cluster_status(args):
    from repro.backends import format_checks, get_backend, state_check

    state = _read_state(args.state)
    with _state_keys(args.state):
        checks = get_backend(state["backend"]).status(state, args.calibration)
    checks += _unreadable_calibrations(args.calibration)
    if args.expect is not None:  # an empty digest (`--expect "$UNSET"`) is compared too, never skipped
        checks.insert(0, state_check(state, args.state, args.expect))
    print(format_checks(checks))
    failed = [c["name"] for c in checks if not c["ok"]]
    if failed:
        raise ReproError(f"cluster status: {len(failed)} check(s) FAILED: {'; '.join(failed)}")
    if args.output:
        write_json(args.output, {"backend": state["backend"], "checks": checks})


def _unreadable_calibrations(paths):
    """A failed check for each calibration that is there but that the run could not read (present is
    not enough), and for one named twice (a run refuses it)."""
    from repro.fsutil import first_named_twice
    from repro.pecan.calibration_files import load_calibrations

    twice = first_named_twice(paths or ())
    checks = [] if twice is None else [
        {"name": f"calibration {twice} named once", "ok": False,
         "detail": f"--calibration {twice}: named twice; expected each pipeline's calibration once"}]
    for path in (path for path in paths or () if os.path.isfile(path)):
        try:
            load_calibrations([path])
        except ReproError as exc:
            checks.append({"name": f"calibration {path} readable", "ok": False, "detail": str(exc)})
    return checks


@settings_keys()
def _cluster_run(args):
    from pathlib import Path

    from repro.backends import RunRequest, get_backend
    from repro.config import check_settings

    state = _read_state(args.state)
    check_settings(args.settings)  # config-shaped: a wrong type or an absurd number named by key
    request = RunRequest(settings=args.settings, experiment=args.experiment, mode=args.mode,
                         calibration_paths=tuple(args.calibration), run_dir=Path(args.run_dir),
                         receipt=Path(args.receipt))
    metrics = get_backend(state["backend"]).execute(request, state)
    print(json.dumps({k: metrics[k] for k in ("throughput", "remote_workers", "local_workers", "simulated_seconds",
                                              "wall_s") if k in metrics}))


def _provenance_command(sub):
    prov = sub.add_parser("provenance", help="what produced a figure: inputs with checksums, settings, commit, "
                          "machine and package versions")
    prov.add_argument("inputs", nargs="+", help="the figure and the files it was drawn from")
    prov.add_argument("--settings", required=True, type=settings_argument,
                      help="the settings the figure depends on, as JSON (repro.rulesettings.provenance_settings)")
    prov.add_argument("-o", "--output", required=True, help="provenance JSON to write")
    prov.set_defaults(func=_provenance, writes={"output": "-o/--output"}, reads=("inputs",))


def _provenance(args):
    from repro.provenance import describe_figure

    write_json(args.output, describe_figure(args.inputs, args.settings))


def _cluster_stop(args):
    from pathlib import Path

    from repro.backends import get_backend
    from repro.trims import service

    try:
        if not args.state or Path(args.state).exists():
            state = _read_state(args.state)
            with _state_keys(args.state):
                get_backend(state["backend"]).stop(state)
            print(f"{state['backend']} backend stopped")
        else:  # nothing started there, or stopped already (a second `make clean`); a typo is seen here
            print(f"no cluster state at {args.state}: no backend to stop")
    finally:  # a state that cannot be read (or none) still leaves no model store or engine service running
        if service.stop(states=[Path(args.state).with_name(service.STATE_NAME)] if args.state else ()):
            print("model store stopped")
        if args.state:
            from repro.pecan.engines import stop_services_beside

            for directory, count in stop_services_beside(args.state):
                print(f"engine service in {directory} stopped: {count} process(es)")


def _config_command(sub):
    config = sub.add_parser("config", help="check configuration files before a workflow reads them")
    csub = config.add_subparsers(dest="config_command", required=True)
    check = csub.add_parser("check", help="check --configfile files merged over the base config, as the workflow "
                            "would (a missing file or invalid YAML named with its line)")
    check.add_argument("files", nargs="*", help="the files a workflow gets with --configfile, in that order")
    check.add_argument("--base", default="config/config.yaml", help="the workflow's own config (default %(default)s)")
    check.set_defaults(func=_config_check, reads=("files", "base"))


def _config_check(args):
    from repro.config import check_config_files

    config = check_config_files(args.files, args.base)
    print(one_line(f"{' + '.join([args.base, *args.files])}: ok (backend {config['backend']}, "
                   f"{len(config['pecan']['experiments'])} experiments)"))


def _doctor_command(sub):
    doctor = sub.add_parser("doctor", help="check what a Snakemake profile needs before Snakemake starts with it: "
                            "its plugins (extras), keys that are Snakemake options, the environment variables it "
                            "names, the cluster commands its executor runs, Google credentials")
    doctor.add_argument("--profile", required=True, help="the profile directory, as given to snakemake --profile")
    doctor.set_defaults(func=_doctor)


def _doctor(args):
    from repro.doctor import check_profile

    problems, summary = check_profile(args.profile)
    for problem in problems:
        print(f"repro: error: {one_line(problem)}", file=sys.stderr)
    if problems:
        return 1
    print(summary)


def _list_command(sub):
    from repro.registries import REGISTRIES

    names = sub.add_parser("list", help="the names every registry holds: backends, pipelines, engines, placements, "
                           "presets, distributions, eviction policies, devices, TrIMS figures")
    names.add_argument("registry", nargs="?", choices=list(REGISTRIES), help="one registry's names, one a line")
    names.add_argument("--where", action="store_true", help="also say where each registry lives and what takes its names")
    names.set_defaults(func=_list)


def _list(args):
    from repro.registries import REGISTRIES

    if args.registry and not args.where:
        print("\n".join(REGISTRIES[args.registry].names()))
        return
    for name, registry in REGISTRIES.items():
        if args.registry in (None, name):
            print(f"{name}: {', '.join(registry.names())}")
            if args.where:
                print(f"    {registry.what}; {registry.where}; taken by {', '.join(registry.keys)}")


def _imported_group(module):
    """A command group that `module`'s add_commands adds, imported only when the group is built."""
    return lambda sub: importlib.import_module(module).add_commands(sub)


# the command groups, each added by a function that imports what only its commands need
COMMAND_GROUPS = {"trace": _trace_commands, "cluster": _cluster_commands, "provenance": _provenance_command,
                  "config": _config_command, "doctor": _doctor_command, "list": _list_command,
                  "pecan": _imported_group("repro.pecan.cli"), "trims": _imported_group("repro.trims.cli")}


def build_parser(group=None):
    """The parser of every command; with `group`, a command group's name, of that group alone: a
    command then starts without importing the other groups' modules (pecan's and trims' take a
    tenth of a second)."""
    parser = _Parser(prog="repro", description=__doc__)
    alone = group in COMMAND_GROUPS
    # a group built alone: its usage lines still name them all, as the whole parser's do
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMAND_GROUPS) + "}" if alone else None)
    for name, add in COMMAND_GROUPS.items():
        if not alone or name == group:
            add(sub)
    _name_subcommands(parser)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser, which names an unknown flag given where a subcommand is missing (`repro
    --bogus`), not the missing subcommand: the flag is what the user mistyped. Its subparsers are
    of this class too."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        if message.startswith("the following arguments are required") and self._subparsers is not None:
            flags = self._given[:self._given.index("--")] if "--" in self._given else self._given
            unknown = [a for a in flags if a.startswith("-") and a.split("=")[0] not in self._option_string_actions]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
        super().error(message)


def _name_subcommands(parser):
    """Each command group's usage line and "required" error list its subcommands (argparse names the
    group's dest, `pecan_command`, where no metavar is set); a metavar given (a group built alone) stays."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if action.metavar is None:
            action.metavar = "{" + ",".join(action.choices) + "}"
        for subparser in dict.fromkeys(action.choices.values()):
            _name_subcommands(subparser)


# the directory flags: an empty value would name the working directory, unsaid (`--out "$UNSET"`)
DIRECTORY_FLAGS = {"out": "--out", "state_dir": "--state-dir", "service_dir": "--service-dir", "run_dir": "--run-dir",
                   "base_path": "--base-path", "asset_store": "--asset-store", "scratch": "--scratch", "data": "--data",
                   "output_dir": "-o/--output-dir", "profile": "--profile"}


# the `reads` that are positional arguments: named as argparse's usage names them, not as a flag
POSITIONAL_READS = ("inputs", "logs", "files", "receipt")


def refuse_overwriting_inputs(args):
    """A command's outputs (its parser's `writes`: {dest: flag}) must not be its inputs (`reads`:
    dests of the files it reads): writing one would destroy what it reads. Nor may an output be a
    device, FIFO, socket, symlink or directory: refused before the command runs, not after its work."""
    from repro.fsutil import check_output, not_a_directory, refuse_overwriting

    def paths(dest):
        value = getattr(args, dest, None)
        return [str(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, (str, os.PathLike))]

    for dest, flag in DIRECTORY_FLAGS.items():
        if getattr(args, dest, None) == "":
            raise ReproError(f"{flag} '': expected a directory name, not an empty one")
    for dest in getattr(args, "reads", ()):  # '' is the working directory to Path(): read as an input directory
        if "" in paths(dest):
            name = dest if dest in POSITIONAL_READS else "--" + dest.replace("_", "-")
            raise ReproError(f"{name} '': expected a file name, not an empty one")
    inputs = [path for dest in getattr(args, "reads", ()) for path in paths(dest)]
    outputs = [(flag, path) for dest, flag in getattr(args, "writes", {}).items() for path in paths(dest)]
    refuse_overwriting(outputs, inputs)
    named = set()
    for flag, path in outputs:  # one output written over another: the first one's content lost
        if file_identity(path) in named:
            raise ReproError(f"{flag} {path}: named twice as an output; expected a file of its own for each")
        named.add(file_identity(path))
    for dest, flag in getattr(args, "writes", {}).items():  # after: "is one of the inputs" says more of a link to one
        for path in paths(dest):
            if not path or path.endswith(os.sep):  # Path() would drop the '/' and write a file of the directory's name
                raise ReproError(f"{flag} {path!r}: expected a file name, not {'an empty one' if not path else 'a directory'}")
            if path == "-":  # the usual spelling of standard output, which would be a file named '-'
                raise ReproError(f"{flag} -: expected a file name; '-' is not standard output here (where a command "
                                 "prints to standard output, leave the flag out; ./- names a file '-')")
            check_output(path, f"{flag} {path}")
            blocker = not_a_directory(os.path.dirname(path) or ".")  # before the work, not when it is written
            if blocker is not None:
                raise ReproError(f"{flag} {path}: cannot write: {blocker} is not a directory")


class Terminated(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP, raised where the command is, as Ctrl-C's KeyboardInterrupt is: the same
    clean-up runs (workers stopped, temporary files removed), then the exit status is 128 + signal."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _repeat_ignored(signum, frame):
    """A stop signal after the first, while the clean-up runs."""


@contextlib.contextmanager
def _terminated_as_interrupted():
    """While a command runs: SIGTERM and SIGHUP do what Ctrl-C does. A signal that is ignored (nohup)
    stays ignored; one that comes during an import is raised once the import is over; once one is
    raised, a repeat is ignored until the clean-up is over."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    after_imports = AfterImports()

    def terminated(signum, frame):
        if after_imports.put_off(signum, frame):
            return
        for other in previous:  # a Python handler that does nothing, not SIG_IGN: a signal that came with
            signal.signal(other, _repeat_ignored)  # this one and waits for its handler would be reported
        raise Terminated(signum)  # "ignored due to race condition" by the interpreter

    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN and (signum != signal.SIGINT or handler is signal.default_int_handler):
            previous[signum] = handler
            signal.signal(signum, terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


STANDARD_OUTPUT = "standard output"  # the name an error writing it gives


class _NamedStandardOutput:
    """sys.stdout while a command runs: a write or flush that fails (a full disk, /dev/full, a reader
    gone) raises an OSError naming standard output, where the stream's own names no file."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        with _named_standard_output_error():
            return self._stream.write(text)

    def flush(self):
        with _named_standard_output_error():
            return self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _named_standard_output_error():
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, STANDARD_OUTPUT) from None  # of the same subclass (BrokenPipeError)


@contextlib.contextmanager
def _standard_output_named():
    """sys.stdout named in the errors of writing it while a command runs, and flushed before it ends: a
    write that fails is the command's error, not an 'Exception ignored' at exit with status 120."""
    stream = sys.stdout
    sys.stdout = _NamedStandardOutput(stream)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stream


def open_closed_standard_streams():
    """Each standard stream the shell closed (`>&-`) opened on /dev/null. Left closed, the next file
    opened would take its number, and a child's output, or a write to sys.stdout, would go into that
    file. What is written to a closed stream is discarded, as Python's print does where sys.stdout
    is None."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, mode, closefd=False))


def run(args, prog="repro", spell=str):
    """Run a parsed command line; errors a user can cause become one line and exit status 1.
    `spell` rewrites an error message (trims-tools names its own flags)."""
    open_closed_standard_streams()
    try:
        with _terminated_as_interrupted(), _standard_output_named():
            refuse_overwriting_inputs(args)
            code = args.func(args)  # a command returns its exit code, or None for success
    except ReproError as exc:
        print(f"{prog}: error: {one_line(spell(str(exc)))}", file=sys.stderr)
        return 1
    except OSError as exc:  # a file the user named: missing, unreadable, a directory, a full disk
        if isinstance(exc, BrokenPipeError) and _stdout_reader_gone():
            # `repro ... | head`: the reader has what it wanted; end quietly, as a tool SIGPIPE ends does
            _discard_standard_output()
            return 128 + signal.SIGPIPE
        if exc.filename == STANDARD_OUTPUT:  # what is left in its buffer cannot be written either
            _discard_standard_output()
        print(f"{prog}: error: {one_line(_os_error(exc))}", file=sys.stderr)
        return 1
    except MemoryError:  # the machine's memory, or the process's limit (ulimit -v), is what is short
        print(f"{prog}: error: out of memory{_memory_limit()}; expected the command to have more memory to use",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: cleaned up on the way out; 128 + signal, as shells do
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"{prog}: interrupted" if signum == signal.SIGINT else f"{prog}: terminated ({signal.Signals(signum).name})",
              file=sys.stderr)
        return 128 + signum
    return code or 0


def _memory_limit():
    """The process's address-space limit as the out-of-memory error names it, or nothing where unlimited."""
    import resource

    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "" if limit == resource.RLIM_INFINITY else f" (this process may use {limit >> 20} MiB: ulimit -v)"


def _discard_standard_output():
    """Standard output made /dev/null: the flush at exit writes nowhere (it would fail again, an
    'Exception ignored' and exit status 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _stdout_reader_gone():
    """Whether standard output is a pipe whose reader has closed it (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's captured output)
        return False


def _os_error(exc):
    # a rename's error names the file it renames over, the user's: the other is a temporary one, removed by now
    filename = exc.filename if exc.filename2 is None else exc.filename2
    if filename is None:
        return exc.strerror or str(exc)
    if isinstance(exc, FileExistsError):
        return f"{filename}: exists and is not a directory"
    return f"{filename}: {exc.strerror}"

