"""Loading and checking the workflow configuration (the same schema Snakemake validates against)."""

from pathlib import Path

import jsonschema
import yaml

from repro.errors import ReproError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def _with_defaults(validator_class):
    """A validator that fills in each property's `default` (as snakemake.utils.validate does)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(name, sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate_config(config, source="config"):
    """Fill defaults and check `config`; raise ReproError naming the key at fault."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ReproError(f"{source}: {key}: {error.message}")
    if config["backend"] == "ssh" and "ssh" not in config:
        raise ReproError(f"{source}: ssh: required when backend is ssh (hosts, known_hosts, ...)")
    check_references(config, source)
    return config


def check_references(config, source="config"):
    """Cross-key checks a JSON schema cannot express: names that must exist elsewhere in the config."""
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
    from repro.trims.models import ARCHITECTURES
    from repro.trims.workload import distribution

    trims = config["trims"]
    for model_set, models in trims["models"].items():
        unknown = sorted(set(models) - set(ARCHITECTURES))
        if unknown:
            raise ReproError(f"{source}: trims.models.{model_set}: unknown model(s) {unknown}; "
                             f"expected some of {sorted(ARCHITECTURES)}")
    for name, params in trims.get("distributions", {}).get("runs", {}).items():
        try:
            distribution(name, params)
        except ReproError as exc:
            raise ReproError(f"{source}: trims.distributions.runs.{name}: {exc}") from None
    if config.get("backend") == "ssh" and config.get("plots", {}).get("trims"):
        raise ReproError(f"{source}: plots.trims: the TrIMS experiments run on the local backend only; "
                         "set plots.trims to [] with backend: ssh")
    for name, figure in config.get("plots", {}).get("figures", {}).items():
        if figure["experiment"] not in pecan["experiments"]:
            raise ReproError(f"{source}: plots.figures.{name}.experiment: unknown experiment {figure['experiment']!r}")


def load_config(path):
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ReproError(f"{path}: cannot read config: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ReproError(f"{path}: not a text file (expected a YAML config)") from None
    except yaml.YAMLError as exc:
        raise ReproError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(config, dict):
        raise ReproError(f"{path}: expected a mapping of config keys")
    return validate_config(config, str(path))
