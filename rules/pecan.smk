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


# The tf.data engine's sweep (pecan.tfdata.sweep): a run per remote worker count, held fixed, at the
# scale the modes' runs derive from the same calibration; the validation reads them beside the
# modes' runs, a curve for the model to match.
if sweep_counts(config):

    rule sweep:
        input:
            calibration=experiment_calibrations(EXPERIMENT_CALIBRATIONS),
        output:
            metrics=sweep_outputs(config),
        log:
            "results/logs/sweep/{experiment}.log",
        benchmark:
            "results/benchmarks/sweep/{experiment}.tsv"
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=SMALL_JOB["mem_mb"],
            runtime=10,
        params:
            settings=by_wildcards(sweep_settings, config, "experiment"),
            out=output_dir(0, levels=2),
        shell:
            "repro pecan tfdata sweep --settings {params.settings:q}"
            " --experiment {wildcards.experiment:q} --calibration {input.calibration:q}"
            " --out {params.out:q} > {log:q} 2>&1"
