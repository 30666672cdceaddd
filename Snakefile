import gc

from snakemake.utils import min_version

from repro.checkedconfig import checked_config

min_version("9.0")

# What Snakemake and the package have built by now lives for the whole run: frozen, the cyclic
# garbage collector stops walking it at every full collection (4% of a full dry-run's work).
gc.freeze()


configfile: "config/config.yaml"


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
        all_targets(config, report),
