"""Combine N traces into one, each input on its own process row.

Each input is parsed once. Its kept events wait in a spool until the whole input is seen (its
processes, its ``ignore`` spans, its first timestamp), then go out with new pids and adjusted
timestamps. A file parsed in chunks waits serialised, each timestamp replaced by a marker that
a byte-level substitution fills in at the end, so its memory stays near its size on disk. One
input is held at a time and the output is streamed, so peak memory follows the largest input.
"""

import secrets
from collections import deque
from itertools import chain, compress, repeat
from operator import and_, eq, is_not, ne, sub
from pathlib import Path

import numpy as np
import orjson

from repro.errors import TraceError
from repro.traces.events import IGNORE_CATEGORY, check_event, first_bad_event, positions, values
from repro.traces.reader import TraceReader, cycle_collection_paused
from repro.traces.writer import TraceWriter


def run_label(path, other_data, metadata):
    """A readable process name for one input: TrIMS run fields when present, else its own name."""
    if other_data.get("model_name"):
        sharing = "shared" if other_data.get("upr_enabled") else "original"
        parts = [str(other_data["model_name"]), str(other_data.get("hostname", "")), sharing]
        if other_data.get("iteration") is not None:
            parts.append(f"iteration {other_data['iteration']}")
        return " ".join(p for p in parts if p)
    for key in ("name", "run_id", "trace_name"):
        value = other_data.get(key) or metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return Path(path).stem


class _InputPlan:
    """What reading one input teaches: its processes, ignored spans and first timestamp."""

    def __init__(self):
        self.origin = None
        self.pids = {}  # original pid -> process name seen in its metadata (or None)
        self.dropped = 0  # events left out: ignored spans and process names
        self.spans = []  # (start, end) of ignored spans
        self.renamed = 0  # process_name events, replaced by the combined trace's own


def _kept_chunks(reader, plan, adjust, check):
    """Yield each chunk's kept (events, phases, stamps, pids), learning the input's pids and
    process names, ignored events and spans, and first timestamp into `plan` on the way.

    The per-chunk work runs over columns (the events' ph, ts and pid, read once, in C); a
    per-event loop over the whole chunk is needed only when an ignored 'B' may be closed by an
    'E' that does not carry the category itself.
    """
    open_ignored = {}  # (pid, tid) -> timestamps of ignored B events still open (fast path)
    open_b = {}  # (pid, tid) -> stack of (ignored?, ts) of every open B event (slow path)
    by_stack = False  # once on the slow path, stay on it for the rest of the input
    index = 0
    for chunk in reader.chunks():
        try:
            columns = (chunk, values(chunk, "ph"), values(chunk, "ts"), values(chunk, "pid"))
        except TypeError:  # not every event is an object: name the first that is not
            first = next(i for i, e in enumerate(chunk) if type(e) is not dict)
            check_event(chunk[first], reader.path, index + first)
        _, phases, stamps, pids = columns
        if check:
            bad = first_bad_event(chunk, phases, stamps)
            if bad is not None:
                check_event(chunk[bad], reader.path, index + bad)
        for pid in dict.fromkeys(pids):
            plan.pids.setdefault(pid, None)
        drops = []
        if "M" in phases:
            for i in positions(phases, "M"):
                if chunk[i].get("name") == "process_name":
                    plan.pids[chunk[i].get("pid")] = (chunk[i].get("args") or {}).get("name")
                    drops.append(i)
                    plan.renamed += 1
        if adjust:
            categories = values(chunk, "cat")
            ignored = positions(categories, IGNORE_CATEGORY)
            pending = any(open_ignored.values())
            if not by_stack and (ignored or pending) and None in set(compress(categories, map(eq, phases, repeat("E")))):
                by_stack = True
                for key, stack in open_ignored.items():
                    open_b[key] = [(True, ts) for ts in stack]
            if by_stack:
                drops += _ignored_by_stack(chunk, plan.spans, open_b)
            else:
                _ignored_by_category(chunk, columns, ignored, plan.spans, open_ignored)
                drops += ignored
        drops = list(dict.fromkeys(drops))  # an ignored process_name is listed twice
        plan.dropped += len(drops)
        kept = _without(columns, drops)
        _, kept_phases, kept_stamps, _ = kept
        origin = min(compress(kept_stamps, map(ne, kept_phases, repeat("M"))), default=None)
        if origin is not None and (plan.origin is None or origin < plan.origin):
            plan.origin = origin
        index += len(chunk)
        yield kept


def _ignored_by_category(chunk, columns, positions, spans, open_ignored):
    """Spans of ignored events when every event of an ignored span carries the category."""
    _, phases, stamps, pids = columns
    ignored_events = list(map(chunk.__getitem__, positions))
    keys = zip(map(pids.__getitem__, positions), values(ignored_events, "tid"))
    for event, ph, ts, key in zip(ignored_events, map(phases.__getitem__, positions),
                                  map(stamps.__getitem__, positions), keys):
        if ph == "B":
            stack = open_ignored.get(key)
            if stack is None:
                open_ignored[key] = [ts]
            else:
                stack.append(ts)
        elif ph == "E":
            stack = open_ignored.get(key)
            if stack:
                spans.append((stack.pop(), ts))
        elif ph == "X":
            spans.append((ts, ts + event.get("dur", 0)))


def _ignored_by_stack(chunk, spans, open_b):
    """Spans of ignored events, matching every B with its E per (pid, tid); returns the positions to drop."""
    drops = []
    for position, event in enumerate(chunk):
        ph = event["ph"]
        if ph == "M":
            continue
        ignored = event.get("cat") == IGNORE_CATEGORY
        if ph == "B":
            open_b.setdefault((event.get("pid"), event.get("tid")), []).append((ignored, event["ts"]))
        elif ph == "E":
            stack = open_b.get((event.get("pid"), event.get("tid")))
            if stack:
                began_ignored, began = stack.pop()
                if began_ignored:
                    ignored = True
                    spans.append((began, event["ts"]))
        elif ignored and ph == "X":
            spans.append((event["ts"], event["ts"] + event.get("dur", 0)))
        if ignored:
            drops.append(position)
    return drops


def _merge(spans):
    """Sorted (starts, ends) arrays of the union of the spans."""
    if not spans:
        return np.zeros(0), np.zeros(0)
    spans = np.array(spans)  # ints stay ints, so whole shifts keep integer timestamps
    spans = spans[np.lexsort((spans[:, 1], spans[:, 0]))]
    starts, ends = spans[:, 0], spans[:, 1]
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    return starts[first], np.maximum.reduceat(ends, first)


class _Shift:
    """Adjusted timestamps: zeroed at the origin, with the ignored spans cut out."""

    def __init__(self, origin, spans):
        self.starts, self.ends = _merge(spans)
        self.before = np.concatenate([[0], np.cumsum(self.ends - self.starts)])
        self.origin = 0
        self.origin = self.apply(np.array([origin or 0])).tolist()[0]

    def shifted(self, stamps):
        """The adjusted timestamps, as a list (ints stay ints when the shift is whole)."""
        if not self.starts.size:
            return list(map(sub, stamps, repeat(self.origin)))
        return self.apply(np.array(stamps)).tolist()

    def apply(self, ts):
        if not self.starts.size:
            return ts - self.origin
        i = np.searchsorted(self.ends, ts, side="right")
        removed = self.before[i]
        inside = i < self.starts.size
        partial = np.where(inside, ts - self.starts[np.minimum(i, self.starts.size - 1)], 0)
        removed = removed + np.where(inside & (partial > 0), partial, 0)
        return ts - removed - self.origin


def _without(columns, drops):
    """The chunk's (events, phases, stamps, pids) minus the events at the `drops` positions."""
    if not drops:
        return columns
    keep = [True] * len(columns[0])
    for position in drops:
        keep[position] = False
    return tuple(list(compress(column, keep)) for column in columns)


def _rewrite(columns, pid_map, new_stamps=None):
    """Give events their new pid and, with `new_stamps` (a function of the timestamps giving their
    replacements), new timestamps for every event that has one; metadata events keep theirs absent.
    Returns the timestamps replaced."""
    events, phases, stamps, pids = columns
    new_pids = map(pid_map.__getitem__, pids)
    if new_stamps is not None and "M" not in phases and None not in stamps:  # the common case: one loop
        for event, pid, ts in zip(events, new_pids, new_stamps(stamps)):
            event["pid"], event["ts"] = pid, ts
        return stamps
    for event, pid in zip(events, new_pids):
        event["pid"] = pid
    if new_stamps is None:
        return []
    events, stamps = _timed(events, phases, stamps)
    for event, ts in zip(events, new_stamps(stamps)):
        event["ts"] = ts
    return stamps


def _timed(events, phases, stamps):
    """The events that have a timestamp to adjust (not metadata, ts present), and their timestamps."""
    keep = list(map(and_, map(ne, phases, repeat("M")), map(is_not, stamps, repeat(None))))
    return list(compress(events, keep)), list(compress(stamps, keep))


class _Spool:
    """One input's kept events, waiting for their new pids and adjusted timestamps.

    A file parsed in one piece stays as live events, rewritten in place at the end. A file
    parsed in chunks is serialised chunk by chunk with its new pids, each timestamp still to be
    adjusted replaced by a marker, so that it is parsed only once and its memory stays near its
    size on disk; the adjusted timestamps replace the markers in the bytes at the end.
    """

    def __init__(self, path, adjust, serialise):
        self.path, self.adjust, self.serialise = path, adjust, serialise
        # a string no trace contains (a NUL and a random token); its JSON form is what gets replaced
        self.marker_value = "\x00ts-" + secrets.token_hex(8)
        self.marker = orjson.dumps(self.marker_value)
        self.chunks = deque()  # live columns, or (JSON of the events, their count, timestamps to adjust)

    def add(self, columns, pid_map):
        if not columns[0]:
            return
        if not self.serialise:
            self.chunks.append(columns)
            return
        markers = repeat(self.marker_value)
        stamps = _rewrite(columns, pid_map, (lambda _: markers) if self.adjust else None)
        self.chunks.append((orjson.dumps(columns[0])[1:-1], len(columns[0]), stamps))

    def write(self, writer, pid_map, shift):
        """Write every chunk with its new pids and adjusted timestamps; return the event count."""
        written = 0
        while self.chunks:
            chunk = self.chunks.popleft()
            if not self.serialise:
                _rewrite(chunk, pid_map, None if shift is None else shift.shifted)
                writer.write_events(chunk[0])
                written += len(chunk[0])
                continue
            body, count, stamps = chunk
            if stamps:
                pieces = body.split(self.marker)
                if len(pieces) != len(stamps) + 1:
                    raise TraceError(self.path, "an event contains the combiner's timestamp marker; combine it again")
                texts = orjson.dumps(shift.shifted(stamps))[1:-1].split(b",")
                body = b"".join(chain.from_iterable(zip(pieces, texts))) + pieces[-1]
            writer.write_serialized(body, count)
            written += count
        return written


def combine(inputs, output, adjust=True, skip_first=False, strict=True, reader_options=None):
    """Write the combined trace of `inputs` to `output`; return a small report dict."""
    inputs = [Path(p) for p in inputs][1 if skip_first else 0 :]
    report = {"inputs": len(inputs), "events": 0, "skipped": 0, "dropped": 0}
    next_pid = 1
    per_input = []
    display_unit = None
    with TraceWriter(output) as writer, cycle_collection_paused():
        for path in inputs:
            # strict: each event is validated here; lenient: the reader drops bad events
            reader = TraceReader(path, strict=strict, check=not strict, **(reader_options or {}))
            plan, spool, pid_map = _InputPlan(), _Spool(path, adjust, serialise=not reader.whole), {}
            for kept in _kept_chunks(reader, plan, adjust, check=strict):
                for pid in plan.pids:  # numbered in order of first appearance
                    pid_map.setdefault(pid, next_pid + len(pid_map))
                spool.add(kept, pid_map)
            kept = None  # only the spool keeps the events: freed as written, before the next input is parsed
            metadata, other = reader.metadata, reader.other_data
            display_unit = display_unit or metadata.get("displayTimeUnit")
            label = run_label(path, other, metadata)
            names = []
            for pid, own_name in plan.pids.items():
                name = label if len(plan.pids) == 1 or not own_name else f"{label} / {own_name}"
                names.append({"ph": "M", "name": "process_name", "pid": pid_map[pid], "tid": 0, "args": {"name": name}})
            next_pid += len(plan.pids)
            writer.write_events(names)
            written = spool.write(writer, pid_map, _Shift(plan.origin, plan.spans) if adjust else None)
            report["events"] += len(names) + written
            report["dropped"] += plan.dropped - plan.renamed
            report["skipped"] += reader.skipped
            per_input.append(
                {
                    "file": str(path),
                    "label": label,
                    "pids": list(pid_map.values()),
                    "otherData": metadata.get("otherData"),
                    "metadata": {k: v for k, v in metadata.items() if k not in ("otherData", "displayTimeUnit")},
                }
            )
        writer.metadata = {"displayTimeUnit": display_unit or "ms", "otherData": {"inputs": per_input}}
    return report
