"""The `repro` program: a command line parsed by the command tree (repro.commands) and run by it.

    repro {trace,cluster,provenance,config,doctor,pecan,trims} ...
"""

import sys

# What tests and tools import from here, imported with the command tree when first asked for: the
# program itself imports it in main(), once the stop signals are put off (see there).
_COMMAND_TREE = ("COMMAND_GROUPS", "build_parser", "run")


def __getattr__(name):
    if name in _COMMAND_TREE:
        import repro.commands

        return getattr(repro.commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv=None):
    from repro import stopsignals

    # the command tree's imports (argparse, the file tools: tens of milliseconds) come before its
    # handlers: a stop signal meanwhile is put off, then ends the command as a later one does, with
    # 128 + signal, rather than in a KeyboardInterrupt traceback or the signal's own death
    with stopsignals.deferred() as caught:
        import contextlib
        import io
        from types import SimpleNamespace

        import repro.commands  # noqa: F401
    program = sys.modules[__name__]  # its build_parser and run, as a test may have replaced them
    argv = sys.argv[1:] if argv is None else list(argv)
    parsed = []

    def parse(_):
        # as a command: help that cannot be written is one line naming standard output (argparse
        # ignores a failed write), so it is written here, after argparse; --help's SystemExit goes on.
        # The parser too is built here: its command groups import numpy (a third of a second), and a
        # stop signal meanwhile ends as a command's does, not in a traceback or the signal's own death
        stopsignals.raise_deferred(caught)  # here, where the command's handlers are set
        parser = program.build_parser(argv[0] if argv else None)
        text = io.StringIO()
        try:
            with contextlib.redirect_stdout(text):
                parsed.append(parser.parse_args(argv))
        finally:
            if text.getvalue():
                sys.stdout.write(text.getvalue())
                sys.stdout.flush()

    status = program.run(SimpleNamespace(func=parse))
    return program.run(parsed[0]) if parsed else status


if __name__ == "__main__":
    sys.exit(main())
