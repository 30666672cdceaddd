"""Helpers the end-to-end tests share: ports, workflow copies, stopping clusters, optional services,
model store servers."""

import contextlib
import functools
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKFLOW_FILES = ("Snakefile", "rules", "config", "envs", "profiles", "report")
TINY = REPO / "tests" / "configs" / "tiny.yaml"
STOP_GRACE_S = 60  # what a stopped workflow's jobs get to clean up before they are killed
RESNET = {"pipeline": "resnet", "batch_size": 1024, "steps_per_epoch": 1251}  # the artifact's ResNet-50 model entry


def configfiles(workdir, *overrides):
    """`--configfile` arguments as a user passes them: the tiny test config, then each mapping in
    `overrides` written to its own file in `workdir` (later files win, as in Snakemake)."""
    paths = [str(TINY)]
    for override in overrides:
        path = workdir / f"override-{len(list(workdir.glob('override-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(override))
        paths.append(str(path))
    return ["--configfile", *paths]


def sleeper(**popen):
    """A process of ours that does nothing for a minute: a stand-in for a server or a foreign process."""
    return subprocess.Popen(["sleep", "60"], **popen)


def kill_started(proc, children):
    """Kill a command a test started (`proc`, a Popen) and the `children` (psutil processes) it had
    started; psutil checks each child is still the process it found (its pid and start time)."""
    import psutil

    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
    proc.kill()
    proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_workflow(target):
    """A copy of the workflow (not of results) in `target`."""
    target.mkdir(exist_ok=True)
    for item in WORKFLOW_FILES:
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / item)
    return target


def ctrl_c_heard():
    """In the child before it starts: SIGINT does what it does at a terminal, also where the tests
    themselves run with it ignored (started in the background by a shell, `cmd &`, which passes
    that on to every program it starts)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_stopped_as_by_ctrl_c(command, timeout, **popen):
    """subprocess.run(command, capture_output=True, text=True, timeout=timeout), in a process group
    of its own that a timeout or an interrupted test stops as Ctrl-C at a terminal would: SIGINT to
    the whole group, so Snakemake and its jobs clean up, and SIGKILL only if it still runs after
    STOP_GRACE_S. subprocess.run would SIGKILL the program alone and leave its jobs running."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=ctrl_c_heard, **popen)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)  # the group it leads, ours: the leader is not reaped yet
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=STOP_GRACE_S)
        finally:  # also after a second Ctrl-C during the grace
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def snakemake(workdir, *args, cores=2, check=True, timeout=600, env=None):
    """This environment's snakemake in `workdir`: its entry point (snakemake.cli.main, what the
    `snakemake` command runs) in a child forked from this process, which has loaded Snakemake and its
    plugins once (run_forked), so that a start costs no second of imports. An `env` that the
    interpreter reads as it starts (PYTHONPATH, say) runs the `snakemake` command instead. Stopped as
    Ctrl-C would stop it after `timeout`. Fails with its output tail unless check=False."""
    argv = ["--cores", str(cores), *args]
    if any(name.startswith("PYTHON") for name in env or {}):
        proc = run_stopped_as_by_ctrl_c([str(BIN / "snakemake"), *argv], timeout, cwd=workdir, env=path_env(**env))
    else:
        code, out, err = run_forked(argv, workdir, timeout, main=_snakemake_entry(), env=path_env(**(env or {})),
                                    graceful=True)
        proc = subprocess.CompletedProcess([str(BIN / "snakemake"), *argv], code, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@functools.cache
def _snakemake_entry():
    """snakemake.cli.main, with Snakemake's modules and plugin registries loaded in this process (the
    forked children share them), as `main(argv)` for run_forked: sys.argv as the command's, and the
    log files flushed before the child ends (os._exit runs no atexit handler)."""
    import logging

    import snakemake.cli

    snakemake.cli.get_argument_parser()  # collects every installed plugin, once

    def entry(argv):
        sys.argv = [str(BIN / "snakemake"), *argv]  # what Snakemake records as the command
        try:
            return snakemake.cli.main(argv)
        finally:
            logging.shutdown()

    return entry


def planned_jobs(workdir, *args, env=None):
    """The jobs a dry-run would execute, as 'rule' or 'rule[wildcard values]' strings."""
    return jobs_in_plan(snakemake(workdir, "--dry-run", *args, env=env).stdout)


def jobs_in_plan(out):
    """The jobs in a dry-run's output, as planned_jobs gives them."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        match = re.match(r"(?:local)?rule (\w+):", block)
        if not match:
            continue
        wildcards = re.search(r"wildcards: (.*)", block)
        values = "" if not wildcards else "[" + ",".join(v.split("=", 1)[1] for v in wildcards.group(1).split(", ")) + "]"
        jobs.append(match.group(1) + values)
    return sorted(jobs)


def path_env(**extra):
    """The environment with this interpreter's bin/ first on PATH (the rules call `repro`)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **extra}


def stop_clusters(*workdirs):
    """Stop every cluster a workflow copy started (remote commands, a model store left by a killed run)."""
    for workdir in workdirs:
        states = list((Path(workdir) / "results" / "cluster").glob("*/state.json")) or [Path("none.json")]
        for state in states:
            subprocess.run([str(BIN / "repro"), "cluster", "stop", "--state", str(state)], capture_output=True,
                           timeout=60, cwd=workdir)


def skip_unless_installed(paths, required_by, hint):
    """Skip the calling module when a system service is missing, unless `required_by` is set to 1 (CI)."""
    missing = [p for p in paths if not Path(p).exists()]
    why = f"missing {missing}" if missing else ("not root" if os.geteuid() != 0 else None)
    if why is None:
        return
    if os.environ.get(required_by) == "1":
        raise RuntimeError(f"{required_by}=1 but {why} ({hint})")
    pytest.skip(f"{why} ({hint})", allow_module_level=True)


def start_server(models, directory):
    """A model store server on directory/store.sock (pid file store.pid, log server.log); returns its pid."""
    from repro.trims.server import start_daemon

    return start_daemon(directory / "store.sock", models, 1 << 30, "lru", directory / "store.pid",
                        directory / "server.log")


def server_record(directory):
    """The process record of the server start_server started in `directory`, as it wrote it (with the
    token that proves it that directory's)."""
    from repro.processes import read_record

    return read_record(directory / "store.pid")


def stop_server(pid, record=None, directory=None):
    """SIGTERM (then SIGKILL) our server child, started by start_server in `directory`, unless it is
    gone already; reap it."""
    from repro.processes import terminate

    if record is not None:
        terminate(record, owner=directory)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def experiment_modes(experiment="ResNet50_v2-8"):
    """The modes config/config.yaml lists for `experiment`: the runs its figure's chain makes."""
    import yaml

    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())["pecan"]["experiments"][experiment]["modes"]


SNAPSHOT_READ_LIMIT = 64 << 20


def snapshot(root):
    """Every entry under `root`: a regular file's digest, a directory, or another kind (never opened:
    a FIFO would block). Two snapshots differ where something was written, changed or deleted."""
    import hashlib
    import stat

    entries = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        mode = info.st_mode
        if stat.S_ISREG(mode) and info.st_size > SNAPSHOT_READ_LIMIT:
            # a huge (sparse) input: a write changes its size or modification time, and reading it costs a minute
            entries[str(path.relative_to(root))] = (info.st_ino, info.st_size, info.st_mtime_ns)
        elif stat.S_ISREG(mode):
            entries[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[str(path.relative_to(root))] = stat.S_IFMT(mode)
    return entries


def run_repro(argv, capsys, main=None):
    """`repro ARGV` in this process (or the entry point `main`, trims-tools' for one): (exit code, stdout,
    stderr). An escaping exception fails the test."""
    if main is None:
        from repro.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse, `trace validate`
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


class _Hidden:
    """A meta path finder under which `names` and their submodules cannot be found."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if any(name == hidden or name.startswith(hidden + ".") for hidden in self.names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def hide_modules(monkeypatch, *names):
    """From here to the test's end, `names` (and their submodules) cannot be imported in this process,
    as where the extra that installs them is missing: importlib.util.find_spec and import raise
    ModuleNotFoundError. Those imported already are set aside; monkeypatch puts everything back."""
    monkeypatch.setattr(sys, "meta_path", [_Hidden(names), *sys.meta_path])
    for name in list(sys.modules):
        if any(name == hidden or name.startswith(hidden + ".") for hidden in names):
            monkeypatch.delitem(sys.modules, name)


def store_processes(workdir):
    """Model store servers this workflow directory started: none may outlive the invocation."""
    import psutil

    from repro.processes import runtime_dir

    private = str(runtime_dir(workdir, create=False))
    return [p for p in psutil.process_iter(["cmdline"]) if any(private in arg for arg in p.info["cmdline"] or ())]


def _address_space():
    """This process's virtual memory size in bytes (what RLIMIT_AS limits)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _forked_child(argv, out, err, main, growth, file_size, env, interrupt=signal.SIG_DFL):
    """In a child forked by run_forked: `main(argv)` with stdout and stderr on the pipes `out` and
    `err`, in a process group of its own, its address space limited to `growth` bytes past what it
    inherited and its files to `file_size` bytes (where given), SIGINT handled by `interrupt` (the
    default action, as at a terminal before the program sets its own; signal.default_int_handler:
    KeyboardInterrupt, as a Python program has it from its start). Ends with main's exit code, or 1
    and the traceback where an exception escapes, as the program does."""
    code = 1
    try:
        os.setsid()
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        os.environ.update(env or {})
        if growth is not None:
            limit = _address_space() + growth
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        signal.signal(signal.SIGINT, interrupt)
        if main is None:
            from repro.cli import main
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's usage errors, `trace validate`
            code = exc.code
        if not isinstance(code, int):  # sys.exit(None) or sys.exit("message"), as the interpreter ends
            if code is not None:
                print(code, file=sys.stderr)
            code = 0 if code is None else 1
    except BaseException:  # noqa: BLE001 - reported as an uncaught exception ends a program
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _stop_forked(pid, graceful):
    """Stop run_forked's child and its process group (its own; the child is not reaped yet: ours),
    SIGINT first where `graceful`, then reap it."""
    if graceful:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return  # it ended, and is reaped
            time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def run_forked(argv, cwd, timeout, main=None, growth=None, file_size=None, env=None, graceful=False):
    """`repro ARGV` (or the entry point `main`) in a child forked from this process, which has
    imported the package already: no interpreter start, as the program would pay. The child runs in
    `cwd` with `env` added to the environment, bounded as _forked_child says. Returns (exit code,
    stdout, stderr); after `timeout` seconds (or where this process is interrupted) its process group
    is killed and subprocess.TimeoutExpired raised; `graceful`: sent SIGINT first, as Ctrl-C at a
    terminal, and killed only if it still runs after STOP_GRACE_S (a workflow stops its jobs)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        os.chdir(cwd)
        _forked_child(argv, out_w, err_w, main, growth, file_size, env,
                      signal.default_int_handler if graceful else signal.SIG_DFL)
    os.close(out_w)
    os.close(err_w)
    chunks = {out_r: [], err_r: []}
    open_fds = set(chunks)
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            for fd in chunks:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                ready = selector.select(timeout=left) if left > 0 else []
                if not ready:
                    raise subprocess.TimeoutExpired(["repro", *map(str, argv)], timeout)
                for key, _ in ready:
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
                        open_fds.discard(key.fd)
    except BaseException:
        _stop_forked(pid, graceful)
        for fd in open_fds:  # only those still open: a closed one's number may be another file's by now
            os.close(fd)
        raise
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)  # -N where signal N ended it
    return code, *(b"".join(chunks[fd]).decode(errors="replace") for fd in (out_r, err_r))


# The tf.data engine's settings for the tests' runs (pecan.tfdata keys): few images, short windows of
# small batches, a short transfer probe. The tests check the chain and the processes, not the numbers.
ENGINE_TEST_SETTINGS = {"decision_steps": 8, "images": 16, "batch_size": 4, "probe_seconds": 0.2}


def engine_spec(pecan_config, mode, **overrides):
    """A short tf.data engine run of ResNet50_v2-8 in `mode` (repro.pecan.tfdata.spec.EngineSpec)."""
    from repro.pecan.tfdata.spec import spec_from_config

    settings = {**ENGINE_TEST_SETTINGS, "settle_windows": 3, "max_windows": 40, **overrides}
    return spec_from_config(pecan_config, "ResNet50_v2-8", mode, **settings)
