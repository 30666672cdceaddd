"""Rule `cluster_start`: start the backend with the effective config's cluster settings."""

import sys

from repro.backends import get_backend, start_cluster
from repro.rulesettings import cluster_settings

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
state = start_cluster(cluster_settings(snakemake.config), snakemake.output[0])
print(get_backend(state["backend"]).describe(state))
