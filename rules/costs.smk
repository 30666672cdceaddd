localrules:
    cost_estimate,


rule costs:
    input:
        logs=per_mode(config, f"{RUN_DIR}/run.log"),
        metrics=per_mode(config, RUN_METRICS),
        summary="results/summary/{experiment}.json",
        combined="results/traces/{experiment}/combined.json",
    output:
        "results/tables/{experiment}.csv",
    log:
        "results/logs/costs/{experiment}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=by_wildcards(cost_settings, config, "experiment"),
        modes=modes(config),
    shell:
        "repro pecan cost-table --settings {params.settings:q} --mode {params.modes:q}"
        " --log {input.logs:q} --metrics {input.metrics:q} --summary {input.summary:q}"
        " -o {output:q} > {log:q} 2>&1"


# `snakemake cost_estimate` before launching on a real cluster: the cluster model's estimate.
rule cost_estimate:
    input:
        calibration=CALIBRATIONS,
    output:
        "results/cost_estimate.txt",
    log:
        "results/logs/cost_estimate.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=estimate_settings(config),
    shell:
        "repro pecan estimate --settings {params.settings:q} --calibration {input.calibration:q}"
        " -o {output:q} > {log:q} 2>&1"
