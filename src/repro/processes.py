"""Processes this package starts, recorded so that only they are ever signalled.

A pid alone is not an identity: after a crash or reboot the same number may belong to another
program. A record keeps the pid together with the kernel's start time of that process
(field 22 of /proc/<pid>/stat, in clock ticks since boot) and the boot id; `matches` compares all
three before anything is signalled, so a stale pid file can never stop a foreign process.

An identity alone is not ownership either: a record copied from another working directory (a
copied `results/`) names that directory's live processes exactly, and a record can be written to
name any process of the user's (a `sleep` in the state directory, a `tail -f` of its log). So a
process is only signalled for the state directory whose record names it when it also belongs to
that directory (`belongs`): it was started with `owner_environment(directory)` in its environment,
and the random token that environment holds is the record's own `token` (`describe(..., token=)`).
Neither its working directory nor its command line is proof: any program may have those.
"""

import hashlib
import json
import os
import secrets
import signal
import stat
import tempfile
import time
from pathlib import Path

from repro import stopsignals
from repro.errors import ReproError
from repro.fsutil import read_json, write_text

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# the state directory a process was started for: its resolved path, and its device and inode (a
# moved working directory keeps them; a copied one does not)
OWNER_DIRECTORY = "REPRO_OWNER_DIRECTORY"
OWNER_ID = "REPRO_OWNER_ID"
# a random value made for each process started: the record holds it too
OWNER_TOKEN = "REPRO_OWNER_TOKEN"


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


def describe(pid, role, token=None):
    """The identity of a running process: what `matches` checks later. token: the OWNER_TOKEN of the
    owner_environment it was started with (what `belongs` requires of it)."""
    fields = _stat_fields(pid)
    if fields is None:
        raise ProcessLookupError(pid)
    return {"pid": int(pid), "start_ticks": int(fields[19]), "boot_id": _boot_id(), "role": role,
            **({"token": token} if token is not None else {})}


def alive(pid):
    """Whether `pid` runs and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def matches(record, owner=None):
    """Whether the process in `record` (from `describe`) is still the one that was recorded; with
    `owner` (a state directory), also whether it belongs to that directory (`belongs`)."""
    if not isinstance(record, dict) or type(record.get("pid")) is not int or record["pid"] <= 0:
        return False
    fields = _stat_fields(record["pid"])
    same = (fields is not None and fields[0] != "Z" and int(fields[19]) == record.get("start_ticks")
            and record.get("boot_id") == _boot_id())
    return same and (owner is None or belongs(record["pid"], owner, record.get("token")))


def _directory_id(path):
    info = path.stat()
    return f"{info.st_dev}:{info.st_ino}"


def owner_environment(directory):
    """The environment entries that mark a process started for the state directory `directory`
    (which must exist) as that directory's: `belongs` reads them back from /proc/<pid>/environ.
    Each call makes a new OWNER_TOKEN, which the process's record keeps (describe's token)."""
    directory = Path(directory).resolve()
    return {OWNER_DIRECTORY: str(directory), OWNER_ID: _directory_id(directory), OWNER_TOKEN: secrets.token_hex(16)}


def belongs(pid, directory, token=None):
    """Whether process `pid` was started for the state directory `directory`: its environment holds
    owner_environment of that directory (its path, or its device and inode after a move) and the
    record's `token`. A record without one proves nothing: any process started with the directory's
    marks (a child of one that inherited them, or one given them by hand) would pass.
    A process of another user, whose environment cannot be read, does not; nor one that merely runs
    in the directory or names a file of it."""
    import psutil

    try:
        directory = Path(directory).resolve()
        here = str(directory)
        ident = _directory_id(directory)
    except OSError:  # no such directory: nothing was started for it
        return False
    try:
        environment = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return False
    if environment.get(OWNER_DIRECTORY) != here and environment.get(OWNER_ID) != ident:
        return False
    return token is not None and environment.get(OWNER_TOKEN) == token


def write_record(path, record):
    write_text(path, json.dumps(record) + "\n")


def spawn(command, **popen):
    """subprocess.Popen(command, **popen) for a process that must not outlive this one's stop. A
    stop signal (Ctrl-C, SIGTERM, SIGHUP) that comes while Popen forks would be raised inside it,
    with the child running and no Popen object to stop it by: such a signal is put off until Popen
    has returned, then stops the child (stop_child) and is raised as it came."""
    import subprocess

    with stopsignals.deferred() as caught:
        proc = subprocess.Popen(command, **popen)
    if caught:
        stop_child(proc)
        stopsignals.raise_deferred(caught)
    return proc


def stop_child(proc, grace_s=10.0):
    """SIGTERM a child this process started (a subprocess.Popen), SIGKILL it after `grace_s`; reaped."""
    import subprocess

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_record(path):
    """The record in `path`, or None when it is missing or not a record (an old plain pid file)."""
    try:  # bounded, regular files only: a FIFO or a link to /dev/zero neither hangs nor fills the memory
        record = read_json(path, "a process record")
    except ReproError:
        return None
    return record if isinstance(record, dict) else None


def terminate(record, *, owner, grace_s=5.0):
    """SIGTERM the recorded process, SIGKILL it after `grace_s`; never signal a process that does not
    match, nor one that does not belong to the state directory `owner` that keeps its record.

    Returns True when the recorded process was running and has been stopped.
    """
    if not matches(record, owner):
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
    if xdg and is_private(Path(xdg)):
        base = Path(xdg) / "repro"
    else:
        base = Path(tempfile.gettempdir()) / f"repro-{os.getuid()}"
    return private(base)


def runtime_dir(key, create=True):
    """A private directory (ours, mode 0700) for the sockets and process records of the workflow
    directory `key`: the next start finds them there even after `rm -rf results`. create=False: its
    path, which need not exist (nothing of `key`'s runs where it does not)."""
    path = private_directory() / hashlib.sha256(str(Path(key).resolve()).encode()).hexdigest()[:16]
    return private(path) if create else path


def private(directory):
    """`directory`, made where missing; ReproError unless it is private (is_private)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    if not is_private(directory):
        raise ReproError(f"{directory}: not a private directory (expected owner uid {os.getuid()}, mode 0700); "
                         "remove it or set XDG_RUNTIME_DIR")
    return directory


def is_private(path):
    """Whether `path` is a directory of this user's that no one else may enter (mode 0700 or narrower)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0
