"""Adding a workload plans only its own jobs: each run's params carry only what it reads, and each
pipeline is calibrated by a job of its own."""

import copy
from pathlib import Path

import pytest

from repro.config import merge_over, read_config_file, validate_config
from repro.pecan.presets import pipeline_costs
from repro.pecan.calibrate import calibrate
from repro.rulesettings import calibrated_pipelines, cost_settings, experiment_pipelines, run_settings

REPO = Path(__file__).resolve().parents[1]


def with_workload(config):
    """The config plus one workload, merged from an override file as Snakemake merges --configfile: SimCLR
    on the v3-8 (a new bound in an accelerator entry other runs use)."""
    override = {"pecan": {"accelerators": {"v3-8": {"max_batches_per_s": {"simclr": 5.4}}},
                          "experiments": {"SimCLR_v3-8": {"model": "simclr", "accelerator": "v3-8",
                                                          "modes": ["cachew", "autoorder"]}}}}
    return validate_config(merge_over(read_config_file(REPO / "config" / "config.yaml"), override))


def test_adding_a_workload_leaves_every_existing_runs_and_tables_settings_alone(config):
    grown = with_workload(config)
    for experiment, exp in config["pecan"]["experiments"].items():
        assert experiment_pipelines(grown, [experiment]) == experiment_pipelines(config, [experiment])
        assert cost_settings(grown, experiment) == cost_settings(config, experiment)
        for mode in exp["modes"]:
            # the text Snakemake keeps as the params' rerun trigger: equal, key order included
            assert str(run_settings(grown, experiment, mode)) == str(run_settings(config, experiment, mode)), (experiment, mode)
    assert run_settings(grown, "SimCLR_v3-8", "cachew")["pecan"]["accelerators"]["v3-8"]["max_batches_per_s"] == {"simclr": 5.4}


@pytest.mark.parametrize("preset, expected", [("local", {"ResNet50_v2-8": ["resnet"], "SimCLR": ["resnet", "simclr"],
                                                         "ASRTrans": ["asr", "resnet"]}),
                                              ("artifact", {"ResNet50_v2-8": ["resnet"], "SimCLR": ["simclr"],
                                                            "ASRTrans": ["asr"]})])
def test_a_run_reads_its_own_pipelines_calibration_and_the_anchors(config, preset, expected):
    cfg = copy.deepcopy(config)
    cfg["calibration"]["preset"] = preset
    assert {e: experiment_pipelines(cfg, [e]) for e in expected} == expected
    assert calibrated_pipelines(cfg) == ["asr", "resnet", "retinanet", "simclr"]


def test_the_local_preset_relates_pipelines_by_their_cost_per_reference_kernel(config):
    calibrations = {p: calibrate(p, elements=2, repeats=1) for p in ("resnet", "asr")}
    slower = copy.deepcopy(calibrations["asr"])  # the same pipeline measured on a machine half as fast
    for key in ("declared", "autoorder"):
        slower[key]["cpu_s_per_element"] *= 2
    slower["reference_kernel"]["cpu_s"] *= 2
    costs = pipeline_costs("local", config["pecan"]["cluster"], calibrations)
    again = pipeline_costs("local", config["pecan"]["cluster"], {"resnet": calibrations["resnet"], "asr": slower})
    assert again["asr"]["declared"] == pytest.approx(costs["asr"]["declared"])
    assert costs["asr"]["declared"] / costs["resnet"]["declared"] == pytest.approx(
        calibrations["asr"]["declared"]["per_reference_kernel"] / calibrations["resnet"]["declared"]["per_reference_kernel"])
