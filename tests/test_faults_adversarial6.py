"""Fault injection: the trace store's objects and receipts edited by hand, and what the commands
write and stop beside their main work (scratch directories, service records, helper files) when
those are not what the command left there.

Each ends with nothing outside the command's own files written to or deleted, no process of
another directory signalled, no unbounded copy; a command that refuses says so in one line naming
the file or flag.
"""

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from support import REPO, kill_started, run_forked, run_repro


pytestmark = pytest.mark.fault


def _receipt(path, store, key, size, sha256="0" * 64):
    path.write_text(json.dumps({"store": str(store), "objects": [{"key": key, "sha256": sha256, "bytes": size}]}))
    return path


def test_download_stops_at_the_size_the_receipt_records(tmp_path, monkeypatch, capsys):
    """`repro trace download RECEIPT` where the stored object is far larger than the `bytes` its upload
    recorded (a receipt or store edited by hand, a sparse file of terabytes): the whole object was
    copied beside the output, filling the disk, before its checksum was found wrong."""
    monkeypatch.chdir(tmp_path)
    key = "traces/E/m/E-m.json"
    (tmp_path / "store" / key).parent.mkdir(parents=True)
    with open(tmp_path / "store" / key, "wb") as fh:
        fh.truncate(256 << 20)  # sparse: no disk used
    (tmp_path / "store" / f"{key}.sha256").write_text("0" * 64 + "\n")
    receipt = _receipt(tmp_path / "upload.json", "store", key, 10)
    code, out, err = run_repro(["trace", "download", str(receipt), "-o", "d"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: {receipt}: trace store store: 'traces/E/m/E-m.json': larger than the 10 bytes its "
                   "upload recorded; expected the trace that was uploaded (the store the run uploaded to; run it again "
                   "to upload anew: snakemake --forcerun run)\n")
    assert not (tmp_path / "d").exists()  # nor the directory the download made for it


def test_download_refuses_a_receipt_size_that_is_no_size(tmp_path, monkeypatch, capsys):
    """A receipt whose object `bytes` is negative or not a number was read without a look at it."""
    monkeypatch.chdir(tmp_path)
    receipt = _receipt(tmp_path / "upload.json", "store", "traces/E/m/E-m.json", "10")
    code, out, err = run_repro(["trace", "download", str(receipt), "-o", "d"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: {receipt}: object 'traces/E/m/E-m.json': bytes: expected the object's size (a whole "
                   "number of bytes), got '10'\n")


def test_a_cost_interval_of_few_repeats_starts_at_zero(tmp_path):
    """`repeats: 2` (the schema allows it) with two runs far apart: the cost table's 95% interval of
    worker_cost reached below zero, and the figure and the comparison figures refused the table the
    workflow had just written ("expected non-negative dollars")."""
    from types import SimpleNamespace

    from repro.pecan.comparisons import not_a_cost
    from repro.pecan.costs import cost_row
    from repro.pecan.costtable import SPREAD_OF, with_spread

    model = {"batch_size": 128, "steps_per_epoch": 1000}
    repeats = [{"throughput": 2000.0, "remote_workers": 0, "local_workers": 4},
               {"throughput": 2200.0, "remote_workers": 12, "local_workers": 0}]
    first = SimpleNamespace(**repeats[0])
    row = with_spread(cost_row(first, "cachew", "m", model, 4.5, 0.4), repeats, "cachew", "m", model, 4.5, 0.4)
    lows = {column: row[f"{column}_ci_low"] for column in SPREAD_OF}
    assert not_a_cost(lows) is None
    assert row["worker_cost_ci_low"] == 0.0 < row["worker_cost_mean"] < row["worker_cost_ci_high"]


@pytest.mark.parametrize("linked", ["results", "plots"])
def test_make_clean_refuses_a_linked_results_directory(linked, tmp_path):
    """`make clean` where results/ (or plots/) is a symbolic link to a directory elsewhere: `rm -rf
    results/*` emptied that directory, outside the clone, of whatever else it held."""
    shutil.copy(REPO / "Makefile", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.txt").write_text("mine\n")
    (tmp_path / linked).symlink_to(elsewhere)
    other = {"results": "plots", "plots": "results"}[linked]
    (tmp_path / other).mkdir()
    (tmp_path / other / "x").write_text("x\n")
    proc = subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0
    said = f"make clean: {linked} is a symbolic link (to {elsewhere}); expected this clone's own {linked}/ directory"
    assert said in proc.stderr
    assert (elsewhere / "mine.txt").read_text() == "mine\n"
    assert (tmp_path / other / "x").exists()  # nothing deleted


def _service_start(directory):
    def main(argv):
        from repro.pecan.tfdata.service import Service

        Service.start(directory)
        return 0

    return main


def _service_use(directory):
    def main(argv):
        from repro.pecan.tfdata.service import exclusive

        with exclusive(directory):
            return 0

    return main


def _store_stop(workdir):
    def main(argv):
        from repro.trims import service

        service.stop(workdir)
        return 0

    return main


def _lock_path(kind, tmp_path):
    from repro.processes import runtime_dir

    if kind == "model store":
        return runtime_dir(tmp_path / "work") / "store.lock", _store_stop(tmp_path / "work")
    directory = tmp_path / "service"
    directory.mkdir()
    if kind == "service start":
        return directory / "start.lock", _service_start(directory)
    return directory / "use.lock", _service_use(directory)


@pytest.mark.parametrize("kind", ["service start", "service use", "model store"])
@pytest.mark.parametrize("node", ["fifo", "directory"])
def test_a_lock_that_is_no_regular_file_is_named(kind, node, tmp_path):
    """The locks beside the tf.data service's state (start.lock, use.lock: `repro pecan tfdata start`,
    a run on a shared service, the workflow's status check) and the model store's (store.lock in its
    runtime directory), where a FIFO stood in their place: the command waited forever for a reader of
    the FIFO; a directory there ended in an IsADirectoryError traceback."""
    from repro.errors import ReproError

    (tmp_path / "work").mkdir()
    lock, main = _lock_path(kind, tmp_path)

    def guarded(argv):
        try:
            return main(argv)
        except ReproError as exc:
            print(f"repro: error: {exc}", file=__import__("sys").stderr)
            return 1

    os.mkfifo(lock) if node == "fifo" else lock.mkdir()
    try:
        code, out, err = run_forked([], tmp_path, 30, main=guarded)
    finally:
        os.rmdir(lock) if node == "directory" else os.unlink(lock)
    what = "a FIFO" if node == "fifo" else "a directory"
    assert (code, out) == (1, "")
    assert err.startswith("repro: error: ") and f"is {what}; expected a regular file (a lock file)" in err, err
    assert len(err.splitlines()) == 1


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
@pytest.mark.service
def test_tfdata_start_stopped_while_its_workers_start_leaves_nothing_running(tmp_path):
    """SIGTERM to `repro pecan tfdata start --workers 2` once its dispatcher was recorded, while a worker
    started: the command ended (the worker with it), and the dispatcher it had started ran on."""
    import psutil
    from support import BIN

    state = tmp_path / "sd"
    children = []
    proc = subprocess.Popen([str(BIN / "repro"), "pecan", "tfdata", "start", "--state-dir", str(state), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # its log is opened before the worker starts
            children = psutil.Process(proc.pid).children(recursive=True)
            if (state / "worker-0.log").exists() and len(children) == 2:
                break
            time.sleep(0.05)
        assert (state / "state.json").exists() and len(children) == 2, "the dispatcher and a worker did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, f"left running: {[child.cmdline() for child in alive]}"
        assert not (state / "state.json").exists()
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:  # a worker started since the loop looked is ours too
            with contextlib.suppress(psutil.NoSuchProcess):
                children = psutil.Process(proc.pid).children(recursive=True)
        kill_started(proc, children)
