import re

from repro.config import check_references
from repro.workflow import (
    cost_settings,
    figure_settings,
    run_settings,
    trims_client_settings,
    trims_models,
)

check_references(config, "config")

BACKEND = config["backend"]
PIPELINES = sorted(
    {model["pipeline"] for model in config["pecan"]["models"].values()}
    | {"resnet", "retinanet"}
)
CALIBRATIONS = expand("results/calibration/{pipeline}.json", pipeline=PIPELINES)
STATE = f"results/cluster/{BACKEND}/state.json"
STATUS = f"results/cluster/{BACKEND}/status/{{job}}.json"
TRIMS_MODELS = trims_models(config)
ASSETS_IN_GCS = config["trims"]["asset_store"].startswith("gs://")
TRIMS_DISTRIBUTIONS = config["trims"]["distributions"]["runs"]
TRIMS_CONCURRENCY = config["trims"]["distributions"]["concurrency"]


wildcard_constraints:
    experiment="|".join(config["pecan"]["experiments"]),
    mode="|".join(config["pecan"]["modes"]),
    pipeline="resnet|retinanet",
    figure="|".join(config["plots"]["figures"]) or "no-figures",
    backend=BACKEND,
    job="[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*",
    model="|".join(re.escape(m) for m in TRIMS_MODELS),
    distribution="|".join(TRIMS_DISTRIBUTIONS) or "no-distributions",
    concurrency=r"\d+",


def modes_of(experiment):
    return config["pecan"]["experiments"][experiment]["modes"]


def run_targets():
    """Every run's metrics: requested directly, so a deleted run directory is redone."""
    return [
        f"results/runs/{experiment}/{mode}/metrics.json"
        for experiment, spec in config["pecan"]["experiments"].items()
        for mode in spec["modes"]
    ]


def figure_targets():
    figures = list(config["plots"]["figures"]) + config["plots"]["trims"]
    return expand("plots/{figure}.{ext}", figure=figures, ext=["pdf", "png"])
