"""Rule `provenance`: what produced a figure (inputs with checksums, settings, commit, machine, packages)."""

import sys

from repro.provenance import describe_figure
from repro.fsutil import write_json

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
write_json(snakemake.output[0], describe_figure([snakemake.input.figure, *snakemake.input.data],
                                                snakemake.params.settings))
