from repro.config import check_references
from repro.workflow import cost_settings, figure_settings, run_settings

check_references(config, "config")

BACKEND = config["backend"]
PIPELINES = sorted(
    {model["pipeline"] for model in config["pecan"]["models"].values()}
    | {"resnet", "retinanet"}
)
CALIBRATIONS = expand("results/calibration/{pipeline}.json", pipeline=PIPELINES)
STATE = f"results/cluster/{BACKEND}/state.json"
STATUS = f"results/cluster/{BACKEND}/status/{{experiment}}/{{mode}}.json"


wildcard_constraints:
    experiment="|".join(config["pecan"]["experiments"]),
    mode="|".join(config["pecan"]["modes"]),
    pipeline="resnet|retinanet",
    figure="|".join(config["plots"]["figures"]) or "no-figures",
    backend=BACKEND,


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
    return expand(
        "plots/{figure}.{ext}", figure=config["plots"]["figures"], ext=["pdf", "png"]
    )
