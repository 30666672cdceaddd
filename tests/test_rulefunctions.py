"""repro.rulefunctions: the rules' input and params functions and the Snakemake version check."""

from types import SimpleNamespace

import pytest

from repro.rulefunctions import (
    _release,
    beside_input,
    by_wildcards,
    output_dir,
    per_mode,
    require_snakemake,
    untracked,
)

CONFIG = {"pecan": {"experiments": {"E": {"modes": ["a", "b"]}}}}


def test_release_orders_versions():
    assert _release("9.27.1") == (9, 27, 1)
    assert _release("9.27.1.dev3+g12ab") == (9, 27, 1)
    assert _release("9") == _release("9.0") == (9, 0, 0)
    assert _release("10.0") > _release("9.27.1")


def test_require_snakemake():
    from snakemake.exceptions import WorkflowError

    require_snakemake("9.0")
    with pytest.raises(WorkflowError, match="Expecting Snakemake version 999.0"):
        require_snakemake("999.0")


def test_params_functions():
    wildcards = SimpleNamespace(experiment="E", mode="a")
    assert by_wildcards(lambda config, *values: values, CONFIG, "experiment", "mode")(wildcards) == ("E", "a")
    output = SimpleNamespace(log="results/runs/E/a/run.log")
    assert output_dir("log")(wildcards, output) == "results/runs/E/a"
    assert output_dir(levels=2)(wildcards, ["base/model/manifest.json"]) == "base"
    assert beside_input(("traces", "x"))(wildcards, ["r/c/report.json"]) == ["r/c/traces/x"]
    assert untracked({"k": 1})(wildcards, output) == {"k": 1}
    assert per_mode(CONFIG, "{experiment}-{mode}")(wildcards) == ["E-a", "E-b"]
