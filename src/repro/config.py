"""Loading and checking the workflow configuration: the one place a config is validated.

The Snakefile calls `validate_config` on Snakemake's merged config (config/config.yaml, then
`--configfile`, then `--config`), so every rule sees the same checked, defaulted and expanded values
(through `repro.checkedconfig`, which reuses a result while nothing it depends on changes).
"""

import copy
import functools
import importlib.util
import math
import os
from importlib.resources import files
from pathlib import Path

import yaml

from repro.backends import backend_names, get_backend
from repro.errors import ReproError
from repro.fsutil import expand_path, not_a_directory
from repro.pecan.runsize import check_run_size

# Keys whose values are paths on this machine: `~` and environment variables are expanded once, at load.
# ("*" stands for every entry of a mapping or list.)
# Backends name theirs within their own section (Backend.path_keys).
PATH_KEYS = (
    ("trace_store",),
    ("trims", "base_path"),
    ("trims", "asset_store"),
)


def schema():
    """The config schema, shipped inside the package, with the names of registered things filled in
    from their registries (repro.registries), which can grow while a process runs: a copy each call."""
    from repro.registries import fill_schema

    return fill_schema(copy.deepcopy(_shipped_schema()))


@functools.cache
def _shipped_schema():
    """The schema file as parsed (a tenth of the time of parsing it again: each config check reads it)."""
    text = files("repro").joinpath("schemas", "config.schema.yaml").read_text()
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 5x faster


def _strict_validator():
    """Draft 2020-12, but an `integer` is an int: jsonschema takes 20.0 for one, which range() and
    the bit shifts that use the value then refuse (a traceback, after the check passed)."""
    from jsonschema import Draft202012Validator, validators

    def integer(checker, instance):
        return isinstance(instance, int) and not isinstance(instance, bool)

    return validators.extend(Draft202012Validator,
                             type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", integer))


def _with_defaults(validator_class):
    """A validator that fills in each property's `default` (as snakemake.utils.validate does)."""
    import jsonschema

    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(name, sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate_config(config, source="config"):
    """Check `config` in place: finite numbers, the schema (defaults filled in), `~` and `$VAR` in
    paths expanded, cross-key references. Raise ReproError naming the key at fault."""
    _reject_non_finite(config, source, [])
    # jsonschema imported here: a Snakefile start that reuses a checked config skips it
    validator = _with_defaults(_strict_validator())(schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        key = _shortened(".".join(str(p) for p in error.absolute_path) or "(top level)")
        raise ReproError(f"{source}: {key}: {_shortened(error.message)}{_nested_config_hint(error)}")
    backend = get_backend(config["backend"])
    if backend.needs_section and backend.name not in config:
        raise ReproError(f"{source}: {backend.name}: required when backend is {backend.name} "
                         f"(its settings: see the schema's `{backend.name}` section)")
    for keys in _path_keys():
        _expand_at(config, keys, [], source)
    for keys in PATH_KEYS:  # in rules' outputs, where Snakemake reads braces as wildcards
        value = config
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and ("{" in value or "}" in value):
            raise ReproError(f"{source}: {'.'.join(keys)}: {value!r} holds a brace; expected a path without "
                             "{ or } (the workflow's rules would read them as wildcards)")
        if isinstance(value, str) and value.startswith("gs://") and not value[5:].partition("/")[0]:
            raise ReproError(f"{source}: {'.'.join(keys)}: {value!r} names no bucket; expected gs://bucket[/prefix] "
                             "or a directory")
    plots = config["plots"]
    config["reproducibility"].setdefault("figures", [*plots["figures"], *plots["comparisons"]])
    check_references(config, source)
    return config


def check_settings(settings, flag="--settings", places=None, at=()):
    """Settings written by hand (`--settings`) hold the values a config holds: check each against the
    schema where the workflow takes it from, so a wrong type or an absurd number is named by key
    before it is used. `places` gives a key's place in the config where it is not the same key at the
    top (a tuple of keys; None: not a config value; a mapping: the schema of a value the workflow
    derives from the config, such as a caption); `at`: where every other key lies (the top: ()).
    A key they lack is left to `settings_keys`."""
    validator = _strict_validator()
    places = places or {}
    shaped, where = {}, {}
    for key, value in settings.items():
        place = places.get(key, (*at, key))
        if place is None:
            continue
        if isinstance(place, dict):
            error = next(validator(place).iter_errors(value), None)
            if error is not None:
                raise ReproError(f"{flag}: {_shortened(key)}: {_shortened(error.message)}")
            continue
        node = shaped
        for part in place[:-1]:
            node = node.setdefault(part, {})
        node[place[-1]] = value
        where[tuple(place)] = key
    _reject_non_finite(shaped, flag, [])
    errors = sorted(validator(_without_required(schema())).iter_errors(shaped),
                    key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        path = _named_as_given([str(p) for p in error.absolute_path], where, at)
        raise ReproError(f"{flag}: {_shortened(path)}: {_shortened(error.message)}")
    for keys in _path_keys():
        _expand_at(shaped, keys, [], flag, expand=False, name=lambda path: _named_as_given(path, where, at))
    return settings


def _named_as_given(path, where, at):
    """The config key path `path` (a list) as the settings name it: `where` maps a config place to the
    settings' key, `at` is where the others lie."""
    for place, key in where.items():
        if tuple(path[:len(place)]) == place:
            path = [key, *path[len(place):]]
            break
    else:  # the mapping `at` names itself (a key it does not allow)
        path = path[len(at):] if tuple(path[:len(at)]) == at else path
    return '.'.join(path) or '(top level)'


def check_style(style, flag="--style"):
    """A figure's style given by hand (plots.style as JSON): each value checked against the schema, the
    keys it lacks filled in with the schema's defaults."""
    if not isinstance(style, dict):
        raise ReproError(f"{flag}: expected a JSON object of plots.style keys, got {type(style).__name__}")
    check_settings(style, flag, at=("plots", "style"))
    defaults = schema()["properties"]["plots"]["properties"]["style"]["properties"]
    style = {**{key: spec["default"] for key, spec in defaults.items()}, **style}
    check_figure_pixels(style, flag)
    return style


def check_figure_pixels(style, label):
    """ReproError where a figure of `style` (complete: its defaults filled in) would take more than
    MAX_FIGURE_PIXELS: the renderer allocates them all (120,000 px square: 57 GB)."""
    pixels = round(style["width_in"] * style["dpi"]) * round(style["height_in"] * style["dpi"])
    if pixels > MAX_FIGURE_PIXELS:
        raise ReproError(f"{label}: {style['width_in']} x {style['height_in']} in at {style['dpi']} dpi "
                         f"is {pixels} pixels; expected at most {MAX_FIGURE_PIXELS}")


def _without_required(tree):
    """The schema with no key required: settings hold a part of a config."""
    if isinstance(tree, dict):
        return {k: _without_required(v) for k, v in tree.items() if not (k == "required" and isinstance(v, list))}
    if isinstance(tree, list):
        return [_without_required(v) for v in tree]
    return tree


def _shortened(text, limit=200):
    """An error message quotes the value at fault: a long one shortened in the middle, so the line
    stays readable and still ends with what was expected."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...({len(text) - limit} characters left out)...{text[-limit // 2:]}"


def _is_json_type(value, name):
    if name == "boolean" or isinstance(value, bool):  # a bool is an int to Python, not to the schema
        return name == "boolean" and isinstance(value, bool)
    return isinstance(value, {"integer": int, "number": (int, float)}.get(name, ()))


def _nested_config_hint(error):
    """Where a string stands for the number or boolean the schema wants: Snakemake passes the
    values nested in a `--config KEY='{...}'` as strings, so say how to set them instead."""
    if error.validator != "type" or len(error.absolute_path) < 2 or not isinstance(error.instance, str):
        return ""
    import yaml

    try:
        value = yaml.safe_load(error.instance)
    except yaml.YAMLError:
        return ""
    wanted = [error.validator_value] if isinstance(error.validator_value, str) else error.validator_value
    if not any(_is_json_type(value, name) for name in wanted):
        return ""
    return (" (a value nested in `--config KEY='{...}'` reaches the workflow as a string: "
            "set it in a file passed with --configfile)")


def _reject_non_finite(value, source, where):
    """JSON schema's minimum/maximum let NaN and infinities through: refuse them by name."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ReproError(f"{source}: {'.'.join(where) or '(top level)'}: {value} is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            _reject_non_finite(item, source, [*where, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_non_finite(item, source, [*where, str(index)])


def _path_keys():
    """The keys whose values are paths on this machine: PATH_KEYS and each backend's."""
    return [*PATH_KEYS, *((name, *keys) for name in backend_names() for keys in get_backend(name).path_keys)]


def _expand_at(node, keys, where, source, expand=True, name=".".join):
    """`~` and `$VAR` expanded in the paths at `keys` (not with expand=False); a NUL byte in one is
    refused, named by `name(its key path)`."""
    if not keys:
        return
    head, rest = keys[0], keys[1:]
    children = (range(len(node)) if isinstance(node, list) else node.keys()) if head == "*" else [head]
    for child in children:
        try:
            value = node[child]
        except (KeyError, IndexError, TypeError):
            continue
        path = [*where, str(child)]
        if rest:
            _expand_at(value, rest, path, source, expand, name)
        elif isinstance(value, str) and "\0" in value:  # no file name holds one: os.* raise ValueError
            raise ReproError(f"{source}: {name(path)}: {value[:80]!r} holds a NUL byte; expected a path")
        elif expand and isinstance(value, str) and not value.startswith("gs://"):
            node[child] = expand_path(value, ".".join(path), source)


MAX_FIGURE_PIXELS = 50_000_000  # the default style draws 0.4 million


def _check_tfdata_step_times(pecan, source):
    """ReproError where pecan.tfdata.time_scale gives an experiment's accelerator a step time no
    miniature runs at (repro.pecan.tfdata.spec.STEP_TIME_S): a subnormal scale made it 0 and a
    window's steps infinite."""
    miniature = pecan.get("tfdata", {})
    if "time_scale" not in miniature:
        return
    from repro.pecan.tfdata.spec import MINIATURE, check_step_time

    for name in pecan["experiments"]:
        check_step_time(pecan, name, miniature["time_scale"], miniature.get("batch_size", MINIATURE["batch_size"]),
                        f"{source}: pecan.tfdata.time_scale")


# The placeholders the ssh backend fills in (repro.backends.ssh.SshBackend.run).
SSH_PLACEHOLDERS = {"command": {"python", "settings", "experiment", "mode", "calibration", "out"},
                    "env": {"autoorder", "mode", "experiment", "epochs", "local_workers"}}


def check_placeholders(text, allowed, key):
    """ReproError naming `key` unless every `{name}` in `text` is one of `allowed` (plain names: no
    attribute, index, conversion or format spec) and its braces are balanced (`{{`, `}}` for literal ones)."""
    import string

    try:
        fields = [(name, conversion, spec) for _, name, spec, conversion in string.Formatter().parse(text)
                  if name is not None]
    except ValueError as exc:
        raise ReproError(f"{key}: {exc} in {text!r}; write a literal brace as {{{{ or }}}}") from None
    for name, conversion, spec in fields:
        if name not in allowed or conversion or spec:
            raise ReproError(f"{key}: unknown placeholder {{{name}{'!' + conversion if conversion else ''}"
                             f"{':' + spec if spec else ''}}} in {text!r}; expected some of "
                             + ", ".join(f"{{{n}}}" for n in sorted(allowed)))


def check_ssh_section(ssh, source):
    """The ssh backend's settings as a cluster state records them (`source`: that file), checked in
    place as a config's `ssh` section is: the schema, with its defaults filled in where a key is
    missing, and the run command's and environment's placeholders. ReproError naming the key."""
    root = schema()
    section = {"$ref": "#/$defs/ssh", "$defs": {"ssh": root["properties"]["ssh"]}, "definitions": root["definitions"]}
    errors = sorted(_with_defaults(_strict_validator())(section).iter_errors(ssh), key=lambda e: list(e.absolute_path))
    if errors:
        key = ".".join(["ssh", *(str(p) for p in errors[0].absolute_path)])
        raise ReproError(f"{source}: {_shortened(key)}: {_shortened(errors[0].message)}")
    _reject_non_finite(ssh, source, ["ssh"])
    run = ssh["run"]
    check_placeholders(run["command"], SSH_PLACEHOLDERS["command"], f"{source}: ssh.run.command")
    for name, value in run["env"].items():
        check_placeholders(value, SSH_PLACEHOLDERS["env"], f"{source}: ssh.run.env.{name}")
    return ssh


# The directory download_traces writes, results/traces/<experiment>/<mode>/: a local trace store at
# results puts its keys, traces/<experiment>/<mode>/, there, and Snakemake deletes a job's outputs
# before it runs, so every download found its upload gone.
DOWNLOADED_TRACES = Path("results", "traces")


# The directories of results/ that the workflow's rules write (rules/*.smk), results/traces aside
# (its rule writes an experiment's directories there, and a store beside them is the check above's
# case): a store inside one is uploaded into, or replaced with, another rule's output; a run refused
# its run directory's traces/ holding the other modes' traces, half-way through the workflow.
RULE_DIRECTORIES = ("benchmarks", "calibration", "cluster", "cost_estimate", "logs", "provenance", "reference",
                    "reproducibility", "runs", "summary", "sweep", "tables", "trims", "validation")


def check_trace_store(store, source):
    """ReproError where a local trace store (relative to the workflow directory) keeps its traces
    where the workflow downloads them, or lies in a directory the rules write."""
    if store.startswith("gs://"):
        return
    # resolved: a store reached through a symbolic link to results/ keeps its traces there too
    real = Path(os.path.realpath(store))
    if real / "traces" == Path(os.path.realpath(DOWNLOADED_TRACES)):
        raise ReproError(f"{source}: trace_store: {store!r} keeps the store's traces in {DOWNLOADED_TRACES}, where the "
                         "workflow downloads them (and deletes them before each download); expected a directory of "
                         "its own, such as results/store")
    written = next((name for name in RULE_DIRECTORIES if real.is_relative_to(os.path.realpath(Path("results", name)))),
                   None)
    if written is not None:
        raise ReproError(f"{source}: trace_store: {store!r} lies in results/{written}, which the workflow's rules write; "
                         "expected a directory of its own, such as results/store")


def _check_output_names(config, source):
    """ReproError where a configured name gives a file the workflow writes for something else too:
    Snakemake ended in AmbiguousRuleException, or read the other's file (an experiment `trims`'s
    cost table was given the TrIMS summary, results/summary/trims.json)."""
    from repro.trims.figures import FIGURES as TRIMS_FIGURES

    if "trims" in config["pecan"]["experiments"]:
        raise ReproError(f"{source}: pecan.experiments.trims: its trace summary would be results/summary/trims.json, "
                         "the TrIMS experiments' summary; expected a name of its own")
    # drawn to plots/<name>.pdf, as a TrIMS figure is, and each experiment's validation_<experiment>
    taken = {**{name: "a TrIMS figure (plots.trims)" for name in TRIMS_FIGURES},
             **{f"validation_{name}": f"experiment {name}'s validation figure" for name in config["pecan"]["experiments"]}}
    for kind in ("figures", "comparisons"):
        clash = next((name for name in config.get("plots", {}).get(kind, {}) if name in taken), None)
        if clash is not None:
            raise ReproError(f"{source}: plots.{kind}.{clash}: the name of {taken[clash]}, both drawn to "
                             f"plots/{clash}.pdf; expected a name of its own")


def _check_model_directory(base_path, backend, source):
    """ReproError where trims.base_path holds the model store's state file, which the store refuses
    to write among the models it reads: named here, not when the TrIMS runs reach the store's start."""
    from repro.trims.service import STATE_NAME

    state = Path("results", "cluster", backend, STATE_NAME)
    if Path(os.path.realpath(state)).is_relative_to(os.path.realpath(base_path)):
        raise ReproError(f"{source}: trims.base_path: {base_path!r} holds {state}, the model store's state file; "
                         "expected a directory of models only, such as results/trims/models")


def _check_store_budget(trims, source):
    """ReproError where the model store's budget cannot hold the largest model of the set the
    TrIMS runs use: every shared request for it failed, after the models were built and the
    original runs done ("needs N MiB, more than the store's budget")."""
    from repro.trims.models import parameter_count

    server = trims.get("server", {})
    if "memory_mb" not in server:
        return
    selected = trims["models"][trims.get("model_set", "small")]
    largest = max(selected, key=parameter_count)
    need = parameter_count(largest) * 4  # float32 weights, as model.params holds them
    if need > server["memory_mb"] << 20:
        raise ReproError(f"{source}: trims.server.memory_mb: {server['memory_mb']} MiB cannot hold {largest} "
                         f"({math.ceil(need / (1 << 20))} MiB of weights), of trims.models.{trims.get('model_set', 'small')}; "
                         "expected a budget at least that large")


def _check_directories(config, source):
    """ReproError naming the key whose local directory (PATH_KEYS) is, or lies under, something that
    is not a directory (/dev/null, a file): refused here, not by the step that first writes there."""
    for keys in PATH_KEYS:
        value = config
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value and not value.startswith("gs://"):
            blocker = not_a_directory(value)
            if blocker is not None:
                where = "" if blocker == Path(value) else f" lies under {str(blocker)!r}, which"
                raise ReproError(f"{source}: {'.'.join(keys)}: {value!r}{where} is not a directory; expected a "
                                 "directory, or a path where one can be made")


# the worker counts a placement reads from its mode (the others decide theirs, or run none)
WORKER_COUNTS = {"fixed": ("remote_workers", "local_workers"), "fastflow": ("remote_workers",)}


def _check_worker_counts(name, mode, cluster, source):
    """A mode's worker counts: only where its placement reads them (elsewhere they were ignored, the
    run reporting others), each no more than the cluster has (they were run and billed)."""
    read = WORKER_COUNTS.get(mode["placement"], ())
    for key in ("remote_workers", "local_workers"):
        if key in mode and key not in read:
            raise ReproError(f"{source}: pecan.modes.{name}.{key}: placement {mode['placement']!r} does not read it "
                             f"(it decides its workers, or runs none); expected it only with placement "
                             f"{' or '.join(p for p, keys in WORKER_COUNTS.items() if key in keys)}")
        limit = cluster[f"max_{key}"]
        if key in mode and mode[key] > limit:
            raise ReproError(f"{source}: pecan.modes.{name}.{key}: {mode[key]}, more than the cluster's "
                             f"pecan.cluster.max_{key} {limit}; expected a deployment the cluster can run")
    # the placements that decide their own workers take them from the cluster's bounds: none, none run
    bounds = {"cachew": ("max_remote_workers",), "autoplacement": ("max_remote_workers", "max_local_workers")}
    keys = bounds.get(mode["placement"], ())
    if keys and not any(mode.get(key, cluster[key]) for key in keys):  # a mode's own bound before the cluster's
        named = " and ".join(f"pecan.modes.{name}.{key}" if key in mode else f"pecan.cluster.{key}" for key in keys)
        raise ReproError(f"{source}: pecan.modes.{name}: placement {mode['placement']!r} starts its workers within "
                         f"{named}, which allow none; expected at least 1")


def _check_fixed_deployment(name, mode, source):
    """A fixed placement's workers: at least one (without any, nothing preprocesses: every run divided
    by a rate of 0)."""
    if mode.get("remote_workers", 0) + mode.get("local_workers", 0) == 0:
        raise ReproError(f"{source}: pecan.modes.{name}: a fixed deployment of no workers preprocesses nothing; "
                         "expected remote_workers or local_workers of at least 1 (collocated is the placement "
                         "without workers)")


def check_references(config, source="config"):
    """Cross-key checks a JSON schema cannot express: names that must exist elsewhere in the config."""
    _check_directories(config, source)
    check_trace_store(config["trace_store"], source)
    pecan = config["pecan"]
    for name, exp in pecan["experiments"].items():
        where = f"{source}: pecan.experiments.{name}"
        if exp["model"] not in pecan["models"]:
            raise ReproError(f"{where}.model: unknown model {exp['model']!r}; expected one of {sorted(pecan['models'])}")
        if exp["accelerator"] not in pecan["accelerators"]:
            raise ReproError(f"{where}.accelerator: unknown accelerator {exp['accelerator']!r}; "
                             f"expected one of {sorted(pecan['accelerators'])}")
        accel = pecan["accelerators"][exp["accelerator"]]
        if exp["model"] not in accel["max_batches_per_s"]:
            raise ReproError(f"{where}: accelerator {exp['accelerator']!r} has no max_batches_per_s for model {exp['model']!r}")
        if accel["tpu_type"] not in pecan["prices"]["tpu"]:
            raise ReproError(f"{where}: no price for TPU type {accel['tpu_type']!r} in pecan.prices.tpu")
        for mode in exp["modes"]:
            if mode not in pecan["modes"]:
                raise ReproError(f"{where}.modes: unknown mode {mode!r}; expected one of {sorted(pecan['modes'])}")
            check_run_size(where, pecan["models"][exp["model"]], mode, pecan["modes"][mode], pecan["cluster"])
    _check_tfdata_step_times(pecan, source)
    tf_ops = config.get("calibration", {}).get("ops") == "tf"
    if pecan["engine"] == "tfdata" or tf_ops:  # each pipeline's TF form runs (repro.pecan.tfdata.ops)
        from repro.pecan.pipelines import PIPELINES

        for name, model in pecan["models"].items():
            if not PIPELINES[model["pipeline"]].tf_form:
                expected = "calibration.ops: pillow" if tf_ops else "engine: model"
                raise ReproError(f"{source}: pecan.models.{name}.pipeline: pipeline {model['pipeline']!r} has no TF form "
                                 f"(an op without Op.tf); expected {expected}, or a pipeline with one")
        sweep = pecan.get("tfdata", {}).get("sweep", [])
        if sweep and config["backend"] == "local":  # the engine's workers run on this machine, each on its CPUs
            from repro.pecan.tfdata import check_sweep, cpus_available

            threads = pecan["tfdata"].get("worker_threads", 1)
            try:
                check_sweep(sweep, threads, cpus_available())
            except ReproError as exc:
                raise ReproError(f"{source}: {exc}") from None
    from repro.pecan.policies import fastflow_workers

    for name, mode in pecan["modes"].items():
        _check_worker_counts(name, mode, pecan["cluster"], source)
        if mode["placement"] == "fixed":
            _check_fixed_deployment(name, mode, source)
        if mode["placement"] == "fastflow":
            try:
                fastflow_workers(mode.get("remote_workers", 2), f"pecan.modes.{name}.remote_workers")
            except ReproError as exc:
                raise ReproError(f"{source}: {exc}") from None
    if "ssh" in config:
        run = config["ssh"]["run"]
        check_placeholders(run["command"], SSH_PLACEHOLDERS["command"], f"{source}: ssh.run.command")
        for name, value in run["env"].items():
            check_placeholders(value, SSH_PLACEHOLDERS["env"], f"{source}: ssh.run.env.{name}")
    style = config.get("plots", {}).get("style", {})
    if "dpi" in style:
        check_figure_pixels(style, f"{source}: plots.style")
    from repro.trims.models import ARCHITECTURES
    from repro.trims.workload import check_params

    trims = config["trims"]
    for model_set, models in trims["models"].items():
        unknown = sorted(set(models) - set(ARCHITECTURES))
        if unknown:
            raise ReproError(f"{source}: trims.models.{model_set}: unknown model(s) {unknown}; "
                             f"expected some of {sorted(ARCHITECTURES)}")
    _check_store_budget(trims, source)
    _check_model_directory(trims["base_path"], config["backend"], source)
    for name, params in trims.get("distributions", {}).get("runs", {}).items():
        try:
            check_params(name, params)
        except ReproError as exc:
            raise ReproError(f"{source}: trims.distributions.runs.{name}: {exc}") from None
    backend = get_backend(config["backend"])
    if not backend.runs_trims and config.get("plots", {}).get("trims"):
        raise ReproError(f"{source}: plots.trims: the TrIMS experiments run on the local backend only; "
                         f"set plots.trims to [] with backend: {backend.name}")
    from repro.pecan.presets import REFERENCE_PLOTS, reference_of_another_workload

    _check_output_names(config, source)
    for name, figure in config.get("plots", {}).get("figures", {}).items():
        if figure["experiment"] not in pecan["experiments"]:
            raise ReproError(f"{source}: plots.figures.{name}.experiment: unknown experiment {figure['experiment']!r}")
        if figure.get("reference") and figure["reference"] not in REFERENCE_PLOTS:
            raise ReproError(f"{source}: plots.figures.{name}.reference: unknown reference {figure['reference']!r}; "
                             f"expected one of {sorted(REFERENCE_PLOTS)}")
        listed = pecan["experiments"][figure["experiment"]]["modes"]
        unknown = [m for m in figure.get("modes", []) if m not in listed]
        if unknown:
            raise ReproError(f"{source}: plots.figures.{name}.modes: unknown mode(s) {unknown}; "
                             f"expected modes of experiment {figure['experiment']!r} ({', '.join(listed)})")
        drawn = figure.get("modes", listed)
        workload = pecan["experiments"][figure["experiment"]]
        another = figure.get("reference") and reference_of_another_workload(
            figure["reference"], figure["experiment"], workload["model"], workload["accelerator"])
        if another:
            raise ReproError(f"{source}: plots.figures.{name}.reference: {another}")
        if figure.get("reference") and not set(REFERENCE_PLOTS[figure["reference"]]) & set(drawn):
            # the figure drew no reference value and judged none: "0 of 0 reference values inside"
            raise ReproError(f"{source}: plots.figures.{name}.reference: {figure['reference']!r} holds values for modes "
                             f"{', '.join(REFERENCE_PLOTS[figure['reference']])}, none of them drawn ({', '.join(drawn)}); "
                             "expected a reference of the figure's modes, or none")
    from repro.pecan.reproducibility import check_figures

    check_figures(config, config.get("reproducibility", {}).get("figures", []), f"{source}: reproducibility.figures")
    from repro.pecan.comparisons import check_comparison

    for name, spec in config.get("plots", {}).get("comparisons", {}).items():
        if name in pecan["experiments"] or name in config["plots"]["figures"]:
            raise ReproError(f"{source}: plots.comparisons.{name}: the name of an experiment or figure too; "
                             "expected a name of its own (its table and plot are named after it)")
        check_comparison(name, spec, pecan["experiments"], source)
    for key, extra, module in needed_extras(config):
        _require_extra(source, key, extra, module)


def needed_extras(config):
    """[key, extra, module] for each optional part of the install (pyproject.toml's extras) that
    a setting of this (checked) config needs."""
    from repro.pecan.engines import ENGINES

    needed = []
    backend = get_backend(config["backend"])
    if backend.extra:
        needed.append(["backend", *backend.extra])
    engine = ENGINES[config["pecan"]["engine"]]
    if engine.extra:
        needed.append(["pecan.engine", *engine.extra])
    if config.get("calibration", {}).get("ops") == "tf":  # the pipelines' TF forms (repro.pecan.tfdata.calibrate)
        needed.append(["calibration.ops", "tfdata", "tensorflow"])
    for key, value in (("trace_store", config.get("trace_store")),
                       ("trims.asset_store", config["trims"].get("asset_store"))):
        if str(value).startswith("gs://"):
            needed.append([key, "gcs", "google.cloud.storage"])
    return needed


def _require_extra(source, key, extra, module):
    """A setting that needs an optional part of the install (pyproject.toml's extras) names it."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing too
        found = False
    if not found:
        raise ReproError(f"{source}: {key}: needs the '{extra}' extra (pip install -e '.[{extra}]')")


def read_config_file(path):
    """The mapping of config keys in the YAML file `path`, unchecked; ReproError naming the file (and,
    for invalid YAML or a key written twice, the line) otherwise. Bounded as repro.yamlfile bounds
    every YAML file a user gives: size, nesting, aliases expanded."""
    from repro.yamlfile import read_yaml_file

    path = Path(path)
    try:
        config = read_yaml_file(path, "a YAML config")
    except OSError as exc:
        raise ReproError(f"{path}: cannot read config: {exc.strerror}") from None
    if not isinstance(config, dict):
        raise ReproError(f"{path}: expected a mapping of config keys")
    return config


def load_config(path, base="config/config.yaml"):
    """The config at `path`: a whole config as it is; an overlay (a file that lacks keys the schema
    requires, such as config/examples/tfdata.yaml) merged over `base`, the workflow's defaults, as
    Snakemake merges `--configfile path` over them."""
    config = read_config_file(path)
    try:
        return validate_config(copy.deepcopy(config), str(path))
    except ReproError as exc:
        if "is a required property" not in str(exc):
            raise
        base = Path(base)
        if not base.is_file():
            raise ReproError(f"{exc}; as an overlay it would be merged over {base}, which is not a file here (run the "
                             "command in the workflow's directory)") from None
        if base.resolve() == Path(path).resolve():
            raise
    return check_config_files([path], base)


def merge_over(base, override):
    """`override` merged over `base` as Snakemake merges --configfile files: mappings key by key,
    any other value replaced."""
    merged = dict(base)
    for key, value in override.items():
        merged[key] = merge_over(merged[key], value) if isinstance(value, dict) and isinstance(
            merged.get(key), dict) else value
    return merged


def check_config_files(paths, base="config/config.yaml"):
    """The config Snakemake makes of `base` and `--configfile paths`, checked as the workflow checks it."""
    config = read_config_file(base)
    for path in paths:
        config = merge_over(config, read_config_file(path))
    return validate_config(config, " + ".join(str(p) for p in [base, *paths]))
