localrules:
    plot,
    provenance,


rule plot:
    input:
        table=lambda wildcards: "results/tables/{}.csv".format(
            config["plots"]["figures"][wildcards.figure]["experiment"]
        ),
        calibration=CALIBRATIONS,
    output:
        pdf="plots/{figure}.pdf",
        png=report(
            "plots/{figure}.png", category="Figures", labels={"figure": "{figure}"}
        ),
        verdicts=report(
            "results/reference/{figure}.csv",
            category="Reference verdicts",
            labels={"figure": "{figure}"},
        ),
    log:
        "results/logs/plot/{figure}.log",
    conda:
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
    params:
        settings=lambda wildcards: figure_settings(config, wildcards.figure),
    script:
        "../workflow/scripts/plot.py"


rule provenance:
    output:
        report("results/provenance.json", category="Run metadata"),
    log:
        "results/logs/provenance.log",
    conda:
        "../envs/repro.yaml"
    resources:
        mem_mb=500,
        runtime=5,
    script:
        "../workflow/scripts/provenance.py"
