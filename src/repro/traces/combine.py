"""Combine N traces into one, each input on its own process row.

Each input is read twice in chunks (whole small files are parsed once and kept): the first pass
finds its processes, its ``ignore`` spans and its first timestamp; the second writes the events
with pids remapped and timestamps adjusted. Only one input is in memory at a time and the output
is streamed, so peak memory follows the largest input, not the sum.
"""

from pathlib import Path

import numpy as np

from repro.traces.events import IGNORE_CATEGORY, NUMBER_TYPES, PHASES, PHASES_WITHOUT_TS, check_event
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
        self.dropped = set()  # event indices of ignored spans
        self.spans = []  # (start, end) of ignored spans


def _analyse(reader, adjust, check):
    """Pass 1 over one input: its pids and process names, ignored events and spans, first timestamp.

    With `check`, every event is validated here (the loop touches each event anyway), and the
    first bad one raises the reader's precise error.
    """
    plan = _InputPlan()
    pids, dropped, spans = plan.pids, plan.dropped, plan.spans
    open_b = {}  # (pid, tid) -> stack of (ignored?, ts) for B events
    origin = None
    index = 0
    for chunk in reader.chunks():
        track = adjust and (bool(open_b) or any(e.get("cat") == IGNORE_CATEGORY for e in chunk if type(e) is dict))
        for event in chunk:
            if type(event) is not dict:
                check_event(event, reader.path, index)
            ph = event.get("ph")
            ts = event.get("ts")
            if check and (
                ph not in PHASES
                or (type(ts) not in NUMBER_TYPES and not (ts is None and ph in PHASES_WITHOUT_TS))
                or (ph == "X" and type(event.get("dur", 0)) not in NUMBER_TYPES)
            ):
                check_event(event, reader.path, index)
            pid = event.get("pid")
            if pid not in pids:
                pids[pid] = None
            if ph == "M":
                if event.get("name") == "process_name":
                    pids[pid] = (event.get("args") or {}).get("name")
                index += 1
                continue
            ignored = False
            if track:
                ignored = event.get("cat") == IGNORE_CATEGORY
                if ph == "B":
                    open_b.setdefault((pid, event.get("tid")), []).append((ignored, ts))
                elif ph == "E":
                    stack = open_b.get((pid, event.get("tid")))
                    if stack:
                        began_ignored, began = stack.pop()
                        if began_ignored:
                            ignored = True
                            spans.append((began, ts))
                elif ignored and ph == "X":
                    spans.append((ts, ts + event.get("dur", 0)))
            if ignored:
                dropped.add(index)
            elif origin is None or ts < origin:
                origin = ts
            index += 1
    plan.origin = origin
    return plan


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
        self.origin = self.apply(np.array([origin or 0]))[0]

    def apply(self, ts):
        if not self.starts.size:
            return ts - self.origin
        i = np.searchsorted(self.ends, ts, side="right")
        removed = self.before[i]
        inside = i < self.starts.size
        partial = np.where(inside, ts - self.starts[np.minimum(i, self.starts.size - 1)], 0)
        removed = removed + np.where(inside & (partial > 0), partial, 0)
        return ts - removed - self.origin

    def update(self, events):
        """Rewrite the ts of `events` in place (ints stay ints when the shift is whole)."""
        timed = [e for e in events if e["ph"] != "M" and "ts" in e]
        if not timed:
            return
        if not self.starts.size and type(self.origin) in (int, float):
            origin = self.origin
            for event in timed:
                event["ts"] -= origin
            return
        for event, ts in zip(timed, self.apply(np.array([e["ts"] for e in timed])).tolist()):
            event["ts"] = ts


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
            single_pid = next(iter(pid_map.values())) if len(pid_map) == 1 else None
            index = 0
            for chunk in reader.chunks():
                dropped = plan.dropped
                if dropped:
                    kept = [e for i, e in enumerate(chunk, index)
                            if i not in dropped and (e["ph"] != "M" or e.get("name") != "process_name")]
                else:
                    kept = [e for e in chunk if e["ph"] != "M" or e.get("name") != "process_name"]
                index += len(chunk)
                if single_pid is not None:
                    for event in kept:
                        event["pid"] = single_pid
                else:
                    for event in kept:
                        event["pid"] = pid_map[event.get("pid")]
                if shift is not None:
                    shift.update(kept)
                writer.write_events(kept)
                report["events"] += len(kept)
            report["dropped"] += len(plan.dropped)
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
