"""Combine N traces into one, each input on its own process row.

Each input is parsed once. Its kept events wait in a spool until the whole input is seen (its
processes, its ``ignore`` spans, its first timestamp), then go out with new pids and adjusted
timestamps. A file parsed in chunks waits serialised, each timestamp replaced by a marker that
a byte-level substitution fills in at the end, so its memory stays near its size on disk. One
input is held at a time and the output is streamed, so peak memory follows the largest input.

An input in the compact form orjson writes, parsed whole or in chunks, is neither built into
dicts nor serialised again (these cost most; in chunks the markers mean a second parse). Its
events are decoded
into small structs for the checks and the pairing (reader.compact_chunks), and their JSON texts
are copied through with only each pid and each adjusted ts rewritten in the bytes
(_CompactSpool), giving the bytes the general path writes. The copy keeps an event's other
fields as the input spells them: a number orjson would write otherwise (``1.50``, ``1E5``) or a
repeated key stays as it is, where the general path writes orjson's form; inputs with whitespace
between tokens, escapes or anything else the copy cannot vouch for take the general path.

With more than one usable CPU and inputs large enough together, forked workers read the inputs
(_Workers): each input in a worker, and a large one in parts read at once. This process merges
what the parts learn into the input's plan, numbers the pids and sets the shift; the workers
write the events into the output, each at the place reserved for it in order, so the combined
trace is the same bytes. Whatever goes wrong in a worker has the input read here instead, the same
output or the same error.
"""

import math
import os
import secrets
from bisect import bisect_left
from collections import deque
from contextlib import nullcontext
from functools import partial
from itertools import chain, compress, repeat
from operator import and_, eq, is_not, ne, sub
from pathlib import Path

import numpy as np
import orjson

from repro.allocator import fix_malloc_thresholds
from repro.errors import TraceError
from repro.fsutil import file_identity
from repro.pool import Pool, TaskFailed, usable_cpus
from repro.traces.events import IGNORE_CATEGORY, check_event, first_bad_event, positions
from repro.traces.events import values as dict_values
from repro.traces.matching import SpanMatcher
from repro.traces.reader import (
    MetadataTotal,
    NotCompact,
    TraceReader,
    check_not_combined_from,
    cycle_collection_paused,
    field_values,
)
from repro.traces.splice import key_values, splice, value_ends
from repro.traces.writer import TraceWriter, separated_size, write_at


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
        self.named = {}  # the pids that process_name events name, and the name the last gives
        self.dropped = 0  # events left out: ignored spans and process names
        self.spans = []  # (start, end) of ignored spans
        self.renamed = 0  # process_name events, replaced by the combined trace's own
        self.unmatched = 0  # 'B' and 'E' events without their pair, skipped (lenient)
        self.dangling = []  # (index, event) of the 'B' events never closed (lenient)


def _kept_chunks(reader, plan, adjust, strict, compact=False, part=None, last=True):
    """Yield each chunk's kept (events, phases, stamps, pids) with its first index and the
    positions dropped from it, learning the input's pids and process names, ignored events and
    spans, and first timestamp into `plan` on the way. With `compact` the chunks come from the
    reader's compact_chunks and the kept events are their JSON texts; with `part` only those of
    one part of the file (reader.parts). A part but the `last` ends where no begin is open (the
    next part would not know it), else NotCompact: the file is read in one piece instead.

    The per-chunk work runs over columns (each field read once, in C); Python loops only over
    the events that are dropped.
    """
    matcher = SpanMatcher(reader.path, strict)
    index = 0
    values = field_values if compact else dict_values
    for chunk, columns, texts in reader.compact_chunks(with_json=True, part=part) if compact else _dict_chunks(reader):
        if compact:
            columns["cat"] = values(chunk, "cat")
        elif strict:  # lenient: the reader has dropped the bad events already
            bad = first_bad_event(chunk, columns)
            if bad is not None:
                check_event(chunk[bad], reader.path, index + bad)
        else:
            columns.update((key, values(chunk, key)) for key in ("ph", "ts", "pid", "tid", "cat"))
        phases, stamps, pids = columns["ph"], columns["ts"], columns["pid"]
        matched = matcher.feed(chunk, phases, index, pids=pids, tids=columns["tid"], stamps=stamps, field=values)
        for pid in dict.fromkeys(pids):
            plan.pids.setdefault(pid, None)
        drops = matched.strays.tolist()
        plan.unmatched += len(drops)
        if "M" in phases:
            for i in positions(phases, "M"):
                if chunk[i].get("name") == "process_name":
                    args = (orjson.loads(texts[i]) if compact else chunk[i]).get("args")
                    name = args.get("name") if isinstance(args, dict) else None
                    plan.pids[chunk[i].get("pid")] = plan.named[chunk[i].get("pid")] = name
                    drops.append(i)
                    plan.renamed += 1
        if adjust:
            drops += _ignored(chunk, phases, stamps, columns["cat"], matched, plan.spans, values)
        drops = list(dict.fromkeys(drops))  # an ignored process_name is listed twice
        plan.dropped += len(drops) - matched.strays.size
        keep = None
        if drops:
            keep = np.ones(len(chunk), bool)
            keep[drops] = False
        kept = _without(([] if compact else chunk, phases, stamps, pids), keep)
        if compact:  # the positions of the kept events, and the texts they are at
            kept = ((texts, np.arange(len(chunk)) if keep is None else np.flatnonzero(keep)), *kept[1:])
        _, kept_phases, kept_stamps, _ = kept
        if "M" in kept_phases:
            origin = min(compress(kept_stamps, map(ne, kept_phases, repeat("M"))), default=None)
        else:
            origin = min(kept_stamps, default=None)
        if origin is not None and (plan.origin is None or origin < plan.origin):
            plan.origin = origin
        yield kept, index, sorted(drops)
        index += len(chunk)
    if not last and matcher.still_open:
        raise NotCompact
    plan.dangling = matcher.finish()  # a part but the last: only the begins of pairs that end before they begin
    plan.unmatched += len(plan.dangling)


def _dict_chunks(reader):
    for chunk in reader.chunks():
        yield chunk, {}, None


def _ignored(chunk, phases, stamps, categories, matched, spans, values=dict_values):
    """Positions of the chunk's ignored events, adding their spans to `spans`: events of category
    'ignore' (an 'E' goes with its 'B': it is dropped when, and only when, its 'B' is ignored)."""
    ignored = positions(categories, IGNORE_CATEGORY)
    ignored_phases = list(map(phases.__getitem__, ignored))
    if "X" in ignored_phases:
        for i in compress(ignored, map(eq, ignored_phases, repeat("X"))):
            spans.append((stamps[i], stamps[i] + chunk[i].get("dur", 0)))
    drops = list(compress(ignored, map(ne, ignored_phases, repeat("E"))))
    pairs = positions(values(matched.begins, "cat"), IGNORE_CATEGORY)
    if pairs:
        ends = matched.ends[pairs].tolist()
        spans += zip(values(list(map(matched.begins.__getitem__, pairs)), "ts"), map(stamps.__getitem__, ends))
        drops += ends
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


def _within_int64(path, array):
    """A TraceError unless `array` is numpy's int64 or float64: integers from 2**63 on make an
    unsigned (or object) array, whose subtractions would wrap around without a word. (The origin is
    the least timestamp: beyond int64 only where the timestamps are.)"""
    if array.dtype.kind not in {"i", "f"}:
        raise TraceError(path, "a timestamp or ignored span is an integer of 2**63 or more, beyond what "
                               "adjusting handles (try --no-adjust)")


def _within_int64_apart(path, stamps, low, high):
    """A TraceError unless the integer timestamps of `stamps`, the spans and the origin (from `low`
    to `high`) lie less than 2**63 apart: numpy's int64 differences would wrap around without a
    word. Within that, every difference adjusting takes, and every sum of cut spans, fits."""
    if stamps.dtype.kind == "i" and stamps.size:
        if max(int(stamps.max()), high) - min(int(stamps.min()), low) >= 2**63:
            raise TraceError(path, "integer timestamps 2**63 or more apart, beyond what adjusting handles "
                                   "(try --no-adjust)")


class _Shift:
    """Adjusted timestamps: zeroed at the origin, with the ignored spans cut out."""

    def __init__(self, path, origin, spans):
        self.path = path
        self.starts, self.ends = _merge(spans)
        origin = origin or 0  # None where no event is kept: nothing to shift
        if self.starts.size:  # one array (ends alike); without spans timestamps stay Python's numbers
            _within_int64(path, self.starts)
            self.low, self.high = min(self.starts[0].item(), origin), max(self.ends[-1].item(), origin)
        with np.errstate(over="ignore"):  # shifted() reports what is not finite
            self.before = np.concatenate([[0], np.cumsum(self.ends - self.starts)])
        self.origin = 0
        self.origin = self.apply(np.array([origin])).tolist()[0]

    def shifted(self, stamps):
        """The adjusted timestamps, as a list (ints stay ints when the shift is whole)."""
        result = self._shifted(stamps)
        return result if isinstance(result, list) else result.tolist()

    def shifted_json(self, stamps):
        """orjson's JSON text of shifted(stamps); an array of timestamps is written as it is, without
        a Python number made for each (orjson writes 64-bit numbers of numpy as it writes Python's)."""
        result = self._shifted(stamps)
        if isinstance(result, np.ndarray) and result.dtype in (np.float64, np.int64):
            return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)
        return orjson.dumps(result if isinstance(result, list) else result.tolist())

    def _shifted(self, stamps):
        """The adjusted timestamps: a list without ignored spans (each number keeps its type), an array
        with them; a TraceError where one is not finite."""
        if not self.starts.size:
            result = list(map(sub, stamps, repeat(self.origin)))
            # a difference of finite numbers overflows to +-inf, never nan: the extremes tell
            finite = not result or (math.isfinite(min(result)) and math.isfinite(max(result)))
        else:
            stamps = np.array(stamps)
            _within_int64(self.path, stamps)
            _within_int64_apart(self.path, stamps, self.low, self.high)
            result = self.apply(stamps)
            finite = bool(np.isfinite(result).all())
        if not finite:
            raise TraceError(self.path, "adjusted timestamp is not a finite number (timestamps too far apart; "
                                        "try --no-adjust)")
        return result

    def apply(self, ts):
        if not self.starts.size:
            return ts - self.origin
        i = np.searchsorted(self.ends, ts, side="right")
        removed = self.before[i]
        inside = i < self.starts.size
        with np.errstate(over="ignore", invalid="ignore"):  # shifted() reports what is not finite
            partial = np.where(inside, ts - self.starts[np.minimum(i, self.starts.size - 1)], 0)
            removed = removed + np.where(inside & (partial > 0), partial, 0)
            return ts - removed - self.origin


def _without(columns, keep):
    """The chunk's (events, phases, stamps, pids) at the positions `keep` (a mask, None: all) marks."""
    if keep is None:
        return columns
    keep = keep.tolist()
    return tuple(list(compress(column, keep)) for column in columns)


def _dumps(events, path):
    """The events as comma-separated JSON, or a TraceError naming the input when orjson cannot
    write one (it writes at most 254 levels of nested objects and lists)."""
    try:
        return orjson.dumps(events)[1:-1]
    except orjson.JSONEncodeError as exc:
        raise TraceError(path, f"cannot write an event of this input: {exc} (an event's 'args' nest deeper "
                               "than the 254 levels a combined trace may hold)") from None


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
        # live columns, or (JSON of the events, their count, timestamps to adjust, the chunk's first
        # index in the input, the positions dropped from it)
        self.chunks = deque()

    def add(self, columns, pid_map, first, dropped):
        if not columns[0]:
            return
        if not self.serialise:
            self.chunks.append(columns)
            return
        markers = repeat(self.marker_value)
        stamps = _rewrite(columns, pid_map, (lambda _: markers) if self.adjust else None)
        self.chunks.append((_dumps(columns[0], self.path), len(columns[0]), stamps, first, dropped))

    def leave_out(self, dangling):
        """Leave out the begins never closed (lenient), known only once the input is read."""
        if not self.serialise:
            gone = {id(event) for _, event in dangling}
            for n, columns in enumerate(self.chunks):
                keep = [id(event) not in gone for event in columns[0]]
                if not all(keep):
                    self.chunks[n] = tuple(list(compress(column, keep)) for column in columns)
            return
        for n, (body, count, stamps, first, dropped) in enumerate(self.chunks):
            mine = [index - first for index, _ in dangling if first <= index < first + count + len(dropped)]
            # a position among the kept events; an ignored begin has been dropped already
            gone = {p - bisect_left(dropped, p) for p in mine if p not in dropped}
            if not gone:
                continue
            events = orjson.loads(b"[" + body + b"]")
            if stamps:
                timed = compress(range(len(events)), [e.get("ts") == self.marker_value for e in events])
                stamps = [ts for ts, position in zip(stamps, timed) if position not in gone]
            events = [e for position, e in enumerate(events) if position not in gone]
            self.chunks[n] = (_dumps(events, self.path), len(events), stamps, first, dropped)

    def write(self, writer, pid_map, shift):
        """Write every chunk with its new pids and adjusted timestamps; return the event count."""
        written = 0
        while self.chunks:
            chunk = self.chunks.popleft()
            if not self.serialise:
                _rewrite(chunk, pid_map, None if shift is None else shift.shifted)
                writer.write_serialized(_dumps(chunk[0], self.path), len(chunk[0]))
                written += len(chunk[0])
                continue
            body, count, stamps, _, _ = chunk
            if stamps:
                pieces = body.split(self.marker)
                if len(pieces) != len(stamps) + 1:
                    raise TraceError(self.path, "an event contains the combiner's timestamp marker; combine it again")
                texts = orjson.dumps(shift.shifted(stamps))[1:-1].split(b",")
                body = b"".join(chain.from_iterable(zip(pieces, texts))) + pieces[-1]
            writer.write_serialized(body, count)
            written += count
        return written


_DEEP_TEXT = 2 * 200  # an event this long may nest deeper than orjson writes
_NEAR = 32  # bytes between an event's ts and pid values, the most written with them as one


def _check_depth(texts):
    """NotCompact where an event nests deeper than orjson writes: the general spool names the input."""
    for text in texts:
        try:
            orjson.dumps([orjson.loads(text)])
        except (orjson.JSONEncodeError, orjson.JSONDecodeError):  # the general reading names the event
            raise NotCompact from None


def _one_each(keys, texts, kept, wanted):
    """The key (offset) of each kept event that `wanted` says has one, in event order; NotCompact
    unless every kept event holds exactly as many as `wanted` gives it (1 or 0): its own field,
    and no key of that name nested in it (or repeated, or holding null)."""
    if keys.size == texts.starts.size and wanted is None:  # as many as events: one in each, or not
        if ((keys >= texts.starts) & (keys < texts.ends)).all():
            return keys[kept]
    owner = np.searchsorted(texts.ends, keys, side="right")  # the event each key lies in
    wanted = np.ones(kept.size, np.int64) if wanted is None else wanted.astype(np.int64)
    if not np.array_equal(np.bincount(owner, minlength=texts.ends.size)[kept], wanted):
        raise NotCompact
    return keys[np.searchsorted(owner, kept[wanted.astype(bool)])]


class _CompactSpool:
    """One input's kept events as their own JSON texts, copied through: only each pid and each
    timestamp are rewritten, in the bytes (splice), so no event is built or serialised. Every
    timestamp is written anew in orjson's form, adjusted or not, as the general spool writes it.

    The text is copied only where it is what orjson writes for the event, so the combined trace is
    the one the general spool writes: one event per JSON text, in compact form (no whitespace
    between tokens), no escapes, each event's pid once and each number-valued ts once. Anything
    else is NotCompact, and the input is read with orjson instead.
    """

    def __init__(self, path, adjust):
        self.path, self.adjust = path, adjust
        # per chunk: its JSON array and the edits of its kept events (see add), their count, and
        # (their timestamps, which of them to adjust: None for all)
        self.chunks = deque()

    def add(self, columns, pid_map, first, dropped):
        """Note where the kept events' pids and timestamps are, and what leaving out the dropped
        events between them takes: one comma in place of each run of them. The new pids are given
        when written (`pid_map` is not read): a part of a file read on its own does not know them."""
        (texts, kept), phases, stamps, pids = columns
        if not kept.size:
            return
        if texts.lengths.max() >= _DEEP_TEXT:
            _check_depth(texts[int(i)] for i in kept[texts.lengths[kept] >= _DEEP_TEXT])
        if None in dict.fromkeys(pids):
            raise NotCompact  # an event without a pid (or a null one) is given one at its end
        view, quads, starts, ends = texts.view, texts.quads, texts.starts[kept], texts.ends[kept]
        pid_at = _one_each(key_values(view, quads, b"pid"), texts, kept, None)
        has_ts = np.fromiter(map(is_not, stamps, repeat(None)), bool, kept.size) if None in stamps else None
        ts_at = _one_each(key_values(view, quads, b"ts"), texts, kept, has_ts)
        pid_until, ts_until = np.split(value_ends(view, np.concatenate([pid_at, ts_at])), [pid_at.size])
        gaps = np.flatnonzero(np.diff(kept) > 1)  # the dropped events after these go, with one comma
        at, until, fixed = [ends[gaps]], [starts[gaps + 1]], [b","] * gaps.size
        around = None
        if has_ts is None and pids.count(pids[0]) == len(pids):
            around = _next_to_each_other(view, ts_at, ts_until, pid_at, pid_until)
        if around is not None:  # one edit per event: its ts, the bytes between, its pid
            at.append(np.minimum(ts_at, pid_at))
            until.append(np.maximum(ts_until, pid_until))
            pids, around = pids[:1], (around, bool(pid_at[0] < ts_at[0]))
        else:
            at += [pid_at, ts_at]
            until += [pid_until, ts_until]
        at, until = np.concatenate(at), np.concatenate(until)
        order = np.argsort(at, kind="stable")  # into the fixed texts, then the timestamps' ones
        numbered = stamps if has_ts is None else list(compress(stamps, has_ts))
        timed = None
        if self.adjust and "M" in phases:  # metadata events keep their timestamps
            timed = list(map(ne, compress(phases, map(is_not, stamps, repeat(None))), repeat("M")))
        edits = (int(starts[0]), int(ends[-1]), at[order], until[order], order, fixed, pids, around)
        self.chunks.append((texts.listed, edits, kept.size, (numbered, timed) if numbered else None))

    def write(self, writer, pid_map, shift):
        written = 0
        while self.chunks:
            listed, (lo, hi, at, until, order, fixed, pids, around), count, stamps = self.chunks.popleft()
            new_pids = {pid: orjson.dumps(pid_map[pid]) for pid in dict.fromkeys(pids)}
            if around is None:  # every pid's text, then every timestamp's
                fixed = fixed + list(map(new_pids.__getitem__, pids))
                before = after = b""
            else:  # each timestamp's text with the bytes up to the pid and the pid's text (one pid)
                between, pid_first = around
                new_pid = new_pids[pids[0]]
                before, after = (new_pid + between, b"") if pid_first else (b"", between + new_pid)
            if stamps:
                stamps, timed = stamps
                if shift is not None and timed is None:
                    texts = shift.shifted_json(stamps)
                else:
                    if shift is not None:  # metadata events' timestamps stay as they are
                        moved = iter(shift.shifted(list(compress(stamps, timed))))
                        stamps = [next(moved) if keep else ts for ts, keep in zip(stamps, timed)]
                    texts = orjson.dumps(stamps)
                # each timestamp's text (with what its edit writes before and after it), split in C
                texts = texts[1:-1].replace(b",", after + b"\x00" + before)
                fixed = fixed + (before + texts + after).split(b"\x00")
            writer.write_serialized(splice(listed, lo, hi, at, until, list(map(fixed.__getitem__, order.tolist()))), count)
            written += count
        return written


def _next_to_each_other(view, ts_at, ts_until, pid_at, pid_until):
    """The bytes between each event's ts and pid values where these are the same in every event
    (a few), else None: the two values and these bytes can then be written as one."""
    ts_first = bool(ts_at[0] < pid_at[0])
    first, gap = (ts_until, pid_at - ts_until) if ts_first else (pid_until, ts_at - pid_until)
    if gap[0] > _NEAR or (gap != gap[0]).any():  # an event with the values the other way round has gap < 0
        return None
    for k in range(int(gap[0])):
        if (view[first + k] != view[first[0] + k]).any():
            return None
    return view[first[0] : first[0] + gap[0]].tobytes()


def _read_input(path, next_pid, adjust, strict, reader_options, compact, part=None, last=True):
    """Read one input (or with `part` one part of it, see _kept_chunks) into its spool: (reader, plan,
    spool, pid map). With `compact` the events are copied through as their JSON texts
    (_CompactSpool), or NotCompact is raised."""
    # strict: each event is validated here; lenient: the reader drops bad events
    reader = TraceReader(path, strict=strict, check=not strict, **(reader_options or {}))
    plan, pid_map = _InputPlan(), {}
    spool = _CompactSpool(path, adjust) if compact else _Spool(path, adjust, serialise=not reader.whole)
    for kept, first, dropped in _kept_chunks(reader, plan, adjust, strict, compact, part, last):
        for pid in plan.pids:  # numbered in order of first appearance
            pid_map.setdefault(pid, next_pid + len(pid_map))
        spool.add(kept, pid_map, first, dropped)
    kept = None  # only the spool keeps the events: freed as written, before the next input is parsed
    if plan.dangling:
        spool.leave_out(plan.dangling)
    return reader, plan, spool, pid_map


def _read_here(index, path, next_pid, adjust, strict, reader_options):
    """Read one input in this process: copied through where it can be, else with orjson."""
    try:
        return _read_input(path, next_pid, adjust, strict, reader_options, True)
    except NotCompact:  # read with orjson: the same output, or the same error, as ever
        return _read_input(path, next_pid, adjust, strict, reader_options, False)


PARALLEL_BYTES = 16 << 20  # inputs smaller than this together are read in one process: forks cost more


def _worker_count(inputs, strict, workers):
    """How many processes read the inputs: those asked for, else one per usable CPU where the inputs
    are large enough together; one where they are read leniently (the general reading)."""
    if not strict:
        return 1
    if workers is None:
        try:
            size = sum(os.path.getsize(path) for path in inputs)
        except OSError:
            size = 0  # a missing input: its error comes in its turn
        workers = usable_cpus() if size >= PARALLEL_BYTES else 1
    return workers


class _Bodies:
    """Stands in for the TraceWriter in a worker: keeps the bodies, to be sent to the parent."""

    def __init__(self):
        self.bodies, self.counts = [], []

    def write_serialized(self, body, count):
        if count:
            self.bodies.append(body)
            self.counts.append(count)


def _read_in_worker(task, conn):
    """One task of _Workers, in a worker: read an input or a part of one into its spool and send the
    reader and plan. Once the new pids and the shift come back (None: the parent reads the input
    itself), write the bodies in memory and send their event counts and size; once the parent has
    reserved their place in the output (None: it writes the input itself), write them there and
    say so (or send the OSError's errno and text). A failure sends nothing more."""
    path, part, last, adjust, reader_options = task
    reader, plan, spool, _ = _read_input(path, 1, adjust, True, reader_options, True, part, last)
    conn.send((reader, plan))
    answer = conn.recv()
    if answer is None:
        return
    bodies = _Bodies()
    spool.write(bodies, *answer)
    conn.send((bodies.counts, separated_size(bodies.bodies)))
    place = conn.recv()
    if place is None:
        return
    try:
        write_at(*place, bodies.bodies)
    except OSError as exc:
        conn.send((exc.errno, exc.strerror))
    else:
        conn.send(None)


def _merged(plans):
    """The plan of a file read in parts, from theirs, in file order."""
    plan = plans[0]
    for other in plans[1:]:
        if other.origin is not None and (plan.origin is None or other.origin < plan.origin):
            plan.origin = other.origin
        for pid in other.pids:
            plan.pids.setdefault(pid, None)
        plan.named.update(other.named)
        plan.spans += other.spans
        plan.dropped += other.dropped
        plan.renamed += other.renamed
        plan.unmatched += other.unmatched
    plan.pids.update(plan.named)
    return plan


def _read_here_instead(pool, answered):
    """Tell each task that answered ((task, its answer or None where it failed)) that its input is
    read in this process instead."""
    for i, answer in answered:
        if answer is not None:
            pool.send(i, None)


class _Workers:
    """The inputs read by forked workers (repro.pool): each input is a task, and a large one written
    as orjson writes it one task per part (TraceReader.parts), so that its parts are read at once;
    their plans are merged here, where the new pids and the shift are known, and the workers write
    their parts into the output at the places reserved for them (_SentSpool).

    Anything that goes wrong in a worker has the input read again here, the way it is read
    without workers: the same output or the same error."""

    def __init__(self, inputs, workers, adjust, reader_options):
        tasks, self.tasks, self.readers = [], [], []
        for path in inputs:
            reader = parts = None
            try:
                reader = TraceReader(path, **(reader_options or {}))
                parts = reader.parts(workers)
            except TraceError:
                pass  # raised again in its turn
            parts = parts or [None]
            self.tasks.append(range(len(tasks), len(tasks) + len(parts)))
            self.readers.append(reader if parts[0] else None)  # the metadata of a file read in parts
            tasks += [(path, part, n == len(parts) - 1, adjust, reader_options) for n, part in enumerate(parts)]
        self.pool = Pool(_read_in_worker, tasks, min(workers, len(tasks)))
        self.unheard = []  # tasks whose plans are not waited for: refused when their worker is next heard

    def _recv(self, i):
        """Task i's first message (its reader and plan), or None where it failed; first, in order, that
        of each task before it on its worker that was not waited for, refused where it answered."""
        for j in [j for j in self.unheard if self.pool.worker(j) == self.pool.worker(i)]:
            self.unheard.remove(j)
            try:
                self.pool.recv(j)
            except TaskFailed:
                continue
            self.pool.send(j, None)
        try:
            return self.pool.recv(i)
        except TaskFailed:
            return None

    def read(self, index, path, next_pid, adjust, strict, reader_options):
        """_read_here's (reader, plan, spool, pid map) of input `index`, the spool writing what the
        workers send."""
        ids, answers = self.tasks[index], {}
        for i in reversed(ids):  # a part that begins inside a span fails at once: the others are not waited for
            answers[i] = self._recv(i)
            if answers[i] is None:
                break
        read_here = partial(_read_here, index, path, next_pid, adjust, strict, reader_options)
        if None in answers.values():
            _read_here_instead(self.pool, answers.items())
            self.unheard += [i for i in ids if i not in answers]
            return read_here()
        answers = [answers[i] for i in ids]
        plan = _merged([plan for _, plan in answers])
        pid_map = {pid: next_pid + n for n, pid in enumerate(plan.pids)}
        return self.readers[index] or answers[0][0], plan, _SentSpool(self.pool, ids, read_here), pid_map

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.pool.__exit__(*exc)


class _SentSpool:
    """The spool of an input read by workers: they write its bodies into the output, at the places
    this process reserves for them in order."""

    def __init__(self, pool, ids, read_here):
        self.pool, self.ids, self.read_here = pool, ids, read_here

    def _answers(self):
        found = []
        for i in self.ids:
            try:
                found.append(self.pool.recv(i))
            except TaskFailed:
                found.append(None)
        return found

    def write(self, writer, pid_map, shift):
        for i in self.ids:
            self.pool.send(i, (pid_map, shift))
        sizes = self._answers()
        if None in sizes:  # nothing of the input is written yet: it is read and written here instead
            _read_here_instead(self.pool, zip(self.ids, sizes))
            _, _, spool, _ = self.read_here()
            return spool.write(writer, pid_map, shift)
        for i, (counts, size) in zip(self.ids, sizes):
            self.pool.send(i, writer.reserve(size, sum(counts)))
        for failed in self._answers():  # a worker gone would leave a hole: TaskFailed
            if failed:
                raise OSError(*failed)  # the output cannot be written, as where this process writes it
        return sum(sum(counts) for counts, _ in sizes)


def combine(inputs, output, adjust=True, skip_first=False, strict=True, reader_options=None, workers=None):
    """Write the combined trace of `inputs` to `output`; return a small report dict. `workers`:
    how many processes read the inputs (default: see _worker_count)."""
    inputs = [Path(p) for p in inputs][1 if skip_first else 0 :]
    report = {"inputs": len(inputs), "events": 0, "skipped": 0, "dropped": 0}
    next_pid = 1
    per_input, copied = [], MetadataTotal("the combined trace's metadata")
    given = {file_identity(path) for path in inputs}
    display_unit = None
    fix_malloc_thresholds(trim_threshold=256 * 2**20)  # freed buffers reused, not page-faulted afresh per input
    workers = _worker_count(inputs, strict, workers)
    with (
        cycle_collection_paused(),  # before the workers are forked: theirs is paused too
        _Workers(inputs, workers, adjust, reader_options) if workers > 1 else nullcontext() as parallel,
        TraceWriter(output) as writer,  # after: no worker holds the output open
    ):
        read = parallel.read if parallel else _read_here
        for index, path in enumerate(inputs):
            reader, plan, spool, pid_map = read(index, path, next_pid, adjust, strict, reader_options)
            metadata, other = reader.metadata, reader.other_data
            check_not_combined_from(path, other, given)
            display_unit = display_unit or metadata.get("displayTimeUnit")
            label = run_label(path, other, metadata)
            names = []
            for pid, own_name in plan.pids.items():
                name = label if len(plan.pids) == 1 or not own_name else f"{label} / {own_name}"
                names.append({"ph": "M", "name": "process_name", "pid": pid_map[pid], "tid": 0, "args": {"name": name}})
            next_pid += len(plan.pids)
            writer.write_events(names)
            written = spool.write(writer, pid_map, _Shift(path, plan.origin, plan.spans) if adjust else None)
            report["events"] += len(names) + written
            report["dropped"] += plan.dropped - plan.renamed
            report["skipped"] += reader.skipped + plan.unmatched
            per_input.append(
                {
                    "file": str(path),
                    "label": label,
                    "pids": list(pid_map.values()),
                    "otherData": metadata.get("otherData"),
                    "metadata": {k: v for k, v in metadata.items() if k not in ("otherData", "displayTimeUnit")},
                }
            )
            copied.add(path, len(orjson.dumps(per_input[-1])))
        writer.metadata = {"displayTimeUnit": display_unit or "ms", "otherData": {"inputs": per_input}}
    return report


# how every trace `combine` writes begins: the writer's opening, then the first input's process row (or no event)
_COMBINED_STARTS = (b'{"traceEvents":[{"ph":"M","name":"process_name","pid":1,"tid":0,',
                    b'{"traceEvents":[],"displayTimeUnit":')


def is_combined(path):
    """Whether `path` begins as a trace `combine` wrote does, not as any Chrome trace or JSON array (a
    user's trace named combined.json is not replaced by a default output); the start only: a
    combined trace may be large."""
    with open(path, "rb") as fh:
        return fh.read(max(map(len, _COMBINED_STARTS))).startswith(_COMBINED_STARTS)
