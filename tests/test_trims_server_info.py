"""The model store's own record: its settings and counters as JSON at start and stop (the original's
~/.micro18_server.json), its trace under --profile, and the store's settings in shared runs' traces."""

import json
import os

import psutil
import pytest

from repro.cli import main
from repro.processes import describe
from repro.traces import TraceReader
from repro.trims.modelstore import segment_prefix
from repro.trims.originals import translate
from support import stop_server


@pytest.mark.service
def test_server_info_and_trace(models, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sock, info, prof = tmp_path / "s.sock", tmp_path / "info.json", tmp_path / "prof"
    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  profile_output_directory: {tmp_path / 'profiles'}\n")
    assert main(["trims", "server", "run", "-d", "--socket", str(sock), "--base-path", str(models), "--memory-mb", "64",
                 "--eviction", "fifo", "--device", "cpu", "--info-file", str(info), "--profile", str(prof),
                 "--config", str(config)]) == 0
    started = json.loads(info.read_text())
    pid = started["pid"]
    record = describe(pid, "test server")
    try:
        assert started["eviction_policy"] == "fifo" and started["budget_bytes"] == 64 << 20
        assert started["persist_cpu_bytes"] == 0 and started["device"] == "cpu" and "server_stop_time" not in started
        assert main(["trims", "client", "run", "--socket", str(sock), "--base-path", str(models), "--model",
                     "squeezenet_1.1", "--iterations", "2", "--device", "cpu", "--config", str(config),
                     "--profile-output", "run"]) == 0
        traces = sorted((tmp_path / "profiles").rglob("shared-*.json"))
        other = TraceReader(traces[0]).other_data
        assert (other["store_eviction"], other["store_budget_bytes"], other["store_device"]) == ("fifo", 64 << 20, "cpu")
        assert main(["trims", "server", "stop", "--socket", str(sock)]) == 0
        psutil.Process(pid).wait(30)
    finally:
        stop_server(pid, record)
    stopped = json.loads(info.read_text())
    assert stopped["server_id"] == started["server_id"] and "server_stop_time" in stopped
    assert stopped["counters"]["tiers"]["file"]["loads"] == 1 and stopped["counters"]["tiers"]["cpu"]["hits"] == 1
    trace = prof / f"server_{started['server_id']}.json"
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "acquire"]
    assert [e["args"]["source"] for e in events] == ["file", "resident"]
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(segment_prefix(sock))]
    capsys.readouterr()


def test_trims_tools_server_profile_writes_the_servers_trace(tmp_path, monkeypatch):
    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  profile_output_directory: {tmp_path / 'p'}\n  device: cpu\n")
    commands, _, _ = translate(["server", "run", "--profile", f"--config={config}", "--profile_output=x"])
    argv = commands[0]
    assert argv[argv.index("--profile") + 1].startswith(str(tmp_path / "p"))
    assert argv[argv.index("--profile") + 1].endswith("/x")
