"""Fault injection, an adversarial pass over bounds and signals: a detailed trace summary streams its
events rather than holding them, in either summary format; a stop signal to the process group of a
process-per-request client run reaches the client alone.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from repro.cli import main
from repro.errors import ReproError
from support import BIN, ctrl_c_heard, run_forked

pytestmark = pytest.mark.fault


def _many_events(path, count):
    """A trace of `count` complete events, written as a client writes them."""
    with open(path, "w") as fh:
        fh.write('{"traceEvents":[')
        fh.write(",".join(f'{{"name":"n{i % 50}","cat":"c","ph":"X","ts":{i},"dur":1,"pid":1,"tid":1}}'
                          for i in range(count)))
        fh.write("]}")
    return path


@pytest.mark.large
@pytest.mark.parametrize("form", ["own", "original"])
def test_a_detailed_summary_of_a_large_trace_fits_a_memory_bound(tmp_path, form):
    """`trace summarize --detailed` held every event as a Python dict, about 28 times the trace's size:
    a 90 MB trace took 2.5 GB. A trace of 30 MB now fits in 350 MiB above the program's start."""
    _many_events(tmp_path / "big.json", 500_000)
    words = ["--format", "original"] if form == "original" else []
    code, out, err = run_forked(["trace", "summarize", "--detailed", *words, "big.json", "-o", "s.json"], tmp_path,
                                timeout=120, growth=350 << 20)
    assert (code, err) == (0, ""), err
    doc = json.loads((tmp_path / "s.json").read_text())
    if form == "own":
        events = doc["traces"][0]["detailed_events"]
        assert len(events) == 500_000 and events[-1] == {"name": "n49", "cat": "c", "start": 499_999, "duration": 1,
                                                          "pid": 1, "tid": 1}
    else:
        assert doc[0]["init_time"] == "1970-01-01T00:00:00.000000Z"


def _request_processes(pid):
    """The processes multiprocessing has spawned for `pid`'s requests (not its resource tracker)."""
    with contextlib.suppress(psutil.Error):
        return [child for child in psutil.Process(pid).children() if "spawn_main" in " ".join(child.cmdline())]
    return []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stop_signal_to_the_group_of_a_process_per_request_run_prints_no_traceback(server, models, tmp_path, signum):
    """Ctrl-C or a hang-up sent to the process group, as a terminal sends it, reached each request
    process in its imports (a KeyboardInterrupt traceback apiece) and killed multiprocessing's resource
    tracker (its KeyError tracebacks). The run stops with its one line; nothing of it is left running."""
    socket_path, _ = server
    proc = subprocess.Popen([str(BIN / "repro"), "trims", "client", "run", "--model", "squeezenet_1.1",
                             "--iterations", "50", "--concurrent", "2", "--process-per-request", "--socket",
                             str(socket_path), "--base-path", str(models)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=ctrl_c_heard)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _request_processes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # past the interpreter's start, into the imports (numpy, onnxruntime: a second or more)
        group = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert group
    assert "Traceback" not in err and "Some resources might leak" not in err, err
    assert proc.returncode == 128 + signum and err.strip().splitlines()[-1].startswith("repro: "), err
    assert not psutil.wait_procs(group, timeout=10)[1]  # the resource tracker ends once it reads the end of its pipe


def test_two_stop_signals_at_once_are_one_stop_without_a_race_report(tmp_path):
    """Ctrl-C and SIGTERM that arrive together: the first one's handler set the other's to SIG_IGN
    while it waited for its handler, and the interpreter printed "Signal 15 ignored due to race
    condition" beside the command's line."""
    script = """
import os, signal, sys
from repro.commands import Terminated, _terminated_as_interrupted
with _terminated_as_interrupted():
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # both come now
        sum(range(1000))
    except Terminated as stop:
        print("stopped by", signal.Signals(stop.signum).name)
    sum(range(1000))  # the interpreter looks at the signals still waiting
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          preexec_fn=ctrl_c_heard)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "stopped by SIGINT\n", "")


def test_cluster_stop_stops_the_store_whose_record_was_edited_to_name_another_process(tmp_path, monkeypatch, capsys):
    """A store record edited to name another process (its pid and start ticks): that process was rightly
    left alone, but the store itself was left running with its socket and record removed, where nothing
    could reach or stop it, and `cluster stop` said "model store stopped"."""
    from repro.processes import describe, matches
    from repro.trims import service

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    settings = {"base_path": "models", "server": {"eviction": "lru", "memory_mb": 50, "device": "cpu"}}
    assert main(["trims", "store", "start", "--settings", json.dumps(settings), "--state", "st.json"]) == 0
    store = json.loads((tmp_path / "st.json").read_text())["process"]
    other = subprocess.Popen(["sleep", "300"])
    try:
        record_path = service._record_path(tmp_path)
        record = json.loads(record_path.read_text())
        forged = {key: value for key, value in describe(other.pid, "sleep").items() if key in ("pid", "start_ticks")}
        for key in ("process", "watchdog"):
            record[key] = {**record[key], **forged}
        record_path.write_text(json.dumps(record))
        capsys.readouterr()
        assert main(["cluster", "stop", "--state", "no-state.json"]) == 0
        assert "model store stopped" in capsys.readouterr().out
        assert not matches(store) and other.poll() is None
    finally:
        other.kill()
        other.wait()
        service.stop(tmp_path)


@pytest.mark.parametrize("words", [["pecan", "costs", "--path", "log.txt", "-o", "-"],
                                   ["trace", "summarize", "t.json", "-o", "-"],
                                   ["trace", "combine", "t.json", "-o", "-"]], ids=["costs", "summarize", "combine"])
def test_an_output_named_dash_is_refused_not_written_as_a_file(tmp_path, monkeypatch, capsys, words):
    """`repro pecan costs -o -` wrote a file literally named '-' where '-' says standard output."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    assert main(words) == 1
    assert capsys.readouterr().err.startswith("repro: error: -o/--output -: expected a file name; '-' is not ")
    assert not (tmp_path / "-").exists()


def _serving(path, models):
    """A model store serving on `path` in a thread of this process (its bounds patched as a test sets
    them); stopped by a shutdown request."""
    from repro.trims import server as store_server

    ready = threading.Event()
    thread = threading.Thread(target=store_server.serve, args=(path, models, 50 << 20, "lru"),
                              kwargs={"ready": ready.set}, daemon=True)
    thread.start()
    assert ready.wait(30)
    return thread


def test_the_model_store_serves_a_bounded_number_of_connections(models, tmp_path, monkeypatch):
    """2000 idle connections of one process filled the store's accept queue with a thread each, and
    `trims server stop` then failed with 'Connection reset by peer'. One past the bound is told so and
    closed; the store goes on serving the others, and a new one once one has closed."""
    from repro.trims import server as store_server

    monkeypatch.setattr(store_server, "MAX_CONNECTIONS", 3)
    path = tmp_path / "s.sock"
    thread = _serving(path, models)
    idle = [store_server.StoreConnection(path, timeout=10) for _ in range(3)]
    try:
        with pytest.raises(ReproError, match="serves at most 3 connections at once"):
            store_server.StoreConnection(path, timeout=10).request({"op": "status"})
        assert idle[0].request({"op": "status"})["ok"]
        idle.pop().close()
        assert _served(path, {"op": "status"})["ok"]
    finally:
        for connection in idle:
            connection.close()
        _served(path, {"op": "shutdown"})
        thread.join(30)
    assert not thread.is_alive()


def _served(path, request):
    """The answer to `request` on a connection of its own, once the store has a connection free (a
    closed one's thread ends once it reads the end of its connection)."""
    from repro.trims.server import StoreConnection

    deadline = time.monotonic() + 10
    while True:
        connection = StoreConnection(path, timeout=10)
        try:
            return connection.request(request)
        except ReproError as exc:
            if "connections at once" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            connection.close()


@pytest.mark.service
@pytest.mark.parametrize("name", ["dispatcher.log", "dispatcher.status.json"])
def test_a_service_start_keeps_a_users_file_named_as_its_log_or_status(tf, tmp_path, monkeypatch, capsys, name):
    """`repro pecan tfdata start --state-dir DIR`: the user's DIR/dispatcher.log, worker-0.log and their
    status files were emptied and rewritten. An earlier start's are told by their content and replaced."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / name).write_text("USER notes\n")
    try:
        assert main(["pecan", "tfdata", "start", "--state-dir", "state"]) == 1
    finally:
        if (tmp_path / "state" / "state.json").exists():  # started before: stop it
            main(["pecan", "tfdata", "stop", "--state-dir", "state"])
    err = capsys.readouterr().err
    assert err.startswith(f"repro: error: state directory state: state/{name} is not a tf.data "), err
    assert (tmp_path / "state" / name).read_text() == "USER notes\n"
    (tmp_path / "state" / name).unlink()
    try:  # a start, stopped, and started again: its own files are replaced
        for _ in range(2):
            assert main(["pecan", "tfdata", "start", "--state-dir", "state"]) == 0
            assert main(["pecan", "tfdata", "stop", "--state-dir", "state"]) == 0
    finally:
        main(["pecan", "tfdata", "stop", "--state-dir", "state"])
    assert (tmp_path / "state" / "dispatcher.log").read_text().startswith("repro tf.data dispatcher log\n")


def _answering(path, answer):
    """A Unix socket at `path` that answers every line with `answer` (a store that answers wrongly):
    a JSON-able value, or bytes sent as they are."""
    import socket as sockets

    listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def serve():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection, connection.makefile("rb") as lines:
                for _ in lines:
                    connection.sendall((answer if isinstance(answer, bytes) else json.dumps(answer).encode()) + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.mark.parametrize("words", [["memory", "--no-measure", "squeezenet_1.1"],
                                   ["client", "run", "--monitor-memory", "--model", "squeezenet_1.1", "--iterations", "1"]],
                         ids=["memory", "client-monitor-memory"])
def test_a_store_status_of_wrong_types_is_a_malformed_answer(models, tmp_path, monkeypatch, capsys, words):
    """`repro trims memory --socket S` where S answers status with `"models": 5` (an AttributeError
    traceback), and a client run that monitors the store's memory where it answers without a pid (KeyError)."""
    monkeypatch.chdir(tmp_path)
    listener = _answering(tmp_path / "s.sock", {"ok": True, "pid": "x", "models": 5, "device": "cpu"})
    try:
        code = main(["trims", *words, "--socket", str(tmp_path / "s.sock"), "--base-path", str(models)])
    finally:
        listener.close()
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"repro: error: model store server on {tmp_path / 's.sock'} sent a malformed "
                                        "answer to status ("), err


def test_one_connection_holds_a_bounded_number_of_references(models, tmp_path, monkeypatch):
    """Each `acquire` on one connection added a reference the connection held, without bound: 300,000
    of them grew the store by 26 MiB. One past the bound is refused; a release makes room again."""
    from repro.trims import server as store_server

    monkeypatch.setattr(store_server, "MAX_HELD", 3)
    path = tmp_path / "s.sock"
    thread = _serving(path, models)
    connection = store_server.StoreConnection(path, timeout=10)
    try:
        acquire = {"op": "acquire", "model": "squeezenet_1.1"}
        for _ in range(3):
            assert connection.request(acquire)["ok"]
        with pytest.raises(ReproError, match=r"this connection holds 3 references already \(at most 3\); release one"):
            connection.request(acquire)
        assert connection.request({"op": "release", "model": "squeezenet_1.1"})["ok"]
        assert connection.request(acquire)["ok"]
        assert connection.request({"op": "status"})["models"]["squeezenet_1.1"]["refs"] == 3
    finally:
        connection.request({"op": "shutdown"})
        connection.close()
        thread.join(30)


@pytest.mark.parametrize("name", ["worker-0.log", "worker-0.status.json"])
def test_a_remote_worker_start_keeps_a_users_file_named_as_its_log_or_status(tmp_path, capsys, name):
    """On a worker host, the remote worker's start emptied a file of the user's named as its log in
    the worker directory, and deleted one named as its status file, without a look at either."""
    from repro.pecan.tfdata import remote

    (tmp_path / name).write_text("USER notes\n")
    code = remote.main(["start", "--dir", str(tmp_path), "--dispatcher", "localhost:1", "--host", "127.0.0.1",
                        "--threads", "1", "--slot", "0", "--number", "0"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.startswith(f"error: state directory {tmp_path}: {tmp_path / name} is not a tf.data "), err
    assert (tmp_path / name).read_text() == "USER notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_detailed_summary_of_many_traces_holds_one_temporary_file(tmp_path):
    """`trace summarize --detailed` kept a temporary file open per trace: past the open-file limit
    (1024 by default, 40 here) it failed with 'Too many open files'."""
    for n in range(60):
        (tmp_path / f"t{n:02d}.json").write_text('{"traceEvents": [{"name": "a", "ph": "X", "ts": %d, "dur": 1, '
                                                 '"pid": 1, "tid": 1}]}' % n)
    import resource

    proc = subprocess.run([str(BIN / "repro"), "trace", "summarize", "--detailed",
                           *sorted(p.name for p in tmp_path.iterdir()), "-o", "s.json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40)))
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [entry["detailed_events"][0]["start"] for entry in doc["traces"]] == list(range(60))


GOOD_STATUS = {"ok": True, "pid": 1, "policy": "lru", "device": "cpu", "budget_bytes": 1, "used_bytes": 0,
               "evictions": 0, "tiers": {"host": {"budget_bytes": 0}}, "models": {}}


@pytest.mark.parametrize("answer, said", [
    ({**GOOD_STATUS, "pid": float("nan")}, "sent a malformed answer$"),
    ({**GOOD_STATUS, "pid": 10**400}, r"sent a malformed answer to status \(pid: expected a process id"),
    ({**GOOD_STATUS, "tiers": 5}, r"sent a malformed answer to status \(tiers: expected an object of tiers"),
    ({**GOOD_STATUS, "policy": 5}, r"sent a malformed answer to status \(policy: expected a name"),
    (b"\x00garbage", "sent a malformed answer$"),
    ([1, 2], "sent a malformed answer$")], ids=["pid-nan", "pid-huge", "tiers-a-number", "policy-a-number",
                                               "garbage", "a-list"])
@pytest.mark.parametrize("words", [["server", "status"], ["server", "stop"], ["memory", "--no-measure", "squeezenet_1.1"],
                                   ["client", "run", "--model", "squeezenet_1.1", "--iterations", "1"]],
                         ids=["server-status", "server-stop", "memory", "client-run"])
def test_every_store_command_names_a_malformed_status_answer(models, tmp_path, monkeypatch, capsys, words, answer, said):
    """A socket answering status with NaN, a 400-digit pid, wrong types or garbage: `trims server status`
    printed NaN as JSON (exit 0), `server stop` said "stopped", `trims memory` took it for no store (exit
    0), and `client run` ended in an AttributeError traceback."""
    monkeypatch.chdir(tmp_path)
    listener = _answering(tmp_path / "s.sock", answer)
    try:
        code = main(["trims", *words, "--socket", str(tmp_path / "s.sock"),
                     *(["--base-path", str(models)] if words[0] != "server" else [])])
    finally:
        listener.close()
    out, err = capsys.readouterr()
    assert code == 1 and re.match(rf"repro: error: model store server on {re.escape(str(tmp_path / 's.sock'))} {said}",
                                  err), (out, err)
    assert "stopped" not in out and "NaN" not in out


@pytest.mark.parametrize("edit", ["no-params", "distribution-null", "concurrency-a-string"])
def test_trims_summary_refuses_a_distribution_report_without_its_series(server, models, config, tmp_path, capsys, edit):
    """A distribution report without params (a KeyError traceback), or whose distribution is null (a
    TypeError beside another report; alone, exit 0 with "distribution": null in the summary)."""
    from repro.trims.experiments import run_compare, run_distribution

    from repro.rulesettings import trims_client_settings

    settings = trims_client_settings(config, "compare")
    run_compare("squeezenet_1.1", {**settings, "iterations": 2}, models, server[0], tmp_path / "c")
    for name, concurrency in (("d1", 1), ("d2", 2)):
        run_distribution("uniform", [], concurrency, {**settings, "iterations": 2}, ["squeezenet_1.1"], models,
                         server[0], tmp_path / name)
    report = json.loads((tmp_path / "d1" / "report.json").read_text())
    if edit == "no-params":
        del report["params"]
    else:
        report.update({"distribution-null": {"distribution": None}, "concurrency-a-string": {"concurrency": "1"}}[edit])
    (tmp_path / "d1" / "report.json").write_text(json.dumps(report))
    for others in ([], [str(tmp_path / "d2" / "report.json")]):
        capsys.readouterr()
        assert main(["trims", "summary", "--compare", str(tmp_path / "c" / "report.json"), "--distributions",
                     str(tmp_path / "d1" / "report.json"), *others, "-o", str(tmp_path / "s.json")]) == 1
        assert capsys.readouterr().err == (f"repro: error: {tmp_path / 'd1' / 'report.json'}: expected a distribution "
                                           "report: the distribution's name, its params and a concurrency of at "
                                           "least 1\n")
    assert not (tmp_path / "s.json").exists()


def test_a_profiling_store_keeps_a_bounded_number_of_events(models, monkeypatch):
    """A store started with --profile kept every acquire and release event until it stopped: 0.7 KB a
    request, without bound. Past the bound they are counted, and the trace says how many."""
    from repro.trims import modelstore

    monkeypatch.setattr(modelstore, "MAX_PROFILE_EVENTS", 5)
    store = modelstore.ModelStore(models, 50 << 20, "lru", events=[])
    try:
        for _ in range(10):
            store.acquire("squeezenet_1.1")
            store.release("squeezenet_1.1")
    finally:
        store.close()
    assert len(store.events) == 5 and store.events_dropped >= 5


def test_a_store_request_with_a_key_given_twice_is_refused(module_server):
    """{"op": "status", "op": "shutdown"} shut the store down: the last key won, where config files
    refuse a key given twice."""
    import socket as sockets

    socket_path, _ = module_server
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as connection:
        connection.connect(str(socket_path))
        connection.sendall(b'{"op": "status", "op": "shutdown"}\n')
        answer = json.loads(connection.makefile("rb").readline())
    assert answer == {"ok": False, "error": "bad request: key 'op' given twice; expected each key once"}
    from repro.trims.server import StoreConnection

    assert StoreConnection(socket_path, timeout=10).status()["pid"]  # still serving


@pytest.mark.parametrize("at", ["x", [1], 1e300, -1e20, None], ids=["a-string", "a-list", "far-future", "far-past", "null"])
def test_an_earlier_probe_at_no_time_is_probed_again(tmp_path, monkeypatch, at):
    """`tfdata status --probe-workers` in a workflow: a probed.json whose `at` was a string or out of
    range ended in a TypeError or OverflowError traceback; it is no earlier probe."""
    from types import SimpleNamespace

    from repro.pecan.tfdata import service as tfdata_service

    key = {"dispatcher": {"pid": 1, "start_ticks": 2}}
    monkeypatch.setattr(tfdata_service, "_probe_key", lambda service: key)
    probed = {**key, "text": "a worker served", "where": "here", "at": at}
    (tmp_path / tfdata_service.PROBED).write_text(json.dumps(probed))
    assert tfdata_service._probed_earlier(SimpleNamespace(directory=tmp_path)) is None
    (tmp_path / tfdata_service.PROBED).write_text(json.dumps({**probed, "at": time.time()}))
    assert tfdata_service._probed_earlier(SimpleNamespace(directory=tmp_path)).startswith("a worker served (here, at ")


@pytest.mark.parametrize("server", [{"eviction": "lru", "memory_mb": 300}, {}], ids=["without-device", "empty"])
@pytest.mark.parametrize("experiment", [["compare", "squeezenet_1.1"],
                                        ["distribution", "pareto", "--params", "1", "1.5", "--concurrency", "1",
                                         "--models", "squeezenet_1.1"]], ids=["compare", "distribution"])
def test_an_experiments_settings_without_the_stores_keys_are_named(config, tmp_path, monkeypatch, capsys, server,
                                                                    experiment):
    """`trims experiment --settings` whose server lacks device: a KeyError traceback after the settings
    check passed, and an empty traces/ left behind."""
    from repro.rulesettings import trims_client_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / "st.json").write_text(json.dumps({"base_path": "bp", "socket": "s.sock"}))
    settings = {**trims_client_settings(config, experiment[0] if experiment[0] == "compare" else "distributions"),
                "server": server}
    assert main(["trims", "experiment", *experiment, "--store", "st.json", "--settings", json.dumps(settings),
                 "--out", "exp"]) == 1
    missing = "device" if server else "memory_mb"
    assert capsys.readouterr().err == (f"repro: error: --settings: lacks key 'server.{missing}' (expected the settings "
                                       "the workflow passes; see repro.rulesettings.trims_client_settings)\n")
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("hosts", [{"hosts": [{"name": "h", "address": "127.0.0.1"}]}, {"a": 1}, {"hosts": 5}],
                         ids=["without-python", "without-hosts", "hosts-a-number"])
@pytest.mark.parametrize("command", ["stop", "status"])
def test_a_state_whose_worker_hosts_are_not_the_services_is_named(tmp_path, capsys, hosts, command):
    """`tfdata stop` on a state whose ssh_workers lacked python or hosts: a KeyError traceback, after
    the workers and before the dispatcher (which a real state would have left running)."""
    state = {"dispatcher": {"pid": 999999, "start_ticks": 1, "address": "localhost:1", "status": "x"},
             "workers": [{"pid": 999998, "start_ticks": 1, "status": "s", "kind": "remote", "slot": 0, "host": "h"}],
             "ssh_workers": hosts}
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert main(["pecan", "tfdata", command, "--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"repro: error: {tmp_path / 'state.json'}: ssh_workers: expected an "
                                              "object with hosts (a list of objects with a name and an address)")
