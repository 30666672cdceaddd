rule run:
    input:
        state=ancient(rules.cluster_start.output[0]),
        status=f"results/cluster/{BACKEND}/status/{{experiment}}/{{mode}}.json",
        calibration=experiment_calibrations(EXPERIMENT_CALIBRATIONS),
    output:
        log=f"{RUN_DIR}/run.log",
        metrics=RUN_METRICS,
        trace=f"{RUN_DIR}/traces/{{experiment}}-{{mode}}.json",
        receipt=f"{RUN_DIR}/upload.json",
    log:
        "results/logs/run/{experiment}/{mode}.log",
    benchmark:
        "results/benchmarks/run/{experiment}/{mode}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=SMALL_JOB["mem_mb"],
        runtime=10,
    params:
        settings=by_wildcards(run_settings, config, "experiment", "mode"),
        run_dir=output_dir("log"),
    shell:
        "repro cluster run --state {input.state:q} --settings {params.settings:q}"
        " --experiment {wildcards.experiment:q} --mode {wildcards.mode:q}"
        " --calibration {input.calibration:q} --run-dir {params.run_dir:q}"
        " --receipt {output.receipt:q} > {log:q} 2>&1"
