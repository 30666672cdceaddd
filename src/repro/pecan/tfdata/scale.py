"""The tf.data engine's miniature time scale (docs/TFDATA.md): how fast the accelerator a run
stands in for consumes, derived from the pipeline's measured CPU cost and the machine's CPUs so
that collocated preprocessing is input-bound and the largest deployment reaches the bound.
Arithmetic only: no TensorFlow, so that settings and calibrations are checked without importing it
(repro.pecan.tfdata.engine runs the engine and re-exports these)."""

import math

from repro.errors import ReproError

# The derived scale (derive_scale): collocated preprocessing may deliver at most this share of
# the accelerator's demand (the paper's collocated runs are input-bound).
COLLOCATED_SHARE = 0.6


def max_workers_for(cpus, worker_threads):
    """(remote, local) worker caps where the config leaves them: the workers the CPUs hold, one
    more remote one so that Cachew sees a worker beyond the CPUs gain nothing."""
    held = max(1, cpus // worker_threads)
    return held + 1, held


def derive_scale(cost_s, accelerator_examples_per_s, collocated_threads, worker_threads, cpus):
    """The miniature time scale from measurements: {time_scale, demand, ...} as metrics.json records it.

    With `cost_s` CPU seconds per element, collocated's `collocated_threads` CPUs deliver
    collocated_threads / cost_s examples/s and the largest deployment the machine holds (whole
    workers on its `cpus`) delivers held / cost_s. The accelerator's miniature demand D must lie
    between collocated_threads / (COLLOCATED_SHARE x cost_s) (collocated input-bound) and
    held / cost_s (the largest deployment reaches the bound). D is the geometric middle of that
    range, so that neither condition holds only by the margin of a measurement's noise; a larger
    machine gets a larger D and a longer scaling curve. A machine whose CPUs cannot satisfy both
    is refused in one line.
    """
    held = check_cpus(collocated_threads, worker_threads, cpus)
    low, high = collocated_threads / (COLLOCATED_SHARE * cost_s), held / cost_s
    demand = math.sqrt(low * high)
    return {"rule": f"geometric middle of collocated at {COLLOCATED_SHARE:.0%} of demand and the largest deployment "
                    "at the bound", "cost_s_per_element": cost_s, "cpus": cpus, "preprocessing_cpus": held,
            "collocated_threads": collocated_threads, "demand_examples_per_s": demand,
            "collocated_share": collocated_threads / cost_s / demand, "largest_share": high / demand,
            "time_scale": accelerator_examples_per_s / demand}


def check_cpus(collocated_threads, worker_threads, cpus):
    """The CPUs of the largest deployment `cpus` CPUs hold (whole workers); a ReproError when they
    cannot make any deployment input-bound at a scale where they reach the bound (derive_scale)."""
    held = (cpus // worker_threads) * worker_threads
    if held < collocated_threads / COLLOCATED_SHARE:
        need = math.ceil(collocated_threads / COLLOCATED_SHARE / worker_threads) * worker_threads
        raise ReproError(
            f"{cpus} CPU(s) available (os.sched_getaffinity): too few for an input-bound miniature, where collocated "
            f"({collocated_threads} CPU) delivers at most {COLLOCATED_SHARE:.0%} of the accelerator's demand and the "
            f"largest deployment reaches it; expected at least {need} CPUs, or set pecan.tfdata.time_scale")
    return held
