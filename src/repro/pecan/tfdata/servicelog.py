"""The logs and status files of the tf.data service's processes, on the accelerator host or a worker
host: a start replaces an earlier start's, told by their content, and never a file of the user's
under such a name."""

import os
import re
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import check_output, open_regular
from repro.processes import read_record


def open_service_log(directory, role, log_path, status_path):
    """The log of a process about to start, opened for writing with its first line naming it. An
    earlier start's log and status file of these names are replaced, told by their content; another
    file there is refused (it may be the user's), as is a link (open() would empty what it names)."""
    check_output(log_path, str(log_path))
    for path, is_ours, what in ((log_path, is_service_log, f"a tf.data {role}'s log (its first line names it)"),
                                (status_path, is_status, "a tf.data process's status (role, pid)")):
        if os.path.lexists(path) and not is_ours(path):
            raise ReproError(f"state directory {directory}: {path} is not {what}, and a start would replace it; it "
                             "may be yours: move it, or name another state directory")
    log = open(log_path, "w")
    log.write(f"repro tf.data {role} log\n")
    log.flush()
    return log


def is_service_log(path):
    """Whether `path` is a log open_service_log wrote: its first line names it (not a link, not another file)."""
    try:
        with open_regular(path, str(path), "a tf.data process's log", "r", errors="replace") as fh:
            return not Path(path).is_symlink() and re.fullmatch(r"repro tf\.data (dispatcher|worker) log\n",
                                                                 fh.readline(100)) is not None
    except (OSError, ReproError):
        return False


def is_status(path):
    """Whether `path` holds a status a tf.data process reported (repro.pecan.tfdata.server)."""
    status = read_record(path)
    return (not Path(path).is_symlink() and isinstance(status, dict) and status.get("role") in ("dispatcher", "worker")
            and isinstance(status.get("pid"), int))
