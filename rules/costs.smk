localrules:
    cost_estimate,


rule costs:
    input:
        logs=per_mode(config, "results/runs/{experiment}/{mode}/run.log"),
        metrics=per_mode(config, "results/runs/{experiment}/{mode}/metrics.json"),
        summary="results/summary/{experiment}.json",
        combined="results/traces/{experiment}/combined.json",
    output:
        "results/tables/{experiment}.csv",
    log:
        "results/logs/costs/{experiment}.log",
    conda:
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
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
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
    params:
        settings=estimate_settings(config),
    shell:
        "repro pecan estimate --settings {params.settings:q} --calibration {input.calibration:q}"
        " -o {output:q} > {log:q} 2>&1"
