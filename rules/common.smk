import re
import time

from repro.workflow import (
    cluster_settings,
    cost_settings,
    figure_settings,
    run_settings,
    settings_digest,
    trims_client_settings,
    trims_models,
    trims_store_settings,
)
from repro.trims.service import stop_store_started_since

INVOCATION_STARTED = time.time()
BACKEND = config["backend"]
CLUSTER_SETTINGS = cluster_settings(config)
PIPELINES = sorted(
    {model["pipeline"] for model in config["pecan"]["models"].values()}
    | {"resnet", "retinanet"}
)
CALIBRATIONS = expand("results/calibration/{pipeline}.json", pipeline=PIPELINES)
STATE = f"results/cluster/{BACKEND}/state.json"
TRIMS_STORE = f"results/cluster/{BACKEND}/trims-store.json"
TRIMS_STORE_SETTINGS = trims_store_settings(config)
TRIMS_MODELS = trims_models(config)
ASSETS_IN_GCS = config["trims"]["asset_store"].startswith("gs://")
TRIMS_DISTRIBUTIONS = config["trims"]["distributions"]["runs"]
TRIMS_CONCURRENCY = config["trims"]["distributions"]["concurrency"]


def one_of(names, none):
    """A wildcard constraint matching exactly these names (`none` when there are none)."""
    return "|".join(re.escape(name) for name in names) or none


wildcard_constraints:
    experiment=one_of(config["pecan"]["experiments"], "no-experiments"),
    mode=one_of(config["pecan"]["modes"], "no-modes"),
    pipeline=one_of(PIPELINES, "no-pipelines"),
    figure=one_of(config["plots"]["figures"], "no-figures"),
    backend=re.escape(BACKEND),
    trims_job=r"[A-Za-z0-9_][A-Za-z0-9_.-]*",
    model=one_of(TRIMS_MODELS, "no-models"),
    distribution=one_of(TRIMS_DISTRIBUTIONS, "no-distributions"),
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
