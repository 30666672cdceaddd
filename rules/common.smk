import re

from repro.commandpath import put_own_bin_first
from repro.invocation import this_invocation
from repro.rulefunctions import (
    RUN_DIR,
    RUN_METRICS,
    all_targets,
    beside_input,
    by_wildcards,
    comparison_calibrations,
    comparison_option,
    comparison_tables,
    comparison_workloads,
    experiment_calibrations,
    fetch_source,
    figure_calibrations,
    figure_data,
    figure_metrics,
    figure_table,
    modes,
    output_dir,
    per_mode,
    stop_trims_store,
    sweep_counts,
    sweep_outputs,
    untracked,
    validation_metrics,
)
from repro.rulesettings import (
    Settings,
    calibrated_pipelines,
    cluster_settings,
    comparison_settings,
    cost_settings,
    estimate_settings,
    experiment_pipelines,
    figure_settings,
    provenance_settings,
    run_settings,
    settings_digest,
    sweep_settings,
    trims_client_settings,
    trims_distribution,
    trims_models,
    trims_store_settings,
)
from repro.snakemake_adapter import forget_incomplete, is_main_process
from repro.trims.figures import FIGURES as TRIMS_FIGURES
from repro.wildcards import one_of

# what every rule runs in, and what a rule asks for unless it says more
ENV = "../envs/repro.yaml"
SMALL_JOB = {"mem_mb": 500, "runtime": 5}
# this invocation (repro.invocation): a model store user, and the tf.data probe's key
INVOCATION = this_invocation(is_main_process(workflow))
put_own_bin_first()  # the rules run `repro` from this environment, also when it is not on PATH
BACKEND = config["backend"]
CLUSTER_SETTINGS = cluster_settings(config)
PIPELINES = calibrated_pipelines(config)
CALIBRATIONS = expand("results/calibration/{pipeline}.json", pipeline=PIPELINES)
# per experiment, the calibrations its runs read: adding a workload adds its own pipeline's job only
EXPERIMENT_CALIBRATIONS = {
    experiment: [
        f"results/calibration/{pipeline}.json"
        for pipeline in experiment_pipelines(config, [experiment])
    ]
    for experiment in config["pecan"]["experiments"]
}
STATE = f"results/cluster/{BACKEND}/state.json"
TRIMS_STORE = f"results/cluster/{BACKEND}/trims-store.json"
# written whole (temp, then rename): an interrupted start leaves the old file or the new one,
# and Snakemake's mark of it as incomplete would plan its start alone (repro.snakemake_adapter)
forget_incomplete(workflow, [STATE, TRIMS_STORE])
TRIMS_STORE_SETTINGS = trims_store_settings(config)
TRIMS_MODELS = trims_models(config)
ASSETS_IN_GCS = config["trims"]["asset_store"].startswith("gs://")
TRIMS_DISTRIBUTIONS = config["trims"]["distributions"]["runs"]
TRIMS_CONCURRENCY = config["trims"]["distributions"]["concurrency"]


wildcard_constraints:
    experiment=one_of(config["pecan"]["experiments"], "no-experiments"),
    mode=one_of(config["pecan"]["modes"], "no-modes"),
    figure=one_of(config["plots"]["figures"], "no-figures"),
    pipeline=one_of(PIPELINES, "no-pipelines"),
    comparison=one_of(config["plots"]["comparisons"], "no-comparisons"),
    any_figure=one_of(
        [
            *config["plots"]["figures"],
            *config["plots"]["comparisons"],
            *config["plots"]["trims"],
        ],
        "no-figures",
    ),
    backend=re.escape(BACKEND),
    trims_job=r"[A-Za-z0-9_][A-Za-z0-9_.-]*",
    model=one_of(TRIMS_MODELS, "no-models"),
    distribution=one_of(TRIMS_DISTRIBUTIONS, "no-distributions"),
    concurrency=one_of([str(c) for c in TRIMS_CONCURRENCY], "no-concurrency"),
