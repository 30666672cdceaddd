"""Edits of compact JSON text at byte offsets: where a key's values are, and the text with ranges
of it replaced, each step a few passes of numpy or C over the bytes instead of a Python step per
value.

The offsets are only as good as what the caller vouches for: in JSON without escapes and without
whitespace between tokens (as orjson writes it), a string holds no quote, so every ``"key":`` in
the text is that key of some object, at some depth, and a number or a string without escapes
ends where these functions say.
"""

import numpy as np

_QUOTE, _COMMA, _BRACE = ord('"'), ord(","), ord("}")


def words(text):
    """The text's bytes as an array, and every 4 bytes from each offset as one integer (a strided
    view: no copy), for `key_values`."""
    view = np.frombuffer(text, np.uint8)
    return view, np.ndarray((max(len(text) - 3, 0),), "<u4", text, strides=(1,))


def spaced(view):
    """Whether the text has whitespace between tokens (raw control characters are invalid inside
    strings, so any outside them)."""
    blank = np.flatnonzero(view <= 32)
    return bool(blank.size) and not (np.searchsorted(np.flatnonzero(view == _QUOTE), blank) % 2).all()


def key_values(view, quads, key):
    """The offsets of the values of every ``"key":`` in the text (`view`, `quads` from `words`)."""
    pattern = b'"' + key + b'":'
    at = np.flatnonzero(quads == int.from_bytes(pattern[:4], "little"))
    at = at[at + len(pattern) <= view.size]  # a value follows every key of valid JSON; this one is cut off
    for offset in range(4, len(pattern)):
        at = at[view[at + offset] == pattern[offset]]
    return at + len(pattern)


def value_ends(view, starts):
    """Where the values at `starts` end (exclusive): a number (or literal) at the next comma or
    brace, which no number holds; a string after its closing quote."""
    stops = np.flatnonzero((view == _COMMA) | (view == _BRACE))
    ends = stops[np.searchsorted(stops, starts)]
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
