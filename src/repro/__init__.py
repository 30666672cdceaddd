"""Reproduce ML-systems experiments (Pecan input-pipeline cost, TrIMS model sharing) end to end."""

import os

__version__ = "0.1.0"

# numpy's OpenBLAS starts a thread per CPU as numpy is imported (about 70 ms of CPU in each command)
# and shares each matrix product out over them; their idle threads then spin. On two CPUs a
# calibration took nearly twice the CPU, and did part of each product outside the thread it times.
# The pipelines' arrays are small: one thread, as Snakemake gives a rule's job of one thread. Set
# here, before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
