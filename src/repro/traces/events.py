"""What the Chrome trace event format defines, and the checks every reader applies to an event."""

import math
from itertools import compress, repeat
from operator import eq, is_

from repro.errors import TraceError

# Every phase of the Trace Event Format: duration (B/E), complete (X), instant (i, and the
# legacy I), counter (C), async (b/n/e and the legacy S/T/p/F), flow (s/t/f), sample (P),
# object (N/O/D), metadata (M), memory dump (V/v), mark (R), clock sync (c), context ( ( ) ).
PHASES = frozenset("BEXiICbneSTpFstfPNODMVvRc()")

# Metadata events carry no meaningful timestamp; every other phase must have a numeric ts.
PHASES_WITHOUT_TS = frozenset("M")

IGNORE_CATEGORY = "ignore"


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


NUMBER_TYPES = (int, float)
_NUMBER_TYPE_SET = set(NUMBER_TYPES)


def values(events, key):
    """events[i].get(key) for every event, computed in C (TypeError unless they are all dicts)."""
    return list(map(dict.get, events, repeat(key)))


def column(events, columns, key):
    """values(events, key), from `columns` when already extracted there (and added to it if not)."""
    found = columns.get(key)
    if found is None:
        found = columns[key] = values(events, key)
    return found


def positions(items, value):
    """The indices of `value` in the list `items`: list.index scans in C between the hits."""
    found, at = [], -1
    try:
        while True:
            at = items.index(value, at + 1)
            found.append(at)
    except ValueError:
        return found


# Fields every tool reads, and the types they may have (absent is always allowed).
FIELD_TYPES = {"pid": (int, float, str), "tid": (int, float, str), "name": (str,), "cat": (str,)}


def first_bad_event(events, columns=None):
    """Index of the first event that check_event would reject, or None.

    Set-based checks over whole columns first (C speed); check_event runs event by event only
    when one of them finds something, to name the exact index. `columns` maps field names to
    columns already extracted with values(); the ones extracted here are added to it, for the
    caller to reuse. Extracting any column also proves that every event is a dict.
    """
    columns = {} if columns is None else columns
    try:
        for key in ("ph", "ts", *FIELD_TYPES):
            if key not in columns:
                columns[key] = values(events, key)
    except TypeError:  # not every event is an object
        return _first_bad_by_loop(events)
    phases, stamps = columns["ph"], columns["ts"]
    try:  # the distinct values: few, so their types are quick to check; a list or object raises
        distinct = {key: set(columns[key]) for key in ("ph", "name", "cat")}
    except TypeError:
        return _first_bad_by_loop(events)
    # every value's type for ids, since 1 == True would hide a bool among the distinct values
    distinct.update((key, columns[key]) for key in ("pid", "tid"))
    if not distinct["ph"] <= PHASES:
        return _first_bad_by_loop(events)
    stamp_types = set(map(type, stamps))
    if not stamp_types <= _NUMBER_TYPE_SET:
        untimed = set(compress(phases, map(is_, stamps, repeat(None))))  # only metadata may lack a ts
        if not (stamp_types - _NUMBER_TYPE_SET <= {type(None)} and untimed <= PHASES_WITHOUT_TS):
            return _first_bad_by_loop(events)
    for key, allowed in FIELD_TYPES.items():
        if not set(map(type, distinct[key])) <= {*allowed, type(None)}:
            return _first_bad_by_loop(events)
    if "X" in phases:
        complete = list(map(eq, phases, repeat("X")))
        durations = list(map(dict.get, compress(events, complete), repeat("dur"), repeat(0)))
        starts = list(compress(stamps, complete))
        if not set(map(type, durations)) <= _NUMBER_TYPE_SET:
            return _first_bad_by_loop(events)
        shortest = min(durations)
        # every ts + dur lies between these two sums: both finite, all are
        if shortest < 0 or not (math.isfinite(min(starts) + shortest) and math.isfinite(max(starts) + max(durations))):
            return _first_bad_by_loop(events)
    return None


def _first_bad_by_loop(events):
    for index, event in enumerate(events):
        try:
            check_event(event, None, index)
        except TraceError:
            return index
    return None


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_event(event, path, index):
    """Raise TraceError unless `event` is an object with a known `ph`, a numeric `ts` and fields
    of the types the format gives them."""
    if not isinstance(event, dict):
        raise TraceError(path, f"expected an event object, found {type(event).__name__}", index)
    ph = event.get("ph")
    if ph is None:
        raise TraceError(path, "event has no 'ph' (phase)", index)
    if not isinstance(ph, str) or ph not in PHASES:
        raise TraceError(path, f"unknown phase ph={_short(ph)}", index)
    ts = event.get("ts")
    if ts is None:
        if ph not in PHASES_WITHOUT_TS:
            raise TraceError(path, f"event with ph={ph!r} has no 'ts'", index)
    elif not is_number(ts):
        raise TraceError(path, f"'ts' must be a number of microseconds, found {_short(ts)}", index)
    for key, allowed in FIELD_TYPES.items():
        value = event.get(key)
        if value is not None and (type(value) not in allowed):
            expected = "a string" if allowed == (str,) else "a number or a string"
            raise TraceError(path, f"'{key}' must be {expected}, found {_short(value)}", index)
    if ph == "X":
        dur = event.get("dur", 0)
        if not is_number(dur):
            raise TraceError(path, f"'dur' must be a number, found {_short(dur)}", index)
        if dur < 0:  # it would end before it began: a negative time in every total it went into
            raise TraceError(path, f"'dur' must not be negative, found {_short(dur)}", index)
        if not math.isfinite(ts + dur):
            raise TraceError(path, f"'ts' + 'dur' is not a finite number ({ts!r} + {dur!r})", index)
