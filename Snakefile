from snakemake.utils import min_version

from repro.checkedconfig import checked_config, json_configfile

min_version("9.0")


# config/config.yaml, handed to Snakemake as a JSON copy kept under .snakemake/repro (the same data,
# read without Snakemake's pure-Python YAML loader; repro.checkedconfig.json_configfile)
configfile: json_configfile("config/config.yaml", ".snakemake/repro")


# config/config.yaml, then --configfile, then --config: checked once, with defaults, paths expanded
# (repro.config.validate_config; its result is reused while the config and the package are unchanged)
checked_config(config, "config", ".snakemake/repro")


include: "rules/common.smk"
include: "rules/calibration.smk"
include: "rules/cluster.smk"
include: "rules/pecan.smk"
include: "rules/traces.smk"
include: "rules/costs.smk"
include: "rules/plots.smk"
include: "rules/trims.smk"
include: "rules/reproducibility.smk"


report: "report/workflow.rst"


rule all:
    default_target: True
    input:
        all_targets(),
