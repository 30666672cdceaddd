"""Rule `trims_store_start`: the model store the TrIMS runs share, with the effective config's settings."""

import sys

from repro.trims import service
from repro.rulesettings import trims_store_settings

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
record = service.start(trims_store_settings(snakemake.config), snakemake.output[0])
print(f"model store pid {record['process']['pid']} on {record['socket']}" + (" (found running)" if record.get("reused") else ""))
