"""The rules' input and params functions, and the workflow's targets: rules/*.smk name these.

Snakemake parses the Snakefile and every rule file at each start, token by token, at about
50,000 instructions a token (callgrind, Snakemake 9.27): a lambda or a helper written in a rule
file is paid for at every invocation. Written here, it is compiled once into Python's bytecode
cache and imported. Standard library only: the rule files import it at every start.

Every input or params function returned here has its signature inspected once (`per_job`), and
`untracked` makes a derived param; both lean on Snakemake's internals, through repro.snakemake_adapter.
"""

import os

from repro.snakemake_adapter import per_job, untracked  # noqa: F401  (the rule files import untracked from here)

# A Pecan run's directory and its metrics, which the cost, validation and `all` targets ask for.
RUN_DIR = "results/runs/{experiment}/{mode}"
RUN_METRICS = f"{RUN_DIR}/metrics.json"
# The tf.data engine's sweep: a run per remote worker count, which the validation reads with the modes' runs
SWEEP_METRICS = "results/sweep/{experiment}/{count}/metrics.json"


def by_wildcards(settings, config, *names):
    """A params function: `settings(config, *values)`, the values of the job's wildcards `names`
    (e.g. `repro.rulesettings.run_settings` of the job's experiment and mode)."""
    return per_job(lambda wildcards: settings(config, *(getattr(wildcards, name) for name in names)))


def output_dir(item=0, levels=1):
    """A derived param: the directory `levels` up from the job's output `item` (index or name)."""

    def directory(wildcards, output):
        path = output[item] if isinstance(item, int) else getattr(output, item)
        for _ in range(levels):
            path = os.path.dirname(path)
        return path

    return per_job(directory)


def beside_input(*parts_list):
    """A derived param: for each tuple of path parts, that path joined onto the directory of the
    job's first input."""
    return per_job(lambda wildcards, input: [os.path.join(os.path.dirname(input[0]), *parts) for parts in parts_list])


def modes_of(config, experiment):
    return config["pecan"]["experiments"][experiment]["modes"]


def modes(config):
    """A params function: the modes of the job's experiment."""
    return per_job(lambda wildcards: modes_of(config, wildcards.experiment))


def per_mode(config, pattern):
    """An input function: `pattern` filled in for each mode of the job's experiment (a plain
    str.format per mode: it runs once per job, and expand() costs ten times as much)."""

    def files(wildcards):
        experiment = wildcards.experiment
        return [pattern.format(experiment=experiment, mode=mode) for mode in modes_of(config, experiment)]

    return per_job(files)


def sweep_counts(config):
    """The remote worker counts of the tf.data engine's sweep (pecan.tfdata.sweep); none under another engine."""
    pecan = config["pecan"]
    return list(pecan.get("tfdata", {}).get("sweep", [])) if pecan["engine"] == "tfdata" else []


def sweep_outputs(config):
    """The sweep rule's outputs: each count's metrics, for the job's experiment."""
    return [SWEEP_METRICS.format(experiment="{experiment}", count=count) for count in sweep_counts(config)]


def validation_metrics(config):
    """An input function: the engine runs the validation of the job's experiment reads, each mode's
    and each of the sweep's counts'."""
    counts = sweep_counts(config)

    def files(wildcards):
        experiment = wildcards.experiment
        return ([RUN_METRICS.format(experiment=experiment, mode=mode) for mode in modes_of(config, experiment)]
                + [SWEEP_METRICS.format(experiment=experiment, count=count) for count in counts])

    return per_job(files)


def figure_metrics(config):
    """An input function: the engine runs a Pecan figure's experiment was measured by, whose caption
    says what the machine let the modes reach (pecan.engine: tfdata); none under another engine."""
    if config["pecan"]["engine"] != "tfdata":
        return []

    def files(wildcards):
        experiment = config["plots"]["figures"][wildcards.figure]["experiment"]
        return [RUN_METRICS.format(experiment=experiment, mode=mode) for mode in modes_of(config, experiment)]

    return per_job(files)


def figure_table(config):
    """An input function: the cost table a Pecan figure is drawn from."""
    return per_job(lambda wildcards: "results/tables/{}.csv".format(config["plots"]["figures"][wildcards.figure]["experiment"]))


def comparison_tables(config):
    """An input function: the cost tables of a comparison's workloads, in order."""
    return per_job(lambda wildcards: [f"results/tables/{workload}.csv"
                                      for workload in config["plots"]["comparisons"][wildcards.comparison]["workloads"]])


def comparison_workloads(config):
    """A params function: a comparison's workloads."""
    return per_job(lambda wildcards: config["plots"]["comparisons"][wildcards.comparison]["workloads"])


def comparison_option(config):
    """A params function: a comparison's option (repro.pecan.comparisons.OPTIONS)."""
    return per_job(lambda wildcards: config["plots"]["comparisons"][wildcards.comparison]["option"])


def experiment_calibrations(calibrations):
    """An input function: the calibrations the job's experiment's runs read (`calibrations`: {experiment: paths})."""
    return per_job(lambda wildcards: calibrations[wildcards.experiment])


def figure_calibrations(config, calibrations):
    """An input function: the calibrations of a figure's experiment."""
    return per_job(lambda wildcards: calibrations[config["plots"]["figures"][wildcards.figure]["experiment"]])


def comparison_calibrations(config, calibrations):
    """An input function: the calibrations of a comparison's workloads."""
    return per_job(lambda wildcards: sorted({path for workload in config["plots"]["comparisons"][wildcards.comparison]["workloads"]
                                             for path in calibrations[workload]}))


def figure_data(config, calibrations):
    """An input function: the data a figure is drawn from, its cost table and its experiment's
    calibrations (`calibrations`: {experiment: paths}; a comparison's: its table and its workloads'
    calibrations), or the TrIMS summary."""

    def data(wildcards):
        comparison = config["plots"]["comparisons"].get(wildcards.any_figure)
        if comparison is not None:
            return [f"results/tables/{wildcards.any_figure}.csv",
                    *sorted({path for workload in comparison["workloads"] for path in calibrations[workload]})]
        spec = config["plots"]["figures"].get(wildcards.any_figure)
        if spec is None:
            return ["results/summary/trims.json"]
        return [f"results/tables/{spec['experiment']}.csv", *calibrations[spec["experiment"]]]

    return per_job(data)


def fetch_source(config, assets_in_gcs):
    """An input function: the locally generated model a TrIMS fetch copies, or nothing when the
    asset store is a GCS bucket filled beforehand."""
    asset_store = config["trims"]["asset_store"]
    return per_job(lambda wildcards: [] if assets_in_gcs else f"{asset_store}/{wildcards.model}/manifest.json")


def run_targets(config):
    """Every run's metrics (Pecan) and, where TrIMS figures are configured (plots.trims), every TrIMS
    run's report: requested directly, so a deleted run directory is redone. (Without TrIMS figures no
    TrIMS run is asked for: backends other than local do not run them.)"""
    trims = config["trims"]
    distributions = trims["distributions"]
    pecan_runs = [
        RUN_METRICS.format(experiment=experiment, mode=mode)
        for experiment, spec in config["pecan"]["experiments"].items()
        for mode in spec["modes"]
    ]
    if not config["plots"]["trims"]:
        return pecan_runs
    return (
        pecan_runs
        + [f"results/trims/runs/compare/{model}/report.json" for model in trims["models"][trims["model_set"]]]
        + [
            f"results/trims/runs/distribution/{distribution}-c{concurrency}/report.json"
            for distribution in distributions["runs"]
            for concurrency in distributions["concurrency"]
        ]
    )


def all_targets(config, report):
    """Every configured run, figure, table and provenance record; those present are marked for
    Snakemake's report (`report`, Snakemake's function): `snakemake --report` then shows what has
    been built (after `make fig8` alone, the fig8 figure, its table and provenance)."""
    pecan, trims = list(config["plots"]["figures"]), config["plots"]["trims"]
    experiments = sorted({config["plots"]["figures"][f]["experiment"] for f in pecan})
    report_items = [(f"plots/{figure}.png", "pecan_figure", "Figures", {"figure": figure}) for figure in pecan]
    report_items += [(f"plots/{figure}.png", "trims_figure", "Figures", {"figure": figure}) for figure in trims]
    report_items += [(f"results/tables/{exp}.csv", "cost_table", "Cost tables", {"experiment": exp}) for exp in experiments]
    report_items += [
        (f"results/reference/{figure}.csv", "reference_verdicts", "Reference verdicts", {"figure": figure}) for figure in pecan
    ]
    report_items += [(f"results/provenance/{figure}.json", "provenance", "Provenance", {"figure": figure}) for figure in pecan + trims]
    comparisons = list(config["plots"].get("comparisons", {}))
    report_items += [(f"plots/{name}.png", "comparison_figure", "Figures", {"figure": name}) for name in comparisons]
    report_items += [(f"results/provenance/{name}.json", "provenance", "Provenance", {"figure": name}) for name in comparisons]
    report_items += [(f"results/tables/{name}.csv", "comparison_table", "Cost tables", {"experiment": name}) for name in comparisons]
    report_items += [(f"results/reference/{name}.csv", "paper_verdicts", "Reference verdicts", {"figure": name})
                     for name in comparisons]
    return (
        run_targets(config)
        + [f"plots/{figure}.pdf" for figure in pecan + trims + comparisons]
        + [
            report(path, caption=f"report/{caption}.rst", category=category, labels=labels) if os.path.exists(path) else path
            for path, caption, category, labels in report_items
        ]
    )


def stop_trims_store(invocation):
    """At the end of an invocation (Snakemake's onsuccess and onerror): it leaves the TrIMS model
    store, which stops unless another invocation still uses it (repro.trims.service, imported only then)."""
    from repro.trims.service import leave

    leave(invocation)
