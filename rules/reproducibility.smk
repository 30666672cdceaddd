# `snakemake reproducibility_check`: the figures' chains run twice from empty scratch directories
# (calibration included) and every plotted number compared within the configured tolerance.
# It measures afresh each time it runs: `--forcerun reproducibility_check` repeats it.
rule reproducibility_check:
    output:
        report(
            "results/reproducibility/check.csv",
            caption="../report/reproducibility_check.rst",
            category="Reproducibility",
            labels={"table": "two fresh chains compared"},
        ),
    log:
        "results/logs/reproducibility_check.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=20,
    params:
        scratch="results/reproducibility/scratch",
        config=untracked(Settings(config)),
    shell:
        "repro pecan check-reproducibility --settings {params.config:q} --scratch {params.scratch:q}"
        " -o {output:q} > {log:q} 2>&1"
