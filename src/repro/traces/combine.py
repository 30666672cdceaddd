"""Combine N traces into one, each input on its own process row.

Each input is read twice in chunks (whole small files are parsed once and kept): the first pass
finds its processes, its ``ignore`` spans and its first timestamp; the second writes the events
with pids remapped and timestamps adjusted. Only one input is in memory at a time and the output
is streamed, so peak memory follows the largest input, not the sum.
"""

from itertools import compress
from pathlib import Path

import numpy as np

from repro.traces.events import IGNORE_CATEGORY, check_event, first_bad_event, values
from repro.traces.reader import TraceReader
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
    """What pass 1 learns about one input."""

    def __init__(self):
        self.origin = None
        self.pids = {}  # original pid -> process name seen in its metadata (or None)
        self.dropped = set()  # indices of events left out: ignored spans and process names
        self.spans = []  # (start, end) of ignored spans
        self.renamed = 0  # process_name events, replaced by the combined trace's own
        self.kept = None  # the events pass 2 writes, when the input is a single chunk


def _analyse(reader, adjust, check):
    """Pass 1 over one input: its pids and process names, ignored events and spans, first timestamp.

    Mostly comprehensions over each chunk (they run at C speed); a per-event loop is needed
    only when an ignored 'B' may be closed by an 'E' that does not carry the category itself.
    """
    plan = _InputPlan()
    open_ignored = {}  # (pid, tid) -> timestamps of ignored B events still open (fast path)
    open_b = {}  # (pid, tid) -> stack of (ignored?, ts) of every open B event (slow path)
    by_stack = False  # once on the slow path, stay on it for the rest of the input
    index = 0
    for chunk in reader.chunks():
        if check:
            if set(map(type, chunk)) - {dict}:  # values() needs dicts: name the first that is not
                first = next(i for i, e in enumerate(chunk) if type(e) is not dict)
                check_event(chunk[first], reader.path, index + first)
            phases = values(chunk, "ph")
            bad = first_bad_event(chunk, phases)
            if bad is not None:
                check_event(chunk[bad], reader.path, index + bad)
        else:
            phases = values(chunk, "ph")
        for pid in dict.fromkeys(values(chunk, "pid")):
            plan.pids.setdefault(pid, None)
        for i in [i for i, ph in enumerate(phases) if ph == "M"]:
            if chunk[i].get("name") == "process_name":
                plan.pids[chunk[i].get("pid")] = (chunk[i].get("args") or {}).get("name")
                plan.dropped.add(index + i)
                plan.renamed += 1
        if adjust:
            categories = values(chunk, "cat")
            ignored = [i for i, cat in enumerate(categories) if cat == IGNORE_CATEGORY]
            pending = any(open_ignored.values())
            if not by_stack and (ignored or pending) and None in set(compress(categories, map("E".__eq__, phases))):
                by_stack = True
                for key, stack in open_ignored.items():
                    open_b[key] = [(True, ts) for ts in stack]
            if by_stack:
                _ignored_by_stack(chunk, index, plan, open_b)
            else:
                _ignored_by_category(chunk, index, ignored, plan, open_ignored)
        kept = _without(chunk, index, plan.dropped)
        if reader.single_chunk:
            plan.kept = kept  # pass 2 gets the same chunk back: no need to cut it again
        origin = min(compress(values(kept, "ts"), map("M".__ne__, values(kept, "ph"))), default=None)
        if origin is not None and (plan.origin is None or origin < plan.origin):
            plan.origin = origin
        index += len(chunk)
    return plan


def _ignored_by_category(chunk, index, positions, plan, open_ignored):
    """Spans of ignored events when every event of an ignored span carries the category."""
    for i in positions:
        event = chunk[i]
        ph = event["ph"]
        plan.dropped.add(index + i)
        if ph == "B":
            open_ignored.setdefault((event.get("pid"), event.get("tid")), []).append(event["ts"])
        elif ph == "E":
            stack = open_ignored.get((event.get("pid"), event.get("tid")))
            if stack:
                plan.spans.append((stack.pop(), event["ts"]))
        elif ph == "X":
            plan.spans.append((event["ts"], event["ts"] + event.get("dur", 0)))


def _ignored_by_stack(chunk, index, plan, open_b):
    """Spans of ignored events, matching every B with its E per (pid, tid)."""
    for offset, event in enumerate(chunk, index):
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
                    plan.spans.append((began, event["ts"]))
        elif ignored and ph == "X":
            plan.spans.append((event["ts"], event["ts"] + event.get("dur", 0)))
        if ignored:
            plan.dropped.add(offset)


def _merge(spans):
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


class _Shift:
    """Adjusted timestamps: zeroed at the origin, with the ignored spans cut out."""

    def __init__(self, origin, spans):
        merged = _merge(spans)
        self.starts = np.array([s for s, _ in merged])
        self.ends = np.array([e for _, e in merged])
        self.before = np.concatenate([[0], np.cumsum(self.ends - self.starts)]) if merged else np.zeros(1)
        self.origin = 0
        self.origin = self.apply(np.array([origin or 0])).tolist()[0]

    def apply(self, ts):
        if not self.starts.size:
            return ts - self.origin
        i = np.searchsorted(self.ends, ts, side="right")
        removed = self.before[i]
        inside = i < self.starts.size
        partial = np.where(inside, ts - self.starts[np.minimum(i, self.starts.size - 1)], 0)
        removed = removed + np.where(inside & (partial > 0), partial, 0)
        return ts - removed - self.origin

    def update(self, events, pid_map):
        """Give `events` their new pid and adjusted ts, in place (ints stay ints when the shift is whole)."""
        phases, stamps = values(events, "ph"), values(events, "ts")
        if "M" in phases or None in stamps:
            timed = [e for e, ph, ts in zip(events, phases, stamps) if ph != "M" and ts is not None]
            stamps = values(timed, "ts")
            for event in events:
                event["pid"] = pid_map[event.get("pid")]
        else:
            timed = events
            only = next(iter(pid_map.values())) if len(pid_map) == 1 else None
            for event in events:
                event["pid"] = only if only is not None else pid_map[event.get("pid")]
        for event, ts in zip(timed, self.apply(np.array(stamps)).tolist() if timed else ()):
            event["ts"] = ts


def _without(chunk, start, dropped):
    """The chunk minus the events whose global index is in `dropped`, cut by slicing."""
    cuts = sorted(i - start for i in dropped if start <= i < start + len(chunk)) if dropped else ()
    if not cuts:
        return chunk
    kept, previous = [], 0
    for cut in cuts:
        kept.extend(chunk[previous:cut])
        previous = cut + 1
    kept.extend(chunk[previous:])
    return kept


def _remap(events, pid_map, shift):
    """Give events their new pid and, when adjusting, their shifted timestamp (in place)."""
    if shift is not None and shift.starts.size:
        shift.update(events, pid_map)
        return
    origin = shift.origin if shift is not None else None
    for event in events:
        event["pid"] = pid_map[event.get("pid")]
        if origin is not None:
            ts = event.get("ts")
            if ts is not None and event["ph"] != "M":
                event["ts"] = ts - origin


def combine(inputs, output, adjust=True, skip_first=False, strict=True, reader_options=None):
    """Write the combined trace of `inputs` to `output`; return a small report dict."""
    inputs = [Path(p) for p in inputs][1 if skip_first else 0 :]
    report = {"inputs": len(inputs), "events": 0, "skipped": 0, "dropped": 0}
    next_pid = 1
    per_input = []
    display_unit = None
    with TraceWriter(output) as writer:
        for path in inputs:
            # strict: pass 1 validates each event itself; lenient: the reader drops bad events
            reader = TraceReader(path, strict=strict, check=not strict, **(reader_options or {}))
            plan = _analyse(reader, adjust, check=strict)
            metadata, other = reader.metadata, reader.other_data
            display_unit = display_unit or metadata.get("displayTimeUnit")
            label = run_label(path, other, metadata)
            pid_map, names = {}, []
            for pid, own_name in plan.pids.items():
                pid_map[pid] = next_pid
                name = label if len(plan.pids) == 1 or not own_name else f"{label} / {own_name}"
                names.append({"ph": "M", "name": "process_name", "pid": next_pid, "tid": 0, "args": {"name": name}})
                next_pid += 1
            writer.write_events(names)
            report["events"] += len(names)
            shift = _Shift(plan.origin, plan.spans) if adjust else None
            index = 0
            for chunk in reader.chunks():
                kept = plan.kept if plan.kept is not None else _without(chunk, index, plan.dropped)
                index += len(chunk)
                _remap(kept, pid_map, shift)
                writer.write_events(kept)
                report["events"] += len(kept)
            report["dropped"] += len(plan.dropped) - plan.renamed
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
