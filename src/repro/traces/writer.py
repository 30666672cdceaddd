"""Streaming Chrome trace writer: events go to disk as they come, the file appears complete or not at all."""

import contextlib
import os

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
        self._stack = None
        self._fh = None
        self.temporary = None

    def __enter__(self):
        # one stack for the file and its temporary: a failure, or a signal's exception, that comes
        # while the file is opened or ended removes the temporary too
        with contextlib.ExitStack() as stack:
            tmp = self.temporary = stack.enter_context(atomic_path(self.path))  # renamed to `path` on success
            self._fh = stack.enter_context(open(tmp, "wb", buffering=1 << 20))
            self._fh.write(b'{"traceEvents":[')
            self._stack = stack.pop_all()
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

    def reserve(self, size, count):
        """Leave the place of `count` events, `size` bytes serialised as write_serialized writes
        them one after the other (see separated_size), for write_at to fill; return (the file
        written, where they go). Nothing is reserved for no event."""
        if not count:
            return self.temporary, 0
        if self.count:
            self._fh.write(b",\n")
        self._fh.flush()
        at = self._fh.tell()
        self._fh.seek(at + size)
        self.count += count
        return self.temporary, at

    def write_event(self, event):
        self.write_events([event])

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self._fh.write(b"]")
                for key, value in self.metadata.items():
                    self._fh.write(b"," + orjson.dumps(key) + b":" + orjson.dumps(value, default=str))
                self._fh.write(b"}\n")
            except BaseException as error:  # the temporary goes, and the error with its cause goes on
                self._stack.__exit__(type(error), error, error.__traceback__)
                raise
        return self._stack.__exit__(exc_type, exc, tb)

def separated_size(bodies):
    """The size of `bodies` as TraceWriter writes them one after the other."""
    return sum(map(len, bodies)) + 2 * max(len(bodies) - 1, 0)


def write_at(path, at, bodies):
    """Write `bodies` at `at` in the file `path`, as TraceWriter writes them one after the other, in
    a place it has reserved (possibly from another process)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for n, body in enumerate(bodies):
            for data in (b",\n", body) if n else (body,):
                view = memoryview(data)
                while view:
                    written = os.pwrite(fd, view, at)
                    view, at = view[written:], at + written
    finally:
        os.close(fd)


def write_trace(path, events, metadata=None):
    """Write a whole trace at once (object form)."""
    with TraceWriter(path, metadata) as writer:
        writer.write_events(list(events))
    return path
