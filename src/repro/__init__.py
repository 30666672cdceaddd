"""Reproduce ML-systems experiments (Pecan input-pipeline cost, TrIMS model sharing) end to end."""

__version__ = "0.1.0"
