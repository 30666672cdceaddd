"""The `repro` program: a command line parsed by the command tree (repro.commands) and run by it.

    repro {trace,cluster,provenance,config,doctor,pecan,trims} ...
"""

import sys

from repro.commands import COMMAND_GROUPS, build_parser, run  # noqa: F401  (tests and tools import them from here)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(build_parser(argv[0] if argv else None).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
