#!/usr/bin/env python3
"""Job status for cluster-generic: prints running, success or failed for a SLURM job id.

A job that already left the queue is looked up with `scontrol show job` (kept for MinJobAge) and,
where accounting exists, with `sacct`; a job found nowhere is reported failed, not running forever.
"""

import subprocess
import sys

RUNNING = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STAGE_OUT"}


def state_of(job_id):
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.split()[0]
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    for word in out.stdout.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    out = subprocess.run(["sacct", "-n", "-X", "-j", job_id, "-o", "State"], capture_output=True, text=True)
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.strip() else "UNKNOWN"


state = state_of(sys.argv[1])
print("running" if state in RUNNING else "success" if state == "COMPLETED" else "failed")
