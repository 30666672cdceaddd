"""repro.rulefunctions: the rules' input and params functions."""

from pathlib import Path
from types import SimpleNamespace

from repro.rulefunctions import (
    beside_input,
    by_wildcards,
    output_dir,
    per_mode,
    untracked,
)

REPO = Path(__file__).resolve().parents[1]
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


def test_all_asks_for_trims_runs_only_where_trims_figures_are_configured():
    from repro.config import load_config
    from repro.rulefunctions import run_targets

    config = load_config(REPO / "config" / "config.yaml")
    targets = run_targets(config)
    assert "results/runs/ResNet50_v2-8/pecan/metrics.json" in targets
    assert "results/trims/runs/distribution/uniform-c1/report.json" in targets
    assert any(t.startswith("results/trims/runs/compare/") for t in targets)
    config["plots"]["trims"] = []  # as backends other than local require
    assert run_targets(config) == [t for t in targets if not t.startswith("results/trims/")]


def test_a_comparison_figure_has_provenance_over_its_workloads():
    from repro.config import load_config
    from repro.rulefunctions import all_targets, figure_data
    from repro.rulesettings import provenance_settings

    config = load_config(REPO / "config" / "config.yaml")
    calibrations = {name: [f"results/calibration/{name}.json"] for name in config["pecan"]["experiments"]}
    data = figure_data(config, calibrations)(SimpleNamespace(any_figure="Cachew_AP_FF"))
    workloads = config["plots"]["comparisons"]["Cachew_AP_FF"]["workloads"]
    assert data == ["results/tables/Cachew_AP_FF.csv", *sorted(f"results/calibration/{w}.json" for w in workloads)]
    settings = provenance_settings(config, "Cachew_AP_FF")
    assert sorted(settings["costs"]) == sorted(workloads) and sorted(settings["runs"]) == sorted(workloads)
    assert settings["figure"]["option"] == "autoplacement"
    before = provenance_settings(config, "AutoOrder_Cost")
    config["pecan"]["prices"]["worker"] *= 2  # a setting its costs read: its provenance (and the record) changes
    assert provenance_settings(config, "AutoOrder_Cost") != before
    assert "results/provenance/Cachew_AP_FF.json" in [str(t) for t in all_targets(config, lambda path, **_: path)]
