"""`repro trims ...`: models, server, client run / compare; and the steps the workflow's rules run:
store start / status, fetch, experiment compare / distribution, summary, plot.

Defaults come from the `micro18` section of ~/.carml_config.yml (or --config FILE), as in the
original tools; flags override them. Keys: base_path, server_socket, server_eviction,
server_memory_fraction, device, profile_output_directory, base_bucket_url and upload_bucket_name
(where --trace-upload puts traces), and the original's keys that have no meaning here
(repro.trims.carml_config), reported once. `~` and `$NAME` in paths are expanded. The default
socket lies in a directory only this user can enter (repro.processes.private_directory).
"""

import argparse
import contextlib
import itertools
import json
import math
import os
import socket
import sys
import time
import uuid
from pathlib import Path, PurePath

import yaml

from repro.errors import ReproError, invalid_yaml, printable
from repro.fsutil import (OWN_DIRECTORY_MARK, check_fresh_directory, first_repeated, fresh_directory, refuse_inside,
                          removed_unless_done)
from repro.settings import figure_file, settings_argument, settings_keys, utf8_text
from repro.trims.eviction import POLICIES, POLICY_ALIASES
from repro.trims.figures import FIGURES
from repro.trims.modelstore import DEVICE_CHOICES
from repro.trims.workload import DISTRIBUTIONS

DEFAULTS = {
    "base_path": "results/trims/models",
    "server_socket": None,  # <private directory>/trims.sock
    "server_eviction": "lru",
    "server_memory_fraction": 0.5,
    "device": "auto",
    "profile_output_directory": "results/trims/profiles",
    "base_bucket_url": None,  # a directory or gs://bucket/prefix
    "upload_bucket_name": "traces",
    "server_info_path": None,  # the server's settings and counters as JSON (trims-tools: ~/.micro18_server.json)
}
_reported_unused = set()  # config files whose ignored keys were already reported


# the names `trims-tools info config` prints for settings whose key in the micro18 section differs
PRINTED_NAMES = {"serverinfopath": "server_info_path", "uprenabled": "upr_enabled"}


def _misplaced(document):
    """{top-level key: its name under micro18} for the settings a tool config holds outside its micro18
    section: bare (`base_path:`), or as `trims-tools info config` prints them (`micro18.base_path:`,
    `serverinfopath:`), which a copy of that output would hold."""
    found = {}
    for key in document:
        name = key.removeprefix("micro18.") if isinstance(key, str) else key
        name = PRINTED_NAMES.get(name, name)
        if name in DEFAULTS or (isinstance(key, str) and key.startswith("micro18.")):
            found[key] = name
    return found


def load_tool_config(path, defaults=None):
    """The micro18 section of the tool config, over the defaults (DEFAULTS unless given)."""
    explicit = path is not None
    path = Path(path) if explicit else Path.home() / ".carml_config.yml"
    config = dict(DEFAULTS if defaults is None else defaults)
    if not path.exists():
        if explicit:
            raise ReproError(f"--config: {path} does not exist")
        return config
    try:
        document = _read_yaml(path) or {}
    except OSError as exc:
        raise ReproError(f"{path}: cannot read tool config ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ReproError(f"{path}: not a text file (expected YAML)") from None
    except yaml.YAMLError as exc:
        raise invalid_yaml(path, exc) from None
    section = (document.get("micro18") or {}) if isinstance(document, dict) else None
    if not isinstance(section, dict):
        raise ReproError(f"{path}: expected a mapping with a 'micro18' mapping of settings")
    misplaced = _misplaced(document)  # other top-level sections are other tools'; these are not
    if misplaced:
        names = ", ".join(misplaced[key] for key in sorted(misplaced) if misplaced[key] != key)
        raise ReproError(f"{path}: {sorted(misplaced)} at the top level; expected them under 'micro18:'"
                         + (f" (as {names})" if names else "") + ", where the tools read their settings")
    from repro.trims.carml_config import UNUSED_KEYS

    unknown = sorted(set(section) - set(DEFAULTS) - set(UNUSED_KEYS))
    if unknown:
        raise ReproError(f"{path}: unknown micro18 keys {unknown}; expected some of {sorted(DEFAULTS)} "
                         f"(or the original tools' {sorted(UNUSED_KEYS)})")
    unused = sorted(set(section) & set(UNUSED_KEYS))
    others = sorted(_key_name(key) for key in document if key != "micro18")  # a typo reads as another tool's section
    if (unused or others) and str(path) not in _reported_unused:
        _reported_unused.add(str(path))
        if unused:
            print(f"note: {path}: micro18 keys with no meaning here, ignored: {', '.join(unused)}", file=sys.stderr)
        if others:
            names = ", ".join(others)
            print(f"note: {path}: top-level sections other than micro18 are not read here (other tools' "
                  f"settings), ignored: {names if len(names) <= 200 else names[:200] + '...'}", file=sys.stderr)
    # an empty value means the default, as in the original
    config.update({k: v for k, v in section.items() if k not in UNUSED_KEYS and v not in (None, "")})
    _expand_paths(config, path)
    _check_values(config, path)
    return config


def _key_name(key):
    """A YAML key as a note names it on one line: as written where it is printable text, else escaped."""
    if isinstance(key, str):
        return key if key.isprintable() else ascii(key)
    return json.dumps(key) if isinstance(key, (int, float, bool)) or key is None else ascii(key)


def _read_yaml(path):
    """The one place the tool config is parsed: bounded in size, nesting and aliases, regular files only."""
    from repro.yamlfile import read_yaml_file

    return read_yaml_file(path, "the YAML tool config", max_bytes=1 << 20)


def _check_values(config, path):
    """Refuse micro18 values of the wrong kind, naming the key, before any command uses them."""
    import math

    def bad(key, expected):
        return ReproError(f"{path}: micro18.{key}: expected {expected}, got {config[key]!r}"[:400])

    fraction = config["server_memory_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
            math.isfinite(fraction) and 0 < fraction <= 1):
        raise bad("server_memory_fraction", "a fraction in (0, 1]")
    policies = [*POLICIES, *POLICY_ALIASES]
    if config["server_eviction"] not in policies:
        raise bad("server_eviction", f"one of {policies}")
    if config["device"] not in DEVICE_CHOICES:
        raise bad("device", f"one of {', '.join(DEVICE_CHOICES)}")
    bucket = config["upload_bucket_name"]
    if not isinstance(bucket, str) or not bucket or PurePath(bucket).is_absolute() or ".." in PurePath(bucket).parts \
            or "\0" in bucket:
        raise bad("upload_bucket_name", "a relative name without '..' (a prefix inside base_bucket_url)")


def _expand_paths(config, path):
    from repro.fsutil import expand_path
    from repro.trims.carml_config import EXPANDED_KEYS

    for key in EXPANDED_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or "\0" in value:
            raise ReproError(f"{path}: micro18.{key}: expected a path (a string without NUL bytes), got {value!r}"[:400])
        config[key] = expand_path(value, f"micro18.{key}", str(path))


def add_commands(sub):
    trims = sub.add_parser("trims", help="TrIMS model sharing: models, model store server, clients")
    tsub = trims.add_subparsers(dest="trims_command", required=True)

    models = tsub.add_parser("models", help="generate model files (graph + model.params + checksums)")
    models.add_argument("models", nargs="+", help="model names")
    models.add_argument("--base-path", help="directory to write <model>/ into")
    models.add_argument("--seed", type=int, default=0)
    models.add_argument("--publish", metavar="GS_URL", help="also upload them to a GCS asset store (gs://bucket/prefix)")
    models.add_argument("--config", help="tool config (default ~/.carml_config.yml)")
    models.set_defaults(func=_models)

    server = tsub.add_parser("server", help="the model store server")
    ssub = server.add_subparsers(dest="server_command", required=True)
    run = ssub.add_parser("run", help="run the server (in the foreground, or -d to daemonise)")
    _server_flags(run)
    run.add_argument("-d", "--daemon", action="store_true", help="start in the background and return once it answers")
    run.add_argument("--pid-file", help="write the server's pid here")
    run.add_argument("--log-file", default="trims-server.log", help="the daemon's output (with -d)")
    run.add_argument("--persist-cpu-mb", type=int, default=0,
                     help="a host-memory tier of this many MiB: evicted models stay there and come back without "
                     "reading their file (TrIMS's persist_cpu; default 0: none)")
    run.add_argument("--info-file", help="write the server's settings and counters here as JSON, at start and at "
                     "stop (the original's ~/.micro18_server.json; default: the tool config's server_info_path, if set)")
    run.add_argument("--profile", metavar="DIR", help="write the server's own trace (acquisitions and evictions) "
                     "to DIR/server_<id>.json when it stops")
    run.set_defaults(func=_server_run, writes={"pid_file": "--pid-file", "info_file": "--info-file"})
    stop = ssub.add_parser("stop", help="ask the server to shut down")
    stop.add_argument("--socket")
    stop.add_argument("--config")
    stop.set_defaults(func=_server_stop)
    status = ssub.add_parser("status", help="print the server's resident models and memory")
    status.add_argument("--socket")
    status.add_argument("--config")
    status.set_defaults(func=_server_status)

    client = tsub.add_parser("client", help="inference clients")
    csub = client.add_subparsers(dest="client_command", required=True)
    for name, func, text in (("run", _client_run, "run inference requests"),
                             ("compare", _client_compare, "original, then shared, with the same flags")):
        parser = csub.add_parser(name, help=text)
        _client_flags(parser)
        parser.set_defaults(func=func, writes={"results": "--results"}, reads=("config",))
    compare = csub.choices["compare"]
    compare.add_argument("--run-original", action=argparse.BooleanOptionalAction, default=True,
                         help="run the original mode first (default: on)")
    compare.add_argument("--combine", action=argparse.BooleanOptionalAction, default=True,
                         help="combine each model's traces into compared-<model>.json (default: on)")
    compare.add_argument("--combined-all", action="store_true",
                         help="combine every model's traces into one compared-all.json instead")

    memory = tsub.add_parser("memory", help="memory a model needs: parameter and activation bytes (per layer), "
                             "and what a running store holds for it")
    memory.add_argument("models", nargs="+", help="model names (under the base path)")
    memory.add_argument("-f", "--format", default="table", help="table, csv, tsv or cpp (default: table)")
    memory.add_argument("--layers", action="store_true", help="one row per layer as well")
    memory.add_argument("--measure", action=argparse.BooleanOptionalAction, default=True,
                        help="measure RSS and PSS growth around session creation and the first inference, in a "
                        "process per model (default: on); the computed figures are reported either way")
    memory.add_argument("--base-path")
    memory.add_argument("--socket")
    memory.add_argument("--config", help="tool config (default ~/.carml_config.yml)")
    memory.set_defaults(func=_memory)

    config = tsub.add_parser("config", help="print the effective tool config (YAML)")
    config.add_argument("--config", help="tool config (default ~/.carml_config.yml)")
    config.set_defaults(func=_print_config)
    _workflow_commands(tsub)


def _workflow_commands(tsub):
    """The steps the workflow's rules run, with the settings the rules pass as JSON."""
    store = tsub.add_parser("store", help="the model store the workflow's TrIMS runs share")
    stsub = store.add_subparsers(dest="store_command", required=True)
    start = stsub.add_parser("start", help="start it with these settings unless it already runs with them")
    start.add_argument("--settings", required=True, type=settings_argument,
                       help="base_path and server settings as JSON (repro.rulesettings.trims_store_settings)")
    start.add_argument("--state", required=True, help="state JSON to write")
    start.set_defaults(func=_store_start, writes={"state": "--state"})
    stop = stsub.add_parser("stop", help="stop the store this working directory started, if it runs (as "
                            "snakemake cluster_stop does)")
    stop.set_defaults(func=_store_stop)
    status = stsub.add_parser("status", help="check it runs, with the expected settings; exit 1 if not")
    status.add_argument("--state", required=True, help="the state JSON store start wrote")
    status.add_argument("--expect", required=True, metavar="DIGEST", help="digest of the settings it must run with")
    status.add_argument("-o", "--output", required=True, help="status JSON to write when every check passes")
    status.set_defaults(func=_store_status, writes={"output": "-o/--output"}, reads=("state",))

    fetch = tsub.add_parser("fetch", help="copy a model from an asset store into the base path, checksums verified")
    fetch.add_argument("model")
    fetch.add_argument("--asset-store", required=True, help="a directory or gs://bucket/prefix")
    fetch.add_argument("--base-path", required=True, help="directory to copy <model>/ into")
    fetch.set_defaults(func=_fetch)

    exp = tsub.add_parser("experiment", help="a TrIMS experiment's clients against the running model store")
    esub = exp.add_subparsers(dest="experiment_command", required=True)
    compare = esub.add_parser("compare", help="one model, original then shared")
    compare.add_argument("model")
    dist = esub.add_parser("distribution", help="requests drawn from a distribution over the models")
    dist.add_argument("distribution")
    dist.add_argument("--params", required=True, nargs="+", type=float, help="the distribution's parameters")
    dist.add_argument("--concurrency", required=True, type=int, help="requests in flight")
    dist.add_argument("--models", required=True, nargs="+", help="the models to draw from")
    for parser, func in ((compare, _experiment_compare), (dist, _experiment_distribution)):
        parser.add_argument("--store", required=True, help="the running store's state JSON")
        parser.add_argument("--settings", required=True, type=settings_argument,
                            help="client settings as JSON (repro.rulesettings.trims_client_settings)")
        parser.add_argument("--out", required=True, help="directory for the report and traces")
        parser.set_defaults(func=func, reads=("store",))

    summ = tsub.add_parser("summary", help="the tables the TrIMS figures show, from the experiments' reports")
    summ.add_argument("--compare", nargs="+", required=True, help="compare reports (report.json)")
    summ.add_argument("--distributions", nargs="+", required=True, help="distribution reports (report.json)")
    summ.add_argument("-o", "--output", required=True, help="summary JSON to write")
    summ.set_defaults(func=_summary, writes={"output": "-o/--output"}, reads=("compare", "distributions"))

    plot = tsub.add_parser("plot", help="a TrIMS figure from the summary")
    plot.add_argument("figure", choices=list(FIGURES))
    plot.add_argument("--summary", required=True, help="the summary JSON (trims summary)")
    plot.add_argument("--style", required=True, type=settings_argument, help="plots.style as JSON")
    plot.add_argument("--output", nargs=2, required=True, type=figure_file, metavar=("PDF", "PNG"),
                        help="the figure files")
    plot.set_defaults(func=_plot, writes={"output": "--output"}, reads=("summary",))


def _store_state(path):
    """The state `trims store start` wrote, or one line naming the file."""
    from repro.fsutil import read_json

    try:
        state = read_json(path, "the model store state JSON that trims store start writes")
    except ReproError as exc:
        raise ReproError(f"{exc}; run trims store start first") from None
    if not isinstance(state, dict) or not {"base_path", "socket"} <= set(state):
        raise ReproError(f"{path}: not a model store state (expected a JSON object with base_path and socket); "
                         "run trims store start first")
    return state


@settings_keys()
def _store_start(args):
    from repro.config import check_settings
    from repro.trims import service

    settings = check_settings(args.settings, places=service.SETTINGS_PLACES)
    record = service.start(settings, args.state)
    print(f"model store pid {record['process']['pid']} on {record['socket']}"
          + (" (found running)" if record.get("reused") else ""))


def _store_stop(args):
    from repro.trims import service

    print("model store stopped" if service.stop() else "no model store of this directory was running")


def _store_status(args):
    from repro.config import check_settings
    from repro.backends import format_checks
    from repro.fsutil import write_json
    from repro.trims import service

    state = _store_state(args.state)
    if state.get("digest") == args.expect:  # started with these settings: running again if it stopped
        state = service.ensure(args.state, check_settings)
    checks = service.status(state, args.expect)
    print(format_checks(checks))
    failed = [c["name"] for c in checks if not c["ok"]]
    if failed:
        raise ReproError(f"model store status: {len(failed)} check(s) FAILED: {'; '.join(failed)}")
    write_json(args.output, {"checks": checks})


def _fetch(args):
    from repro.trims.experiments import fetch_model

    manifest = fetch_model(args.asset_store, args.model, args.base_path)
    print(f"{manifest['model']}: {manifest['params_bytes']} bytes of weights, checksums verified")


def _client_settings(settings, experiment):
    """The client settings a TrIMS experiment is given (repro.rulesettings.trims_client_settings), each value
    checked where the config holds it, before the store is started for them."""
    from repro.config import check_settings

    places = {key: ("trims", "client", key) for key in ("eager", "eager_async", "cold_cache")}
    places.update(seed=("trims", "seed"), server=("trims", "server"), iterations=("trims", experiment, "iterations"))
    check_settings(settings, places=places)
    from repro.trims.service import SERVER_KEYS

    missing = [key for key in places if key not in settings]
    missing += [f"server.{key}" for key in SERVER_KEYS if not missing and key not in settings["server"]]
    if missing:
        raise ReproError(f"--settings: lacks key {missing[0]!r} (expected the settings the workflow passes; "
                         "see repro.rulesettings.trims_client_settings)")
    return settings


MAX_CONCURRENCY, MAX_PARAMETER = 1024, 1e6  # as the config schema bounds trims.distributions


def _experiment_compare(args):
    from repro.config import check_settings
    from repro.trims import service
    from repro.trims.client import TRACE_FILES, holds_run_file
    from repro.trims.experiments import check_report_replaceable, compare_trace_directories, run_compare
    from repro.trims.models import check_model_name

    _store_state(args.store)  # a state that is no state named first, as it would be without these checks
    settings = _client_settings(args.settings, "compare")
    check_model_name(args.model)
    for directory in compare_trace_directories(args.out):
        check_fresh_directory(directory, "--out", TRACE_FILES, holds_run_file)
    check_report_replaceable(args.out)
    store = service.ensure(args.store, check_settings)  # started again if it no longer runs (a killed run, cluster_stop)
    run_compare(args.model, settings, store["base_path"], store["socket"], Path(args.out))
    print(f"wrote {Path(args.out) / 'report.json'}")


def _experiment_distribution(args):
    from repro.config import check_settings
    from repro.trims import service
    from repro.trims.client import TRACE_FILES, holds_run_file
    from repro.trims.experiments import check_report_replaceable, run_distribution
    from repro.trims.models import check_model_name
    from repro.trims.workload import check_params

    _store_state(args.store)
    settings = _client_settings(args.settings, "distributions")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise ReproError(f"--concurrency: expected 1 to {MAX_CONCURRENCY} clients, got {str(args.concurrency)[:40]}")
    if not all(math.isfinite(p) and abs(p) <= MAX_PARAMETER for p in args.params):
        raise ReproError(f"--params: expected finite numbers from -{MAX_PARAMETER:g} to {MAX_PARAMETER:g}, got {args.params}")
    for model in args.models:
        check_model_name(model)
    try:  # before --out is made and the store started for nothing; named as this command's arguments
        check_params(args.distribution, args.params)
    except ReproError as exc:
        raise ReproError(str(exc).replace("--distribution-params", "--params").replace("--distribution", "distribution")) \
            from None
    check_fresh_directory(Path(args.out) / "traces", "--out", TRACE_FILES, holds_run_file)
    check_report_replaceable(args.out)
    store = service.ensure(args.store, check_settings)  # started again if it no longer runs (a killed run, cluster_stop)
    run_distribution(args.distribution, args.params, args.concurrency, settings, args.models,
                     store["base_path"], store["socket"], Path(args.out))
    print(f"wrote {Path(args.out) / 'report.json'}")


def _summary(args):
    from repro.fsutil import write_json
    from repro.trims.experiments import summary

    write_json(args.output, summary(args.compare, args.distributions))


def _plot(args):
    from repro.config import check_style
    from repro.plots import plot_trims

    from repro.trims.figures import read_summary

    plot_trims(args.figure, read_summary(args.summary, args.figure), args.output, check_style(args.style))


def _server_flags(parser):
    parser.add_argument("--socket", help="Unix socket path")
    parser.add_argument("--base-path", help="directory holding <model>/model.params")
    parser.add_argument("--memory-fraction", type=float,
                        help="share of RAM (of GPU memory with --device gpu) the store may use, in (0, 1]")
    parser.add_argument("--memory-mb", type=int, help="the store's budget in MiB (instead of --memory-fraction)")
    parser.add_argument("--eviction", choices=[*POLICIES, *POLICY_ALIASES],
                        help="eviction policy (never: a model that does not fit fails; flush, all: evict every "
                        "unused model at once; lcu: lfu)")
    _device_flag(parser, "where the store keeps models")
    parser.add_argument("--config", help="tool config (default ~/.carml_config.yml)")


def _client_flags(parser):
    parser.add_argument("--model", nargs="+", dest="models", help="models to pick from (default: every model under the base path)")
    parser.add_argument("--distribution", choices=list(DISTRIBUTIONS))
    parser.add_argument("--distribution-params", nargs="+", type=float, help="the distribution's parameters")
    parser.add_argument("--iterations", type=int, default=1, help="requests (per model when no distribution)")
    parser.add_argument("--model-iterations", type=int, default=-1, help="at most this many requests per model (-1: no cap)")
    parser.add_argument("--concurrent", type=int, default=1, help="requests in flight")
    parser.add_argument("--process-per-request", action="store_true",
                        help="run each request in a process of its own, as the original client did (default: threads)")
    parser.add_argument("--eager", action="store_true", help="initialise the runtime before the timed request")
    parser.add_argument("--eager-async", action="store_true", help="initialise it in the background, overlapped with input preparation")
    parser.add_argument("--original", action="store_true", help="no sharing: load the model from its file")
    parser.add_argument("--cold-cache", action="store_true", help="evict model files from the page cache before original requests")
    parser.add_argument("--profile-output", help="the run's trace directory, a relative name under <profile dir>/<hostname>/ "
                        "(default: the hour, or a fresh -N variant of it); an earlier run's is kept unless overwritten")
    parser.add_argument("--profile-output-overwrite", action="store_true",
                        help="replace an earlier run's traces in that directory")
    parser.add_argument("--experiment-description", default="", type=utf8_text, help="recorded in every trace")
    parser.add_argument("--trace-names", choices=["repro", "original"], default="repro",
                        help="repro: <mode>/<model>/<mode>-<n>.json; original: the original tools' "
                        "[upr_]<model>_<uuid>.json in the run directory, with combined-<uuid>.json (default: repro)")
    parser.add_argument("--monitor-memory", action="store_true", help="sample GPU (NVML) and store memory every 50 ms")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--simulate", action="store_true",
                        help="check everything and print the planned requests, but run and write nothing")
    _device_flag(parser, "where inference runs (must be the GPU when the store keeps models there)")
    parser.add_argument("--results", help="write per-request results as JSON here")
    parser.add_argument("--trace-upload", action="store_true",
                        help="also put the run's traces in the store at base_bucket_url (a directory or gs://), "
                        "under <upload_bucket_name>/<run directory name>/")
    parser.add_argument("--base-path")
    parser.add_argument("--socket")
    parser.add_argument("--config", help="tool config (default ~/.carml_config.yml)")


def _device_flag(parser, what):
    parser.add_argument("--device", choices=DEVICE_CHOICES,
                        help=f"{what} (auto: the GPU when an NVIDIA device and PyTorch with CUDA are present)")


def tool_config(args):
    """The tool config for a parsed command line; `args.tool_defaults` (set by trims-tools) replaces DEFAULTS."""
    return load_tool_config(getattr(args, "config", None), getattr(args, "tool_defaults", None))


def _setting(args, flag, key):
    config = tool_config(args)
    value = getattr(args, flag, None)
    return config[key] if value is None else value


def _socket(args):
    from repro.trims.server import default_socket_path

    return Path(_setting(args, "socket", "server_socket") or default_socket_path())


def _models(args):
    from repro.trims.models import generate

    base = Path(_setting(args, "base_path", "base_path"))
    if not 0 <= args.seed < 2**32:
        raise ReproError(f"--seed: expected a whole number from 0 to {2**32 - 1}, got {args.seed}")
    store = None
    if args.publish:  # before any model is built: a malformed URL or missing credentials are named first
        from repro.tracestore import GCSStore

        if not args.publish.startswith("gs://"):  # GCSStore would name it a trace store
            raise ReproError(f"--publish {args.publish!r}: expected gs://bucket[/prefix] (a GCS asset store)")
        store = GCSStore(args.publish, what="asset store (--publish)")
    if (twice := first_repeated(args.models)) is not None:
        raise ReproError(f"model {twice!r} named twice; expected each model once")
    for name in args.models:
        current = _current_model(base / name, name, args.seed)
        if current is not None:  # already there, checksums matching: nothing to rebuild (download is idempotent)
            print(f"{base / name}: up to date ({current['params_bytes'] / 1e6:.1f} MB of weights, checksums match)")
        else:
            manifest = generate(name, base / name, seed=args.seed)
            print(f"{base / name}: {manifest['params_bytes'] / 1e6:.1f} MB of weights")
        if store is not None:  # an up-to-date model too: publishing what was built earlier is what --publish is for
            from repro.trims.experiments import publish_model

            publish_model(base / name, store)
            print(f"  published to {args.publish}/{name}/")


def _current_model(directory, name, seed):
    """The manifest of the model in `directory` when it is `name` built with `seed` and every file's
    checksum matches; None when it has to be built."""
    from repro.trims.models import load_manifest

    if not (directory / "manifest.json").is_file():
        return None
    try:
        manifest = load_manifest(directory, verify=True)
    except (ReproError, OSError):
        return None
    return manifest if manifest["model"] == name and manifest.get("seed") == seed else None


def _server_run(args):
    from repro.trims.device import resolve_device
    from repro.trims.server import budget_bytes, serve, start_daemon, tier_bytes

    socket_path = _socket(args)
    base = _setting(args, "base_path", "base_path")
    fraction = _setting(args, "memory_fraction", "server_memory_fraction")
    policy = _setting(args, "eviction", "server_eviction")
    device = resolve_device(_setting(args, "device", "device"))
    budget = budget_bytes(fraction, args.memory_mb, device)
    persist = tier_bytes(args.persist_cpu_mb)
    where = f"{policy}, budget {budget >> 20} MiB of {device} memory" + (
        f", host tier {args.persist_cpu_mb} MiB" if persist else "")
    info = _setting(args, "info_file", "server_info_path")
    if args.daemon:
        pid_file = args.pid_file or str(Path(socket_path).with_suffix(".pid"))
        pid = start_daemon(socket_path, base, budget, policy, pid_file, args.log_file, device, persist, info, args.profile)
        print(f"model store server pid {pid} on {socket_path} ({where})")
        return
    # announced once it listens: a socket, pid file or info file refused is then the only line
    serve(socket_path, base, budget, policy, pid_file=args.pid_file, device=device, persist_bytes=persist,
          info_file=info, profile_dir=args.profile,
          ready=lambda: print(f"model store server on {socket_path} ({where})", flush=True))


STOP_WAIT_S = 30  # for a stopped server to remove its segments and exit


def _server_stop(args):
    from repro.processes import describe, matches
    from repro.trims.server import StoreConnection
    from repro.trims.modelstore import remove_stale_segments, segment_prefix

    socket_path = _socket(args)
    try:
        connection = StoreConnection(socket_path, timeout=10)
    except ReproError as exc:
        removed = remove_stale_segments(segment_prefix(socket_path))
        if removed:
            raise ReproError(f"{exc}; removed {len(removed)} shared memory segment(s) a killed server left") from None
        raise
    pid = connection.status()["pid"]
    try:
        server = describe(pid, "model store server")
    except (ProcessLookupError, TypeError, ValueError):  # it answers from elsewhere (another namespace)
        server = None
    connection.request({"op": "shutdown"})
    deadline = time.monotonic() + STOP_WAIT_S
    while server is not None and matches(server) and time.monotonic() < deadline:
        time.sleep(0.05)  # the command ends once the server has: `trims-tools run` returned with it still running
    print("model store server stopping" if server is not None and matches(server) else "model store server stopped")


def _server_status(args):
    from repro.trims.server import StoreConnection

    print(json.dumps(StoreConnection(_socket(args), timeout=10).status(), indent=2))


def profile_directory(root, name, overwrite, share_hour=False):
    """The run's own trace directory, <root>/<hostname>/<name>, created empty.

    `name` must be a relative path without '..' (the directory is the only thing overwrite may
    delete). An existing non-empty directory is replaced only with overwrite; without a name
    the directory is named after the hour, with -2, -3, ... when an earlier run has it, unless
    `share_hour` (the original's trace names, unique per request): then the hour's runs share it,
    as in the original.
    """
    from repro.trims.client import RUN_FILES, holds_run_file

    directory, shared_hour = check_profile_directory(root, name, overwrite, share_hour)
    if shared_hour:
        directory.mkdir(parents=True, exist_ok=True)
        return directory
    # an earlier run's removed, this one's made and marked
    return fresh_directory(directory, "--profile-output", RUN_FILES, holds_run_file)


def check_profile_directory(root, name, overwrite, share_hour=False):
    """Where profile_directory would put the run's traces, and whether that is the hour's shared
    directory; refuse as it would, without creating or removing anything (a client checks this
    before it asks the model store, so a bad --profile-output is named whatever the store does)."""
    host = Path(root) / socket.gethostname()
    if name is None and share_hour:
        directory = host / time.strftime("%Y-%m-%d-%H")
        if directory.is_symlink() or directory.exists() and not directory.is_dir():
            raise ReproError(f"{directory}: exists and is not a directory (the hour's trace directory)")
        return directory, True
    if name is None:
        stem = time.strftime("%Y-%m-%d-%H")
        candidates = (stem if n == 1 else f"{stem}-{n}" for n in itertools.count(1))
        name = next(c for c in candidates if not (host / c).exists() or not any((host / c).iterdir()))
    if not printable(name):  # a line break would split every message naming it; other bytes fit no trace
        raise ReproError(f"--profile-output {ascii(name)}: expected a name of UTF-8 text without line breaks or other "
                         "control characters")
    parts = PurePath(name).parts
    if not parts or PurePath(name).is_absolute() or ".." in parts:
        raise ReproError(f"--profile-output {name!r}: expected a relative name (no '..') for a directory under {host}")
    directory = host / name
    if directory.is_symlink() or directory.exists() and not directory.resolve().is_relative_to(host.resolve()):
        raise ReproError(f"--profile-output {name!r}: {directory} leads outside {host}")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        if (directory / OWN_DIRECTORY_MARK).is_file() and not overwrite:
            raise ReproError(f"{directory}: holds an earlier run's traces; pass --profile-output-overwrite to "
                             "replace them, or choose another --profile-output")
        if not (directory / OWN_DIRECTORY_MARK).is_file():  # the user's files: overwrite replaced them too
            raise ReproError(f"--profile-output {name!r}: {directory} holds files no run of this client made; "
                             "--profile-output-overwrite replaces only a directory a run made: remove it or choose "
                             "another --profile-output")
    return directory, False


MAX_CONCURRENT = 1024  # requests in flight: threads (or processes) of this client
MAX_ITERATIONS = 1_000_000  # requests a run plans (the plan is a list in memory)
MAX_SEED = 2**63 - 1  # numpy's seeds are non-negative


def check_client_flags(concurrent, iterations, model_iterations, seed=0, distribution=None, distribution_params=None):
    """Refuse client flags out of range, naming the flag, before anything runs: before the model
    directory is read too, so a bad flag is its own error wherever the models are (trims-tools
    checks its flags with this before it lists the models)."""
    from repro.trims.workload import check_params

    checks = [("--concurrent", concurrent, 1, MAX_CONCURRENT), ("--iterations", iterations, 1, MAX_ITERATIONS),
              ("--seed", seed, 0, MAX_SEED)]
    for flag, value, low, high in checks:
        if not low <= value <= high:
            raise ReproError(f"{flag}: expected a whole number from {low} to {high}, got {value}")
    if model_iterations != -1 and not 1 <= model_iterations <= MAX_ITERATIONS:
        raise ReproError(f"--model-iterations: expected at least 1 request per model (at most {MAX_ITERATIONS}), "
                         f"or -1 for no cap; got {model_iterations}")
    if distribution is not None:
        check_params(distribution, distribution_params)


REQUEST_PROCESS_MB = 170  # a request's own process (--process-per-request): interpreter and onnxruntime, measured


def check_client_memory(concurrent, params_bytes, own_copies, processes, meminfo="/proc/meminfo"):
    """A ReproError naming --concurrent where that many requests at once would need more memory than
    the machine has available: each its own copy of the weights where `own_copies` (the original
    client's way; `params_bytes`: of each model the requests use), each its own process where `processes`."""
    from repro.machine import available_memory_mb

    each_mb = (max(params_bytes) >> 20 if own_copies else 0) + (REQUEST_PROCESS_MB if processes else 0)
    available_mb = available_memory_mb(meminfo)
    if available_mb is not None and concurrent * each_mb > available_mb:
        raise ReproError(f"--concurrent {concurrent}: {concurrent} requests at once need about {concurrent * each_mb} MB "
                         f"({each_mb} MB each: {'its own copy of the weights' if own_copies else ''}"
                         f"{', ' if own_copies and processes else ''}{'its own process' if processes else ''}); "
                         f"{available_mb} MB available (MemAvailable); expected at most {available_mb // each_mb}")


def _check_store_answers(socket_path, device):
    """Refuse, before a shared (UPR) run starts, when no model store answers on `socket_path`, or when
    it keeps its models on the GPU and the client runs on the CPU: the original client refused too."""
    from repro.trims.server import StoreConnection

    connection = StoreConnection(socket_path, timeout=10)
    try:
        status = connection.status()
    finally:
        connection.close()
    if status.get("device") == "gpu" and device != "gpu":
        raise ReproError(f"the model store on {socket_path} holds its models in GPU memory; run the client with "
                         "--device gpu")
    return status


def check_upload_target(config):
    """Refuse --trace-upload before the run when base_bucket_url is no trace store this client can reach:
    unset, an http(s) or s3 URL (the original's default), a directory that cannot be created or
    written, or a gs:// bucket that does not answer."""
    url = config["base_bucket_url"]
    if not url or url.startswith(("http://", "https://", "s3://")):
        raise ReproError(f"micro18.base_bucket_url: {url!r} is not a trace store here; --trace-upload needs a "
                         "directory or gs://bucket/prefix")
    if url.startswith("gs://"):
        from repro.tracestore import GCSStore

        store = GCSStore(url, retry_deadline_s=10)
        try:
            found = store.bucket.exists(timeout=10, retry=None)
        except Exception as exc:  # transport and API errors alike: the bucket cannot be reached
            raise ReproError(f"micro18.base_bucket_url {url}: cannot reach the bucket ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
        if not found:
            raise ReproError(f"micro18.base_bucket_url {url}: no such bucket")
        return
    existing = Path(url)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ReproError(f"micro18.base_bucket_url {url}: not a directory this user can write traces into")


def _client_setup(args, shared, own_copies):
    from repro.trims.client import ClientOptions
    from repro.trims.device import resolve_device
    from repro.trims.workload import plan_requests

    if args.distribution is None and args.distribution_params:  # a plan of its own, or a forgotten flag
        raise ReproError("--distribution-params: given without --distribution; expected --distribution NAME "
                         f"({', '.join(DISTRIBUTIONS)}) for the parameters to apply to")
    check_client_flags(args.concurrent, args.iterations, args.model_iterations, args.seed, args.distribution,
                       args.distribution_params)
    base = Path(_setting(args, "base_path", "base_path"))
    given = "--base-path" if getattr(args, "base_path", None) is not None else "the tool config's base_path"
    refuse_inside("--results", args.results, given, base, "the models the requests read")  # written over one
    available = sorted(p.name for p in base.glob("*") if (p / "manifest.json").exists())
    if not available:
        raise ReproError(f"{given} {base}: {'holds no models' if base.is_dir() else 'no such directory'} "
                         "(each model a directory with a manifest.json; `repro trims models` makes them)")
    models = args.models or available
    if (twice := first_repeated(models)) is not None:  # its requests were made twice over
        raise ReproError(f"--model: {twice!r} named twice; expected each model once")
    unknown = sorted(set(models) - set(available))
    if unknown:
        raise ReproError(f"--model: unknown model(s) {unknown}; {base} holds {available or 'no models'}")
    from repro.trims.models import check_model, load_manifest

    for model in models:  # before any request: a broken model is one line, not a failure per request
        check_model(base, model)
    check_client_memory(args.concurrent, [load_manifest(base / m)["params_bytes"] for m in models], own_copies,
                        args.process_per_request)
    plan = plan_requests(models, args.iterations, args.distribution, args.distribution_params, args.model_iterations,
                         args.seed)
    config = tool_config(args)
    if args.trace_upload:
        check_upload_target(config)
    check_profile_directory(config["profile_output_directory"], args.profile_output,  # --simulate too: it checks all
                            args.profile_output_overwrite, share_hour=args.trace_names == "original")
    store = _check_store_answers(_socket(args), resolve_device(_setting(args, "device", "device"))) if shared else None
    options = ClientOptions(base_path=base, socket=_socket(args),
                            eager=args.eager, eager_async=args.eager_async, cold_cache=args.cold_cache,
                            device=resolve_device(_setting(args, "device", "device")),
                            experiment_description=args.experiment_description,
                            run_id=f"{socket.gethostname()}-{int(time.time())}-{os.getpid()}",
                            extra={"distribution": args.distribution, "distribution_params": args.distribution_params,
                                   "concurrent": args.concurrent})
    if store is not None:
        from repro.trims.client import store_fields

        options.extra.update(store_fields(store))
    # checked (and emptied with --profile-output-overwrite) before any request runs
    if args.simulate:  # the original's --simulate_run: everything up to the requests, none of them run
        counts = {model: sum(m == model for m, _ in plan) for model in dict.fromkeys(m for m, _ in plan)}
        print(f"simulated: {len(plan)} request(s) would run ({', '.join(f'{m} x{n}' for m, n in counts.items())}); "
              "nothing was run or written")
        return options, plan, None
    run_dir = profile_directory(config["profile_output_directory"], args.profile_output, args.profile_output_overwrite,
                                share_hour=args.trace_names == "original")
    return options, plan, run_dir


def _run_mode(args, options, plan, run_dir, original, label):
    from repro.trims.client import Client

    options.original = original
    flat = args.trace_names == "original"
    options.trace_names = args.trace_names
    options.profile_output = run_dir if flat else run_dir / label
    memory_files = f"{label}-memory" if flat else "memory"
    store_pid = None
    if args.monitor_memory and not original:
        from repro.trims.server import StoreConnection

        store_pid = StoreConnection(options.socket, timeout=10).status()["pid"]
    if args.monitor_memory:
        from repro.trims.monitor import MemoryMonitor

        with MemoryMonitor(store_pid=store_pid) as monitor:
            results, wall = Client(options).run(plan, args.concurrent, args.process_per_request)
        monitor.write(options.profile_output / f"{memory_files}.csv",
                      options.profile_output / f"{memory_files}-summary.json")
        print(monitor.table())
    else:
        results, wall = Client(options).run(plan, args.concurrent, args.process_per_request)
    failed = [r for r in results if not r["ok"]]
    done = [r for r in results if r["ok"]]
    mean = sum(r["latency_us"] for r in done) / len(done) / 1000 if done else float("nan")
    print(f"{label}: {len(done)} of {len(results)} requests in {wall:.2f} s ({len(done) / wall:.2f} requests/s), "
          f"mean latency {mean:.1f} ms; traces in {options.profile_output}")
    for r in failed:
        print(f"  FAILED request {r['iteration']} ({r['model']}): {r['error']}", file=sys.stderr)
    return results, wall, options.profile_output


def _memory(args):
    from repro.trims.memory import check_format, format_report, model_memory
    from repro.trims.server import StoreConnection

    check_format(args.format)  # before the models are read and measured (seconds each)
    base = Path(_setting(args, "base_path", "base_path"))
    socket_path = _socket(args)
    if (socket_path.exists() or socket_path.is_symlink()) and not socket_path.is_socket():
        raise ReproError(f"--socket {socket_path}: is not a socket; expected a model store's socket, or no file "
                         "when no store runs")  # else the report would say that nothing is resident
    try:
        connection = StoreConnection(socket_path, timeout=2)
    except ReproError:
        status = None  # no store running: nothing resident to report
    else:  # one that answers wrongly is named, not taken for none
        try:
            status = connection.status()
        finally:
            connection.close()
    rows = []
    from repro.trims.models import GRAPH, PARAMS, check_file_size, load_manifest, model_directory, model_file

    for model in args.models:
        directory = model_directory(base, model)  # resolved and confined to the base path
        if not (directory / "manifest.json").is_file():
            raise ReproError(f"unknown model {model!r}: no {base / model / 'manifest.json'}")
        manifest = load_manifest(directory)
        for name in (GRAPH, PARAMS):  # before they are loaded: a sparse model.params of 3 GiB was allocated whole
            path = model_file(base, model, name)
            check_file_size(path, name, path.stat().st_size, manifest)
        rows.append(model_memory(directory, status, measured=args.measure))
    print(format_report(rows, args.format))
    for row in rows if args.layers else ():
        print(f"\n{row['model_name']}:")
        print(format_report([{"model_name": f"{layer['name']} ({layer['op']})", "store_bytes": None, **layer}
                             for layer in row["layers"]], args.format))


def _print_config(args):
    print(yaml.safe_dump({"micro18": tool_config(args)}, sort_keys=True), end="")


def _upload(args, run_dir):
    """Put the run's traces in the trace store named by base_bucket_url, as the original's --trace_upload."""
    from repro.fsutil import write_json
    from repro.tracestore import open_store

    config = tool_config(args)
    url = config["base_bucket_url"]
    check_upload_target(config)
    run_dir, receipt = Path(run_dir), Path(run_dir) / "upload.json"
    store, prefix = open_store(url), f"{config['upload_bucket_name']}/{run_dir.name}"
    entries = [store.put(p, f"{prefix}/{p.relative_to(run_dir).as_posix()}")
               for p in sorted(run_dir.rglob("*.json")) if p != receipt]
    write_json(receipt, {"store": url, "objects": entries})
    print(f"{len(entries)} traces uploaded to {url}/{prefix}/")


@contextlib.contextmanager
def _removed_unless_done(args, run_dir, run_id):
    """What the run writes to run_dir removed where the block ends in an exception (Ctrl-C, SIGTERM, a
    failure): a cut run's traces are never read as a whole run's. The directory profile_directory
    made for the run goes; in the hour's directory, which runs share, only this run's traces."""
    if not _shares_hour(args):
        with removed_unless_done(run_dir):
            yield
        return
    from repro.traces.reader import TraceReader
    from repro.trims.client import TRACE_FILES

    earlier = set(os.listdir(run_dir))
    try:
        yield
    except BaseException:
        for name in set(os.listdir(run_dir)) - earlier:
            path = run_dir / name
            with contextlib.suppress(OSError, ReproError):
                if TRACE_FILES.fullmatch(name) and TraceReader(path).other_data.get("run_id") == run_id:
                    path.unlink()
        raise


def _shares_hour(args):
    """Whether the run's traces go to the hour's directory, shared with the hour's other runs."""
    return args.profile_output is None and args.trace_names == "original"


def _finish(args, report, failed, run_dir):
    if args.results:
        from repro.fsutil import write_json

        write_json(args.results, report)
    if args.trace_upload:
        _upload(args, run_dir)
    if failed:
        raise ReproError(f"{failed} request(s) failed")


def _client_run(args):
    options, plan, run_dir = _client_setup(args, shared=not args.original, own_copies=args.original)
    if run_dir is None:
        return
    label = "original" if args.original else "shared"
    with _removed_unless_done(args, run_dir, options.run_id):
        results, wall, where = _run_mode(args, options, plan, run_dir, args.original, label)
        traces = [Path(r["trace"]) for r in results if r["ok"]]
        if args.trace_names == "original" and len(traces) > 1:  # the original client's post-processing
            from repro.traces import combine

            combine(traces, run_dir / f"combined-{uuid.uuid4()}.json")
    _finish(args, {label: {"results": results, "wall_s": wall, "traces": str(where)}},
            sum(not r["ok"] for r in results), run_dir)


def _client_compare(args):
    from repro.traces import combine
    from repro.trims.experiments import compare

    options, plan, run_dir = _client_setup(args, shared=True, own_copies=True)  # the original's runs too
    if run_dir is None:
        return

    def run(label, original):
        results, wall, where = _run_mode(args, options, plan, run_dir, original, label)
        return {"results": results, "wall_s": wall, "traces": str(where)}

    with _removed_unless_done(args, run_dir, options.run_id):
        report = compare(run, run_original=args.run_original)
        models = sorted({m for m, _ in plan})
        groups = {"all": models} if args.combined_all else {model: [model] for model in models}
        for group, members in groups.items() if args.combine else ():
            traces = [Path(r["trace"]) for label in report for r in report[label]["results"]
                      if r["ok"] and r["model"] in members]
            if traces:
                out = run_dir / (f"compared-{group}-{uuid.uuid4()}.json" if args.trace_names == "original"
                                 else f"compared-{group}.json")
                combine(traces, out)
                print(f"{out}: {len(traces)} requests, {' and '.join(report)}")
    failed = sum(not r["ok"] for mode in report.values() for r in mode["results"])
    _finish(args, report, failed, run_dir)
