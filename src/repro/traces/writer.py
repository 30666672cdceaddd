"""Streaming Chrome trace writer: events go to disk as they come, the file appears complete or not at all."""

import orjson

from repro.fsutil import atomic_path


class TraceWriter:
    """Write ``{"traceEvents": [...], <metadata>}`` to `path` atomically.

    Events are serialised in batches with orjson; metadata (``displayTimeUnit``, ``otherData``,
    ...) may be set at any time before close, since it is written after the event list.
    """

    def __init__(self, path, metadata=None):
        self.path = path
        self.metadata = dict(metadata or {})
        self.count = 0
        self._ctx = None
        self._fh = None

    def __enter__(self):
        self._ctx = atomic_path(self.path)
        tmp = self._ctx.__enter__()
        self._fh = open(tmp, "wb", buffering=1 << 20)
        self._fh.write(b'{"traceEvents":[')
        return self

    def write_events(self, events):
        if events:
            self.write_serialized(orjson.dumps(events)[1:-1], len(events))

    def write_serialized(self, body, count):
        """Write `count` events already serialised as comma-separated JSON objects."""
        if not count:
            return
        if self.count:
            self._fh.write(b",\n")
        self._fh.write(body)
        self.count += count

    def write_event(self, event):
        self.write_events([event])

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self._fh.write(b"]")
                for key, value in self.metadata.items():
                    self._fh.write(b"," + orjson.dumps(key) + b":" + orjson.dumps(value, default=str))
                self._fh.write(b"}\n")
        finally:
            self._fh.close()
        return self._ctx.__exit__(exc_type, exc, tb)


def write_trace(path, events, metadata=None):
    """Write a whole trace at once (object form)."""
    with TraceWriter(path, metadata) as writer:
        writer.write_events(list(events))
    return path
