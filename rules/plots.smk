localrules:
    plot,
    comparison_table,
    comparison,
    validation,
    provenance,


rule plot:
    input:
        table=figure_table(config),
        calibration=figure_calibrations(config, EXPERIMENT_CALIBRATIONS),
        metrics=figure_metrics(config),
    output:
        pdf="plots/{figure}.pdf",
        png="plots/{figure}.png",
        verdicts="results/reference/{figure}.csv",
    log:
        "results/logs/plot/{figure}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=by_wildcards(figure_settings, config, "figure"),
    shell:
        "repro pecan figure {wildcards.figure:q} --table {input.table:q}"
        " --calibration {input.calibration:q} --metrics {input.metrics:q} --settings {params.settings:q}"
        " --output {output.pdf:q} {output.png:q} --verdicts {output.verdicts:q}"
        " > {log:q} 2>&1"


# A figure over several workloads (plots.comparisons, the paper's Fig 6 and 7): its table from the
# workloads' cost tables, then the figure and the paper values' verdicts.
rule comparison_table:
    input:
        comparison_tables(config),
    output:
        "results/tables/{comparison}.csv",
    log:
        "results/logs/comparison_table/{comparison}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        option=comparison_option(config),
        workloads=comparison_workloads(config),
    shell:
        "repro pecan comparison-table --option {params.option:q} --workload {params.workloads:q}"
        " --table {input:q} -o {output:q} > {log:q} 2>&1"


rule comparison:
    input:
        table="results/tables/{comparison}.csv",
        calibration=comparison_calibrations(config, EXPERIMENT_CALIBRATIONS),
    output:
        pdf="plots/{comparison}.pdf",
        png="plots/{comparison}.png",
        verdicts="results/reference/{comparison}.csv",
    log:
        "results/logs/comparison/{comparison}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=by_wildcards(comparison_settings, config, "comparison"),
    shell:
        "repro pecan comparison {wildcards.comparison:q} --table {input.table:q}"
        " --calibration {input.calibration:q} --settings {params.settings:q}"
        " --output {output.pdf:q} {output.png:q} --verdicts {output.verdicts:q}"
        " > {log:q} 2>&1"


# What produced a figure: its inputs (with checksums), the settings it depends on, the commit,
# the machine and the package versions. Rebuilt whenever the figure or those settings change.
rule provenance:
    input:
        figure="plots/{any_figure}.pdf",
        data=figure_data(config, EXPERIMENT_CALIBRATIONS),
    output:
        "results/provenance/{any_figure}.json",
    log:
        "results/logs/provenance/{any_figure}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=by_wildcards(provenance_settings, config, "any_figure"),
    shell:
        "repro provenance {input.figure:q} {input.data:q} --settings {params.settings:q}"
        " -o {output:q} > {log:q} 2>&1"


# The engine's runs (pecan.engine: tfdata) against the cluster model's predictions for the same
# deployments, calibration and scale, and the sweep's runs where pecan.tfdata.sweep lists counts.
rule validation:
    input:
        metrics=validation_metrics(config),
        calibration=experiment_calibrations(EXPERIMENT_CALIBRATIONS),
    output:
        pdf="plots/validation_{experiment}.pdf",
        png="plots/validation_{experiment}.png",
        table="results/validation/{experiment}.csv",
    log:
        "results/logs/validation/{experiment}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        network_gbps=config["pecan"]["cluster"]["network_gbps"],
        style=Settings(config["plots"]["style"]),
    shell:
        "repro pecan validation {wildcards.experiment:q} --metrics {input.metrics:q}"
        " --calibration {input.calibration:q} --network-gbps {params.network_gbps:q}"
        " --style {params.style:q} --output {output.pdf:q} {output.png:q}"
        " --table {output.table:q} > {log:q} 2>&1"
