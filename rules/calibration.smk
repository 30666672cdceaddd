# One job per pipeline: each is measured beside the same reference kernel (fixed JPEG decodes), and
# the local preset relates pipelines by their cost per kernel, so the ratio holds across jobs and a
# new pipeline adds its own job only. Under the tf.data engine it also measures the TF ops, from
# which every run of the pipeline derives one miniature scale.
rule calibrate:
    output:
        "results/calibration/{pipeline}.json",
    log:
        "results/logs/calibrate/{pipeline}.log",
    benchmark:
        "results/benchmarks/calibrate/{pipeline}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        elements=config["calibration"]["elements"],
        repeats=config["calibration"]["repeats"],
        ops=config["calibration"]["ops"],
        engine=config["pecan"]["engine"],
    shell:
        "repro pecan calibrate --pipeline {wildcards.pipeline:q} --elements {params.elements:q}"
        " --repeats {params.repeats:q} --ops {params.ops:q} --engine {params.engine:q}"
        " -o {output:q} > {log:q} 2>&1"
