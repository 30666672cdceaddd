"""Begin/end matching: the one place where the trace tools pair 'B' and 'E' events.

Each 'E' closes the latest 'B' still open on the same (pid, tid), in file order, as trace
viewers do. An 'E' with nothing open is a stray; a 'B' never closed dangles. Strict readers
reject both (naming the event), lenient ones skip and count them. Strict readers also reject an
'E' earlier than the 'B' it closes: its span would last a negative time; lenient ones skip both.

The matching runs over a chunk's columns with numpy, not event by event: within one (pid, tid),
the events at one nesting level alternate B, E, B, E..., so ordering them by (key, level,
position) puts every pair side by side. Begins still open at the end of a chunk are carried
into the next one.
"""

from typing import NamedTuple

import numpy as np

from repro.errors import TraceError
from repro.traces.events import values

_B, _E = ord("B"), ord("E")
_NONE = np.zeros(0, np.int64)


class Matched(NamedTuple):
    begins: list  # the begin event of each pair (possibly from an earlier chunk), pairs in end order
    ends: np.ndarray  # the position in the chunk of each pair's end
    strays: np.ndarray  # positions of ends that close nothing (lenient; strict raises)
    begin_at: np.ndarray = _NONE  # the position of each pair's begin (an earlier chunk's: from -carried)


def phase_codes(phases):
    """The chunk's phases as a uint8 array (every phase is one ASCII character, once checked)."""
    return np.frombuffer("".join(phases).encode("ascii"), np.uint8)


def backwards_error(path, index, end_ts, begin_ts):
    """The error for the 'E' event at `index` that is earlier than the 'B' it closes."""
    return TraceError(path, f"'E' event at ts {end_ts:g} is earlier than the 'B' it closes (ts {begin_ts:g}); "
                            "expected a span that ends after it begins", index)


class SpanMatcher:
    """Feed it a file's chunks in order; `finish` reports the begins left open."""

    def __init__(self, path, strict=True):
        self.path, self.strict = path, strict
        self.strays = 0  # ends skipped (lenient)
        self._keys = {}  # (pid, tid) -> small int
        # (global index, (pid, tid), event) of the begins still open, in file order; the key is kept
        # apart since a caller may rewrite the event (combine gives it its new pid)
        self._open = []
        self._begun = {}  # id of an open begin -> its timestamp, kept apart alike (combine rewrites it too)
        self._backwards = []  # (global index, event) of the begins of pairs that end before they begin (lenient)

    def feed(self, events, phases, first_index, codes=None, pids=None, tids=None, stamps=None, field=values):
        """Match one chunk; `phases` (and optionally its codes, pids, tids) are its columns. Given its
        timestamps (`stamps`), a pair that ends before it begins is refused (strict) or is no pair
        (lenient: its end is a stray, its begin left open); `field` reads a field of the events (dicts
        by default)."""
        carried_before = self._open
        matched = self._match(events, phases, first_index, codes, pids, tids)
        if stamps is None:
            return matched
        if matched.begins:
            carried = [self._begun.pop(id(event), None) for event in matched.begins] if self._begun else ()
            begun = field(matched.begins, "ts")
            begun = np.asarray([ts if ts is not None else own for ts, own in zip(carried, begun)] if carried else begun,
                               float)
            ended = np.asarray(list(map(stamps.__getitem__, matched.ends.tolist())), float)
            backwards = np.flatnonzero(ended < begun)
            if backwards.size and self.strict:
                at = int(backwards[0])  # pairs are in end order: the first such end in the file
                raise backwards_error(self.path, first_index + int(matched.ends[at]), ended[at], begun[at])
            if backwards.size:
                matched = self._unpaired(matched, backwards, carried_before, first_index)
        for index, _, event in self._open:  # this chunk's begins left open: their timestamps as read
            if index >= first_index:
                self._begun[id(event)] = stamps[index - first_index]
        return matched

    def _unpaired(self, matched, backwards, carried_before, first_index):
        """`matched` without the pairs at `backwards` (lenient): each end a stray, each begin one that
        finish() reports as never closed."""
        for at in backwards.tolist():
            position = int(matched.begin_at[at])
            index = carried_before[position + len(carried_before)][0] if position < 0 else first_index + position
            self._backwards.append((index, matched.begins[at]))
        self.strays += int(backwards.size)
        keep = np.ones(len(matched.begins), bool)
        keep[backwards] = False
        strays = np.sort(np.concatenate([matched.strays, matched.ends[backwards]]))
        return Matched([begin for begin, kept in zip(matched.begins, keep) if kept], matched.ends[keep], strays,
                       matched.begin_at[keep])

    def _match(self, events, phases, first_index, codes, pids, tids):
        codes = phase_codes(phases) if codes is None else codes
        is_b = codes == _B
        spans = np.flatnonzero(is_b | (codes == _E))
        carried = len(self._open)
        if not spans.size:
            return Matched([], _NONE, _NONE)
        whole = spans.size == len(events)
        pids = values(events, "pid") if pids is None else pids
        tids = values(events, "tid") if tids is None else tids
        if not whole:
            at = spans.tolist()
            pids, tids = list(map(pids.__getitem__, at)), list(map(tids.__getitem__, at))
        opens = is_b if whole else is_b[spans]
        previous = self._open
        pool = [event for _, _, event in previous] + events if carried else events
        if carried:  # the begins still open go first, at positions -carried..-1
            pids = [pid for _, (pid, _), _ in previous] + pids
            tids = [tid for _, (_, tid), _ in previous] + tids
            spans = np.concatenate([np.arange(-carried, 0), spans])
            opens = np.concatenate([np.ones(carried, bool), opens])
        flat = self._alternating(pool, carried, first_index, spans, opens, pids, tids)
        if flat is not None:
            return flat
        keys = list(zip(pids, tids))
        table = self._keys
        for key in dict.fromkeys(keys):
            if key not in table:
                table[key] = len(table)
        ids = np.fromiter(map(table.__getitem__, keys), np.int64, len(keys))
        order = np.lexsort((spans, ids))  # by key, then file order (carried begins first)
        key, pos, opening = ids[order], spans[order], opens[order]
        step = np.where(opening, 1, -1)
        starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
        group = np.repeat(np.arange(starts.size), np.diff(np.append(starts, key.size)))
        depth = np.cumsum(step)
        depth -= (depth - step)[starts][group]  # depth after each event, per key
        # an end that closes nothing takes the depth below every earlier one (and below 0);
        # the stack stays empty after it, so later depths count from that new floor
        spread = 2 * key.size + 1  # keeps each key's running minimum apart from the previous key's
        floor = np.minimum(np.minimum.accumulate(depth - group * spread) + group * spread, 0)
        before = np.concatenate([[0], floor[:-1]])
        before[starts] = 0
        stray = floor < before
        strays = pos[stray]
        if strays.size:
            if self.strict:
                raise TraceError(self.path, "'E' event without a matching 'B'", first_index + int(strays.min()))
            self.strays += int(strays.size)
            strays.sort()
            keep = ~stray
            key, pos, opening, depth, floor = key[keep], pos[keep], opening[keep], depth[keep], floor[keep]
        level = depth - floor - opening  # a begin's level is the depth before it, an end's the depth after
        order = np.lexsort((pos, level, key))
        key, pos, opening, level = key[order], pos[order], opening[order], level[order]
        paired = opening[:-1] & ~opening[1:] & (key[1:] == key[:-1]) & (level[1:] == level[:-1])
        first = np.flatnonzero(paired)
        begin_at, end_at = pos[first], pos[first + 1]
        still_open = np.ones(pos.size, bool)
        still_open[first] = still_open[first + 1] = False
        by_end = np.argsort(end_at, kind="stable")
        begin_at, end_at = begin_at[by_end], end_at[by_end]
        begins = list(map(pool.__getitem__, (begin_at + carried).tolist()))
        left = still_open & opening
        left_at, left_key = pos[left], key[left]
        order = np.argsort(left_at)
        named = list(table)  # key ids are positions in the table's insertion order
        self._open = [previous[p + carried] if p < 0 else (first_index + p, named[k], events[p])
                      for p, k in zip(left_at[order].tolist(), left_key[order].tolist())]
        return Matched(begins, end_at, strays if strays.size else _NONE, begin_at)

    def _alternating(self, pool, carried, first_index, spans, opens, pids, tids):
        """The common case without sorting: B, E, B, E... each pair on one (pid, tid), so each
        end closes the begin just before it (a last begin stays open); None otherwise."""
        even = spans.size - spans.size % 2
        if not (opens[:even:2].all() and not opens[1:even:2].any() and (even == spans.size or opens[-1])):
            return None
        if pids[:even:2] != pids[1:even:2] or tids[:even:2] != tids[1:even:2]:
            return None
        begins = list(map(pool.__getitem__, (spans[:even:2] + carried).tolist()))
        if even == spans.size:
            self._open = []
        else:
            last = int(spans[-1])  # a chunk position: a carried begin is followed by its end at least
            self._open = [(first_index + last, (pids[-1], tids[-1]), pool[last + carried])]
        return Matched(begins, spans[1:even:2], _NONE, spans[:even:2])

    @property
    def still_open(self):
        """How many begins are open after the chunks fed so far."""
        return len(self._open)

    def finish(self):
        """The (global index, event) of every begin left open (lenient: and of every pair's that ended
        before it began), in file order; strict raises on the first."""
        dangling = sorted([(index, event) for index, _, event in self._open] + self._backwards, key=lambda d: d[0])
        if dangling and self.strict:
            raise TraceError(self.path, "'B' event without a matching 'E'", dangling[0][0])
        return dangling

