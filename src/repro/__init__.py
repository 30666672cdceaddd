"""Reproduce ML-systems experiments (Pecan input-pipeline cost, TrIMS model sharing) end to end."""

import os

__version__ = "0.1.0"

# numpy's OpenBLAS starts a thread per CPU as numpy is imported (about 70 ms of CPU in each command)
# and shares each matrix product out over them; their idle threads then spin. On two CPUs a
# calibration took nearly twice the CPU, and did part of each product outside the thread it times.
# The pipelines' arrays are small: one thread, as Snakemake gives a rule's job of one thread, unless
# the user set a count (OpenBLAS reads these three). Set here, before numpy is imported.
if not {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"} & set(os.environ):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
