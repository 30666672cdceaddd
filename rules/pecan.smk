rule run:
    input:
        state=ancient(rules.cluster_start.output[0]),
        status=f"results/cluster/{BACKEND}/status/{{experiment}}/{{mode}}.json",
        calibration=experiment_calibrations(EXPERIMENT_CALIBRATIONS),
    output:
        log="results/runs/{experiment}/{mode}/run.log",
        metrics="results/runs/{experiment}/{mode}/metrics.json",
        trace="results/runs/{experiment}/{mode}/traces/{experiment}-{mode}.json",
        receipt="results/runs/{experiment}/{mode}/upload.json",
    log:
        "results/logs/run/{experiment}/{mode}.log",
    benchmark:
        "results/benchmarks/run/{experiment}/{mode}.tsv"
    conda:
        "../envs/repro.yaml"
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    params:
        settings=by_wildcards(run_settings, config, "experiment", "mode"),
        run_dir=output_dir("log"),
    shell:
        "repro cluster run --state {input.state:q} --settings {params.settings:q}"
        " --experiment {wildcards.experiment:q} --mode {wildcards.mode:q}"
        " --calibration {input.calibration:q} --run-dir {params.run_dir:q}"
        " --receipt {output.receipt:q} > {log:q} 2>&1"
