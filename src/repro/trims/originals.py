"""`trims-tools`: the original TRIMS tools' command lines (rai-project/trims-tools, cmd/*.go), unchanged.

Each original command line is parsed with the original's flags, defaults and spelling (Go-style
booleans `--flag`, `--flag=true|false`; `--name=value` or `--name value`; comma-separated lists;
short flags), then translated into a `repro` command line and run by the same parser and
functions as `repro trims` / `repro trace`. Where the two differ in meaning (what `-d` means for
`server run`, the `--eager` default, the config defaults) this command follows the original.
Flags that configure the original's MXNet fork (build, I/O profiling, CUDA malloc tracing) are
accepted and reported as having no effect here.
"""

import math
import os
import re
import sys
from types import SimpleNamespace
from typing import NamedTuple

from repro.errors import ReproError, is_utf8

PROG = "trims-tools"


class Flag(NamedTuple):
    kind: str  # bool, int, float or str
    default: object
    short: str = None


PATH_FLAGS = {"config", "profile_output", "output"}  # file names: any bytes; the other str flags are text


class UsageError(ReproError):
    """A command line the original would refuse: exit status 2."""


# The original's flags, by command (cmd/root.go, cmd/clientRun.go, cmd/serverRun.go, cmd/run.go,
# cmd/traceCombine.go, cmd/traceSummary.go, cmd/clientMemory.go).
GLOBAL = {
    "config": Flag("str", ""),
    "profile_output": Flag("str", ""),
    "profile_output_overwrite": Flag("bool", False),
    "experiment_description": Flag("str", ""),
    "monitor_memory": Flag("bool", False),
    "visible_devices": Flag("str", "0"),
    "toggle": Flag("bool", False, "t"),
}
CLIENT = {
    "models": Flag("str", "all"),
    "models_percentage": Flag("float", 1.0),
    "profile_io": Flag("bool", True),
    "model_iterations": Flag("int", -1),
    "iterations": Flag("int", 1, "n"),
    "distribution": Flag("str", "none"),
    "distribution_params": Flag("str", ""),
    "concurrent": Flag("int", 1),
    "debug": Flag("bool", False, "d"),
    "postprocess": Flag("bool", True),
    "eager": Flag("bool", True),
    "eager_async": Flag("bool", False),
    "profile_memory": Flag("bool", True),
    "trace_upload": Flag("bool", False),
    "large_models": Flag("bool", False),
    "simulate_run": Flag("bool", False),
}
SERVER = {
    "debug": Flag("bool", False, "d"),
    "profile": Flag("bool", False),
    "eviction": Flag("str", "lru"),
    "model_estimation_rate": Flag("float", 1.0),
    "memory_percentage": Flag("float", 0.8),
    "persist_cpu": Flag("bool", True),
    "persist_cpu_only": Flag("bool", False),
    "estimate_with_internal_memory": Flag("bool", True),
}
COMPARE = {"run_original": Flag("bool", True), "combine": Flag("bool", False), "combined_all": Flag("bool", False)}
COMMANDS = {
    ("client", "run"): {**CLIENT, "original": Flag("bool", False)},
    ("client", "compare"): {**CLIENT, **COMPARE},
    ("server", "run"): SERVER,
    ("run",): {**SERVER, **{k: v for k, v in CLIENT.items() if k != "models_percentage"}, **COMPARE,
               "compare": Flag("bool", False), "original": Flag("bool", False), "combined_all": Flag("bool", True)},
    ("trace", "combine"): {"output": Flag("str", "combined.json", "o"), "adjust": Flag("bool", True),
                           "skip_first": Flag("bool", False)},
    ("trace", "summarize"): {"output": Flag("str", "", "o"), "detailed": Flag("bool", True),
                             "deep": Flag("bool", False)},
    ("client", "memory_usage"): {**{k: CLIENT[k] for k in ("models", "debug", "large_models")},
                                 "format": Flag("str", "table", "f")},
    ("trace", "memoryinfo"): {},
    ("download", "assets"): {},
    ("info", "config"): {},
}
ALIASES = {("client", "run-compare"): ("client", "compare"), ("client", "memory"): ("client", "memory_usage"),
           ("trace", "summary"): ("trace", "summarize"), ("trace", "memory"): ("trace", "memoryinfo"),
           **{("download", a): ("download", "assets") for a in ("model", "models", "feature", "features")}}
NOT_HERE = {
    ("trace", "publish"): "it is a stub in the original (prints 'publish called'); use client run --trace_upload",
}

# flag -> why it changes nothing here (reported when given)
NO_EFFECT = {
    "toggle": "unused in the original too",
    "profile_io": "it has no effect in the original either",
    "profile_memory": "it traces the MXNet fork's cudaMalloc calls",
    "debug": "it sets the MXNet fork's GLOG logging variables",
    "postprocess": "traces are written complete, and combined-<uuid>.json is always written",
    "model_estimation_rate": "the store knows each model's exact size from its manifest",
    "estimate_with_internal_memory": "the store knows each model's exact size from its manifest",
}
DISTRIBUTION_ALIASES = {"exp": "exponential"}
GO_TRUE, GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")  # Go's strconv
# repro's flag -> the original's, for error messages
ORIGINAL_SPELLING = {
    "--model": "--models", "--model-iterations": "--model_iterations", "--distribution-params": "--distribution_params",
    "--profile-output": "--profile_output", "--profile-output-overwrite": "--profile_output_overwrite",
    "--experiment-description": "--experiment_description", "--memory-fraction": "--memory_percentage",
    "--eager-async": "--eager_async", "--trace-upload": "--trace_upload", "--monitor-memory": "--monitor_memory",
    "--skip-first": "--skip_first",
}
_REPRO_FLAG = re.compile(r"--[a-z][a-z-]*")


def original_spelling(message):
    """`message` with repro's flag names replaced by the original's."""
    return _REPRO_FLAG.sub(lambda m: ORIGINAL_SPELLING.get(m.group(0), m.group(0)), message)


def _value(name, flag, text):
    if flag.kind == "bool":
        if text in GO_TRUE:
            return True
        if text in GO_FALSE:
            return False
        raise UsageError(f"--{name}: invalid boolean {text!r}; expected true or false")
    if flag.kind == "str" and name not in PATH_FLAGS and not is_utf8(text):
        raise UsageError(f"--{name}: {ascii(text)[:80]} is not UTF-8 text; expected text an output can hold")
    try:
        return {"int": int, "float": float, "str": str}[flag.kind](text)
    except ValueError:
        raise UsageError(f"--{name}: invalid {flag.kind} {text!r}") from None


def parse_flags(words, flags):
    """(values, given, positionals) from `words`, flags anywhere, as the original's flag parser reads them."""
    flags = {**GLOBAL, **flags}
    shorts = {f.short: name for name, f in flags.items() if f.short}
    values = {name: f.default for name, f in flags.items()}
    given, positionals = set(), []
    words = list(words)
    while words:
        word = words.pop(0)
        if word == "--":
            positionals += words
            break
        if word.startswith("--"):
            name, eq, text = word[2:].partition("=")
        elif word.startswith("-") and len(word) > 1:
            short, rest = word[1], word[2:]
            if short not in shorts:
                raise UsageError(f"unknown shorthand flag: {short!r} in {word}")
            name, eq, text = shorts[short], bool(rest), rest.removeprefix("=")
        else:
            positionals.append(word)
            continue
        if name not in flags:
            raise UsageError(f"unknown flag: --{name}")
        if not eq and flags[name].kind != "bool":
            if not words:
                raise UsageError(f"flag needs an argument: --{name}")
            text, eq = words.pop(0), True
        values[name] = _value(name, flags[name], text) if eq else True
        given.add(name)
    return values, given, positionals


def _command(words):
    """(command path, the rest): the longest known command at the start of `words`."""
    for length in (2, 1):
        path = tuple(words[:length])
        path = ALIASES.get(path, path)
        if path in COMMANDS or path in NOT_HERE:
            return path, words[length:]
    known = sorted(" ".join(c) for c in COMMANDS)
    raise UsageError(f"unknown command {' '.join(words[:2]) or '(none)'!r}; expected one of: {', '.join(known)}")


def parse_command_line(words):
    """Check an original command line's command and flags, without running it; raise UsageError."""
    path, rest = _command(words)
    return path, parse_flags(rest, COMMANDS.get(path, {}))


def _note(text):
    print(f"{PROG}: note: {text}", file=sys.stderr)


def _config_args(values):
    from repro.trims.carml_config import find_config

    given = values["config"] and os.path.expanduser(values["config"])
    if given and os.path.exists(given) and not os.path.isfile(given):  # a FIFO would hang, a device never end
        raise ReproError(f"--config: {values['config']} is not a regular file; expected a config file "
                         "(.carml_config.yml), or a path that does not exist to search as the original does")
    if given and not os.path.exists(given):
        _note(f"--config: {values['config']} does not exist; searching as the original does")
    path = find_config(values["config"] or None)
    return ["--config", path] if path else []


def _config(config_args):
    """The tool config that `config_args` (from _config_args) name, over the defaults."""
    from repro.trims.carml_config import original_defaults
    from repro.trims.cli import load_tool_config

    return load_tool_config(config_args[1] if config_args else None, {**_repro_defaults(), **original_defaults()})


def _repro_defaults():
    from repro.trims.cli import DEFAULTS

    return DEFAULTS


def _model_pattern(item):
    """An item of --models as the original's Go regexp package reads it: RE2's syntax, matched in time
    linear in the name (Python's backtracking re took minutes on `(.*.*.*)*!`)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the error is raised, and named here; RE2 would also log it to stderr
    try:
        return re2.compile(item, options)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ReproError(f"--models: {item!r} is not a name or a regular expression ({reason})") from None


def select_models(values, base_path):
    """The models --models, --large_models and --models_percentage select, among those in base_path.

    Every item of the comma list is an exact name or a regular expression; every match is kept
    (the original keeps only the first match, a defect its README does not describe)."""
    from pathlib import Path

    available = sorted(p.name for p in Path(base_path).glob("*") if (p / "manifest.json").exists())
    candidates = [m for m in available if m.startswith("large_") == values["large_models"]]
    if not candidates:
        which = "large models" if values["large_models"] else "models"
        raise ReproError(f"micro18.base_path: {base_path} holds no {which}; run `{PROG} download assets` first")
    if values["models"].lower() == "all":
        chosen = candidates
    else:
        chosen = []
        for item in filter(None, values["models"].lower().split(",")):
            pattern = _model_pattern(item)
            matches = [m for m in candidates if m == item or pattern.search(m)]
            if not matches:
                raise ReproError(f"--models: {item!r} matches none of {candidates} in {base_path}")
            chosen += [m for m in matches if m not in chosen]
        if not chosen:
            raise ReproError(f"--models: {values['models']!r} names no model; expected a comma-separated list of names "
                             "or regular expressions, or all")
    # each name reaches repro's command line as an argument: one that begins with '-' would be read as a flag
    dashed = [m for m in chosen if m.startswith("-")]
    if dashed:
        raise ReproError(f"micro18.base_path: {Path(base_path) / dashed[0]}: a model directory whose name begins with "
                         "'-'; expected a model's name (rename or move it)")
    percentage = _models_percentage(values)
    if percentage is not None and _distribution(values) is not None:
        chosen = chosen[:math.ceil(len(chosen) * percentage / 100)]
    return chosen


def _models_percentage(values):
    """--models_percentage as a percentage, where the command has the flag (None where not); checked
    whether or not a distribution uses it: NaN is never a share."""
    if "models_percentage" not in values:
        return None
    percentage = values["models_percentage"] * (100 if values["models_percentage"] <= 1 else 1)
    if not 0 < percentage <= 100:
        raise ReproError(f"--models_percentage: expected a fraction in (0, 1] or a percentage up to 100, "
                         f"got {values['models_percentage']}")
    return percentage


def check_client_values(values):
    """The client flags' values, checked before the models are listed: a bad flag is named as such
    also where the model directory is missing or empty."""
    from repro.trims.cli import check_client_flags

    _models_percentage(values)
    check_client_flags(values["concurrent"], values["iterations"], values["model_iterations"],
                       distribution=_distribution(values),
                       distribution_params=[float(param) for param in _distribution_params(values)])


def _distribution(values):
    from repro.trims.workload import DISTRIBUTIONS

    name = values["distribution"].lower()
    if name in ("", "none"):
        return None
    if name == "zipf":
        raise ReproError("--distribution: zipf is not implemented (in the original either)")
    name = DISTRIBUTION_ALIASES.get(name, name)
    if name not in DISTRIBUTIONS:  # a usage error, as repro's --distribution choices make it
        raise UsageError(f"--distribution: invalid choice {values['distribution']!r} (choose from "
                         f"{', '.join([*DISTRIBUTIONS, *DISTRIBUTION_ALIASES])})")
    return name


def _distribution_params(values):
    params = []
    for item in filter(None, (p.strip() for p in values["distribution_params"].split(","))):
        try:
            params.append(str(float(item)))
        except ValueError:
            raise ReproError(f"--distribution_params: {item!r} is not a number "
                             f"(expected comma-separated numbers, e.g. 1,1.5)") from None
    return params


def _bool_flag(argv, value, repro_flag):
    if value:
        argv.append(repro_flag)


def client_argv(command, values, config, config_args):
    """The `repro trims client run|compare` command line of an original client command."""
    check_client_values(values)
    argv = ["trims", "client", command, "--model", *select_models(values, config["base_path"]),
            "--iterations", str(values["iterations"]), "--model-iterations", str(values["model_iterations"]),
            "--concurrent", str(values["concurrent"]), "--process-per-request", "--trace-names", "original",
            *config_args]
    distribution = _distribution(values)
    if distribution:
        argv += ["--distribution", distribution]
        params = _distribution_params(values)
        if params:
            argv += ["--distribution-params", *params]
    # free text as --flag=VALUE: a value that begins with '-' is never read as a flag of its own
    if values["profile_output"]:
        argv.append(f"--profile-output={values['profile_output']}")
    if values["experiment_description"]:
        argv.append(f"--experiment-description={values['experiment_description']}")
    for name, repro_flag in (("eager", "--eager"), ("eager_async", "--eager-async"),
                             ("profile_output_overwrite", "--profile-output-overwrite"),
                             ("monitor_memory", "--monitor-memory"), ("trace_upload", "--trace-upload")):
        _bool_flag(argv, values[name], repro_flag)
    _bool_flag(argv, values["simulate_run"], "--simulate")
    if command == "run":
        _bool_flag(argv, values["original"], "--original")
    else:
        argv.append("--run-original" if values["run_original"] else "--no-run-original")
        argv.append("--combine" if values["combine"] else "--no-combine")
        _bool_flag(argv, values["combined_all"], "--combined-all")
    return argv


def server_argv(values, given, config, config_args):
    """The `repro trims server run` command line of an original `server run`.

    --persist_cpu (on by default) gives a store in GPU memory a host-memory tier of the same share
    of RAM; --persist_cpu_only keeps models in host memory only (the original ignored it, a defect)."""
    from repro.trims.eviction import POLICIES, POLICY_ALIASES

    eviction = values["eviction"].lower()
    if eviction not in (*POLICIES, *POLICY_ALIASES):
        raise ReproError(f"--eviction: unknown policy {values['eviction']!r}; expected one of "
                         f"{', '.join([*POLICIES, *POLICY_ALIASES])}")
    if not 0 < values["memory_percentage"] <= 1:
        raise ReproError(f"--memory_percentage: expected a fraction in (0, 1], got {values['memory_percentage']}")
    argv = ["trims", "server", "run", "--eviction", eviction, "--memory-fraction", str(values["memory_percentage"]),
            *config_args]
    if values["profile"]:  # the server's trace, server_<id>.json, where the clients' traces of the run go
        import socket
        from pathlib import PurePath

        host = os.path.join(config["profile_output_directory"], socket.gethostname())
        name = PurePath(values["profile_output"])
        if name.is_absolute() or ".." in name.parts:  # as the client refuses it: the trace went wherever it led
            raise ReproError(f"--profile_output {values['profile_output']!r}: expected a relative name (no '..') for a "
                             f"directory under {host}")
        argv += ["--profile", os.path.join(host, values["profile_output"])]
    if values["persist_cpu_only"]:
        return [*argv, "--device", "cpu"]
    from repro.trims.device import resolve_device

    if values["persist_cpu"] and resolve_device(config["device"]) == "gpu":
        import psutil

        argv += ["--persist-cpu-mb", str(int(psutil.virtual_memory().total * values["memory_percentage"]) >> 20)]
    elif values["persist_cpu"] and "persist_cpu" in given:
        _note("--persist_cpu has no effect here: the store keeps models in host memory already")
    return argv


def translate(words):
    """(repro command lines, parsed flag values, the command path) for an original command line."""
    path, rest = _command(words)
    if path in NOT_HERE:
        raise ReproError(f"{' '.join(path)}: not available here: {NOT_HERE[path]}")
    values, given, positionals = parse_flags(rest, COMMANDS[path])
    for name in sorted(given & set(NO_EFFECT)):
        _note(f"--{name} has no effect here: {NO_EFFECT[name]}")
    if path == ("trace", "memoryinfo"):
        # the traces' model names after `--`: a name is never read as a flag ("-h", "--base-path=/x")
        return [["trims", "memory", *_config_args(values), "--", *_traced_models(positionals)]], values, path
    if path[0] == "trace":
        return [_trace_argv(path[1], values, given, positionals)], values, path
    if positionals:
        raise UsageError(f"{' '.join(path)}: takes no arguments, got {positionals}")
    if path == ("info", "config"):  # nothing to run: main prints the configuration
        return [], values, path
    config_args = _config_args(values)
    if path == ("download", "assets"):
        from repro.trims.models import ARCHITECTURES

        return [["trims", "models", *ARCHITECTURES, *config_args]], values, path
    config = _config(config_args)
    if path == ("server", "run"):
        return [server_argv(values, given, config, config_args)], values, path
    if path == ("client", "memory_usage"):
        models = select_models(values, config["base_path"])
        return [["trims", "memory", "--format", values["format"], *config_args, "--", *models]], values, path
    if path[0] == "client":
        return [client_argv(path[1], values, config, config_args)], values, path
    # top-level run: the store in the background, the client, the store stopped (the store's flags
    # checked first, with the client's, before the client lists the models)
    server = [*server_argv(values, given, config, config_args), "-d"]
    client = client_argv("compare" if values["compare"] else "run", values, config, config_args)
    return [server, client, ["trims", "server", "stop", *config_args]], values, path


# The original's config struct, in the order and under the names `info config` prints them
# (pkg/config/config.go: keys as literal 'micro18.<key>' strings, server_info_path as Go's default
# yaml name 'serverinfopath'), with the original's defaults for the keys that mean nothing here.
ORIGINAL_KEYS = ("visible_devices", "build_timeout", "polling_interval", "src_path", "base_path", "server_relative_path",
                 "server_build_cmd", "server_run_cmd", "client_relative_path", "client_build_cmd", "client_run_cmd",
                 "base_bucket_url", "upload_bucket_name", "profile_output_directory", "server_info_path")
ORIGINAL_UNUSED_DEFAULTS = {
    "visible_devices": "0", "build_timeout": 0, "polling_interval": 0, "src_path": "", "server_relative_path": "",
    "server_build_cmd": "make", "server_run_cmd": "bin/uprd",
    "client_relative_path": "example/image-classification/predict-cpp", "client_build_cmd": "make",
    "client_run_cmd": "./image-classification-predict",
}


def original_config_yaml(config, path):
    """What the original's `info config` prints: its keys, with the values in effect here."""
    import yaml

    from repro.trims.cli import PRINTED_NAMES, _read_yaml

    section = {}
    if path:
        document = _read_yaml(__import__("pathlib").Path(path)) or {}
        section = document.get("micro18") or {} if isinstance(document, dict) else {}
    values = {**ORIGINAL_UNUSED_DEFAULTS, **{k: v for k, v in section.items() if k in ORIGINAL_UNUSED_DEFAULTS},
              **{k: config.get(k) for k in ORIGINAL_KEYS if k in config}}
    printed = {name: key for key, name in PRINTED_NAMES.items()}
    names = {key: printed.get(key, f"micro18.{key}") for key in ORIGINAL_KEYS}
    return yaml.safe_dump({names[key]: values[key] for key in ORIGINAL_KEYS}, sort_keys=False)


def _traced_models(paths):
    """The models the traces at `paths` ran (their otherData.model_name), in order of first appearance."""
    from repro.traces import TraceReader

    if not paths:
        raise UsageError("trace memoryinfo: expected at least one trace file")
    models = []
    for path in paths:
        other = TraceReader(path).other_data
        # a combined or compared trace lists the traces it was made of, each with its otherData
        inputs = other.get("inputs") if isinstance(other.get("inputs"), list) else [{"otherData": other}]
        named = [i.get("otherData", {}).get("model_name") for i in inputs if isinstance(i, dict)
                 and isinstance(i.get("otherData"), dict)]
        named = [m for m in named if isinstance(m, str)]
        if not named:
            raise ReproError(f"{path}: the trace names no model (otherData.model_name, or otherData.inputs[].otherData"
                             ".model_name in a combined trace)")
        models += [m for m in dict.fromkeys(named) if m not in models]
    return models


def _trace_argv(command, values, given, positionals):
    """The `repro trace` command line of an original trace command. An output the user did not name
    (combined.json, the --deep summary.json) is written only where it is new or what such a run wrote:
    a file of the user's there is refused, as repro's own default outputs are."""
    from repro.fsutil import check_default_output
    from repro.traces.original import is_summary

    if not positionals:
        raise UsageError(f"trace {command}: expected at least one trace file or directory")
    # the files after `--`, as the original reads them: a file named -t.json is a file, not a flag
    if command == "combine":  # repro's default output is the original's, combined.json
        argv = ["trace", "combine", *(["-o", values["output"]] if "output" in given else [])]
        argv.append("--adjust" if values["adjust"] else "--no-adjust")
        _bool_flag(argv, values["skip_first"], "--skip-first")
        return [*argv, "--", *positionals]
    argv = ["trace", "summarize", "--format", "original"]
    if values["output"]:
        argv += ["-o", values["output"]]
    elif values["deep"]:
        first = positionals[0]
        output = os.path.join(first, "summary.json") if os.path.isdir(first) else "summary.json"
        argv += ["-o", check_default_output(output, "--output", is_summary, "a trace summary")]
    if values["detailed"]:
        argv.append("--detailed")
    if not values["deep"]:  # one summary.json per directory: repro's --each-directory, which is not this command's
        path = next((p for p in positionals if not os.path.isdir(p)), None)
        if path is not None:
            what = "is not a directory" if os.path.lexists(path) else "does not exist"
            raise ReproError(f"trace summarize: {path} {what}; expected a directory of traces (each gets its "
                             "summary.json), or --deep to summarize trace files into one")
        argv.append("--each-directory")
    return [*argv, "--", *positionals]


def _parse_repro(parser, command):
    """The parsed repro command line, or None after one `trims-tools: error:` line (never repro's usage text)."""
    import contextlib
    import io

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return parser.parse_args(command)
    except SystemExit:
        lines = captured.getvalue().strip().splitlines()
        message = lines[-1].split(": error: ", 1)[-1].removeprefix("argument ") if lines else "invalid command line"
        print(f"{PROG}: error: {original_spelling(message)}", file=sys.stderr)
        return None


def _print_usage(status, path=None):
    """The usage of every command, or of the command `path` (`trims-tools run --help`)."""
    if path is not None:
        print(f"usage: {PROG} {' '.join(path)} [flags]\n\nflags: {' '.join(f'--{name}' for name in COMMANDS[path])}"
              f"\nglobal flags: {' '.join(f'--{name}' for name in GLOBAL)}")
        return status
    print(f"usage: {PROG} COMMAND [flags]: the original TRIMS tools' command lines, run by repro\n\ncommands:")
    for command, flags in COMMANDS.items():
        print(f"  {' '.join(command):<20} {' '.join(f'--{name}' for name in flags)}")
    print(f"\nglobal flags: {' '.join(f'--{name}' for name in GLOBAL)}")
    return status


def _print_config(values):
    """`info config`: the configuration as the original prints it."""
    config_args = _config_args(values)
    config = {**_config(config_args), "visible_devices": values["visible_devices"]}
    print(original_config_yaml(config, config_args[1] if config_args else None), end="")


def main(argv=None):
    from repro import stopsignals

    # as repro's main: a stop signal during the imports is put off, then ends the command as a later
    # one does (128 + signal, one line), not in a KeyboardInterrupt traceback or a silent death
    with stopsignals.deferred() as caught:
        from repro.commands import open_closed_standard_streams, run
    open_closed_standard_streams()  # before translate() opens the config
    words = sys.argv[1:] if argv is None else list(argv)
    planned = []

    def plan(_):
        stopsignals.raise_deferred(caught)  # here, where the command's handlers are set
        return _plan(words, planned)

    # run as a command: a write to standard output that fails is one line naming it, not a traceback
    status = run(SimpleNamespace(func=plan), PROG, original_spelling)
    for command, args in planned:
        status = run(args, PROG, original_spelling) or status
        if status and command[:3] == ["trims", "server", "run"]:
            break  # no store: the client would fail on every request
    return status


def _plan(words, planned):
    """The repro command lines (with their parsed arguments) an original command line runs, appended
    to `planned`; or the exit status where it ends here (usage, help, info config, a refusal)."""
    from repro.commands import build_parser
    from repro.trims.carml_config import original_defaults

    if not words or words[0] in ("-h", "--help", "help"):
        return _print_usage(0 if words else 2)
    flags = words[:words.index("--")] if "--" in words else words
    if "-h" in flags or "--help" in flags:  # `trims-tools run --help`, as the original's command line takes it
        try:
            path, _ = _command(words)
        except UsageError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        return _print_usage(0, path if path in COMMANDS else None)
    try:
        commands, values, path = translate(words)  # a ReproError is run's: named as the original spells it
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if path == ("info", "config"):
        return _print_config(values)
    # as the original, for this process and every process it starts
    os.environ["CUDA_VISIBLE_DEVICES"] = values["visible_devices"]
    defaults = {**_repro_defaults(), **original_defaults()}
    parsed = []  # every command line checked before the first runs: no store is left running for a client refused
    for command in commands:
        args = _parse_repro(build_parser(), command)
        if args is None:
            return 2
        args.tool_defaults = defaults
        parsed.append((command, args))
    planned.extend(parsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
