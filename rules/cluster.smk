localrules:
    cluster_start,
    cluster_status,
    cluster_stop,


rule cluster_start:
    output:
        STATE,
    log:
        f"results/logs/cluster/{BACKEND}/start.log",
    conda:
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
    params:
        backend=BACKEND,
        store=config["trace_store"],
        trims_server=config["trims"]["server"],
        trims_base_path=config["trims"]["base_path"],
    shell:
        "repro cluster start --state {output} > {log} 2>&1"


# One temp() status file per run: the checks run again whenever that run has to execute,
# and a run that is up to date needs no status at all. ancient(): restarting the cluster
# (a newer state file) does not make finished runs look stale.
rule cluster_status:
    input:
        state=ancient(STATE),
        calibration=CALIBRATIONS,
    output:
        temp(STATUS),
    log:
        f"results/logs/cluster/{BACKEND}/status/{{job}}.log",
    conda:
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
    shell:
        "repro cluster status --state {input.state} --calibration {input.calibration} -o {output} > {log} 2>&1"


rule cluster_stop:
    log:
        f"results/logs/cluster/{BACKEND}/stop.log",
    conda:
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
    params:
        state=lambda wildcards: STATE,  # not an input: stopping must not start a cluster first
    shell:
        "repro cluster stop --state {params.state} > {log} 2>&1"
