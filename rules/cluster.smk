localrules:
    cluster_start,
    cluster_status,
    cluster_stop,


# The backend, started with the effective config's cluster settings (untracked: a settings change
# must not silently restart a running cluster). The state records their digest; the status checks
# refuse a state started for other settings and say how to restart.
rule cluster_start:
    output:
        STATE,
    log:
        f"results/logs/cluster/{BACKEND}/start.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        settings=untracked(CLUSTER_SETTINGS),
    shell:
        "repro cluster start --settings {params.settings:q} --state {output:q} > {log:q} 2>&1"


# One temp() status file per run: the checks run again whenever that run has to execute,
# and a run that is up to date needs no status at all. ancient(): restarting the cluster
# (a newer state file) does not make finished runs look stale.
# The state and the calibrations are named as rules.X.output: for an output without wildcards
# Snakemake then takes that rule as the producer for every job, where a path would be matched
# against every rule's outputs once per job. (ancient() marks that shared reference itself:
# every rule takes the state, and the TrIMS store, as ancient.) The expected digest is untracked:
# a settings change (another trace_store) must not redo finished runs, whose status files are gone.
rule cluster_status:
    input:
        state=ancient(rules.cluster_start.output[0]),
        calibration=experiment_calibrations(EXPERIMENT_CALIBRATIONS),
    output:
        temp(f"results/cluster/{BACKEND}/status/{{experiment}}/{{mode}}.json"),
    log:
        f"results/logs/cluster/{BACKEND}/status/{{experiment}}/{{mode}}.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        digest=untracked(settings_digest(CLUSTER_SETTINGS)),
    shell:
        "repro cluster status --state {input.state:q} --expect {params.digest:q}"
        " --calibration {input.calibration:q} -o {output:q} > {log:q} 2>&1"


rule cluster_stop:
    log:
        f"results/logs/cluster/{BACKEND}/stop.log",
    conda:
        ENV
    resources:
        **SMALL_JOB,
    params:
        state=lambda wildcards: STATE,  # not an input: stopping must not start a cluster first
    shell:
        "repro cluster stop --state {params.state:q} > {log:q} 2>&1"
