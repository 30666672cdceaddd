"""Check that a file is a well-formed Chrome trace, naming the first problem and its event index."""

from repro.errors import TraceError
from repro.traces.reader import TraceReader


def validate(path, reader_options=None):
    """Return a report dict for a valid trace; raise TraceError naming what is wrong otherwise.

    Checks: the file parses, has the object or array form, every event is an object with a
    known phase and a numeric timestamp, and B/E pairs match per (pid, tid).
    """
    reader = TraceReader(path, strict=True, **(reader_options or {}))
    open_b = {}
    phases = {}
    index = 0
    for chunk in reader.chunks():
        for event in chunk:
            ph = event["ph"]
            phases[ph] = phases.get(ph, 0) + 1
            if ph in "BE":
                stack = open_b.setdefault((event.get("pid"), event.get("tid")), [])
                if ph == "B":
                    stack.append(index)
                elif stack:
                    stack.pop()
                else:
                    raise TraceError(path, "'E' event without a matching 'B'", index)
            index += 1
    dangling = sorted(i for stack in open_b.values() for i in stack)
    if dangling:
        raise TraceError(path, "'B' event without a matching 'E'", dangling[0])
    form = "object" if reader.metadata or _is_object_form(path) else "array"
    return {"file": str(path), "events": index, "phases": dict(sorted(phases.items())), "form": form}


def _is_object_form(path):
    with open(path, "rb") as fh:
        return fh.read(4096).lstrip()[:1] == b"{"
