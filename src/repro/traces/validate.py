"""Check that a file is a well-formed Chrome trace, naming the first problem and its event index."""

from collections import Counter

from repro.traces.events import column
from repro.traces.matching import SpanMatcher
from repro.traces.reader import TraceReader


def validate(path, reader_options=None):
    """Return a report dict for a valid trace; raise TraceError naming what is wrong otherwise.

    Checks: the file parses, has the object or array form, every event is an object with a
    known phase, a numeric timestamp and fields of the right types, and B/E pairs match per
    (pid, tid).
    """
    reader = TraceReader(path, strict=True, **(reader_options or {}))
    matcher = SpanMatcher(path)
    phases = Counter()
    index = 0
    for chunk, columns in reader.column_chunks():
        kinds = column(chunk, columns, "ph")
        phases.update(kinds)
        matcher.feed(chunk, kinds, index, pids=column(chunk, columns, "pid"), tids=column(chunk, columns, "tid"),
                     stamps=column(chunk, columns, "ts"))
        index += len(chunk)
    matcher.finish()
    form = "object" if reader.metadata or _is_object_form(path) else "array"
    return {"file": str(path), "events": index, "phases": dict(sorted(phases.items())), "form": form}


def _is_object_form(path):
    with open(path, "rb") as fh:
        return fh.read(4096).lstrip()[:1] == b"{"
