"""The model store as a workflow service: started for TrIMS targets only, found again through a
private runtime directory keyed by the workflow directory (even after `rm -rf results`), and
stopped when the last invocation that used it ends (or by `snakemake cluster_stop`).

"An invocation" is a main Snakemake process: the Snakefile puts its identity in the environment
($REPRO_INVOCATION, repro.invocation), every job inherits it, and the store's
record lists the invocations that use it (`users`). An invocation that ends stops the store only
if no other user still runs; one that never used it leaves it alone. A store whose users have all
gone (killed, so their end never came) is adopted by the next invocation that uses it, which then
stops it when it ends. Starting, adopting and stopping hold a lock in the runtime directory, so
parallel jobs of one invocation, or two invocations, never start two stores or stop one another's.

The store does not depend on an invocation's end being seen: Snakemake runs onsuccess/onerror
only when its scheduler returns, not when it raises (a WorkflowError, e.g. after `make clean`
removed .snakemake under it), is killed, or runs with --no-hooks. So a watchdog process started
with the store (`watch`) stops it once it has users and none of them runs any more.

The state file (results/cluster/<backend>/trims-store.json, the output of trims_store_start) stays
when the store stops: it keeps the settings, and a TrIMS run that has to execute starts the store
again from them (`ensure`, in the status check and in the run itself). The finished runs, which
take the state as ancient input, are never redone because the store stopped.
"""

import contextlib
import fcntl
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from repro import processes
from repro.errors import ReproError
from repro.fsutil import check_output, not_a_directory, open_lock, open_log, read_json, refuse_inside, write_json
from repro.invocation import owner
from repro.settings import settings_digest

RECORD = "store.json"
LOCK = "store.lock"
# the store's state file, beside the cluster state of its backend (rules/common.smk: TRIMS_STORE)
STATE_NAME = "trims-store.json"
# where the config holds each of the store's settings (repro.rulesettings.trims_store_settings)
SETTINGS_PLACES = {"base_path": ("trims", "base_path"), "server": ("trims", "server")}
SERVER_KEYS = ("memory_mb", "eviction", "device")
WATCH_INTERVAL_S = 1.0
STOP_WAIT_S = 30  # for a store asked to stop to remove its segments and socket


def _same_invocation(a, b):
    return bool(a) and bool(b) and all(a.get(key) == b.get(key) for key in ("pid", "start_ticks", "boot_id"))


def _record_path(workdir, runtime=None):
    """Where the store's record lies (in `runtime`, a runtime directory of workdir's found elsewhere,
    or the environment's); only a holder of the lock (_locked) writes it, so its directory exists then."""
    return (runtime or processes.runtime_dir(workdir, create=False)) / RECORD


@contextlib.contextmanager
def _locked(workdir, runtime=None):
    """Hold the store's lock: one start, adoption or stop at a time for this workflow directory. The
    runtime directory is removed on the way out when it holds nothing but the lock (no store, no
    record): a workflow that no longer runs a store leaves nothing in the temporary directory. A
    waiter that then gets the removed lock file takes the lock again, on the path's current file."""
    while True:
        path = (processes.private(runtime) if runtime else processes.runtime_dir(workdir)) / LOCK
        with open_lock(path, f"{path} (the model store's lock)") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if _same_file(path, lock):
                try:
                    yield
                finally:
                    if os.listdir(path.parent) == [LOCK]:
                        path.unlink()
                        path.parent.rmdir()
                return


def _same_file(path, handle):
    try:
        return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _live(users):
    return [user for user in users if processes.matches(user)]


def _answers(socket_path):
    from repro.trims.server import StoreConnection

    try:
        StoreConnection(socket_path, timeout=2).request({"op": "status"})
        return True
    except ReproError:
        return False


def _shut_down(socket_path):
    """Ask the store answering on `socket_path` to stop; whether it has ended within STOP_WAIT_S."""
    from repro.trims.server import StoreConnection

    try:
        connection = StoreConnection(socket_path, timeout=2)
        store = processes.describe(connection.status()["pid"], "model store")
        connection.request({"op": "shutdown"})
    except (ReproError, ProcessLookupError, TypeError, ValueError):  # gone meanwhile, or no pid of this namespace
        return False
    deadline = time.monotonic() + STOP_WAIT_S
    while processes.matches(store) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not processes.matches(store)


def running(record, workdir="."):
    """Whether the store in `record` is the process that was started for this workflow directory and
    answers on its socket (a state copied from another clone names that clone's store)."""
    owner = processes.runtime_dir(workdir, create=False)  # none: no store of this directory runs
    return (isinstance(record, dict) and owner.is_dir() and processes.matches(record.get("process"), owner)
            and isinstance(record.get("socket"), str) and _answers(record["socket"]))


def start(settings, state_path, workdir=".", starter=None):
    """Start the store with `settings` (trims_store_settings) unless the same one already runs; write
    state_path. This invocation becomes one of the store's users. A store running with other
    settings is stopped first, unless another invocation still uses it: that is refused. starter:
    the user of a store this call starts outside an invocation (none: it runs until stopped)."""
    with _locked(workdir):
        return _start(settings, state_path, workdir, starter)


def _start(settings, state_path, workdir, starter):
    from repro.trims.device import resolve_device
    from repro.trims.server import budget_bytes, start_daemon

    record_path = _record_path(workdir)
    # a record that is no regular file (a FIFO, a link to /dev/zero) is refused before a store starts:
    # it would be read as no record, and the new one could not be written over it
    check_output(record_path, f"{record_path} (the model store's record)")
    digest = settings_digest(settings)
    # read before anything is stopped or made: settings that lack a key change nothing
    base, server = settings["base_path"], settings["server"]
    budget, policy, device = server["memory_mb"], server["eviction"], server["device"]
    # the state, and the store's log beside it, among the models: named as given, before a store is stopped
    refuse_inside("--state", state_path, "--settings base_path", base, "the models the store reads")
    blocker = not_a_directory(base)  # no directory of models can be made there: refused before a store is stopped
    if blocker is not None:
        raise ReproError(f"--settings base_path {base}: {blocker} is not a directory; expected a directory of models")
    # the store's log, beside the state: appended to, by the store and its watchdog, never through a link
    check_output(Path(state_path).with_name("trims-server.log"), str(Path(state_path).with_name("trims-server.log")))
    record = processes.read_record(record_path)
    me = owner()
    if record and running(record, workdir):
        if record.get("digest") == digest:
            record = _join(record, record_path, me)
            write_json(state_path, {**record, "reused": True})
            return {**record, "reused": True}
        others = [user for user in _live(record.get("users", [])) if not _same_invocation(user, me)]
        if others:
            raise ReproError(f"the model store (pid {record['process']['pid']}) runs with other settings for another "
                             f"Snakemake invocation of this workflow (pid {others[0]['pid']}), which still runs: let "
                             "it end first, or stop the store with `snakemake cluster_stop`")
    _stop(workdir)  # another incarnation, or one started with other settings
    state_path = Path(state_path)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    base = Path(base).resolve()
    base.mkdir(parents=True, exist_ok=True)
    socket_path = record_path.with_name("trims.sock")
    log = state_path.with_name("trims-server.log")
    marks = processes.owner_environment(record_path.parent)
    pid = start_daemon(socket_path, base, budget_bytes(megabytes=budget), policy, record_path.with_name("trims.pid"), log,
                       resolve_device(device), environment=marks)
    store = processes.describe(pid, "model store", marks[processes.OWNER_TOKEN])
    record = {"process": store, "socket": str(socket_path), "base_path": str(base),
              **server, "digest": digest, "settings": settings, "log": str(log), "started_at": time.time(),
              "users": [user] if (user := me or starter) else []}
    processes.write_record(record_path, record)
    if not me and starter:
        print(f"model store pid {pid} started for this command; it stops when the command ends "
              "(`repro trims store start` starts one that runs until `snakemake cluster_stop`)", file=sys.stderr)
    record["watchdog"] = _start_watchdog(workdir, record_path, log)
    processes.write_record(record_path, record)
    write_json(state_path, record)
    return record


def _join(record, record_path, me):
    """The running store's record with this invocation (`me`) among its users. A store no live
    invocation uses (they were killed, so their end never came) is adopted: this invocation stops
    it when it ends, instead of leaving it running unnoticed."""
    users = record.get("users", [])
    if me is None or any(_same_invocation(user, me) for user in users):
        return record
    live = _live(users)
    if not live:
        print(f"model store pid {record['process']['pid']} was left running by an invocation that has ended; "
              f"this invocation (pid {me['pid']}) stops it when it ends", file=sys.stderr)
    record = {**record, "users": [*live, me]}
    processes.write_record(record_path, record)
    return record


def ensure(state_path, check_settings, workdir="."):
    """The store the state file `state_path` describes, running: found (and adopted when orphaned),
    or started again with the settings the state recorded (it stopped when its invocation ended, or
    was stopped by `snakemake cluster_stop`). Returns its record; state_path is rewritten.
    check_settings: repro.config.check_settings (from the command layer, above this one), which
    checks the recorded settings as `trims store start` checks its own."""
    try:
        state = read_json(state_path, "the model store state JSON that trims store start writes")
    except ReproError as exc:
        raise ReproError(f"{exc}; start the store with `snakemake trims_store_start --forcerun trims_store_start`") from None
    settings = state.get("settings") if isinstance(state, dict) else None
    if not isinstance(settings, dict):
        raise ReproError(f"{state_path}: the model store state does not record its settings (written by an older "
                         "version); start the store again with `snakemake trims_store_start --forcerun "
                         "trims_store_start`")
    # checked as `trims store start` checks them, before anything is made, started or stopped
    check_settings(settings, f"{state_path}: settings", places=SETTINGS_PLACES)
    lacking = next((key for key in ("base_path", "server") if key not in settings), None) or next(
        (key for key in SERVER_KEYS if key not in settings["server"]), None)
    if lacking:
        raise ReproError(f"{state_path}: settings: lacks key {lacking!r}; start the store again with "
                         "`snakemake trims_store_start --forcerun trims_store_start`")
    # run by hand, outside an invocation: a store this command has to start is this command's, and
    # stops (its watchdog) when the command ends; one already running is left as it was
    return start(settings, state_path, workdir, starter=processes.describe(os.getpid(), "repro command"))


def status(state, expected_digest, workdir="."):
    """Status checks for a TrIMS run: the store recorded in `state` runs, answers, and has the configured settings."""
    checks = [
        {"name": f"model store server answers on {state.get('socket')}", "ok": running(state, workdir),
         "detail": "not running; start it again with `snakemake trims_store_start --forcerun trims_store_start`"},
        {"name": "model store settings match the configuration", "ok": state.get("digest") == expected_digest,
         "detail": "it was started with other settings; restart it with "
                   "`snakemake trims_store_start --forcerun trims_store_start`"},
    ]
    for check in checks:
        if check["ok"]:
            check["detail"] = ""
    return checks


def stop(workdir=".", states=()):
    """Stop the store this workflow directory started, if it still runs; forget its record.

    states: the store's state files (`trims store start --state`). The runtime directory each names
    is looked in too: a store started under another XDG_RUNTIME_DIR than this command's (another
    shell, sudo, cron) keeps its record there, and would otherwise be left running."""
    stopped = False
    for runtime in _runtime_directories(workdir, states):
        with _locked(workdir, runtime):
            stopped = _stop(workdir, runtime) or stopped
    return stopped


def _runtime_directories(workdir, states):
    """None (the environment's runtime directory of workdir), then those the state files name that
    are workdir's too: its key as their name, private (ours, mode 0700). A record in any other is
    not this directory's store's."""
    own = processes.runtime_dir(workdir, create=False)
    found = [None]
    for state in states:
        try:
            socket_path = read_json(state, "the model store state JSON that trims store start writes").get("socket")
        except (ReproError, AttributeError):
            continue  # none there, or not a state file: nothing named
        directory = Path(socket_path).parent if isinstance(socket_path, str) else None
        if (directory is not None and directory.name == own.name and directory != own and directory not in found
                and processes.is_private(directory)):
            found.append(directory)
    return found


def _stop(workdir, runtime=None):
    record_path = _record_path(workdir, runtime)
    record = processes.read_record(record_path)
    if not record:
        return False
    from repro.trims.modelstore import remove_stale_segments, segment_prefix

    owner = record_path.parent
    watchdog = record.get("watchdog")
    if isinstance(watchdog, dict) and watchdog.get("pid") != os.getpid():
        processes.terminate(watchdog, owner=owner)
    stopped = processes.terminate(record.get("process"), owner=owner)
    socket_path = record_path.with_name("trims.sock")  # the only socket a store of this directory has
    if _answers(socket_path):  # the record names another process (edited): what answers in this private
        stopped = _shut_down(socket_path) or stopped  # directory is this directory's store, stopped through it
    with contextlib.suppress(OSError):  # only a socket: a file put in its place is left alone
        if stat.S_ISSOCK(socket_path.lstat().st_mode):
            socket_path.unlink()
    remove_stale_segments(segment_prefix(socket_path))  # left behind when the store was killed
    pid_file = record_path.with_name("trims.pid")  # the server's, left where it was killed
    with contextlib.suppress(OSError):
        if stat.S_ISREG(pid_file.lstat().st_mode) and not processes.matches(record.get("process")):
            pid_file.unlink()
    record_path.unlink(missing_ok=True)
    return stopped


def leave(invocation, workdir="."):
    """At the end of the invocation `invocation` ('pid:start_ticks'): it no longer uses the store,
    which stops if no other user still runs, so nothing stays running that the user did not start.
    A store this invocation never used is left alone. The state file stays (the next run that needs
    the store starts it again from it). Returns whether the store was stopped."""
    with _locked(workdir):
        record_path = _record_path(workdir)
        record = processes.read_record(record_path)
        if not record:
            return False
        me, users = owner(invocation), record.get("users", [])
        if not any(_same_invocation(user, me) for user in users):
            if processes.matches(record.get("process")) and not _live(users):
                print(f"repro: a model store (pid {record['process']['pid']}) left running by an invocation that "
                      "has ended still runs; the next TrIMS run adopts it, or stop it with `snakemake cluster_stop`",
                      file=sys.stderr)
            return False
        others = [user for user in _live(users) if not _same_invocation(user, me)]
        if others:  # still in use
            processes.write_record(record_path, {**record, "users": others})
            return False
        return _stop(workdir)


def _start_watchdog(workdir, record_path, log):
    """The store's watchdog (`watch`), in a session of its own; its process record."""
    marks = processes.owner_environment(record_path.parent)
    with open_log(log, "the model store's log") as out:
        proc = subprocess.Popen([sys.executable, "-m", "repro.trims.service", "watch", str(Path(workdir).resolve()),
                                 str(record_path)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, env={**os.environ, **marks})
    return processes.describe(proc.pid, "model store watchdog", marks[processes.OWNER_TOKEN])


def watch(workdir, interval_s=WATCH_INTERVAL_S):
    """Stop the store of `workdir` once it has users and none of them runs; return when the store
    it was started with has stopped (or another one runs instead)."""
    record_path = _record_path(workdir)
    first = processes.read_record(record_path)
    store = first.get("process") if first else None
    while True:
        time.sleep(interval_s)
        with _locked(workdir):
            record = processes.read_record(record_path)
            if not record or record.get("process") != store or not processes.matches(store, record_path.parent):
                return
            users = record.get("users") or []
            if users and not _live(users):
                print(f"repro: model store pid {store['pid']}: every invocation that used it has ended; stopping it",
                      file=sys.stderr)
                _stop(workdir)
                return


if __name__ == "__main__":  # python -m repro.trims.service watch WORKDIR RECORD (RECORD names it on its command line)
    watch(sys.argv[2])
