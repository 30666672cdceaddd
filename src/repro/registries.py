"""Every registry of names in one table: where it lives, its names, and the config keys that take them.

Each registry stays beside what it registers (a pipeline's ops, a backend's module, an engine's run
function); this table is how the rest of the package finds them. The config schema's allowed names
(`repro.config.schema`), `repro list` and the documentation (docs/ARCHITECTURE.md, config/README.md,
checked by tests/test_registries.py) take the names from here, so adding an entry to a registry is
the whole of adding a name.
"""

import copy
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Registry:
    what: str
    where: str  # the table to add an entry to
    names: Callable  # () -> the registered names, in registration order
    keys: tuple  # the config keys (and command-line flags) whose values are its names
    schema: tuple = ()  # paths into the config schema whose value becomes the list of names (an enum, a default)


def _backends():
    from repro.backends import backend_names

    return backend_names()


def _pipelines():
    from repro.pecan.pipelines import PIPELINES

    return list(PIPELINES)


def _engines():
    from repro.pecan.engines import ENGINES

    return list(ENGINES)


def _presets():
    from repro.pecan.presets import PRESETS

    return list(PRESETS)


def _placements():
    from repro.pecan.cluster import PLACEMENTS

    return list(PLACEMENTS)


def _distributions():
    from repro.trims.workload import DISTRIBUTIONS

    return list(DISTRIBUTIONS)


def _policies():
    from repro.trims.eviction import POLICIES

    return list(POLICIES)


def _devices():
    from repro.trims.modelstore import DEVICE_CHOICES

    return list(DEVICE_CHOICES)


def _trims_figures():
    from repro.trims.figures import FIGURES

    return list(FIGURES)


def _at(*keys):
    """The schema path of a config key: each key under `properties` ("*": any entry of a mapping)."""
    path = []
    for key in keys:
        path += ["additionalProperties"] if key == "*" else ["properties", key]
    return tuple(path)


REGISTRIES = {
    "backends": Registry("where runs execute", "a module of src/repro/backends/ defining BACKEND", _backends,
                         ("backend", "repro pecan run --backend"), (_at("backend") + ("enum",),)),
    "pipelines": Registry("preprocessing pipelines", "PIPELINES in src/repro/pecan/pipelines.py", _pipelines,
                          ("pecan.models.<m>.pipeline", "repro pecan calibrate --pipeline"),
                          (_at("pecan", "models", "*", "pipeline") + ("enum",),)),
    "engines": Registry("what runs a mode", "ENGINES in src/repro/pecan/engines.py", _engines, ("pecan.engine",),
                        (_at("pecan", "engine") + ("enum",),)),
    "placements": Registry("where a mode's preprocessing runs", "PLACEMENTS in src/repro/pecan/cluster.py",
                           _placements, ("pecan.modes.<mode>.placement",),
                           (_at("pecan", "modes", "*", "placement") + ("enum",),)),
    "presets": Registry("calibration presets", "PRESETS in src/repro/pecan/presets.py", _presets,
                        ("calibration.preset",), (_at("calibration", "preset") + ("enum",),)),
    "distributions": Registry("TrIMS request distributions", "DISTRIBUTIONS in src/repro/trims/workload.py",
                              _distributions, ("trims.distributions.runs", "repro trims client --distribution"),
                              (_at("trims", "distributions", "runs") + ("propertyNames", "enum"),)),
    "eviction": Registry("TrIMS model store eviction policies", "POLICIES in src/repro/trims/eviction.py", _policies,
                         ("trims.server.eviction", "repro trims server run --eviction"),
                         (_at("trims", "server", "eviction") + ("enum",),)),
    "devices": Registry("where the TrIMS store keeps models and clients infer",
                        "DEVICE_CHOICES in src/repro/trims/modelstore.py", _devices,
                        ("trims.server.device", "repro trims ... --device"), (_at("trims", "server", "device") + ("enum",),)),
    "trims_figures": Registry("TrIMS figures", "FIGURES in src/repro/trims/figures.py", _trims_figures,
                              ("plots.trims", "repro trims plot"),
                              (_at("plots", "trims") + ("items", "enum"), _at("plots", "trims") + ("default",))),
}


def names(registry):
    """The names registered in `registry` (a key of REGISTRIES)."""
    return REGISTRIES[registry].names()


def fill_schema(tree):
    """The config schema `tree` with every registry's names put where its `schema` paths point, and the
    settings sections of the engines and backends that bring their own schema."""
    from repro.backends import get_backend
    from repro.pecan.engines import ENGINES

    for registry in REGISTRIES.values():
        for path in registry.schema:
            node = tree
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = registry.names()
    pecan = tree["properties"]["pecan"]["properties"]
    for engine in ENGINES.values():
        if engine.section and engine.schema is not None:
            pecan.setdefault(engine.section, copy.deepcopy(engine.schema))  # each call's own (see config.schema)
    for name in _backends():
        schema = get_backend(name).schema
        if schema is not None:
            tree["properties"].setdefault(name, copy.deepcopy(schema))
    return tree
