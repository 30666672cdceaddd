# One job for all pipelines: measured in one interleaved loop, their cost ratio holds still
# while the machine's load changes.
rule calibrate:
    output:
        CALIBRATIONS,
    log:
        "results/logs/calibrate.log",
    benchmark:
        "results/benchmarks/calibrate.tsv"
    conda:
        "../envs/repro.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        pipelines=PIPELINES,
        elements=config["calibration"]["elements"],
        repeats=config["calibration"]["repeats"],
    shell:
        "repro pecan calibrate --pipeline {params.pipelines:q} --elements {params.elements:q}"
        " --repeats {params.repeats:q} -o {output:q} > {log:q} 2>&1"
