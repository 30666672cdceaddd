"""Reading Chrome trace files of any size with bounded memory.

A trace is either a JSON object (``{"traceEvents": [...], "otherData": ..., ...}``) or a bare
JSON array of events. Files up to ``whole_file_limit`` bytes are parsed in one ``orjson.loads``
call. Larger files are memory-mapped and split into chunks of whole events by a vectorised scan
of the JSON structure (quotes, braces, brackets), and each chunk is parsed on its own, so peak
memory follows the chunk size instead of the file size.

Tools that read only the fields every event shares (``compact_chunks``) decode them with msgspec
into small structs, skipping the rest of each event, instead of building a dict per event; a
file this cannot vouch for (see ``NotCompact``) is read again the general way.
"""

import functools
import gc
import json
import math
import mmap
import os
import re
import stat
from bisect import bisect_left
from contextlib import contextmanager
from itertools import compress, repeat
from operator import attrgetter, eq, is_
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import orjson

from repro.errors import ReproError, TraceError
from repro.fsutil import file_identity, file_kind, open_regular, parsed_size, repeated_key
from repro.traces.events import PHASES, PHASES_WITHOUT_TS, check_event, first_bad_event
from repro.traces.splice import find, spaced, words

WHOLE_FILE_LIMIT = 64 << 20
WHOLE_PARSED_LIMIT = 1536 << 20  # a real trace of WHOLE_FILE_LIMIT bytes, its events a few fields each, is below
_ALWAYS_WHOLE = 1 << 20  # parsed, a file this large takes no more than tens of megabytes
CHUNK_BYTES = 4 << 20
TAIL_BYTES = 1 << 20  # how far into a file, from either end, its opening and closing brackets are looked for
_WINDOW = 4 << 20
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPENERS, _CLOSERS = (ord("{"), ord("[")), (ord("}"), ord("]"))
_SPACE = b" \t\r\n"
_SPACE_BYTES = (b" ", b"\t", b"\r", b"\n")
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
_LISTED_HEAD = b'{"traceEvents":['
_CUT_TRIES = 8  # places tried for a cut before the file is left to the general reading
_LONGEST_EVENT = 1 << 20  # a cut is due this far past every chunk_bytes at the latest
# A larger event, or metadata beside the event list, is refused: parsed, it would take several
# times its size in memory, where a trace's events and metadata are kilobytes
LARGEST_PART = 64 << 20


def check_metadata_size(path, size, what="its keys beside 'traceEvents' are"):
    """TraceError where a trace's metadata (`size` bytes of JSON) is larger than LARGEST_PART."""
    if size > LARGEST_PART:
        raise TraceError(path, f"{what} larger than {LARGEST_PART >> 20} MiB; expected a trace's metadata "
                         "(displayTimeUnit, otherData)")


def check_not_combined_from(path, other_data, given):
    """TraceError where the trace at `path` is a combined trace (`trace combine` lists its inputs in
    otherData.inputs) of one of the files `given` (their fsutil.file_identity, {} for none): its
    events would be counted twice, as the shell glob over a profile directory does."""
    inputs = other_data.get("inputs")
    for entry in inputs if isinstance(inputs, list) and given else ():
        file = entry.get("file") if isinstance(entry, dict) else None
        if isinstance(file, str) and file_identity(file) in given:
            raise TraceError(path, f"is a combined trace of {file[:200]}, given too; expected each trace once (the "
                             "combined trace or its inputs)")
        if isinstance(entry, dict) and isinstance(entry.get("otherData"), dict):  # a combined trace's combined input
            check_not_combined_from(path, entry["otherData"], given)


class MetadataTotal:
    """The metadata a command copies from many traces into one output (`what`), bounded as one
    trace's is: a combined trace of larger metadata is one that no reader takes."""

    def __init__(self, what):
        self.what, self.size = what, 0

    def add(self, path, size):
        self.size += size
        if self.size > LARGEST_PART:
            raise TraceError(path, f"its metadata, with that of the traces before it, makes {self.what} larger than "
                             f"{LARGEST_PART >> 20} MiB; expected traces whose metadata (displayTimeUnit, otherData) "
                             "is kilobytes")


@contextmanager
def cycle_collection_paused():
    """Parsed JSON holds no reference cycles, so the cyclic garbage collector's repeated passes
    over millions of live event objects are pure overhead while traces are processed."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _loads(data, path):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None


def _each_key_once_by_search(data, doc):
    """Whether a byte search shows that the root object of the JSON `data` (`doc`, decoded) names each
    key once: with no escape in `data`, a key is written as orjson writes it, so one occurrence of
    its text is one of the key (a search as fast as the file is large, where parsing again is not)."""
    return b"\\" not in data and all(data.count(orjson.dumps(key)) == 1 for key in doc)


def _refuse_repeated_keys(data, doc, path):
    """TraceError naming a key that the root object of the JSON `data` (`doc`, decoded) holds twice:
    orjson and msgspec keep the last value, so a second traceEvents would stand in for the first,
    unsaid. The byte search clears the files written as writers write them; the standard parser
    tells for the others."""
    if not isinstance(doc, dict) or _each_key_once_by_search(data, doc):
        return
    try:
        pairs = json.loads(data, object_pairs_hook=lambda pairs: pairs)  # each object its pairs: nothing merged
    except RecursionError:
        raise TraceError(path, "invalid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None
    twice = repeated_key(pairs)
    if twice is not None:
        raise TraceError(path, f"not a Chrome trace: the key {twice!r} appears twice at the top level; expected "
                         "each key once (a JSON reader keeps one of the two values, unsaid)")


class _Pairs(list):
    """An object's (key, value) pairs, as the standard parser gives them: nothing merged."""


def _repeated_event_key(data):
    """(index, key) of the first event of the JSON `data` (an event array, or a trace object) that
    names a key twice, or None; the standard parser, which merges nothing, tells."""
    try:
        doc = json.loads(data, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return None  # orjson has named the error, or will
    if isinstance(doc, _Pairs):
        doc = dict(doc).get("traceEvents")
    if not isinstance(doc, list) or isinstance(doc, _Pairs):
        return None
    for index, event in enumerate(doc):
        if isinstance(event, _Pairs) and (key := repeated_key(event)) is not None:
            return index, key
    return None


def _key_marks(text):
    """How often a quote is followed by a colon in `text`, whitespace aside: with no escape in it,
    once for each key and each string that begins with a colon."""
    if any(blank in text for blank in _SPACE_BYTES):
        text = text.translate(None, _SPACE)
    return text.count(b'":')


def _keys_once_by_count(data, doc):
    """Whether a byte count shows that no object of the JSON `data` (`doc`, decoded) names a key twice:
    with no escape in `data`, orjson writes `doc` again with the same strings, so a key that decoding
    merged away (and its value) is a mark fewer in what it writes."""
    if b"\\" in data:
        return False
    try:
        return _key_marks(data) == _key_marks(orjson.dumps(doc))
    except orjson.JSONEncodeError:  # nested deeper than orjson writes
        return False


def _refuse_repeated_event_keys(data, doc, path, first=0):
    """TraceError naming an event of the JSON `data` (`doc`, decoded; its events numbered from `first`)
    that names a key twice: orjson and msgspec keep the last value, unsaid. The byte count clears the
    files with no key twice anywhere; the standard parser tells for the others."""
    found = None if _keys_once_by_count(data, doc) else _repeated_event_key(data)
    if found is not None:
        index, key = found
        raise TraceError(path, f"the key {key!r} appears twice in one event; expected each key once (a JSON "
                         "reader keeps one of the two values, unsaid)", first + index)


_QUOTE_COLON, _TOP_DEPTH = ord(":"), 2
_BRACKETS = 0b00100110  # ORed into '[', ']', '{' or '}' (or 'Y', '_', 'y', DEL) it gives 127
# The Trace Event Format's keys of an event: each its own bit of an event's mask, the others share the rest
_EVENT_KEYS = (b"name", b"cat", b"ph", b"ts", b"tts", b"pid", b"tid", b"dur", b"tdur", b"args", b"id", b"id2", b"bp",
               b"s", b"cname", b"scope", b"sf", b"stack", b"esf", b"estack", b"bind_id", b"flow_in", b"flow_out")


@functools.cache
def _key_bits():
    """The bit of a key's mask for each (length up to 31, first byte, last byte) of its text (made on
    first use: a table of 2M entries, tens of milliseconds that every command importing this would pay)."""
    table = np.arange(32 << 16, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) >> np.uint64(40)
    table = (len(_EVENT_KEYS) + table % (64 - len(_EVENT_KEYS))).astype(np.uint8)
    for bit, key in enumerate(_EVENT_KEYS):
        table[len(key) << 16 | key[0] << 8 | key[-1]] = bit
    return table


def _event_keys_once(listed):
    """Whether the JSON array of events `listed` shows by its bytes that no event names a key twice;
    False where it cannot tell (escapes, whitespace between tokens, two keys that share a bit). A
    large array is looked at in pieces of about CHUNK_BYTES, cut between events (where the piece
    before closes each bracket it opens), which keeps the arrays of offsets small."""
    if b"\\" in listed or spaced(listed):
        return False
    start = 1
    while len(listed) - start > 2 * CHUNK_BYTES:
        cut = listed.find(b"},{", start + CHUNK_BYTES)
        if cut < 0:
            break
        if not _piece_keys_once(b"[" + listed[start : cut + 1] + b"]"):
            return False
        start = cut + 2
    return _piece_keys_once(listed if start == 1 else b"[" + listed[start:])


def _piece_keys_once(listed):
    """_event_keys_once for compact JSON (no escapes, no whitespace between tokens): each key at an
    event's top level sets a bit of the event's mask, by its length and first and last bytes, and
    the bits are as many as the keys. False where two keys share a bit, or the brackets do not
    close (a piece cut inside an event)."""
    view = np.frombuffer(listed, np.uint8)
    quotes = np.flatnonzero(view == _QUOTE)
    if quotes.size % 2 or not quotes.size or quotes[-1] + 1 >= view.size:
        return not quotes.size
    closing = quotes[1::2]
    keyed = np.flatnonzero(view[closing + 1] == _QUOTE_COLON)
    ends, starts = closing[keyed], quotes[2 * keyed] + 1
    tokens = np.flatnonzero((view | _BRACKETS) == 127)
    bracket = view[tokens] & 0b11011111  # '{' and '}' as '[' and ']'
    tokens = tokens[(bracket == _OPENERS[1]) | (bracket == _CLOSERS[1])]
    tokens = tokens[np.searchsorted(quotes, tokens) % 2 == 0]  # outside strings
    opens = (view[tokens] & 2) != 0
    depth = np.cumsum(opens.astype(np.int32) * 2 - 1)
    if not depth.size or depth[-1]:
        return False
    before = np.searchsorted(tokens, starts) - 1
    top = np.flatnonzero(depth[before] == _TOP_DEPTH)
    if not top.size:
        return True
    starts, ends = starts[top], ends[top]
    event = np.cumsum((depth == _TOP_DEPTH) & opens)[before[top]]
    bits = _key_bits()[np.minimum(ends - starts, 31) << 16 | view[starts].astype(np.int64) << 8 | view[ends - 1]]
    first = np.flatnonzero(np.diff(event, prepend=-1))
    masks = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), bits.astype(np.uint64)), first)
    return bool((np.bitwise_count(masks) == np.diff(first, append=bits.size)).all())


def _compact_keys_once(listed):
    """NotCompact where an event of the JSON array `listed` names a key twice: the general reading
    names it (msgspec keeps the last value, unsaid)."""
    if not _event_keys_once(listed) and _repeated_event_key(listed) is not None:
        raise NotCompact


def _root_metadata(doc, path, data):
    """The top-level keys but traceEvents of the document `doc`, decoded from `data`."""
    _refuse_repeated_keys(data, doc, path)
    if isinstance(doc, list):
        return {}
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return {k: v for k, v in doc.items() if k != "traceEvents"}
    raise TraceError(
        path, "not a Chrome trace: expected a JSON array of events or an object with a 'traceEvents' list"
    )


class NotCompact(Exception):
    """The msgspec reading cannot vouch for a file (it is not valid JSON, has an event the checks
    reject, or holds something orjson reads otherwise); the caller reads it with orjson instead,
    which gives the same result or the same error as before."""


_PHASE = Literal[tuple(sorted(PHASES))]


class Event(msgspec.Struct, gc=False):
    """The fields of an event the tools read, with the types the checks allow (see
    events.check_event: a value of another type fails the decoding); the other fields are skipped,
    never built. Absent fields read as dict.get gives them (None, and 0 for ``dur``)."""

    ph: _PHASE | None = None  # one of the strings themselves, no new one per event
    ts: int | float | None = None
    pid: int | float | str | None = None
    tid: int | float | str | None = None
    name: str | None = None
    cat: str | None = None
    dur: int | float = 0

    def get(self, key, default=None):
        return getattr(self, key, default)


_EVENT_LIST = msgspec.json.Decoder(list[Event])
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_INT64_MIN, _UINT64_END = -(2**63), 2**64  # orjson reads a larger integer as a float, msgspec as an int


def field_values(events, key):
    """events[i].key for a list of Event structs (the columns of a compact chunk)."""
    return list(map(attrgetter(key), events))


def _check_utf8(data):
    """NotCompact unless `data` is valid UTF-8: orjson refuses invalid UTF-8 anywhere, msgspec only
    where it decodes."""
    if not data.isascii():
        try:
            str(data, "utf-8")
        except UnicodeDecodeError:
            raise NotCompact from None


# a number a double may not hold (300 digits or more, an exponent from 100 up), or text that looks like
# one: the general reading decides, as orjson reads it (a number beyond a double's range is invalid JSON)
_FAR_NUMBER = re.compile(rb"[0-9]{300,}|[eE]\+?0*[1-9][0-9]{2,}")


def _compact_events(data):
    """The Event structs of a JSON array of events, or NotCompact."""
    _check_utf8(data)
    if _FAR_NUMBER.search(data):  # msgspec reads such numbers as inf or keeps them raw: not as orjson does
        raise NotCompact
    try:
        events = _EVENT_LIST.decode(data)
    except (msgspec.DecodeError, RecursionError):  # ValidationError (a field's type) is a DecodeError
        raise NotCompact from None
    _compact_keys_once(data)
    return events


def _within_64_bits(found):
    if int in set(map(type, found)):
        ints = [v for v in found if type(v) is int]
        if min(ints) < _INT64_MIN or max(ints) >= _UINT64_END:
            raise NotCompact


def _numbers_within_64_bits(numbers):
    """_within_64_bits for a list of numbers: every one in range (the common case) is told by the
    extremes alone."""
    if numbers and not (_INT64_MIN <= min(numbers) and max(numbers) < _UINT64_END):
        _within_64_bits(numbers)


def _compact_columns(events):
    """The columns ph, ts, pid and tid, after the checks of events.first_bad_event that the field
    types have not made already; NotCompact if one fails."""
    columns = {key: field_values(events, key) for key in ("ph", "ts", "pid", "tid")}
    phases, stamps = columns["ph"], columns["ts"]
    if None in phases:  # any other value not in PHASES failed the decoding
        raise NotCompact
    if None in stamps:  # only metadata may lack a ts
        if not set(compress(phases, map(is_, stamps, repeat(None)))) <= PHASES_WITHOUT_TS:
            raise NotCompact
        _numbers_within_64_bits([ts for ts in stamps if ts is not None])
    else:
        _numbers_within_64_bits(stamps)
    _within_64_bits(set(columns["pid"]) | set(columns["tid"]))
    if "X" in phases:
        complete = list(compress(events, map(eq, phases, repeat("X"))))
        starts, durations = field_values(complete, "ts"), field_values(complete, "dur")
        _within_64_bits(durations)
        shortest = min(durations)
        if shortest < 0 or not (math.isfinite(min(starts) + shortest) and math.isfinite(max(starts) + max(durations))):
            raise NotCompact  # the general reading names the event
    return columns


class EventTexts:
    """The JSON texts of a chunk's `count` events, within the chunk's JSON array ``[e0,e1,...]``;
    NotCompact unless it is written as orjson writes it: no escapes, no whitespace between tokens
    (so events follow each other with one comma). `view` and `quads` are its bytes (splice.words)."""

    def __init__(self, listed, count):
        if b"\\" in listed:
            raise NotCompact  # escapes: orjson may write them otherwise (and an escaped quote would mislead spaced)
        self.view, self.quads = words(listed)
        if spaced(listed):
            raise NotCompact
        # each boundary between two events (objects with a key each) reads '},{"'; where these are
        # as many as the boundaries, they are the boundaries (a string or an args list may hold one)
        cuts = find(self.quads, b'},{"')
        if count and cuts.size == count - 1 and listed[1:2] == b"{" and listed[-2:] == b"}]":
            self.starts = np.concatenate([[1], cuts + 2])
            self.ends = np.append(cuts + 1, len(listed) - 1)
        else:
            lengths = np.fromiter(map(len, _RAW_LIST.decode(listed)), np.int64)
            self.ends = np.cumsum(lengths + 1)  # each event and the comma (or '[') before it
            self.starts = self.ends - lengths
            if (self.ends[-1] + 1 if lengths.size else 2) != len(listed):
                raise NotCompact
        self.listed, self.lengths = listed, self.ends - self.starts

    def __len__(self):
        return self.lengths.size

    def __getitem__(self, i):
        return self.listed[self.starts[i] : self.ends[i]]


_PART_CUT_TRIES = 8  # chunk ends looked at on either side for a part's end after an event that begins nothing
_PHASE_KEY = b'"ph":"'


def _chunk_ends(mm, start, end, chunk_bytes):
    """Where _split's chunks of the event list end, as far as a byte search tells (_split also
    checks that each piece decodes): the ``},{`` each ends at."""
    cuts, begun = [], start
    while True:
        target = begun + chunk_bytes - 1
        cut = mm.find(b"},{", target, min(end, target + max(chunk_bytes, _LONGEST_EVENT)))
        if cut < 0:
            return cuts
        cuts.append(cut)
        begun = cut + 1


def _part_end(mm, cuts, target, start):
    """Of the chunk ends `cuts`, where a part of the event list ends: the nearest to `target` that
    follows an event whose phase reads other than 'B' (a begin would be open at the cut: the parts
    are read apart only where none is), or the nearest if none of the few near it does; -1 if
    there is none."""
    at = bisect_left(cuts, target)
    near = sorted(cuts[max(at - _PART_CUT_TRIES, 0) : at + _PART_CUT_TRIES], key=lambda cut: abs(cut - target))
    for cut in near:
        phase = mm.rfind(_PHASE_KEY, max(start, cut - 4096), cut)
        if phase >= 0 and mm[phase + len(_PHASE_KEY)] != ord("B"):
            return cut
    return near[0] if near else -1


class TraceReader:
    """Streams the events of one trace file in chunks; `metadata` holds the other top-level keys.

    With ``strict`` every event is checked (object, known ``ph``, numeric ``ts``) and the first
    bad one raises TraceError naming the file and event index; with ``strict=False`` bad events
    are skipped and counted in ``skipped``.
    """

    def __init__(self, path, strict=True, whole_file_limit=WHOLE_FILE_LIMIT, chunk_bytes=CHUNK_BYTES, check=True):
        self.path = Path(path)
        self.strict = strict
        self.check = check  # False: the caller validates events itself (combine does, in its own pass)
        self.chunk_bytes = chunk_bytes
        self.skipped = 0
        try:
            info = os.stat(self.path)
        except OSError as exc:
            raise TraceError(self.path, f"cannot read: {exc.strerror}") from None
        if not stat.S_ISREG(info.st_mode):  # a FIFO would hang the reader, /dev/zero fill the memory
            raise TraceError(self.path, f"is {file_kind(info.st_mode)}; expected a regular file (a Chrome trace)")
        self.size = info.st_size
        # parsed in one piece, not in chunks, where that takes no more memory than a real trace of
        # that size: 64 MiB of `{},` are 22 million dictionaries, 1.5 GB
        # (read here and again to parse: a reader made for each of many inputs holds none of them)
        self.whole = self.size <= whole_file_limit and (
            self.size <= _ALWAYS_WHOLE or parsed_size(self._read_bytes()) <= WHOLE_PARSED_LIMIT)
        self._metadata = None
        self._events = None

    # -- public API ---------------------------------------------------------------------
    @property
    def metadata(self):
        if self._metadata is None:
            if self.whole:
                self._load_whole()
            else:
                for _ in self._scan(parse_events=False):
                    pass
        return self._metadata

    @property
    def other_data(self):
        other = self.metadata.get("otherData")
        return other if isinstance(other, dict) else {}

    def chunks(self):
        """Yield lists of (checked) events; the running event index continues across chunks."""
        for events, _ in self.column_chunks():
            yield events

    def column_chunks(self):
        """Yield (events, columns) per chunk: `columns` maps fields to the values the checks
        extracted (see events.column), so that callers need not extract them again."""
        index = 0
        if self.whole:
            source, self._events = [self._load_whole()], None  # held by the caller only, freed with its chunk
        else:
            source = self._scan(parse_events=True)
        for raw in source:
            columns = {}
            good = self._checked(raw, index, columns)
            index += len(raw)
            yield good, columns if good is raw else {}

    def events(self):
        for chunk in self.chunks():
            yield from chunk

    def compact_chunks(self, with_json=False, part=None):
        """Yield (events, columns) per chunk like column_chunks, strictly checked, with the events
        as Event structs and `columns` holding ph, ts, pid and tid; `with_json` adds a third item,
        the events' own JSON texts (EventTexts). Raises NotCompact (possibly after some chunks)
        where column_chunks must read the file instead. With `part`, one of parts(), only the
        events of that part of a large file."""
        if not self.strict:
            raise NotCompact  # lenient reading drops bad events: the general reader knows how
        if self.whole:
            data = self._read_bytes()
            first = data[: min(len(data), 4096)].lstrip(_SPACE)[:1]
            end = self._list_end(data, len(_LISTED_HEAD)) if data.startswith(_LISTED_HEAD) else None
            if first == b"[":
                listed, metadata = data, {}
            elif end is not None:  # as orjson writes it: the list is found without decoding the rest
                listed, metadata = data[len(_LISTED_HEAD) - 1 : end + 1], self._metadata
            elif first == b"{":
                try:
                    top = _TOP_LEVEL.decode(data)
                    if not _each_key_once_by_search(data, top):
                        raise NotCompact  # the general reading tells whether a key is repeated
                    listed = top.get("traceEvents")
                    if listed is None or bytes(listed)[:1] != b"[":
                        raise NotCompact
                    listed = bytes(listed)
                    metadata = {k: orjson.loads(bytes(v)) for k, v in top.items() if k != "traceEvents"}
                except (msgspec.DecodeError, orjson.JSONDecodeError, RecursionError):
                    raise NotCompact from None
            else:
                raise NotCompact
            self._metadata = metadata
            sources = [(listed, _compact_events(listed))]
        else:
            sources = self._split(part)
        for listed, events in sources:
            columns = _compact_columns(events)
            yield (events, columns, EventTexts(listed.strip(_SPACE), len(events))) if with_json else (events, columns)

    # -- internals ----------------------------------------------------------------------
    def parts(self, count):
        """Up to `count` pieces of a large file's event list, each one `part` for compact_chunks, so
        that they can be read at once; None where the file is read whole or not cut as _split cuts.

        A piece ends where a chunk of _split ends (see _part_end), so that it is read in the same
        chunks (and written with the same line breaks, see TraceWriter) as the whole file; the piece
        before checks that it does, and a piece that decodes from a boundary between events ends
        at one (see _split): the pieces vouch for each other's starts, in order, as the chunks do."""
        if self.whole:
            return None
        mm = self._open_map()
        try:
            bounds = self._list_bounds(mm)
            if bounds is None:
                return None
            start, end = bounds
            ends = _chunk_ends(mm, start, end, self.chunk_bytes)
            cuts = sorted({_part_end(mm, ends, start + (end - start) * k // count, start) for k in range(1, count)} - {-1})
        finally:
            mm.close()
        # (where the piece begins: the comma before its first event but in the first one; its first
        # event; its end)
        return [(begun, begun + (begun > start), stop) for begun, stop in zip([start, *(c + 1 for c in cuts)],
                                                                              [c + 1 for c in cuts] + [end])]

    def _list_bounds(self, mm):
        """(start, end) of the event list of a file written as orjson writes it, for _split; or None."""
        head = mm[: len(_LISTED_HEAD)]
        start = len(head) if head == _LISTED_HEAD else 1 if head[:1] == b"[" else None
        end = None if start is None else self._list_end(mm, start)
        if end is not None and end - start > _LONGEST_EVENT and mm.find(b"},{", start, start + _LONGEST_EVENT) < 0:
            end = None  # not written compactly: cuts would not be found
        return None if end is None else (start, end)

    def _split(self, part=None):
        """(JSON array, Event structs) of each chunk of a large file (or of one of its parts), for
        compact_chunks.

        A file that starts as orjson writes one (``{"traceEvents":[`` or ``[``) is cut without a
        scan of its structure: after the first ``},{`` past every chunk_bytes whose piece decodes (a
        cut inside an event leaves a bracket or a string open, which no decoding accepts), and at
        the list's end, the last ``]`` after which the rest of the document reads. Every piece
        decoding, and the document with an empty list, vouch for the whole file. Other files go
        through the scan.
        """
        mm = self._open_map()
        try:
            if part is None:
                bounds = self._list_bounds(mm)
                if bounds is None:
                    mm.close()
                    for listed in self._scan(parse_events=True, decode=bytes):
                        yield listed, _compact_events(listed)
                    return
                begun, (start, end) = bounds[0], bounds
            else:
                begun, start, end = part
            # a chunk after the first begins at the comma before its first event
            released = begun - begun % mmap.PAGESIZE
            while start < end:
                target = begun + self.chunk_bytes - 1  # the cuts of the scan
                limit = min(end, target + max(self.chunk_bytes, _LONGEST_EVENT))
                for _ in range(_CUT_TRIES):
                    cut = mm.find(b"},{", target, limit)
                    last = cut < 0
                    if last and mm[end - 1 : end + 2] == b"},{" and mm.find(b"},{", target, end + 2) != end - 1:
                        raise NotCompact  # a part (see parts) that the next chunk would not end with
                    if last and limit < end:
                        raise NotCompact  # no cut where one was due: whitespace between events
                    listed = b"[" + mm[start : end if last else cut + 1] + b"]"
                    _check_utf8(listed)
                    try:
                        events = _EVENT_LIST.decode(listed)
                        _compact_keys_once(listed)
                        break
                    except msgspec.ValidationError:
                        raise NotCompact from None
                    except (msgspec.DecodeError, RecursionError):
                        if last:
                            raise NotCompact from None
                        target = cut + 1  # the cut was inside an event: try the next one
                else:
                    raise NotCompact
                yield listed, events
                if last:
                    break
                begun, start = cut + 1, cut + 2
                page = start - start % mmap.PAGESIZE
                if page > released:  # drop the pages read, so the mapping does not grow the RSS
                    mm.madvise(mmap.MADV_DONTNEED, released, page - released)
                    released = page
        finally:
            mm.close()

    def _list_end(self, mm, start):
        """The offset of the event list's closing bracket in `mm` (the file's bytes or its map), where
        the rest of the document reads with an empty list in its place (and sets the metadata), or
        None."""
        if start == 1:  # a bare array: it ends the file
            end = mm.rfind(b"]")
            if end < start or mm[end + 1 :].strip(_SPACE):
                return None
            self._metadata = {}
            return end
        end = len(mm)
        for _ in range(_CUT_TRIES):
            end = mm.rfind(b"]", start, end)
            if end < 0:
                return None
            check_metadata_size(self.path, start + len(mm) - end)
            rest = mm[end + 1 :]
            if b'"traceEvents"' in rest:
                return None  # a repeated key: orjson takes the last one
            emptied = _LISTED_HEAD + b"]" + rest
            try:
                doc = orjson.loads(emptied)
            except orjson.JSONDecodeError:
                continue
            self._metadata = _root_metadata(doc, self.path, emptied)
            return end
        return None

    def _read_bytes(self):
        try:
            with open_regular(self.path, self.path, "a Chrome trace") as fh:
                return fh.read(self.size + 1)  # what stat found: a file that grew since is read as it was
        except ReproError as exc:
            raise TraceError(self.path, str(exc).removeprefix(f"{self.path}: ")) from None
        except OSError as exc:
            raise TraceError(self.path, f"cannot read: {exc.strerror}") from None

    def _load_whole(self):
        if self._events is None:
            data = self._read_bytes()
            doc = _loads(data, self.path)
            self._metadata = _root_metadata(doc, self.path, data)
            _refuse_repeated_event_keys(data, doc, self.path)
            self._events = doc if isinstance(doc, list) else doc["traceEvents"]
        return self._events

    def _checked(self, raw, first_index, columns):
        bad = first_bad_event(raw, columns) if self.check else None
        if bad is None:
            return raw
        if self.strict:
            check_event(raw[bad], self.path, first_index + bad)
        good = []
        for offset, event in enumerate(raw):
            try:
                check_event(event, self.path, first_index + offset)
            except TraceError:
                self.skipped += 1
            else:
                good.append(event)
        return good

    def _open_map(self):
        try:
            fh = open_regular(self.path, self.path, "a Chrome trace")
        except ReproError as exc:
            raise TraceError(self.path, str(exc).removeprefix(f"{self.path}: ")) from None
        except OSError as exc:
            raise TraceError(self.path, f"cannot read: {exc.strerror}") from None
        with fh:
            if self.size == 0:
                raise TraceError(self.path, "empty file")
            try:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:  # no address space for it (ulimit -v), or emptied since
                raise TraceError(self.path, f"cannot map it into memory ({getattr(exc, 'strerror', None) or exc})") from None
        # A trace that opens with '[' or '{' ends with the one that closes it: one that does not is
        # refused now, not after reading the whole file up to its end (gigabytes of zeros took a minute)
        head, tail = mm[:TAIL_BYTES].lstrip(_SPACE), mm[max(0, len(mm) - TAIL_BYTES):].rstrip(_SPACE)
        if head[:1] in (b"[", b"{") and tail and tail[-1:] not in (b"]", b"}"):
            mm.close()
            raise TraceError(self.path, "truncated, or with data after its end: its last character is not the ']' or '}' "
                                        "that closes a trace")
        return mm

    def _scan(self, parse_events, decode=None):
        """Yield raw event lists of about chunk_bytes each; set self._metadata at the end."""
        mm = self._open_map()
        try:
            yield from _ChunkScanner(mm, self.path, self.chunk_bytes, parse_events, self, decode)
        finally:
            mm.close()


def _skip_space(mm, start, end):
    """The offset of the first byte in mm[start:end] that is no JSON whitespace, or `end`: searched a
    megabyte at a time, in place, each dropped from memory once searched (_drop), so a gigabyte of
    spaces between events is never held at once."""
    while start < end:
        stop = min(end, start + (1 << 20))
        found = _NOT_SPACE.search(mm, start, stop)
        _drop(mm, start, stop)
        if found:
            return found.start()
        start = stop
    return end


def _drop(mm, start, end):
    """Drop the mapped pages of mm[start:end] (and the rest of its first page) from this process's
    memory: a later read maps them again from the page cache."""
    start -= start % mmap.PAGESIZE
    if end > start:
        mm.madvise(mmap.MADV_DONTNEED, start, end - start)


class _ChunkScanner:
    """Walks the JSON structure of a mapped file window by window.

    Carried between windows: whether we are inside a string (quote parity) and the nesting
    depth. Escaped quotes are found by counting the backslashes before each quote that follows
    one (rare in traces, so done in Python).
    """

    def __init__(self, mm, path, chunk_bytes, parse_events, owner, decode=None):
        self.mm, self.path, self.chunk_bytes = mm, path, chunk_bytes
        self.parse_events, self.owner = parse_events, owner
        self.decode = decode or self._events  # a JSON array of events -> events
        self.index = 0  # of the next chunk's first event
        self.first_slice = True
        self.released = 0

    def _events(self, data):
        events = _loads(data, self.path)
        _refuse_repeated_event_keys(data, events, self.path, self.index)
        self.index += len(events)
        return events

    def _unescaped(self, quotes, window, base):
        """Drop the quotes that are escaped (preceded by an odd run of backslashes)."""
        mm = self.mm
        suspect = [i for i in np.flatnonzero(window[np.maximum(quotes - 1, 0)] == _BACKSLASH) if quotes[i] > 0]
        if quotes.size and quotes[0] == 0 and base > 0 and mm[base - 1] == _BACKSLASH:
            suspect.insert(0, 0)
        if not suspect:
            return quotes
        keep = np.ones(quotes.size, bool)
        for i in suspect:
            p, n = int(quotes[i] + base) - 1, 0
            while p >= 0 and mm[p] == _BACKSLASH:
                n, p = n + 1, p - 1
            keep[i] = n % 2 == 0
        return quotes[keep]

    def _tokens(self):
        """Per window: structural offsets, depth after each, quote offsets, entry depth/parity, end."""
        mm, size = self.mm, len(self.mm)
        parity, depth = 0, 0
        for base in range(0, size, _WINDOW):
            count = min(_WINDOW, size - base)
            w = np.frombuffer(mm[base : base + count], np.uint8)  # a copy: no export pins the map
            quotes = self._unescaped(np.flatnonzero(w == _QUOTE), w, base)
            opens = np.flatnonzero((w == _OPENERS[0]) | (w == _OPENERS[1]))
            closes = np.flatnonzero((w == _CLOSERS[0]) | (w == _CLOSERS[1]))
            pos = np.concatenate([opens, closes])
            delta = np.concatenate([np.ones(opens.size, np.int64), -np.ones(closes.size, np.int64)])
            outside = (np.searchsorted(quotes, pos) + parity) % 2 == 0
            pos, delta = pos[outside], delta[outside]
            order = np.argsort(pos, kind="stable")
            pos, delta = pos[order], delta[order]
            depth_after = depth + np.cumsum(delta)
            if depth_after.size and depth_after.min() < 0:
                raise TraceError(self.path, "invalid JSON (unbalanced brackets)")
            yield pos + base, depth_after, quotes + base, depth, parity, base + count
            parity = (parity + quotes.size) % 2
            if depth_after.size:
                depth = int(depth_after[-1])

    def _find_events_key(self, pos, depth_after, quotes, depth0, parity0, window_end):
        """Offset just after the '[' of the root object's "traceEvents" value, or None."""
        mm = self.mm
        start = int(pos[0]) if pos.size else 0
        key = b'"traceEvents"'
        while True:
            at = mm.find(key, start, window_end)
            if at < 0:
                return None
            start = at + 1
            qi = np.searchsorted(quotes, at)
            if qi >= quotes.size or quotes[qi] != at or (qi + parity0) % 2:
                continue  # inside a string
            ti = np.searchsorted(pos, at)
            depth = depth_after[ti - 1] if ti else depth0
            if depth != 1:
                continue
            p = at + len(key)
            while mm[p : p + 1] in (b" ", b"\t", b"\r", b"\n"):
                p += 1
            if mm[p : p + 1] != b":":
                continue
            p += 1
            while mm[p : p + 1] in (b" ", b"\t", b"\r", b"\n"):
                p += 1
            if mm[p : p + 1] != b"[":
                raise TraceError(self.path, "not a Chrome trace: 'traceEvents' is not a list")
            return p

    def __iter__(self):
        mm = self.mm
        first = mm[: min(len(mm), 4096)].lstrip(_SPACE)[:1]
        if first not in (b"[", b"{"):
            raise TraceError(self.path, "not a Chrome trace: expected a JSON array or object")
        object_form = first == b"{"
        array_depth = 2 if object_form else 1  # nesting depth inside the event list
        array_open = array_close = chunk_start = None
        last_event_end = 0
        for pos, depth_after, quotes, depth0, parity0, window_end in self._tokens():
            if array_open is None:
                if object_form:
                    array_open = self._find_events_key(pos, depth_after, quotes, depth0, parity0, window_end)
                elif pos.size:
                    array_open = int(pos[0])
                if array_open is None:
                    continue
                chunk_start = array_open + 1
            after = pos >= chunk_start
            closes = pos[after & (depth_after == array_depth - 1)]
            if closes.size:
                array_close = int(closes[0])
            event_ends = pos[after & (depth_after == array_depth)]
            if array_close is not None:
                event_ends = event_ends[event_ends < array_close]
            if event_ends.size:
                last_event_end = int(event_ends[-1]) + 1
            chunk_start = yield from self._emit(chunk_start, event_ends)
            # the window's pages go, those of the events not yet parsed too (the parse maps them again
            # from the page cache): a long run of spaces between events is never resident at once
            self._release(window_end)
            if array_close is not None:
                break
        if array_open is None:
            raise TraceError(
                self.path, "not a Chrome trace: expected a JSON array of events or an object with a 'traceEvents' list"
            )
        if array_close is None:
            raise TraceError(self.path, "truncated: the event list is not closed")
        # the events left end at the last event's end where only space follows it: that space is
        # searched (a megabyte at a time), not parsed
        end = array_close
        if last_event_end > chunk_start and _skip_space(mm, last_event_end, array_close) == array_close:
            end = last_event_end
        if self.parse_events and _skip_space(mm, chunk_start, end) < end:
            yield self._parse_slice(chunk_start, end, first=self.first_slice)
        self._finish(object_form, array_open, array_close)

    def _parse_slice(self, start, end, first):
        """Parse the events between two element boundaries; all but the first slice start with ','.
        A slice ends at the first event end past chunk_bytes: a longer one holds an event, or a space
        between events, over LARGEST_PART. The space before its first event is skipped unread."""
        start = _skip_space(self.mm, start, end)
        if not first:
            if self.mm[start:start + 1] != b",":
                raise TraceError(self.path, "invalid JSON (expected ',' between events)")
            start = _skip_space(self.mm, start + 1, end)
            if start == end:
                raise TraceError(self.path, "invalid JSON (trailing ',' in the event list)")
        if end - start > self.chunk_bytes + LARGEST_PART:
            raise TraceError(self.path, f"holds an event, or a space between events, larger than {LARGEST_PART >> 20} "
                             "MiB; expected trace events (a name, a phase, times and small arguments)")
        return self.decode(b"[" + self.mm[start:end] + b"]")

    def _release(self, upto):
        """Drop the mapped pages before `upto`, so the mapping does not grow the RSS to the file size."""
        end = upto - upto % mmap.PAGESIZE
        if end > self.released:
            self.mm.madvise(mmap.MADV_DONTNEED, self.released, end - self.released)
            self.released = end

    def _emit(self, chunk_start, event_ends):
        """Yield parsed chunks of at least chunk_bytes, each ending after a whole event."""
        while event_ends.size and int(event_ends[-1]) + 1 - chunk_start >= self.chunk_bytes:
            i = int(np.searchsorted(event_ends, chunk_start + self.chunk_bytes - 1))
            end = int(event_ends[i]) + 1
            if self.parse_events:
                yield self._parse_slice(chunk_start, end, first=self.first_slice)
            self.first_slice = False
            chunk_start = end
            event_ends = event_ends[i + 1 :]
        return chunk_start

    def _finish(self, object_form, array_open, array_close):
        mm = self.mm
        if not object_form:
            if mm[array_close + 1 :].strip(_SPACE):
                raise TraceError(self.path, "invalid JSON (data after the event array)")
            self.owner._metadata = {}
            return
        check_metadata_size(self.path, array_open + len(mm) - array_close)
        data = mm[:array_open] + b"[]" + mm[array_close + 1 :]
        self.owner._metadata = _root_metadata(_loads(data, self.path), self.path, data)


def read_trace(path, strict=True):
    """Return (metadata, events) of a whole trace; for small traces and tests."""
    reader = TraceReader(path, strict=strict)
    events = list(reader.events())
    return reader.metadata, events
