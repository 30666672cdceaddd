"""Process records: only the process that was recorded is ever signalled. And the tests' own way
of stopping a program they time out."""

import subprocess
import sys

import pytest

from repro import processes

from support import run_forked, run_stopped_as_by_ctrl_c, sleeper


def test_a_record_matches_its_process_and_terminate_stops_it(tmp_path):
    marks = processes.owner_environment(tmp_path)
    proc = sleeper(env=marks)
    _wait_exec(proc, b"60")
    record = processes.describe(proc.pid, "test", marks[processes.OWNER_TOKEN])
    processes.write_record(tmp_path / "p.json", record)
    assert processes.read_record(tmp_path / "p.json") == record
    assert processes.matches(record)
    assert processes.terminate(record, owner=tmp_path)
    assert proc.wait(timeout=5) == -15
    assert not processes.matches(record)
    assert not processes.terminate(record, owner=tmp_path)


def test_a_stale_record_never_signals_the_process_now_holding_the_pid():
    proc = sleeper()
    try:
        record = processes.describe(proc.pid, "test")
        for stale in ({**record, "start_ticks": record["start_ticks"] - 1}, {**record, "boot_id": "another boot"},
                      {"pid": proc.pid}, {"pid": "1"}, {"pid": 0}, [proc.pid], None):
            assert not processes.matches(stale)
            assert not processes.terminate(stale, owner="/")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_unreadable_records_read_as_none(tmp_path):
    (tmp_path / "old.pid").write_text("1234\n")
    (tmp_path / "list.json").write_text("[1]")
    assert processes.read_record(tmp_path / "old.pid") is None
    assert processes.read_record(tmp_path / "list.json") is None
    assert processes.read_record(tmp_path / "missing") is None


@pytest.mark.parametrize("runner", ["subprocess", "forked"])
def test_a_program_the_tests_time_out_gets_ctrl_c_with_everything_it_started(tmp_path, runner):
    """The tests' own runners (support.run_stopped_as_by_ctrl_c, and support.run_forked as
    support.snakemake uses it): a timeout sends SIGINT to the program and to what it started, as a
    terminal's Ctrl-C does, so they clean up."""
    child = ("import time\ntry:\n    open('child-ready', 'w').close()\n    time.sleep(60)\n"
             "except KeyboardInterrupt:\n    open('child', 'w').close()\n")
    program = ("import os, subprocess, sys, time\n"
               f"child = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
               "try:\n"
               "    while not os.path.exists('child-ready'):\n"
               "        time.sleep(0.01)\n"
               "    open('started', 'w').close()\n"
               "    child.wait()\n"
               "except KeyboardInterrupt:\n"
               "    child.wait()\n"
               "    open('parent', 'w').close()\n")
    # the timeout must come after both have started: the first of these that is long enough on this
    # machine's load (the test waits out the whole timeout, so a fixed 20 s cost 20 s every time)
    for timeout in (2, 5, 20):
        run = tmp_path / f"timeout-{timeout}"
        run.mkdir()
        with pytest.raises(subprocess.TimeoutExpired):
            if runner == "subprocess":
                run_stopped_as_by_ctrl_c([sys.executable, "-c", program], timeout, cwd=run)
            else:  # as support.snakemake runs Snakemake's entry point
                run_forked([], run, timeout, main=lambda argv: exec(program, {}), graceful=True)
        if (run / "started").exists():
            break
    assert (run / "started").exists(), "the program and its child did not start within 20 s"
    assert (run / "parent").exists() and (run / "child").exists()


def test_a_process_belongs_to_the_directory_it_was_started_for(tmp_path):
    """Started with a directory's owner environment, and recorded with that environment's token: it
    belongs to that directory, also once the directory has been moved, and to no other (a copy, a
    sibling, a directory that does not exist). Running in the directory, or naming a path in it on its
    command line, proves nothing: any program of the user's may (`tail -f` of a log there)."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    marks = processes.owner_environment(mine)
    by_environment = subprocess.Popen(["sleep", "60"], env={**marks}, cwd=tmp_path)
    by_argument = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--status",
                                    "mine/x.status.json"], cwd=tmp_path)
    by_directory = subprocess.Popen(["sleep", "60"], cwd=mine)
    neither = subprocess.Popen(["sleep", "60"], cwd=other)
    token = marks[processes.OWNER_TOKEN]
    try:
        _wait_exec(by_environment, b"60")
        record = processes.describe(by_environment.pid, "test", token)
        assert processes.belongs(by_environment.pid, mine, token) and processes.matches(record, mine)
        assert not processes.belongs(by_environment.pid, other, token) and not processes.matches(record, other)
        assert not processes.belongs(by_environment.pid, tmp_path / "nowhere", token)
        # a record with another token names a process it did not start; one without a token proves
        # nothing (a record forged to name a process that carries the directory's marks was signalled)
        assert not processes.matches({**record, "token": "forged"}, mine)
        assert not processes.matches({key: value for key, value in record.items() if key != "token"}, mine)
        assert not processes.terminate({key: value for key, value in record.items() if key != "token"}, owner=mine)
        assert by_environment.poll() is None
        for proc in (by_argument, by_directory, neither):
            _wait_exec(proc, b"60")
            assert not processes.belongs(proc.pid, mine)
            assert not processes.terminate(processes.describe(proc.pid, "test"), owner=mine)
            assert proc.poll() is None
        moved = tmp_path / "moved"
        mine.rename(moved)
        assert processes.belongs(by_environment.pid, moved, token)  # its device and inode: the same directory
    finally:
        for proc in (by_environment, by_argument, by_directory, neither):
            proc.kill()
            proc.wait()


def _wait_exec(proc, word):
    """Until the child runs its program (before, its command line is a copy of this process's)."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and word not in open(f"/proc/{proc.pid}/cmdline", "rb").read():
        time.sleep(0.01)
