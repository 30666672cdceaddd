"""Summaries of traces: per-run metadata, end-to-end time, per-event durations, group statistics.

All times in a summary are microseconds (the trace's own unit). Per trace:
  end_to_end_time          last end minus first begin, events of category 'ignore' left out;
  end_to_end_process_time  the same over every duration event, ignored ones included;
  init_time                time in runtime initialisation: the `runtime_init` spans and the
                           `wait_runtime_init` spans (a request waiting for initialisation in the
                           background), whatever their category.
"""

import contextlib
import json
import math
import os
import re
import secrets
import tempfile
from itertools import compress, repeat
from operator import ne
from pathlib import Path

import numpy as np
import orjson

from repro.errors import ReproError, TraceError
from repro.fsutil import atomic_path, check_text_name, file_identity, first_named_twice, json_text
from repro.stats import t_quantile
from repro.traces.events import IGNORE_CATEGORY, column
from repro.traces.events import values as dict_values
from repro.traces.matching import SpanMatcher, phase_codes
from repro.traces.reader import (
    MetadataTotal,
    NotCompact,
    TraceReader,
    check_not_combined_from,
    cycle_collection_paused,
    field_values,
)

_X = ord("X")

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

# What a trace's summary measures, beside its run fields (no field to group by).
MEASURED = ("end_to_end_time", "end_to_end_process_time", "init_time", "skipped_events")

# Duration events that are runtime initialisation (the TrIMS client's names).
INIT_EVENTS = frozenset({"runtime_init", "wait_runtime_init"})

# File names the trace tools write; directory searches skip them so reruns do not feed on outputs.
OUTPUT_PREFIXES = ("combined", "compared-", "summary")


def find_traces(inputs):
    """Expand directories (recursively, *.json, skipping the tools' own outputs) into files; a file
    named twice (or found in a directory named too) is refused: it would be counted twice."""
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
    for path in files:
        check_text_name(path, "a trace's name goes into the output")
    twice = first_named_twice(files)
    if twice is not None:
        raise TraceError(twice, "given twice (named, or found in a directory named too); expected each trace once")
    return files


class EventSpill:
    """One unnamed temporary file that holds the detailed events of every trace of a summary, one JSON
    line each: as Python objects they are many times the traces' size, and the summary is written by
    streaming them (write_summary). One file for all the traces, not one each (a file descriptor
    apiece ran out past a thousand traces). It goes beside `target`, the summary's file (not to /tmp,
    which may be held in memory), or in its nearest directory that exists."""

    def __init__(self, target):
        self.target = target
        directory = next(p for p in Path(os.path.abspath(target)).parents if p.is_dir())
        try:
            self.file = tempfile.TemporaryFile(dir=directory)
        except OSError as exc:
            raise self.cannot_write(exc) from None

    def cannot_write(self, exc):
        """The error for a failure to write the file (a full disk, a file size limit)."""
        return ReproError(f"{self.target}: cannot write the detailed events beside it ({exc.strerror})")

    def events(self):
        """The place of one trace's events, after those of the traces before it."""
        return SpilledEvents(self)

    def close(self):
        # the file is closed even where flushing fails; its events are read by then, or the failure
        # to write them is the error on its way
        with contextlib.suppress(OSError):
            self.file.close()


class SpilledEvents:
    """One trace's detailed events in an EventSpill's file: appended, all of them, before any is read."""

    def __init__(self, spill):
        self._spill, self._file, self.count = spill, spill.file, 0
        try:  # a seek writes what the buffer holds of the traces before
            self._start = self._file.seek(0, os.SEEK_END)
        except OSError as exc:
            raise spill.cannot_write(exc) from None

    def append(self, record):
        try:
            line = orjson.dumps(record)
        except orjson.JSONEncodeError:  # integers beyond 64 bits, names with lone surrogates
            line = json.dumps(record, separators=(",", ":")).encode()
        try:
            self._file.write(line + b"\n")
        except OSError as exc:
            raise self._spill.cannot_write(exc) from None
        self.count += 1

    def lines(self):
        """The events' JSON texts, in the order appended."""
        try:
            self._file.flush()
            self._file.seek(self._start)
        except OSError as exc:
            raise self._spill.cannot_write(exc) from None
        for _ in range(self.count):
            yield self._file.readline()[:-1]


def summarize_trace(path, detailed=False, strict=True, reader_options=None, given=frozenset(), keep=list):
    """Summary of one trace: run metadata, end_to_end_time and per-event-name durations. `given`: the
    identities of the other traces summarized with it, none of which a combined trace may hold. With
    `detailed`, `keep()` makes what the events are appended to (`detailed_events`)."""
    try:
        return _summary(path, detailed and keep, strict, reader_options, compact=True, given=given)
    except NotCompact:  # read with orjson: the same summary, or the same error, as ever
        return _summary(path, detailed and keep, strict, reader_options, compact=False, given=given)


def _summary(path, keep, strict, reader_options, compact, given=frozenset()):
    """summarize_trace over the reader's compact chunks (Event structs) or its dict chunks."""
    reader = TraceReader(path, strict=strict, **(reader_options or {}))
    chunks, values = (reader.compact_chunks(), field_values) if compact else (reader.column_chunks(), dict_values)
    matcher = SpanMatcher(path, strict)
    names = {}  # event name -> small int, in order of first completion
    counts, totals = np.zeros(0, np.int64), np.zeros(0)
    detail = keep() if keep else None
    first_begin = last_end = process_first = process_last = None
    init_time = 0
    index = 0
    for chunk, columns in chunks:
        phases = column(chunk, columns, "ph")
        codes = phase_codes(phases)
        stamps = column(chunk, columns, "ts")
        matched = matcher.feed(chunk, phases, index, codes=codes, pids=column(chunk, columns, "pid"),
                               tids=column(chunk, columns, "tid"), stamps=stamps, field=values)
        complete = np.flatnonzero(codes == _X).tolist()
        # every duration: B/E pairs and X events, in the order they complete
        begins = matched.begins + list(map(chunk.__getitem__, complete))
        done = np.concatenate([matched.ends, np.array(complete, np.int64)])
        if not begins:
            index += len(chunk)
            continue
        start = np.asarray(values(begins, "ts"))
        lasted = [chunk[i].get("dur", 0) for i in complete]
        end = np.asarray(list(map(stamps.__getitem__, matched.ends.tolist()))
                         + [stamps[i] + dur for i, dur in zip(complete, lasted)])
        if start.dtype.kind not in "if" or end.dtype.kind not in "if" or _wraps(start, end):
            start, end = start.astype(float), end.astype(float)
        with np.errstate(over="ignore", invalid="ignore"):
            duration = end - start
        if lasted:  # an X event's own dur: ts + dur - ts loses what the timestamp's precision cannot hold
            lasted = np.asarray(lasted)
            duration = duration.astype(np.result_type(duration, lasted))
            duration[len(matched.begins):] = lasted
        if duration.dtype.kind == "f" and not np.isfinite(duration).all():
            bad = int(done[np.flatnonzero(~np.isfinite(duration)).min()])
            raise TraceError(path, "duration is not a finite number (timestamps too far apart)", index + bad)
        order = np.argsort(done, kind="stable")
        start, end, duration = start[order], end[order], duration[order]
        begins = list(map(begins.__getitem__, order.tolist()))
        labels = values(begins, "name")
        if None in labels:
            labels = [name or "" for name in labels]
        counted = np.fromiter(map(ne, values(begins, "cat"), repeat(IGNORE_CATEGORY)), bool, len(begins))
        for name in dict.fromkeys(compress(labels, counted)):
            names.setdefault(name, len(names))
        ids = np.fromiter(map(names.get, labels, repeat(-1)), np.int64, len(labels))
        process_first = _extreme(min, process_first, start.min())
        process_last = _extreme(max, process_last, end.max())
        init = np.fromiter(map(INIT_EVENTS.__contains__, labels), bool, len(labels))
        if init.any():
            init_time += sum(duration[init].tolist())  # Python's numbers: an int64 sum would wrap around
        if counted.any():
            first_begin = _extreme(min, first_begin, start[counted].min())
            last_end = _extreme(max, last_end, end[counted].max())
            size = len(names)
            counts = np.pad(counts, (0, size - counts.size))
            totals = np.pad(totals, (0, size - totals.size))
            counts += np.bincount(ids[counted], minlength=size)
            totals += np.bincount(ids[counted], weights=duration[counted], minlength=size)
        if detail is not None:
            for i in np.flatnonzero(counted).tolist():
                begin = begins[i]
                detail.append({"name": labels[i], "cat": begin.get("cat"), "start": start[i].item(),
                               "duration": duration[i].item(), "pid": begin.get("pid"), "tid": begin.get("tid")})
        index += len(chunk)
    dangling = matcher.finish()
    other = reader.other_data
    check_not_combined_from(path, other, given)
    summary = {"file": str(path)}
    for field in RUN_FIELDS:  # grouped by (a key of a dict) and printed: one value each, not a list or object
        value = other.get(field)
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ReproError(f"{path}: otherData.{field}: expected a string, number or true/false, "
                             f"got {type(value).__name__}")
        summary[field] = value
    summary.update({k: v for k, v in other.items() if k not in summary and isinstance(v, (str, int, float, bool))})
    summary["end_to_end_time"] = (last_end - first_begin) if first_begin is not None else 0.0
    summary["end_to_end_process_time"] = (process_last - process_first) if process_first is not None else 0.0
    summary["init_time"] = init_time
    summary["events"] = {name: {"count": count, "total": total, "mean": total / count}
                         for name, count, total in zip(names, counts.tolist(), totals.tolist())}
    for key in ("end_to_end_time", "end_to_end_process_time", "init_time", "events"):
        _require_finite(summary[key], path, key)
    if detail is not None:
        summary["detailed_events"] = detail
    skipped = reader.skipped + matcher.strays + len(dangling)  # a pair that ends before it begins: 2
    if skipped:
        summary["skipped_events"] = skipped
    return summary


def _wraps(start, end):
    """Whether an int64 `end - start` could wrap around (timestamps 2**63 or more apart): then the
    durations are taken as floats, as for integers beyond 64 bits."""
    if not end.dtype.kind == start.dtype.kind == "i":
        return False
    return int(end.max()) - int(start.min()) >= 2**63 or int(end.min()) - int(start.max()) < -(2**63)


def _extreme(pick, current, value):
    value = value.item()
    return value if current is None else pick(current, value)


def _require_finite(value, path, key):
    """Summaries are JSON: a sum or difference that overflowed is an error, never Infinity."""
    numbers = [n for entry in value.values() for n in entry.values()] if isinstance(value, dict) else [value]
    if not all(math.isfinite(n) for n in numbers):
        raise TraceError(path, f"{key} is not a finite number (timestamps too far apart)")


def describe(values):
    """count, mean, median, p90, p99, min, max, sample std and the 95% t-interval of the mean."""
    data = np.asarray(values, dtype=float)
    n = int(data.size)
    if n == 0:
        raise ValueError("no values to describe")
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if n > 1 else 0.0
    if n > 1:  # as scipy.stats.t.interval(0.95, n - 1, loc=mean, scale=scale) computes it; [mean, mean] if std is 0
        scale = std / math.sqrt(n)
        ci = [t_quantile((1.0 - 0.95) / 2, n - 1) * scale + mean, t_quantile((1.0 + 0.95) / 2, n - 1) * scale + mean]
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
    known = set(RUN_FIELDS).union(*([k for k, v in summary.items() if not isinstance(v, (dict, list)) and k not in MEASURED]
                                    for summary in summaries))
    unknown = [k for k in group_by if k not in known]
    if unknown:
        raise ReproError(f"group-by field(s) {unknown}: no trace records them; fields to group by: {sorted(known)}")
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
        for name, stats in metrics.items():
            numbers = [v for v in stats.values() if isinstance(v, float)] + (stats["ci95"] or [])
            if not all(map(math.isfinite, numbers)):
                raise ReproError(f"group {dict(zip(group_by, key))}: statistics of {name} are not finite numbers "
                                 "(durations too large)")
        result.append({"group": dict(zip(group_by, key)), "metrics": metrics})
    return result


def summarize(inputs, group_by=("model_name", "upr_enabled"), detailed=False, strict=True, keep=list):
    """Summary document of many traces (files or directories): per-trace entries and group statistics.
    `keep`: as summarize_trace's (an EventSpill's `events`, for a document that write_summary writes)."""
    copied, traces = MetadataTotal("the summary's copy of the traces' otherData"), []
    with cycle_collection_paused():
        paths = find_traces(inputs)
        given = {file_identity(path) for path in paths}
        for path in paths:
            traces.append(summarize_trace(path, detailed=detailed, strict=strict, given=given, keep=keep))
            copied.add(path, sum(len(value) for value in traces[-1].values() if isinstance(value, str)))
    return {"time_unit": "us", "traces": traces, "group_by": list(group_by), "groups": aggregate(traces, list(group_by))}


def write_summary(target, doc):
    """Write a summary document as write_json does, streaming each trace's SpilledEvents into it (one
    event per line) rather than holding them in memory."""
    token = secrets.token_hex(8)  # a placeholder no trace's text can forge
    spilled = {}
    entries = []
    for entry in doc["traces"]:
        events = entry.get("detailed_events")
        if isinstance(events, SpilledEvents):
            spilled[f"\0spilled-{token}-{len(spilled)}"] = events
            entry = {**entry, "detailed_events": f"\0spilled-{token}-{len(spilled) - 1}"}
        entries.append(entry)
    parts = re.split(rf'( *"detailed_events": "\\u0000spilled-{token}-\d+")', json_text(target, {**doc, "traces": entries}))
    with atomic_path(target) as tmp, open(tmp, "wb") as out:
        for part in parts:
            placeholder = re.fullmatch(rf'( *)"detailed_events": "\\u0000(spilled-{token}-\d+)"', part)
            if placeholder is None:
                out.write(part.encode())
                continue
            indent, events = placeholder[1], spilled["\0" + placeholder[2]]
            out.write(f'{indent}"detailed_events": ['.encode())
            for n, line in enumerate(events.lines()):
                out.write((b",\n" if n else b"\n") + indent.encode() + b"  " + line)
            out.write(f"\n{indent}]".encode() if events.count else b"]")
    return target
