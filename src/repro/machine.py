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


def cpu_seconds():
    """CPU seconds all of the machine's CPUs have spent busy, and those the hypervisor gave to
    others while a virtual CPU wanted to run (steal), from Linux's /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is counted in user already)
    ticks = [int(v) for v in fields[1:9]] + [0] * (9 - len(fields))
    hz = os.sysconf("SC_CLK_TCK")
    return {"busy": (sum(ticks) - ticks[3] - ticks[4] - ticks[7]) / hz, "steal": ticks[7] / hz}


def other_work(before, after, own_cpu_s, seconds):
    """What else ran while this process measured for `seconds` (spending `own_cpu_s` itself), in
    CPUs busy on average: other processes, and the hypervisor's steal; None without /proc/stat."""
    if before is None or after is None or seconds <= 0:
        return None
    return {"other_processes_cpus": max(0.0, (after["busy"] - before["busy"] - own_cpu_s) / seconds),
            "steal_cpus": (after["steal"] - before["steal"]) / seconds,
            "seconds": seconds}


def available_memory_mb(meminfo="/proc/meminfo"):
    """The memory new processes can have without swapping (MiB, Linux's MemAvailable); None where it
    cannot be read."""
    try:
        with open(meminfo) as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:")) // 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return None
