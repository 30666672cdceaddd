"""The one error type the package raises for bad input; the CLI turns it into exit code 1."""


class ReproError(Exception):
    """Bad input or a failed step, with a message that names the file, key or flag at fault."""


class TraceError(ReproError):
    """A file that is not a well-formed Chrome trace."""

    def __init__(self, path, message, index=None):
        self.path = str(path)
        self.index = index
        where = f"{self.path}" + (f": event {index}" if index is not None else "")
        super().__init__(f"{where}: {message}")
