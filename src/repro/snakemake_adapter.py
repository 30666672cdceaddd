"""Every use the workflow makes of Snakemake beyond its documented API, in one place.

Each is a speed trick or a behaviour the documentation does not promise; tests/test_snakemake_adapter.py
checks each against the installed Snakemake, so a release that changes one fails there by name
rather than silently:
  - `per_job`: snakemake.common.overwrite_function_params records a function's parameters, which
    Snakemake otherwise reads with inspect.signature several times for every job it plans;
  - `untracked`: a params function of the job's `output` is a derived param, which Snakemake leaves
    out of the params rerun trigger (Rule._is_deriving_function, Job.non_derived_params);
  - `is_main_process`: Workflow.is_main_process, true in the invocation a user started and false in
    the jobs it spawns;
  - `freeze_startup_objects`: gc.freeze() once Snakemake and the package are imported, so the cyclic
    collector stops walking what lives for the whole run.
  - `forget_incomplete`: a file's "incomplete" mark, which the default (file) persistence keeps as
    .snakemake/incomplete/<the path, URL-safe base64>, dropped for files written whole.
Standard library only (and Snakemake's own helper, already imported when a Snakefile is read).
REPRO_SNAKEMAKE_TRICKS names the speed tricks on: `signatures,freeze` (the default), one of them,
or `off`; benchmarks/workflow.py measures what each saves.
"""

import gc
import inspect
import os
from base64 import urlsafe_b64encode
from pathlib import Path

try:
    from snakemake.common import overwrite_function_params
except ImportError:  # a Snakemake without it: the signature is inspected at every call instead

    def overwrite_function_params(func, params):
        pass


TRICKS = set(os.environ.get("REPRO_SNAKEMAKE_TRICKS", "signatures,freeze").split(","))


def per_job(func):
    """`func`, an input or params function, with its signature inspected once."""
    if "signatures" in TRICKS:
        overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def untracked(value):
    """A param that Snakemake leaves out of the params rerun trigger (a derived param). For the
    settings a service starts with: changing them must not restart it; the status checks compare
    their digest."""
    return per_job(lambda wildcards, output: value)


def is_main_process(workflow):
    """Whether this is the invocation a user started (not a job it spawned)."""
    return workflow.is_main_process


def freeze_startup_objects():
    """What Snakemake and the package have built by now lives for the whole run: frozen, the cyclic
    garbage collector stops walking it at every full collection."""
    if "freeze" in TRICKS:
        gc.freeze()


def forget_incomplete(workflow, paths, root=".snakemake"):
    """Drop Snakemake's marks of `paths` as incomplete, left by an invocation interrupted while it
    wrote one. Only for files written whole (to a temporary path, then renamed): the file there is
    either the old one or the new one, and the status checks after it tell whether what it records
    runs. Snakemake 9 would rerun the job that writes it, and, where every later job takes the file
    as ancient(), plan that job alone and exit 0 without the target (DAG.update_needrun skips the
    jobs after a job that must run, then does not reach them through an ancient input). In the
    invocation a user started only: a job spawned meanwhile must not drop the mark of a file its
    invocation is writing."""
    if not is_main_process(workflow):
        return
    for path in paths:
        Path(root, "incomplete", urlsafe_b64encode(str(path).encode()).decode()).unlink(missing_ok=True)
