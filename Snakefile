import sys

from snakemake.utils import min_version

from repro.checkedconfig import checked_config, config_source
from repro.errors import ReproError
from repro.snakemake_adapter import freeze_startup_objects

min_version("9.0")

# what is built by now lives for the whole run (4% of a full dry-run's work is the collector walking it)
freeze_startup_objects()


configfile: "config/config.yaml"


# config/config.yaml, then --configfile, then --config: checked once, with defaults, paths expanded
# (repro.config.validate_config; its result is reused while the config and the package are unchanged);
# each config file read as `repro config check` reads it (a key written twice, an oversized file).
# A config error is one line naming the files and the key, as the repro commands give it, not
# Snakemake's report of an exception with its stack.
try:
    checked_config(
        config,
        config_source(
            workflow.configfiles,
            workflow.config_settings.configfiles,
            workflow.config_settings.config,
        ),
        ".snakemake/repro",
        workflow.configfiles,
    )
except ReproError as exc:
    sys.exit(f"repro: error: {exc}")


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
