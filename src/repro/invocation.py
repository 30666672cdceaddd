"""The Snakemake invocation a process belongs to. The main Snakemake process puts its identity in the
environment ($REPRO_INVOCATION) as it parses the Snakefile, and every job inherits it: the services
an invocation's jobs share tell their users apart by it (the model store's users, repro.trims.service;
the tf.data service's probe, done once per invocation, repro.pecan.tfdata.service)."""

import os

from repro import processes

INVOCATION_VARIABLE = "REPRO_INVOCATION"


def this_invocation(main_process):
    """This Snakemake invocation, as 'pid:start_ticks' of its main process. The main process
    (`main_process`: repro.snakemake_adapter.is_main_process) sets it in its environment when it parses
    the Snakefile, replacing any value it inherited (a snakemake run inside a job is an invocation of
    its own); every job, and every Snakemake process spawned for a job (which parses the Snakefile
    again), inherits that value."""
    value = os.environ.get(INVOCATION_VARIABLE)
    if main_process or not value:
        me = processes.describe(os.getpid(), "snakemake invocation")
        value = os.environ[INVOCATION_VARIABLE] = f"{me['pid']}:{me['start_ticks']}"
    return value


def owner(value=None):
    """The invocation `value` ('pid:start_ticks', by default $REPRO_INVOCATION) as a process record
    (processes.describe's keys), or None outside a Snakemake invocation of this workflow."""
    value = os.environ.get(INVOCATION_VARIABLE) if value is None else value
    try:
        pid, ticks = (int(part) for part in str(value).split(":"))
    except ValueError:
        return None
    return {"pid": pid, "start_ticks": ticks, "boot_id": processes._boot_id(), "role": "snakemake invocation"}
