"""The `repro` program: a command line parsed by the command tree (repro.commands) and run by it.

    repro {trace,cluster,provenance,config,doctor,pecan,trims} ...
"""

import contextlib
import io
import sys
from types import SimpleNamespace

from repro.commands import COMMAND_GROUPS, build_parser, run  # noqa: F401  (tests and tools import them from here)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parsed = []

    def parse(_):
        # as a command: help that cannot be written is one line naming standard output (argparse
        # ignores a failed write), so it is written here, after argparse; --help's SystemExit goes on.
        # The parser too is built here: its command groups import numpy (a third of a second), and a
        # stop signal meanwhile ends as a command's does, not in a traceback or the signal's own death
        parser = build_parser(argv[0] if argv else None)
        text = io.StringIO()
        try:
            with contextlib.redirect_stdout(text):
                parsed.append(parser.parse_args(argv))
        finally:
            if text.getvalue() and sys.stdout is not None:  # None: closed (>&-)
                sys.stdout.write(text.getvalue())
                sys.stdout.flush()

    status = run(SimpleNamespace(func=parse))
    return run(parsed[0]) if parsed else status


if __name__ == "__main__":
    sys.exit(main())
