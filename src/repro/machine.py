"""What machine this is: recorded with every calibration and provenance record, and named in captions."""

import os
import platform
from importlib.metadata import version


def machine_description():
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "pillow": version("pillow"),
    }
