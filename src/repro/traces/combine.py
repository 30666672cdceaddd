"""Combine N traces into one, each input on its own process row.

Each input is read twice in chunks (whole small files are parsed once and kept): the first pass
finds its processes, its ``ignore`` spans and its first timestamp; the second writes the events
with pids remapped and timestamps adjusted. Only one input is in memory at a time and the output
is streamed, so peak memory follows the largest input, not the sum.
"""

import bisect
from pathlib import Path

from repro.traces.events import IGNORE_CATEGORY
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


def _analyse(reader, adjust):
    plan = _InputPlan()
    open_b = {}  # (pid, tid) -> stack of "is this B ignored"
    index = 0
    for chunk in reader.chunks():
        for event in chunk:
            pid = event.get("pid")
            if pid not in plan.pids:
                plan.pids[pid] = None
            ph = event["ph"]
            if ph == "M":
                if event.get("name") == "process_name":
                    plan.pids[pid] = (event.get("args") or {}).get("name")
                index += 1
                continue
            ignored = adjust and event.get("cat") == IGNORE_CATEGORY
            if adjust and ph in "BE":
                stack = open_b.setdefault((pid, event.get("tid")), [])
                if ph == "B":
                    stack.append((ignored, event["ts"]))
                elif stack:
                    began_ignored, began = stack.pop()
                    if began_ignored:
                        ignored = True
                        plan.spans.append((began, event["ts"]))
            elif ignored and ph == "X":
                plan.spans.append((event["ts"], event["ts"] + event.get("dur", 0)))
            if ignored:
                plan.dropped.add(index)
            elif plan.origin is None or event["ts"] < plan.origin:
                plan.origin = event["ts"]
            index += 1
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
    """Maps a timestamp to its adjusted value: zeroed at the origin, ignored spans removed."""

    def __init__(self, origin, spans):
        merged = _merge(spans)
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]
        self.before = [0]
        for s, e in merged:
            self.before.append(self.before[-1] + (e - s))
        self.origin = 0
        self.origin = self(origin or 0)

    def _removed(self, ts):
        i = bisect.bisect_right(self.ends, ts)
        removed = self.before[i]
        if i < len(self.starts) and self.starts[i] < ts:
            removed += ts - self.starts[i]
        return removed

    def __call__(self, ts):
        if not self.starts:
            return ts - self.origin
        return ts - self._removed(ts) - self.origin


def combine(inputs, output, adjust=True, skip_first=False, strict=True, reader_options=None):
    """Write the combined trace of `inputs` to `output`; return a small report dict."""
    inputs = [Path(p) for p in inputs][1 if skip_first else 0 :]
    report = {"inputs": len(inputs), "events": 0, "skipped": 0, "dropped": 0}
    next_pid = 1
    per_input = []
    display_unit = None
    with TraceWriter(output) as writer:
        for path in inputs:
            reader = TraceReader(path, strict=strict, **(reader_options or {}))
            plan = _analyse(reader, adjust)
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
                kept = []
                for event in chunk:
                    if index in plan.dropped or (event["ph"] == "M" and event.get("name") == "process_name"):
                        index += 1
                        continue
                    index += 1
                    event["pid"] = pid_map[event.get("pid")]
                    if shift is not None and "ts" in event and event["ph"] != "M":
                        event["ts"] = shift(event["ts"])
                    kept.append(event)
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
