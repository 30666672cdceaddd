"""glibc's malloc thresholds, fixed for a process that allocates and frees large blocks over and over.

Left to itself, glibc moves its mmap threshold as large blocks are freed and hands freed heap
back to the system, so whether a large buffer lands on pages already touched or on fresh ones (a
page fault each 4 KiB) depends on what the process did before. Fixing both thresholds keeps
freed blocks for reuse: the calibration's costs then hold still, and the trace tools stop paying
the page faults of a fresh buffer for every input.
"""

import ctypes

# mallopt parameters (malloc.h): blocks below the mmap threshold come from the heap, and freed
# heap is kept up to the trim threshold; 32 MiB is the largest mmap threshold glibc accepts
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
LARGEST_MMAP_THRESHOLD = 32 * 2**20


def fix_malloc_thresholds(trim_threshold, mmap_threshold=LARGEST_MMAP_THRESHOLD):
    """Set both thresholds for this whole process; returns what was set, or None where the C
    library is not glibc (nothing changes there)."""
    try:  # the symbols the process has loaded, the C library's among them (no search for its file)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, TypeError, AttributeError):
        return None
    for param, value in ((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold)):
        if mallopt(param, value) != 1:
            return None
    return {"mmap_threshold": mmap_threshold, "trim_threshold": trim_threshold}
