"""`repro pecan ...` subcommands."""


def add_commands(sub):
    sub.add_parser("pecan", help="Pecan input-pipeline experiments")
