"""What the Chrome trace event format defines, and the checks every reader applies to an event."""

from itertools import compress, repeat
from operator import is_

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


def positions(items, value):
    """The indices of `value` in the list `items`: list.index scans in C between the hits."""
    found, at = [], -1
    try:
        while True:
            at = items.index(value, at + 1)
            found.append(at)
    except ValueError:
        return found


def first_bad_event(events, phases=None, stamps=None):
    """Index of the first event that check_event would reject, or None.

    Set-based checks over whole lists first (C speed); the per-event loop runs only when one of
    them finds something, to name the exact index. `phases` and `stamps` may pass
    values(events, "ph") and values(events, "ts"), which also proves every event is a dict.
    """
    if phases is None and set(map(type, events)) - {dict}:
        return _first_bad_by_loop(events)
    phases = values(events, "ph") if phases is None else phases
    stamps = values(events, "ts") if stamps is None else stamps
    if not set(phases) <= PHASES:
        return _first_bad_by_loop(events)
    stamp_types = set(map(type, stamps))
    if not stamp_types <= _NUMBER_TYPE_SET:
        untimed = set(compress(phases, map(is_, stamps, repeat(None))))  # only metadata may lack a ts
        if not (stamp_types - _NUMBER_TYPE_SET <= {type(None)} and untimed <= PHASES_WITHOUT_TS):
            return _first_bad_by_loop(events)
    if "X" in phases and not {type(e.get("dur", 0)) for e in events if e["ph"] == "X"} <= _NUMBER_TYPE_SET:
        return _first_bad_by_loop(events)
    return None


def _first_bad_by_loop(events):
    for index, event in enumerate(events):
        if type(event) is not dict:
            return index
        ph = event.get("ph")
        ts = event.get("ts")
        if ph not in PHASES or (type(ts) not in NUMBER_TYPES and not (ts is None and ph in PHASES_WITHOUT_TS)):
            return index
        if ph == "X" and type(event.get("dur", 0)) not in NUMBER_TYPES:
            return index
    return None


def check_event(event, path, index):
    """Raise TraceError unless `event` is an object with a known `ph` and a numeric `ts`."""
    if not isinstance(event, dict):
        raise TraceError(path, f"expected an event object, found {type(event).__name__}", index)
    ph = event.get("ph")
    if ph is None:
        raise TraceError(path, "event has no 'ph' (phase)", index)
    if ph not in PHASES:
        raise TraceError(path, f"unknown phase ph={ph!r}", index)
    ts = event.get("ts")
    if ts is None:
        if ph not in PHASES_WITHOUT_TS:
            raise TraceError(path, f"event with ph={ph!r} has no 'ts'", index)
    elif not is_number(ts):
        raise TraceError(path, f"'ts' must be a number of microseconds, found {ts!r}", index)
    if ph == "X" and not is_number(event.get("dur", 0)):
        raise TraceError(path, f"'dur' must be a number, found {event.get('dur')!r}", index)
