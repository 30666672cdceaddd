"""The package's layers (docs/ARCHITECTURE.md): a module imports only from its own layer (none of
the programs from another program) or the layers below, and no chain of imports comes back to where it started.

Every import counts, whether at the top of a module or inside a function, and so does a module
named as a string to import_module (the command groups `repro.commands` imports on demand).
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top. A name ending in ".*" stands for a package and everything in it; the most specific
# name that matches a module places it.
LAYERS = [
    ("base", ["repro", "repro.errors", "repro.fsutil", "repro.processes", "repro.machine", "repro.stats",
              "repro.allocator", "repro.pool", "repro.commandpath", "repro.wildcards", "repro.settings",
              "repro.sshconnect", "repro.yamlfile", "repro.stopsignals", "repro.invocation"]),
    ("domain", ["repro.traces.*", "repro.tracestore", "repro.pecan.*", "repro.trims.*"]),
    ("backends", ["repro.backends.*"]),
    # the workflow's glue, and the one Pecan module that runs the workflow's chain from the whole config
    ("orchestration", ["repro.config", "repro.checkedconfig", "repro.rulesettings", "repro.rulefunctions",
                       "repro.snakemake_adapter", "repro.plots", "repro.provenance", "repro.doctor", "repro.registries",
                       "repro.pecan.reproducibility"]),
    ("command groups", ["repro.pecan.cli", "repro.pecan.tfdata.cli", "repro.trims.cli"]),
    ("command tree", ["repro.commands"]),
    ("programs", ["repro.cli", "repro.trims.originals"]),
]
# layers whose modules import none of each other: each program stands on the layers below alone
INDEPENDENT = {"programs"}


def modules(src=SRC):
    """{module name: (path, is a package)} for every module under src/repro."""
    found = {}
    for path in sorted((src / "repro").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports(src=SRC):
    """{module: {imported repro module: first line}}: every import of a repro module, anywhere in
    the module (a function's lazy import too), and every import_module-style call naming one."""
    known = modules(src)

    def resolve(name):
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, (path, package) in known.items():
        here = module if package else module.rpartition(".")[0]
        edges = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    full = ".".join([*base, node.module] if node.module else base)
                else:
                    full = node.module or ""
                # `from package import module` imports the module; `from module import name` the module
                targets = [f"{full}.{alias.name}" if f"{full}.{alias.name}" in known else full for alias in node.names]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                if isinstance(node.args[0].value, str) and node.args[0].value in known:
                    targets = [node.args[0].value]
            for target in targets:
                if target == "repro" or target.startswith("repro."):
                    resolved = resolve(target)
                    if resolved and resolved != module:
                        edges.setdefault(resolved, node.lineno)
        graph[module] = edges
    return graph


def layer_of(module):
    """(index, name) of the layer that places `module`, or None."""
    best = None
    for index, (name, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if pattern.endswith(".*"):
                package = pattern[:-2]
                match = module == package or module.startswith(package + ".")
                weight = len(package)
            else:
                match, weight = module == pattern, len(pattern) + 0.5  # an exact name beats its package
            if match and (best is None or weight > best[0]):
                best = (weight, index, name)
    return best and best[1:]


def upward_imports(graph):
    found = []
    for module, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            (low, low_name), (high, high_name) = layer_of(module), layer_of(target)
            if high > low or (high == low and low_name in INDEPENDENT):
                found.append(f"{module} (line {line}, {low_name}) imports {target} ({high_name})")
    return found


def circles(graph):
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    unplaced = [module for module in modules() if layer_of(module) is None]
    assert not unplaced, f"modules in no layer (add them to LAYERS here and to docs/ARCHITECTURE.md): {unplaced}"


def test_every_layer_entry_names_a_module():
    known = modules()
    stale = [pattern for _, patterns in LAYERS for pattern in patterns
             if not any(m == pattern.removesuffix(".*") or m.startswith(pattern.removesuffix("*")) for m in known)]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_import_runs_upward():
    upward = upward_imports(imports())
    assert not upward, "imports from a lower layer to a higher one, or between programs:\n" + "\n".join(upward)


def test_no_import_circle():
    found = circles(imports())
    assert not found, f"import circles: {found}"


@pytest.mark.parametrize("source, expected", [
    ("from repro.cli import main\n", {"repro.cli"}),  # a lower module importing a program
    ("def f():\n    from repro import config\n", {"repro.config"}),  # lazy, `from package import module`
    ("import importlib\nimportlib.import_module('repro.trims.cli')\n", {"repro.trims.cli"}),
])
def test_the_check_sees_each_kind_of_import(tmp_path, source, expected):
    for name in ("__init__", "errors", "cli", "config"):
        (tmp_path / "repro").mkdir(exist_ok=True)
        (tmp_path / "repro" / f"{name}.py").write_text("")
    (tmp_path / "repro" / "trims").mkdir()
    (tmp_path / "repro" / "trims" / "__init__.py").write_text("")
    (tmp_path / "repro" / "trims" / "cli.py").write_text("")
    (tmp_path / "repro" / "errors.py").write_text(source)
    graph = imports(tmp_path)
    assert set(graph["repro.errors"]) == expected
    assert upward_imports({"repro.errors": graph["repro.errors"]})
