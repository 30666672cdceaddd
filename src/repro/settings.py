"""Settings as JSON text: the dict a rule passes as `params` and a command reads back, and its digest.

The rules build them (repro.rulesettings); the commands read them (`settings_argument`); the
services started with them record their digest (`settings_digest`) so a status check can compare.
"""

import argparse
import contextlib
import hashlib
import json
import math

from repro.errors import ReproError, is_utf8


class Settings(dict):
    """A dict that a shell command shows as JSON: Snakemake keeps the dict's repr as the params'
    rerun trigger (the same as a plain dict's), and `{params.settings:q}` formats it with str()."""

    def __str__(self):
        return json.dumps(self, separators=(",", ":"))


# --config: what a command reads as the workflow reads `--configfile`
CONFIG_HELP = ("workflow config: a whole one, or an overlay (config/examples/tfdata.yaml, say) merged over "
               "config/config.yaml as Snakemake's --configfile merges it; default config/config.yaml")


def settings_argument(text):
    """argparse type: a JSON object given on the command line (as a rule passes `Settings`)."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise argparse.ArgumentTypeError("nested too deeply") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _unique_keys(pairs):
    from repro.fsutil import unique_keys  # not at the top: the Snakefile imports this module at every start

    return unique_keys(pairs)


def _no_constant(name):
    raise ValueError(f"{name} is not a number JSON holds")


def _finite(text):
    """A JSON number as a float: one too large for a float (1e999) read as infinity, which the
    command then refused naming its output file or a key, not this flag."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


@contextlib.contextmanager
def settings_keys(flag="--settings"):
    """Settings given by hand that lack what a command reads: name the flag, not a KeyError."""
    try:
        yield
    except KeyError as exc:
        raise ReproError(f"{flag}: lacks key {exc} (expected the settings the workflow passes; "
                         "see repro.rulesettings)") from None


def settings_digest(settings):
    """A short, stable fingerprint of `settings`: a state records it, status checks compare it."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def utf8_text(value):
    """argparse type: free text that goes into an output (is_utf8)."""
    if not is_utf8(value):
        raise argparse.ArgumentTypeError(f"{ascii(value)[:80]} is not UTF-8 text; expected text an output can hold")
    return value


FIGURE_FORMATS = ("pdf", "png", "svg", "eps", "ps", "jpg", "jpeg", "tif", "tiff")  # matplotlib's, by file suffix


def figure_file(text):
    """argparse type: a figure file whose suffix names a format matplotlib writes (it picks the format
    by the suffix, and fails only after everything else was computed and written)."""
    suffix = text.rsplit(".", 1)[-1].lower() if "." in text.rsplit("/", 1)[-1] else ""
    if suffix not in FIGURE_FORMATS:
        raise argparse.ArgumentTypeError(f"{text[:200]!r}: expected a file name ending in one of "
                                         f"{', '.join('.' + f for f in FIGURE_FORMATS)}")
    return text
