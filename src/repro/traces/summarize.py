"""Summaries of traces: per-run metadata, end-to-end time, per-event durations, group statistics.

All times in a summary are microseconds (the trace's own unit). Per trace:
  end_to_end_time          last end minus first begin, events of category 'ignore' left out;
  end_to_end_process_time  the same over every duration event, ignored ones included;
  init_time                time in runtime initialisation: the `runtime_init` spans and the
                           `wait_runtime_init` spans (a request waiting for initialisation in the
                           background), whatever their category.
"""

import math
from pathlib import Path

import numpy as np

from repro.errors import TraceError
from repro.traces.events import IGNORE_CATEGORY
from repro.traces.reader import TraceReader, cycle_collection_paused

# Run metadata fields the TrIMS client records in otherData (see trims-tools reference).
RUN_FIELDS = (
    "run_id",
    "server",
    "model_name",
    "hostname",
    "upr_enabled",
    "eager_mode",
    "eager_mode_async",
    "experiment_description",
)

# Duration events that are runtime initialisation (the TrIMS client's names).
INIT_EVENTS = frozenset({"runtime_init", "wait_runtime_init"})

# File names the trace tools write; directory searches skip them so reruns do not feed on outputs.
OUTPUT_PREFIXES = ("combined", "compared-", "summary")


def find_traces(inputs):
    """Expand directories (recursively, *.json, skipping the tools' own outputs) into files."""
    files = []
    for item in map(Path, inputs):
        if item.is_dir():
            found = sorted(
                p for p in item.rglob("*.json") if not p.name.startswith(OUTPUT_PREFIXES) and not p.name.startswith(".")
            )
            if not found:
                raise TraceError(item, "directory holds no trace files (*.json)")
            files.extend(found)
        elif item.exists():
            files.append(item)
        else:
            raise TraceError(item, "no such file or directory")
    return files


def summarize_trace(path, detailed=False, strict=True, reader_options=None):
    """Summary of one trace: run metadata, end_to_end_time and per-event-name durations."""
    reader = TraceReader(path, strict=strict, **(reader_options or {}))
    open_b = {}
    per_name = {}
    detail = [] if detailed else None
    first_begin = last_end = process_first = process_last = None
    init_time = 0
    index = 0
    for chunk in reader.chunks():
        for event in chunk:
            ph = event["ph"]
            if ph == "B":
                open_b.setdefault((event.get("pid"), event.get("tid")), []).append((event, index))
            elif ph in "EX":
                if ph == "E":
                    stack = open_b.get((event.get("pid"), event.get("tid")))
                    if not stack:
                        if strict:
                            raise TraceError(path, "'E' event without a matching 'B'", index)
                        index += 1
                        continue
                    begin, _ = stack.pop()
                    start, end = begin["ts"], event["ts"]
                else:
                    begin = event
                    start, end = event["ts"], event["ts"] + event.get("dur", 0)
                name = begin.get("name", "")
                process_first = start if process_first is None else min(process_first, start)
                process_last = end if process_last is None else max(process_last, end)
                if name in INIT_EVENTS:
                    init_time += end - start
                if begin.get("cat") != IGNORE_CATEGORY:
                    entry = per_name.get(name)
                    if entry is None:
                        entry = per_name[name] = {"count": 0, "total": 0.0}
                    entry["count"] += 1
                    entry["total"] += end - start
                    first_begin = start if first_begin is None else min(first_begin, start)
                    last_end = end if last_end is None else max(last_end, end)
                    if detail is not None:
                        detail.append({"name": name, "cat": begin.get("cat"), "start": start, "duration": end - start,
                                       "pid": begin.get("pid"), "tid": begin.get("tid")})
            index += 1
    dangling = [i for stack in open_b.values() for _, i in stack]
    if dangling and strict:
        raise TraceError(path, "'B' event without a matching 'E'", dangling[0])
    other = reader.other_data
    summary = {"file": str(path)}
    summary.update({field: other.get(field) for field in RUN_FIELDS})
    summary.update({k: v for k, v in other.items() if k not in summary and isinstance(v, (str, int, float, bool))})
    summary["end_to_end_time"] = (last_end - first_begin) if first_begin is not None else 0.0
    summary["end_to_end_process_time"] = (process_last - process_first) if process_first is not None else 0.0
    summary["init_time"] = init_time
    for entry in per_name.values():
        entry["mean"] = entry["total"] / entry["count"]
    summary["events"] = per_name
    if detail is not None:
        summary["detailed_events"] = detail
    if reader.skipped:
        summary["skipped_events"] = reader.skipped
    return summary


def describe(values):
    """count, mean, median, p90, p99, min, max, sample std and the 95% t-interval of the mean."""
    data = np.asarray(values, dtype=float)
    n = int(data.size)
    if n == 0:
        raise ValueError("no values to describe")
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if n > 1 else 0.0
    if n > 1 and std > 0:
        from scipy import stats  # imported here: scipy takes a second to import

        low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=std / math.sqrt(n))
        ci = [float(low), float(high)]
    elif n > 1:
        ci = [mean, mean]
    else:
        ci = None
    return {
        "count": n,
        "mean": mean,
        "median": float(np.median(data)),
        "p90": float(np.percentile(data, 90)),
        "p99": float(np.percentile(data, 99)),
        "min": float(data.min()),
        "max": float(data.max()),
        "std": std,
        "ci95": ci,
    }


def aggregate(summaries, group_by):
    """Statistics of end_to_end_time and each event's total duration, per group of `group_by` keys."""
    groups = {}
    for summary in summaries:
        key = tuple(summary.get(k) for k in group_by)
        groups.setdefault(key, []).append(summary)
    result = []
    for key, members in groups.items():
        metrics = {"end_to_end_time": describe([m["end_to_end_time"] for m in members])}
        names = sorted({name for m in members for name in m["events"]})
        for name in names:
            metrics[name] = describe([m["events"][name]["total"] for m in members if name in m["events"]])
        result.append({"group": dict(zip(group_by, key)), "metrics": metrics})
    return result


def summarize(inputs, group_by=("model_name", "upr_enabled"), detailed=False, strict=True):
    """Summary document of many traces (files or directories): per-trace entries and group statistics."""
    with cycle_collection_paused():
        traces = [summarize_trace(p, detailed=detailed, strict=strict) for p in find_traces(inputs)]
    return {"time_unit": "us", "traces": traces, "group_by": list(group_by), "groups": aggregate(traces, list(group_by))}
