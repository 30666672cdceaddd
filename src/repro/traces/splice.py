"""Edits of compact JSON text at byte offsets: where a key's values are, and the text with ranges
of it replaced, each step a few passes of numpy or C over the bytes instead of a Python step per
value.

The offsets are only as good as what the caller vouches for: in JSON without escapes and without
whitespace between tokens (as orjson writes it), a string holds no quote, so every ``"key":`` in
the text is that key of some object, at some depth, and a number or a string without escapes
ends where these functions say.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_QUOTE, _COMMA, _BRACE = ord('"'), ord(","), ord("}")
_NO_WORDS = np.zeros(0, "<u4")
_SPAN = 32  # bytes looked at first for the end of a value: a number's text is shorter


def words(text):
    """The text's bytes as an array, and its bytes read four at a time from offsets 0, 1, 2 and 3
    (integers compared whole, see `find`; views, no copies)."""
    quads = [np.frombuffer(text, "<u4", (len(text) - k) // 4, k) if len(text) >= k + 4 else _NO_WORDS for k in range(4)]
    return np.frombuffer(text, np.uint8), quads


def find(quads, pattern):
    """The offsets of every occurrence of the four bytes `pattern` in the text, ascending."""
    word = int.from_bytes(pattern, "little")
    # four ascending runs: the stable sort (timsort) merges them
    return np.sort(np.concatenate([np.flatnonzero(q == word) * 4 + k for k, q in enumerate(quads)]), kind="stable")


def spaced(text):
    """Whether the JSON text has whitespace between tokens (raw control characters are invalid
    inside strings, so any outside them); most texts have none at all, found by a byte search."""
    if not any(blank in text for blank in (b" ", b"\n", b"\t", b"\r")):
        return False
    view = np.frombuffer(text, np.uint8)
    blank = np.flatnonzero(view <= 32)
    return not (np.searchsorted(np.flatnonzero(view == _QUOTE), blank) % 2).all()


def key_values(view, quads, key):
    """The offsets of the values of every ``"key":`` in the text (`view`, `quads` from `words`)."""
    pattern = b'"' + key + b'":'
    at = find(quads, pattern[:4])
    at = at[at + len(pattern) < view.size]  # a value follows every key of valid JSON; this one is cut off
    for offset in range(4, len(pattern)):
        at = at[view[at + offset] == pattern[offset]]
    return at + len(pattern)


def value_ends(view, starts):
    """Where the values at `starts` end (exclusive): a number (or literal) at the next comma or
    brace, which no number holds; a string after its closing quote. The next comma or brace is
    looked for in the few bytes after each start first, over the rest only for the values it is
    not in."""
    ends = np.full_like(starts, -1)
    near = starts <= view.size - _SPAN
    if near.any():
        rows = sliding_window_view(view, _SPAN)[starts[near]]
        stop = (rows == _COMMA) | (rows == _BRACE)
        first = stop.argmax(axis=1)  # 0 where there is none
        ends[near] = np.where(stop[np.arange(first.size), first], starts[near] + first, -1)
    rest = np.flatnonzero(ends < 0)
    if rest.size:
        lo = int(starts[rest].min())
        stops = lo + np.flatnonzero((view[lo:] == _COMMA) | (view[lo:] == _BRACE))
        ends[rest] = stops[np.searchsorted(stops, starts[rest])]
    strings = view[starts] == _QUOTE
    if strings.any():
        quotes = np.flatnonzero(view == _QUOTE)
        ends[strings] = quotes[np.searchsorted(quotes, starts[strings] + 1)] + 1
    return ends


def splice(text, lo, hi, starts, ends, texts):
    """text[lo:hi] with each range text[starts[i]:ends[i]] (sorted, disjoint, within lo..hi)
    replaced by texts[i] (a list of bytes): one slice per unchanged piece and one join."""
    pieces = [text[a:b] for a, b in zip([lo, *ends.tolist()], [*starts.tolist(), hi])]
    out = [b""] * (2 * len(pieces) - 1)
    out[::2], out[1::2] = pieces, texts
    return b"".join(out)
