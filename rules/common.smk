import inspect
import re
import time

from repro.commandpath import put_own_bin_first
from repro.rulesettings import (
    Settings,
    calibrated_pipelines,
    cluster_settings,
    cost_settings,
    estimate_settings,
    figure_settings,
    provenance_settings,
    run_settings,
    settings_digest,
    trims_client_settings,
    trims_models,
    trims_store_settings,
)
from repro.trims.service import stop_store_started_since
from repro.wildcards import one_of

try:
    from snakemake.common import overwrite_function_params
except ImportError:  # another Snakemake: it inspects the signature at every call

    def overwrite_function_params(func, params):
        pass


INVOCATION_STARTED = time.time()
put_own_bin_first()  # the rules run `repro` from this environment, also when it is not on PATH
BACKEND = config["backend"]
CLUSTER_SETTINGS = cluster_settings(config)
PIPELINES = calibrated_pipelines(config)
CALIBRATIONS = expand("results/calibration/{pipeline}.json", pipeline=PIPELINES)
STATE = f"results/cluster/{BACKEND}/state.json"
TRIMS_STORE = f"results/cluster/{BACKEND}/trims-store.json"
TRIMS_STORE_SETTINGS = trims_store_settings(config)
TRIMS_MODELS = trims_models(config)
ASSETS_IN_GCS = config["trims"]["asset_store"].startswith("gs://")
TRIMS_DISTRIBUTIONS = config["trims"]["distributions"]["runs"]
TRIMS_CONCURRENCY = config["trims"]["distributions"]["concurrency"]


wildcard_constraints:
    experiment=one_of(config["pecan"]["experiments"], "no-experiments"),
    mode=one_of(config["pecan"]["modes"], "no-modes"),
    figure=one_of(config["plots"]["figures"], "no-figures"),
    any_figure=one_of(
        [*config["plots"]["figures"], *config["plots"]["trims"]], "no-figures"
    ),
    backend=re.escape(BACKEND),
    trims_job=r"[A-Za-z0-9_][A-Za-z0-9_.-]*",
    model=one_of(TRIMS_MODELS, "no-models"),
    distribution=one_of(TRIMS_DISTRIBUTIONS, "no-distributions"),
    concurrency=r"\d+",


def per_job(func):
    """`func`, an input or params function, with its signature inspected once: Snakemake would call
    inspect.signature on it several times for every job it plans. Used where the jobs are many
    (one per run or per experiment)."""
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def untracked(value):
    """A param that Snakemake leaves out of the params rerun trigger: a function of the job's output
    is a derived param, whose changes the output's own triggers catch. For the settings a service
    starts with: changing them must not restart it; the status checks compare their digest.
    """
    return per_job(lambda wildcards, output: value)


def modes_of(experiment):
    return config["pecan"]["experiments"][experiment]["modes"]


def per_mode(pattern):
    """An input function: `pattern` filled in for each mode of the job's experiment (a plain
    str.format per mode: it runs once per job, and expand() costs ten times as much)."""

    def files(wildcards):
        experiment = wildcards.experiment
        return [
            pattern.format(experiment=experiment, mode=mode)
            for mode in modes_of(experiment)
        ]

    return per_job(files)


def run_targets():
    """Every run's metrics: requested directly, so a deleted run directory is redone."""
    return [
        f"results/runs/{experiment}/{mode}/metrics.json"
        for experiment, spec in config["pecan"]["experiments"].items()
        for mode in spec["modes"]
    ]


def figure_data(wildcards):
    """The data a figure is drawn from: its cost table and calibrations, or the TrIMS summary."""
    spec = config["plots"]["figures"].get(wildcards.any_figure)
    if spec is None:
        return ["results/summary/trims.json"]
    return [f"results/tables/{spec['experiment']}.csv", *CALIBRATIONS]


def reported(path, **report_args):
    """`path`, marked for Snakemake's report once it exists: `snakemake --report` then shows what
    has been built (after `make fig8` alone, the fig8 figure, its table and provenance).
    """
    return report(path, **report_args) if os.path.exists(path) else path


def all_targets():
    """Every configured run, figure, table and provenance record; those present are marked for the report."""
    pecan, trims = list(config["plots"]["figures"]), config["plots"]["trims"]
    experiments = sorted({config["plots"]["figures"][f]["experiment"] for f in pecan})
    report_items = [
        (f"plots/{figure}.png", "pecan_figure", "Figures", {"figure": figure})
        for figure in pecan
    ]
    report_items += [
        (f"plots/{figure}.png", "trims_figure", "Figures", {"figure": figure})
        for figure in trims
    ]
    report_items += [
        (f"results/tables/{exp}.csv", "cost_table", "Cost tables", {"experiment": exp})
        for exp in experiments
    ]
    report_items += [
        (
            f"results/reference/{figure}.csv",
            "reference_verdicts",
            "Reference verdicts",
            {"figure": figure},
        )
        for figure in pecan
    ]
    report_items += [
        (
            f"results/provenance/{figure}.json",
            "provenance",
            "Provenance",
            {"figure": figure},
        )
        for figure in pecan + trims
    ]
    return (
        run_targets()
        + [f"plots/{figure}.pdf" for figure in pecan + trims]
        + [
            reported(
                path,
                caption=f"report/{caption}.rst",
                category=category,
                labels=labels,
            )
            for path, caption, category, labels in report_items
        ]
    )
