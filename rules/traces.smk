# From the store the run's receipt records (where it uploaded), not the configured trace_store:
# after trace_store changes, finished runs keep their traces where they are.
rule download_traces:
    input:
        receipt=f"{RUN_DIR}/upload.json",
    output:
        "results/traces/{experiment}/{mode}/{experiment}-{mode}.json",
    log:
        "results/logs/download/{experiment}/{mode}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        into=output_dir(),
    shell:
        "repro trace download {input.receipt:q} -o {params.into:q} > {log:q} 2>&1"


rule combine:
    input:
        per_mode(config, "results/traces/{experiment}/{mode}/{experiment}-{mode}.json"),
    output:
        "results/traces/{experiment}/combined.json",
    log:
        "results/logs/combine/{experiment}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    shell:
        "repro trace combine {input:q} -o {output:q} > {log:q} 2>&1"


rule summarize:
    input:
        per_mode(config, "results/traces/{experiment}/{mode}/{experiment}-{mode}.json"),
    output:
        "results/summary/{experiment}.json",
    log:
        "results/logs/summarize/{experiment}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    shell:
        "repro trace summarize {input:q} --group-by mode -o {output:q} > {log:q} 2>&1"
