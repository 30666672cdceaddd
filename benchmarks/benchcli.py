"""The benchmarks' command lines: flag values checked as argparse types (a bad one is a usage error
naming the flag, before any work), and a main run as `repro` runs a command: a ReproError is one
line and exit status 1, and SIGTERM or SIGHUP stop it as Ctrl-C does, so its clean-up runs (the
servers it started stopped, its temporary directories removed)."""

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

from repro.commands import run


def count(low=1):
    """An argparse type: a whole number of at least `low`."""
    def whole(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {low}, got {value}")
        return value

    return whole


def run_main(main):
    """Exit with what `main()` gives, run as repro.commands.run runs a command."""
    sys.exit(run(SimpleNamespace(func=lambda _: main()), prog=Path(sys.argv[0]).name))
