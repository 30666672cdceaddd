"""Chrome trace event files: read, write, combine, summarise and validate.

The one place in the package where traces are read and written. Timestamps are microseconds.
"""

from repro.traces.combine import combine
from repro.traces.reader import TraceReader, read_trace
from repro.traces.summarize import summarize, summarize_trace
from repro.traces.validate import validate
from repro.traces.writer import TraceWriter, write_trace

__all__ = [
    "TraceReader",
    "TraceWriter",
    "combine",
    "read_trace",
    "summarize",
    "summarize_trace",
    "validate",
    "write_trace",
]
