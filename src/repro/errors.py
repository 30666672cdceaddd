"""The one error type the package raises for bad input; the CLI turns it into exit code 1."""

import re

# C0 and C1 control characters and DEL: a name holding one would break the message's line or
# drive the terminal (escape sequences); and lone surrogates (a file name's bytes that are not UTF-8),
# which a strict UTF-8 stream cannot write
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class ReproError(Exception):
    """Bad input or a failed step, with a message that names the file, key or flag at fault."""


class OutputError(ReproError):
    """A file the command writes cannot be written (a full disk, a size limit, a file in a directory's
    place): the fault is where the output goes, not in the input."""


class TraceError(ReproError):
    """A file that is not a well-formed Chrome trace."""

    def __init__(self, path, message, index=None):
        self.path = str(path)
        self.index = index
        where = f"{self.path}" + (f": event {index}" if index is not None else "")
        super().__init__(f"{where}: {message}")


def invalid_yaml(path, exc):
    """A ReproError for the yaml.YAMLError `exc` reading `path`, in one line: the file, the line and
    column where the parser stopped, and what it found there."""
    mark = getattr(exc, "problem_mark", None)
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return ReproError(f"{path}: invalid YAML{where}: {problem}")


def is_utf8(value):
    """Whether `value` is UTF-8 text: a command line's or a file name's bytes that are not reach Python
    as lone surrogates, which no output (a title, a CSV cell, a trace) can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text):
    """Whether `text` holds none of the characters one_line escapes: a name that goes into a file
    name and into messages."""
    return not _CONTROL.search(text)


def one_line(message):
    """`message` with its control characters written as Python escapes (a newline as \\n), so that an
    error naming a hostile file name is still one line, shown as it is."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], message)
