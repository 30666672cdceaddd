from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "rules/common.smk"
include: "rules/cluster.smk"
include: "rules/pecan.smk"
include: "rules/traces.smk"
include: "rules/costs.smk"
include: "rules/plots.smk"
include: "rules/trims.smk"
include: "rules/reproducibility.smk"


rule all:
    default_target: True
    input:
        figure_targets(),
        run_targets(),
        "results/provenance.json",
