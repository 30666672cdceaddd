"""Rule `trims_status`: before a TrIMS run, the model store it will use runs with the configured settings."""

import json
import sys
from pathlib import Path

from repro.backends import format_checks
from repro.fsutil import write_json
from repro.trims import service

sys.stdout = sys.stderr = open(snakemake.log[0], "w")
state = json.loads(Path(snakemake.input.store).read_text())
checks = service.status(state, snakemake.params.digest)
print(format_checks(checks))
failed = [c["name"] for c in checks if not c["ok"]]
if failed:
    raise SystemExit(f"model store status: {len(failed)} check(s) FAILED: {'; '.join(failed)}")
write_json(snakemake.output[0], {"checks": checks})
