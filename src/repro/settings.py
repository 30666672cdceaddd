"""Settings as JSON text: the dict a rule passes as `params` and a command reads back, and its digest.

The rules build them (repro.rulesettings); the commands read them (`settings_argument`); the
services started with them record their digest (`settings_digest`) so a status check can compare.
"""

import argparse
import contextlib
import hashlib
import json

from repro.errors import ReproError


class Settings(dict):
    """A dict that a shell command shows as JSON: Snakemake keeps the dict's repr as the params'
    rerun trigger (the same as a plain dict's), and `{params.settings:q}` formats it with str()."""

    def __str__(self):
        return json.dumps(self, separators=(",", ":"))


def settings_argument(text):
    """argparse type: a JSON object given on the command line (as a rule passes `Settings`)."""
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
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
