"""Process records: only the process that was recorded is ever signalled."""

import subprocess

from repro import processes


def _sleeper():
    return subprocess.Popen(["sleep", "60"])


def test_a_record_matches_its_process_and_terminate_stops_it(tmp_path):
    proc = _sleeper()
    record = processes.describe(proc.pid, "test")
    processes.write_record(tmp_path / "p.json", record)
    assert processes.read_record(tmp_path / "p.json") == record
    assert processes.matches(record)
    assert processes.terminate(record)
    assert proc.wait(timeout=5) == -15
    assert not processes.matches(record)
    assert not processes.terminate(record)


def test_a_stale_record_never_signals_the_process_now_holding_the_pid():
    proc = _sleeper()
    try:
        record = processes.describe(proc.pid, "test")
        for stale in ({**record, "start_ticks": record["start_ticks"] - 1}, {**record, "boot_id": "another boot"},
                      {"pid": proc.pid}, {"pid": "1"}, {"pid": 0}, [proc.pid], None):
            assert not processes.matches(stale)
            assert not processes.terminate(stale)
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
