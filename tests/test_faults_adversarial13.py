"""Fault injection, an adversarial pass over process records: a server process the tf.data service
starts is stopped by a stop signal that comes before its record is saved."""

import importlib.util
import json
import os
import signal
import time

import psutil
import pytest

from repro.cli import main
from repro.pecan.tfdata import service as tfdata_service
from repro.pecan.tfdata.service import Service
from repro.tracestore import LocalStore, upload_traces
from repro.trims.originals import main as original_main
from support import REPO, run_forked

pytestmark = pytest.mark.fault


@pytest.mark.service
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
@pytest.mark.parametrize("moment", ["describe", "_save"])
def test_a_stop_signal_before_the_dispatchers_record_is_saved_stops_the_dispatcher(tmp_path, monkeypatch, moment):
    """A SIGHUP to `repro pecan tfdata start` just after its dispatcher was forked, while the record
    was read (describe) or once it served but before the state was saved, ended the command and left
    the dispatcher running, recorded nowhere."""
    started, before = [], set(psutil.Process().children())  # others: the session's fixtures' servers

    def interrupted(*args, **kwargs):
        started.extend(set(psutil.Process().children()) - before)
        raise KeyboardInterrupt  # as repro.commands raises a stop signal

    if moment == "_save":
        monkeypatch.setattr(Service, "_save", interrupted)
    else:
        monkeypatch.setattr(tfdata_service, "describe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Service.start(tmp_path / "sd")
    assert started, "no process was started"
    _, alive = psutil.wait_procs(started, timeout=10)
    for process in alive:  # this test's own, found still running: stopped before it fails
        process.kill()
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert not (tmp_path / "sd" / "state.json").exists()


def test_a_detailed_summary_that_cannot_write_its_events_names_its_output(tmp_path):
    """A full disk or a file size limit while `trace summarize --detailed` wrote its events to the
    temporary file beside the output gave `repro: error: File too large`, naming nothing."""
    with open(tmp_path / "big.json", "w") as fh:
        fh.write('{"traceEvents":[' + ",".join(f'{{"name":"e{i}","ph":"X","ts":{i},"dur":1,"pid":1,"tid":1}}'
                                               for i in range(20_000)) + "]}")
    code, _, err = run_forked(["trace", "summarize", "big.json", "--detailed", "-o", "sd.json"], tmp_path, timeout=60,
                              file_size=200 * 1024)
    assert code == 1
    assert err.strip() == "repro: error: sd.json: cannot write the detailed events beside it (File too large)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.json"]


@pytest.mark.parametrize("number", ["1e999", "-5", "+5.0", "nan", "1,5"])
def test_a_throughput_that_a_training_log_never_writes_is_refused_naming_its_line(tmp_path, monkeypatch, capsys, number):
    """`1e999 examples/second` was read as 999 and `-5 examples/second` as 5, and the cost table
    printed from them with exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.log").write_text("I0101 TimeHistory: 1.00 seconds, 12.50 examples/second between steps 0 and 1\n"
                                      f"I0101 TimeHistory: 1.00 seconds, {number} examples/second between steps 1 and 2\n")
    assert main(["pecan", "costs", "--path=run.log", "--config", str(REPO / "config" / "config.yaml"), "--model=resnet",
                 "--accelerator=v2"]) == 1
    assert capsys.readouterr().err == (f"repro: error: run.log:2: throughput {number} examples/second; expected digits "
                                       "with an optional fraction (12.34), as a training log writes them\n")


def test_a_download_that_cannot_write_its_trace_blames_the_destination_not_the_store(tmp_path):
    """A file size limit (or a full disk) where `trace download` wrote its traces was reported with
    the store's remedy: "run it again to upload anew: snakemake --forcerun run"."""
    (tmp_path / "t.json").write_text('{"traceEvents":[' + ",".join(['{"name":"e","ph":"i","ts":1,"pid":1,"tid":1}'] * 20_000)
                                     + "]}")
    upload_traces(LocalStore(tmp_path / "store"), [tmp_path / "t.json"], "traces/e/m", tmp_path / "upload.json")
    code, _, err = run_forked(["trace", "download", "upload.json", "-o", "down"], tmp_path, timeout=60,
                              file_size=200 * 1024)
    assert code == 1
    assert err.strip() == "repro: error: down/t.json: cannot write (File too large)", err
    assert not (tmp_path / "down").exists()  # nor the directory the download made for it


NOT_UTF8 = "\udcff\udcfe"  # the bytes ff fe on a command line, as Python decodes them


@pytest.mark.parametrize("program, words, flag", [
    (main, ["pecan", "plot", "-e", "final", "-m", NOT_UTF8, "-t", "4", "1", "1", "-c", "0", "1", "1", "-o", "p"],
     "argument -m/--model"),
    (main, ["pecan", "costs", "--path", "run.log", "--experiment-type", NOT_UTF8], "argument --experiment-type/--experiment_type"),
    (main, ["trims", "client", "run", "--simulate", "--experiment-description", NOT_UTF8], "argument --experiment-description"),
    (original_main, ["client", "memory_usage", f"--models={NOT_UTF8}"], "--models"),
    (original_main, ["client", "run", "--simulate_run", f"--experiment_description={NOT_UTF8}"], "--experiment_description"),
], ids=["plot-title", "costs-experiment-type", "client-description", "tools-models", "tools-description"])
def test_free_text_that_is_not_utf8_is_refused_naming_its_flag(tmp_path, monkeypatch, capsys, program, words, flag):
    """Bytes that are not UTF-8 in a title, a CSV label, a trace's description or a model pattern gave a
    traceback from the font renderer, the CSV writer, the trace writer or the regex binding: after the
    requests had run, for the description."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        code = program(words)
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.endswith(f"{flag}: '\\udcff\\udcfe' is not UTF-8 text; expected text an output can hold"), err
    assert list(tmp_path.iterdir()) == []


def _distribution_report(**edits):
    report = {"experiment": "distribution", "distribution": "uniform", "params": [0.0, 1.0], "concurrency": 1,
              "wall_s": 0.3, "evictions": 0, "store": {"store_eviction": "lru", "store_budget_bytes": 1 << 26},
              "results": [{"model": "m", "iteration": i, "ok": True, "latency_us": 1000.0 + i, "trace": "t.json",
                           "hit": i > 0} for i in range(5)]}
    return {**report, **edits}


@pytest.mark.parametrize("key, value, said", [
    ("wall_s", -1, "wall_s: -1; expected the run's length, a positive number of seconds"),
    ("wall_s", 0, "wall_s: 0; expected the run's length, a positive number of seconds"),
    ("wall_s", "x", "wall_s: x; expected the run's length, a positive number of seconds"),
    ("wall_s", True, "wall_s: True; expected the run's length, a positive number of seconds"),
    ("evictions", [1], "evictions: [1]; expected the store's count of evictions (0 or more)"),
    ("evictions", -2, "evictions: -2; expected the store's count of evictions (0 or more)"),
])
def test_trims_summary_refuses_a_distribution_reports_wall_time_or_evictions_that_are_none(tmp_path, key, value, said):
    """wall_s -1 wrote requests_per_s -40.0 with exit 0; wall_s 0 named ZeroDivisionError, not the key;
    evictions [1] was copied into the summary."""
    from repro.errors import ReproError
    from repro.trims.experiments import summary

    path = tmp_path / "report.json"
    path.write_text(json.dumps(_distribution_report(**{key: value})))
    with pytest.raises(ReproError) as error:
        summary([], [path])
    assert str(error.value) == f"{path}: {said}"


@pytest.mark.parametrize("model", [["a"], None, -1, ""])
def test_trims_summary_refuses_a_compare_report_whose_model_is_no_name(tmp_path, model):
    """"model": a list gave a TypeError traceback; null or -1 went into the summary with exit 0."""
    from repro.errors import ReproError
    from repro.trims.experiments import summary

    path = tmp_path / "report.json"
    path.write_text(json.dumps({"experiment": "compare", "model": model, "modes": {}}))
    with pytest.raises(ReproError) as error:
        summary([path], [])
    assert str(error.value) == f"{path}: model: {str(model)[:40]}; expected the name of the model the run compared"


@pytest.mark.parametrize("given", ["file", "/dev/zero"])
def test_tfdata_stop_of_a_state_directory_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys, given):
    """`tfdata stop --state-dir` of a file or a device said "stopped 0 process(es)", exit 0: a typo read
    as a stop while the service ran on."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("mine\n")
    assert main(["pecan", "tfdata", "stop", "--state-dir", given]) == 1
    assert capsys.readouterr().err == (f"repro: error: --state-dir {given}: not a directory; expected the directory "
                                       "`tfdata start` was given\n")
    assert (tmp_path / "file").read_text() == "mine\n"


def test_tfdata_stop_of_a_directory_where_no_service_is_recorded_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    assert main(["pecan", "tfdata", "stop", "--state-dir", "results"]) == 0
    assert capsys.readouterr().out == "results: no tf.data service recorded there (no state.json); nothing stopped\n"


def test_a_tables_repeats_are_bounded_as_the_config_bounds_them():
    import yaml

    from repro.pecan.costtable import MAX_REPEATS

    schema = yaml.safe_load((REPO / "src" / "repro" / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["repeats"]["maximum"] == MAX_REPEATS


def test_a_compare_rerun_does_not_empty_the_run_its_traces_directory_links_to(server, models, config, tmp_path):
    """`trims experiment compare --out DIR`, DIR/traces a symbolic link to an archived run: the rerun
    emptied the archive's mode directories through the link."""
    from repro.errors import ReproError
    from repro.rulesettings import trims_client_settings
    from repro.trims.experiments import run_compare

    settings = {**trims_client_settings(config, "compare"), "iterations": 2}
    run_compare("squeezenet_1.1", settings, models, server[0], tmp_path / "first")
    archive = tmp_path / "archive"
    (tmp_path / "first" / "traces").rename(archive)
    kept = sorted(str(p.relative_to(archive)) for p in archive.rglob("*"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "traces").symlink_to(archive)
    with pytest.raises(ReproError) as error:
        run_compare("squeezenet_1.1", settings, models, server[0], tmp_path / "out")
    assert str(error.value) == (f"--out {tmp_path / 'out' / 'traces'}: is a symbolic link; expected a directory this "
                                "command made, which a rerun empties: remove the link or name another --out")
    assert sorted(str(p.relative_to(archive)) for p in archive.rglob("*")) == kept


def test_a_store_started_by_hand_is_stopped_by_its_own_command(tmp_path, monkeypatch, capsys):
    """`repro trims store start` by hand ran until `cluster stop`: no command of its own stopped it."""
    from repro.processes import matches

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    settings = {"base_path": "models", "server": {"eviction": "lru", "memory_mb": 50, "device": "cpu"}}
    assert main(["trims", "store", "start", "--settings", json.dumps(settings), "--state", "st.json"]) == 0
    store = json.loads((tmp_path / "st.json").read_text())["process"]
    capsys.readouterr()
    assert main(["trims", "store", "stop"]) == 0
    assert capsys.readouterr().out == "model store stopped\n"
    assert not matches(store)
    assert main(["trims", "store", "stop"]) == 0
    assert capsys.readouterr().out == "no model store of this directory was running\n"


@pytest.mark.service
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
@pytest.mark.parametrize("state", ["damaged", "missing"])
def test_cluster_stop_without_a_readable_state_stops_the_engine_service_beside_it(tmp_path, monkeypatch, capsys, state):
    """A cluster state.json cut short (or removed), then `make clean`: cluster stop failed (or was not
    run), `rm -rf results/*` deleted the tf.data service's own record, and its dispatcher ran on."""
    from repro.processes import matches

    monkeypatch.chdir(tmp_path)
    directory = tmp_path / "results" / "cluster" / "local"
    dispatcher = Service.start(directory / "tfdata").state["dispatcher"]
    try:
        if state == "damaged":
            (directory / "state.json").write_text('{"trace_store": "results/st')
        assert main(["cluster", "stop", "--state", "results/cluster/local/state.json"]) == (state == "damaged")
        out = capsys.readouterr().out
        assert f"engine service in {os.path.join('results', 'cluster', 'local', 'tfdata')} stopped: 1 process(es)" in out
        assert not matches(dispatcher)
    finally:
        Service(directory / "tfdata").stop()


@pytest.mark.parametrize("name", ["a\nb", "x\udcff", "tab\there"])
def test_a_profile_output_name_with_a_line_break_or_bytes_that_are_not_utf8_is_refused(tmp_path, name):
    """`--profile-output $'a\\nb'` made a directory whose name split the run's last message in two;
    `$'x\\xff'` was taken too, where --experiment-description refuses such bytes."""
    from repro.errors import ReproError
    from repro.trims.cli import check_profile_directory

    with pytest.raises(ReproError) as error:
        check_profile_directory(tmp_path, name, False)
    assert str(error.value) == (f"--profile-output {ascii(name)}: expected a name of UTF-8 text without line breaks or "
                                "other control characters")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["", "{", '{"pipeline": "resnet"}'])
def test_cluster_status_fails_a_calibration_the_run_could_not_read(tmp_path, monkeypatch, capsys, text):
    """An empty, cut or incomplete calibration passed `[ OK ] calibration ... present`, exit 0: the run
    after it failed on it."""
    monkeypatch.chdir(tmp_path)
    assert main(["cluster", "start", "--config", str(REPO / "config" / "config.yaml"), "--state", "state.json"]) == 0
    (tmp_path / "cal.json").write_text(text)
    capsys.readouterr()
    assert main(["cluster", "status", "--state", "state.json", "--calibration", "cal.json"]) == 1
    out, err = capsys.readouterr()
    assert "[FAILED] calibration cal.json readable: --calibration cal.json: " in out, out
    assert err.startswith("repro: error: cluster status: 1 check(s) FAILED: calibration cal.json readable")


@pytest.mark.service
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
def test_a_dispatcher_whose_state_directory_is_removed_ends(tmp_path):
    """Its record damaged, `make clean` could not stop the dispatcher, then removed its directory: the
    dispatcher ran on, wrote its status file into a directory of its own making, and nothing could find
    it. A server whose state directory is removed now ends."""
    import shutil

    from repro.processes import matches

    service = Service.start(tmp_path / "sd")
    dispatcher = service.state["dispatcher"]
    try:
        (tmp_path / "sd" / "state.json").write_text("")  # damaged: no stop can read it
        shutil.rmtree(tmp_path / "sd")
        deadline = time.monotonic() + 20
        while matches(dispatcher) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not matches(dispatcher)
    finally:
        if matches(dispatcher):
            os.kill(dispatcher["pid"], signal.SIGKILL)


@pytest.mark.parametrize("flag", ["--compare", "--distributions"])
def test_trims_summary_refuses_the_other_experiments_report_under_a_flag(tmp_path, flag):
    """A distribution run's report given as --compare (or a compare report as --distributions) was
    read as one: KeyError named as 'not an experiment's report.json', or, where its keys happened to
    be there, drawn in the other figure."""
    from repro.errors import ReproError
    from repro.trims.experiments import summary

    path = tmp_path / "report.json"
    given = {"--compare": "distribution", "--distributions": "compare"}[flag]
    path.write_text(json.dumps({**_distribution_report(), "experiment": given, "model": "m", "modes": {}}))
    with pytest.raises(ReproError) as error:
        summary([path], []) if flag == "--compare" else summary([], [path])
    expected = {"--compare": "compare", "--distributions": "distribution"}[flag]
    assert str(error.value) == f"{path}: experiment {given!r}; expected the report of a {expected!r} experiment ({flag})"


def _compare_report(tmp_path, **edits):
    """A compare report of model m (3 requests a mode) whose requests' trace lies beside it."""
    (tmp_path / "traces").mkdir(exist_ok=True)
    (tmp_path / "traces" / "t.json").write_text(json.dumps({"traceEvents": [
        {"name": "read_params", "cat": "io", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
        "otherData": {"model_name": "m", "upr_enabled": True}}))
    results = [{"model": "m", "iteration": i, "ok": True, "latency_us": 1000.0 + i, "trace": "traces/t.json", "hit": True}
               for i in range(3)]
    report = {"experiment": "compare", "model": "m", "store": {}, "client": {"iterations": 3},
              "modes": {mode: {"results": [dict(r) for r in results], "wall_s": 1} for mode in ("original", "shared")}}
    return {**report, **edits}


def _edit_request(report, mode, index, **fields):
    runs = report["modes"][mode] if mode else report
    runs["results"][index].update(fields)
    return report


def _drop_request(report, mode):
    (report["modes"][mode] if mode else report)["results"].pop()
    return report


@pytest.mark.parametrize("kind, edit, said", [
    # a report relabelled: its requests are still the other model's
    ("compare", lambda r: {**r, "model": "vgg19"}, "original mode request 0: model 'm'; expected the report's model "
     "'vgg19'"),
    ("compare", lambda r: _drop_request(r, "shared"), "shared mode results: 2 request(s); expected client.iterations, 3"),
    ("compare", lambda r: {**r, "client": {}}, "client: iterations None; expected the requests the run made per mode, a "
     "whole number of at least 1"),
    ("compare", lambda r: _edit_request(r, "shared", 1, iteration=1e308), "shared mode request 1: iteration 1e+308; "
     "expected 1 (the requests in the order the run made them)"),
    ("compare", lambda r: _edit_request(r, "shared", 2, hit={}), "shared mode request 2: hit {}; expected true, false or "
     "null (whether the store held the model)"),
    ("compare", lambda r: _edit_request(r, "original", 0, latency_us=0), "original mode request 0: latency_us 0; expected "
     "microseconds above 0, at most 1e+12"),
    ("distribution", lambda r: _edit_request(r, None, 3, model=-1), "request 3: model '-1'; expected the name of a model"),
    ("distribution", lambda r: _drop_request(r, None), "results: 4 request(s); expected client.iterations, 5"),
    ("distribution", lambda r: _edit_request(r, None, 0, iteration=None), "request 0: iteration None; expected 0 (the "
     "requests in the order the run made them)"),
], ids=["relabelled", "a-request-dropped", "no-client", "iteration-1e308", "hit-a-dict", "latency-0",
        "distribution-model-a-number", "distribution-request-dropped", "distribution-iteration-null"])
def test_trims_summary_refuses_requests_that_are_not_the_runs(tmp_path, kind, edit, said):
    """A compare report relabelled `vgg19` (every request still resnet18_v1's) was drawn as vgg19 with
    exit 0, as were reports with a request dropped, iterations or hits of any type, a latency of 0."""
    from repro.errors import ReproError
    from repro.trims.experiments import summary

    path = tmp_path / "report.json"
    if kind == "compare":
        report = _compare_report(tmp_path)
    else:
        report = _distribution_report(client={"iterations": 5})
        for index, result in enumerate(report["results"]):
            result["trace"] = "traces/t.json"
    path.write_text(json.dumps(edit(report)))
    with pytest.raises(ReproError) as error:
        summary([path], []) if kind == "compare" else summary([], [path])
    assert str(error.value) == f"{path}: {said}"


def test_trims_summary_takes_the_reports_its_runs_write(tmp_path):
    """The reports the edits above start from are accepted as they are."""
    from repro.trims.experiments import summary

    (tmp_path / "c").mkdir()
    compare = tmp_path / "c" / "report.json"
    compare.write_text(json.dumps(_compare_report(tmp_path / "c")))
    distribution = tmp_path / "d.json"
    distribution.write_text(json.dumps(_distribution_report(client={"iterations": 5})))
    result = summary([compare], [distribution])
    assert [row["model"] for row in result["compare"]] == ["m"] and result["distributions"][0]["requests"] == 5
