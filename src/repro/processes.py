"""Processes this package starts, recorded so that only they are ever signalled.

A pid alone is not an identity: after a crash or reboot the same number may belong to another
program. A record keeps the pid together with the kernel's start time of that process
(field 22 of /proc/<pid>/stat, in clock ticks since boot) and the boot id; `matches` compares all
three before anything is signalled, so a stale pid file can never stop a foreign process.
"""

import hashlib
import json
import os
import signal
import stat
import tempfile
import time
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import write_text

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _stat_fields(pid):
    """The fields of /proc/<pid>/stat after the command name (which may contain spaces), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _boot_id():
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def describe(pid, role):
    """The identity of a running process: what `matches` checks later."""
    fields = _stat_fields(pid)
    if fields is None:
        raise ProcessLookupError(pid)
    return {"pid": int(pid), "start_ticks": int(fields[19]), "boot_id": _boot_id(), "role": role}


def alive(pid):
    """Whether `pid` runs and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def matches(record):
    """Whether the process in `record` (from `describe`) is still the one that was recorded."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or record["pid"] <= 0:
        return False
    fields = _stat_fields(record["pid"])
    return (fields is not None and fields[0] != "Z" and int(fields[19]) == record.get("start_ticks")
            and record.get("boot_id") == _boot_id())


def write_record(path, record):
    write_text(path, json.dumps(record) + "\n")


def read_record(path):
    """The record in `path`, or None when it is missing or not a record (an old plain pid file)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def terminate(record, grace_s=5.0):
    """SIGTERM the recorded process, SIGKILL it after `grace_s`; never signal a process that does not match.

    Returns True when the recorded process was running and has been stopped.
    """
    if not matches(record):
        return False
    pid = record["pid"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not matches(record):
            return True
        time.sleep(0.05)
    if matches(record):
        os.kill(pid, signal.SIGKILL)
        while alive(pid) and matches(record):
            time.sleep(0.02)
    return True


def private_directory():
    """$XDG_RUNTIME_DIR/repro (when that is private) or <temp dir>/repro-<uid>: ours, mode 0700.

    Sockets belong there rather than in /tmp, where another user could bind one first.
    """
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and _is_private(Path(xdg)):
        base = Path(xdg) / "repro"
    else:
        base = Path(tempfile.gettempdir()) / f"repro-{os.getuid()}"
    return _private(base)


def runtime_dir(key):
    """A private directory (ours, mode 0700) for the sockets and process records of the workflow
    directory `key`: the next start finds them there even after `rm -rf results`."""
    return _private(private_directory() / hashlib.sha256(str(Path(key).resolve()).encode()).hexdigest()[:16])


def _private(directory):
    directory.mkdir(mode=0o700, exist_ok=True)
    if not _is_private(directory):
        raise ReproError(f"{directory}: not a private directory (expected owner uid {os.getuid()}, mode 0700); "
                         "remove it or set XDG_RUNTIME_DIR")
    return directory


def _is_private(path):
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0
