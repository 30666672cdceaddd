"""repro.rulefunctions: the rules' input and params functions."""

from types import SimpleNamespace

from repro.rulefunctions import (
    beside_input,
    by_wildcards,
    output_dir,
    per_mode,
    untracked,
)

CONFIG = {"pecan": {"experiments": {"E": {"modes": ["a", "b"]}}}}


def test_params_functions():
    wildcards = SimpleNamespace(experiment="E", mode="a")
    assert by_wildcards(lambda config, *values: values, CONFIG, "experiment", "mode")(wildcards) == ("E", "a")
    output = SimpleNamespace(log="results/runs/E/a/run.log")
    assert output_dir("log")(wildcards, output) == "results/runs/E/a"
    assert output_dir(levels=2)(wildcards, ["base/model/manifest.json"]) == "base"
    assert beside_input(("traces", "x"))(wildcards, ["r/c/report.json"]) == ["r/c/traces/x"]
    assert untracked({"k": 1})(wildcards, output) == {"k": 1}
    assert per_mode(CONFIG, "{experiment}-{mode}")(wildcards) == ["E-a", "E-b"]
