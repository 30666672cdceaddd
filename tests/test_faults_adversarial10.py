"""Fault injection, an adversarial pass over what labels a figure: a cost table's rows name the
workload and calibration preset of their runs, so a table priced, compared or drawn as another
workload's (or preset's) is refused rather than drawn under the wrong name.
"""

import csv
import os
import json
import re

import pytest

from repro.cli import main
from repro.errors import ReproError
from repro.pecan.calibrate import calibrate
from repro.pecan.run import run_mode

pytestmark = pytest.mark.fault

STYLE = {"width_in": 5.0, "height_in": 3.6, "dpi": 50, "font_size": 9, "show_reference": False}


@pytest.fixture(scope="module")
def table(config, tmp_path_factory):
    """ResNet50_v2-8's cost table of one mode (pecan), made by the commands the workflow runs."""
    from repro.rulesettings import cost_settings

    out = tmp_path_factory.mktemp("table")
    run_mode(config, "ResNet50_v2-8", "pecan", {"resnet": calibrate("resnet", elements=4, repeats=1)}, out / "run")
    summary = out / "summary.json"
    summary.write_text(json.dumps({"traces": [{"mode": "pecan"}]}))
    settings = cost_settings(config, "ResNet50_v2-8")
    assert main(["pecan", "cost-table", "--settings", json.dumps(settings), "--mode", "pecan", "--log",
                 str(out / "run" / "run.log"), "--metrics", str(out / "run" / "metrics.json"), "--summary", str(summary),
                 "-o", str(out / "ResNet50_v2-8.csv")]) == 0
    return out / "ResNet50_v2-8.csv"


def test_a_cost_table_names_the_workload_and_preset_of_its_runs(table):
    rows = list(csv.DictReader(table.open()))
    assert [(row["workload"], row["preset"], row["mode"]) for row in rows] == [("ResNet50_v2-8", "local", "pecan")]


def test_a_cost_table_refuses_runs_of_another_experiment(config, table, capsys):
    """ResNet50_v3-8's settings (the same model, the v3-8's price) over ResNet50_v2-8's runs: the row
    priced them at the other TPU's price, with exit 0."""
    from repro.rulesettings import cost_settings

    run = table.parent / "run"
    settings = cost_settings(config, "ResNet50_v3-8")
    assert main(["pecan", "cost-table", "--settings", json.dumps(settings), "--mode", "pecan", "--log",
                 str(run / "run.log"), "--metrics", str(run / "metrics.json"), "--summary",
                 str(table.parent / "summary.json"), "-o", str(table.parent / "v3.csv")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {run / 'metrics.json'}: a run of experiment 'ResNet50_v2-8', "
                                       "not of the --settings experiment 'ResNet50_v3-8'; expected the runs of the "
                                       "experiment priced\n")
    assert not (table.parent / "v3.csv").exists()


@pytest.mark.parametrize("copy_as", ["SimCLR.csv", "ResNet50_v3-8.csv"])
def test_a_comparison_table_refuses_another_workloads_cost_table(table, tmp_path, capsys, copy_as):
    """ResNet50_v2-8's table given for SimCLR (or, renamed, for ResNet50_v3-8): its numbers went under the
    other workload and were judged against that workload's paper values, with exit 0."""
    given = tmp_path / copy_as
    given.write_bytes(table.read_bytes())
    workload = copy_as.removesuffix(".csv")
    assert main(["pecan", "comparison-table", "--option", "autoorder", "--workload", workload, "--table", str(given),
                 "-o", str(tmp_path / "c.csv")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {given}: row 1 holds runs of 'ResNet50_v2-8', not of "
                                       f"{workload!r}; expected {workload}'s cost table\n")
    assert not (tmp_path / "c.csv").exists()


def _figure(table, tmp_path, **settings):
    from test_faults_input import _calibration

    (tmp_path / "r.json").write_text(_calibration("resnet"))
    given = {"experiment": "ResNet50_v2-8", "engine_caption": None, "reference": None, "modes": ["pecan"],
             "style": STYLE, "backend": "local", "preset": "local", **settings}
    return main(["pecan", "figure", "fig8_ResNet50_v2-8", "--table", str(table), "--calibration",
                 str(tmp_path / "r.json"), "--settings", json.dumps(given), "--output", str(tmp_path / "f.pdf"), str(tmp_path / "f.png"),
                 "--verdicts", str(tmp_path / "v.csv")])


@pytest.mark.parametrize("changed, said", [
    ({"experiment": "RetinaNet"}, "row 1 holds runs of 'ResNet50_v2-8', not of 'RetinaNet'; expected RetinaNet's "
                                  "cost table"),
    ({"preset": "artifact"}, "row 1 holds runs of calibration preset 'local', not of 'artifact'; expected the table "
                             "of the preset the caption names"),
])
def test_a_figure_refuses_a_table_of_another_workload_or_preset(table, tmp_path, capsys, changed, said):
    """The figure's title and caption come from its settings: a RetinaNet figure drawn from ResNet's
    table, or a caption saying "fitted to the artifact's runs" over the local preset's, had exit 0."""
    assert _figure(table, tmp_path, **changed) == 1
    assert capsys.readouterr().err == f"repro: error: {table}: {said}\n"
    assert not (tmp_path / "f.pdf").exists() and not (tmp_path / "v.csv").exists()
    assert _figure(table, tmp_path) == 0


def test_a_table_of_an_older_version_is_named_for_rebuilding(table, tmp_path):
    """A cost table without the workload column cannot say whose runs it holds."""
    from repro.pecan.costtable import check_table_runs

    rows = [{k: v for k, v in row.items() if k != "workload"} for row in csv.DictReader(table.open())]
    with pytest.raises(ReproError, match=re.escape(f"{table}: no 'workload' column (a table written by an older "
                                                   "version); rebuild it (snakemake --forcerun cost_table)")):
        check_table_runs(rows, table, "ResNet50_v2-8")


def test_a_workflow_directory_whose_store_stopped_leaves_no_runtime_directory(models, tmp_path):
    """Every start, status or stop of a workflow directory's model store made a directory in the
    private runtime directory, holding the store's lock, and never removed it: thousands of them
    after a test run. It goes when the store stops, and a check that finds no store makes none."""
    from repro import processes
    from repro.trims import service

    work = tmp_path / "work"
    work.mkdir()
    runtime = processes.runtime_dir(work, create=False)
    assert not service.stop(work) and not runtime.exists()
    assert not service.running({"process": {"pid": os.getpid()}, "socket": "s"}, work) and not runtime.exists()
    settings = {"base_path": str(models), "server": {"memory_mb": 50, "eviction": "lru", "device": "cpu"}}
    record = service.start(settings, work / "state.json", work)
    try:
        assert service.running(record, work) and sorted(p.name for p in runtime.iterdir()) == [
            "store.json", "store.lock", "trims.pid", "trims.sock"]
    finally:
        assert service.stop(work)
    assert not runtime.exists() and not processes.matches(record["process"])


def test_a_waiter_on_a_removed_lock_takes_the_lock_anew(tmp_path):
    """The lock's directory is removed by its last holder: a waiter that had opened the removed file
    must lock the path's new file, or it would run beside the next one to lock the path."""
    import fcntl
    import threading
    import time

    from repro import processes
    from repro.trims import service

    work = tmp_path / "work"
    work.mkdir()
    inside, leave = threading.Event(), threading.Event()

    def waiter():
        with service._locked(work):
            inside.set()
            leave.wait(10)

    with service._locked(work):
        lock = processes.runtime_dir(work) / service.LOCK
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.2)  # long enough for the waiter to open the lock file and wait on it
        assert not inside.is_set()
    assert inside.wait(10)
    try:
        with open(lock, "a") as other, pytest.raises(BlockingIOError):  # the path's file is the one held
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        leave.set()
        thread.join(10)
    assert not lock.parent.exists()


def test_a_run_refused_into_a_finished_run_directory_leaves_the_earlier_run_whole(config, tmp_path):
    """`pecan run --out D` refused for want of a calibration removed D's repeats/ first: the earlier
    run's metrics.json went on listing repeats/run-1.log, which was gone."""
    calibration = {"resnet": calibrate("resnet", elements=4, repeats=1)}
    run_mode({**config, "repeats": 3}, "ResNet50_v2-8", "pecan", calibration, tmp_path / "run")
    before = {path: path.read_bytes() for path in sorted((tmp_path / "run").rglob("*")) if path.is_file()}
    assert tmp_path / "run" / "repeats" / "run-2.log" in before
    with pytest.raises(ReproError, match="calibration"):
        run_mode(config, "ResNet50_v2-8", "pecan", {}, tmp_path / "run")
    assert {path: path.read_bytes() for path in sorted((tmp_path / "run").rglob("*")) if path.is_file()} == before


@pytest.mark.parametrize("second", ["same", "--path", "hard link"])
def test_pecan_costs_refuses_a_log_named_twice(table, tmp_path, capsys, second):
    """`pecan costs run.log run.log` wrote the run's row twice, with exit 0."""
    log = table.parent / "run" / "run.log"
    again = str(log)
    if second == "hard link":
        again = str(tmp_path / "link.log")
        os.link(log, again)
    command = ["pecan", "costs", "--experiment", "ResNet50_v2-8", str(log),
               *(["--path", again] if second == "--path" else [again]), "-o", str(tmp_path / "c.csv")]
    assert main(command) == 1
    assert capsys.readouterr().err == (f"repro: error: {again}: named twice among the logs; expected each training "
                                       "log once\n")
    assert not (tmp_path / "c.csv").exists()


def test_a_run_replaces_the_traces_of_an_earlier_run_of_another_experiment(config, tmp_path):
    """`pecan run --out D` of ResNet50_v3-8 into the run directory of a ResNet50_v2-8 run kept the
    earlier trace beside its own: traces/ is uploaded whole as the run's."""
    calibration = {"resnet": calibrate("resnet", elements=4, repeats=1)}
    run_mode(config, "ResNet50_v2-8", "cachew", calibration, tmp_path / "run")
    run_mode(config, "ResNet50_v3-8", "cachew", calibration, tmp_path / "run")
    assert [p.name for p in (tmp_path / "run" / "traces").iterdir()] == ["ResNet50_v3-8-cachew.json"]


def test_a_cluster_run_uploads_its_own_trace_only(config, tmp_path):
    """Another run's trace (pecan's) in a Cachew run's traces/ was uploaded and listed in the receipt
    as Cachew's, and the workflow downloaded it among Cachew's traces."""
    from repro.rulesettings import run_settings
    from test_faults_input import _calibration

    other = tmp_path / "other"
    run_mode(config, "ResNet50_v2-8", "pecan", {"resnet": calibrate("resnet", elements=4, repeats=1)}, other)
    (tmp_path / "run" / "traces").mkdir(parents=True)
    (tmp_path / "run" / "traces" / "ResNet50_v2-8-pecan.json").write_bytes(
        (other / "traces" / "ResNet50_v2-8-pecan.json").read_bytes())
    (tmp_path / "store").mkdir()
    (tmp_path / "state.json").write_text(json.dumps({"backend": "local", "trace_store": str(tmp_path / "store")}))
    (tmp_path / "cal.json").write_text(_calibration("resnet"))
    assert main(["cluster", "run", "--state", str(tmp_path / "state.json"), "--settings",
                 json.dumps(run_settings(config, "ResNet50_v2-8", "cachew")), "--experiment", "ResNet50_v2-8",
                 "--mode", "cachew", "--calibration", str(tmp_path / "cal.json"), "--run-dir", str(tmp_path / "run"),
                 "--receipt", str(tmp_path / "run" / "upload.json")]) == 0
    uploaded = sorted(p.name for p in (tmp_path / "store").rglob("*.json"))
    assert uploaded == ["ResNet50_v2-8-cachew.json"], uploaded
    assert "pecan" not in (tmp_path / "run" / "upload.json").read_text()


def test_trims_summary_refuses_compare_reports_of_two_stores(tmp_path, capsys):
    """Compare reports of an lru store of 300 MiB and a never-evicting one of 10 GB were drawn side by
    side in trims_model_load, under a caption that names neither."""
    trace = {"traceEvents": [{"name": "read_params", "cat": "io", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
             "otherData": {"model_name": "m", "upr_enabled": True}}
    reports = []
    for model, store in (("m", {"store_eviction": "lru"}), ("n", {"store_eviction": "never"})):
        (tmp_path / model / "traces").mkdir(parents=True)
        (tmp_path / model / "traces" / "t.json").write_text(json.dumps(
            {**trace, "otherData": {"model_name": model, "upr_enabled": True}}))
        results = [{"model": model, "iteration": i, "latency_us": 1000 + i, "ok": True, "hit": True,
                    "trace": str(tmp_path / model / "traces" / "t.json")} for i in range(3)]
        reports.append(tmp_path / model / "report.json")
        reports[-1].write_text(json.dumps({"experiment": "compare", "model": model, "store": store,
                                           "client": {"iterations": 3}, "modes": {
            mode: {"results": results, "wall_s": 1} for mode in ("original", "shared")}}))
    run = tmp_path / "d" / "report.json"
    run.parent.mkdir()
    run.write_text(json.dumps({"experiment": "distribution", "distribution": "uniform", "params": [0, 1],
                               "concurrency": 1, "results": results, "wall_s": 1, "evictions": 0, "store": {},
                               "client": {"iterations": 3}}))
    assert main(["trims", "summary", "--compare", *map(str, reports), "--distributions", str(run), "-o",
                 str(tmp_path / "s.json")]) == 1
    assert capsys.readouterr().err == (f"repro: error: --compare {reports[1]}: store settings {{'store_eviction': "
                                       f"'never'}}, and {reports[0]}'s {{'store_eviction': 'lru'}}; expected the runs "
                                       "of one series (one store, one client's settings, one set of parameters per "
                                       "distribution)\n")
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("edit, said", [
    ({"tpu_cost_mean": "10", "tpu_cost_ci_low": "20", "tpu_cost_ci_high": "1"},
     "mode 'pecan': tpu_cost interval [20, 1]; expected ci_low at most ci_high"),
    ({"repeats": "0"}, "mode 'pecan': repeats is '0'; expected a whole number from 1 to 10000 (the runs behind the mean)"),
    ({"repeats": "2.5"}, "mode 'pecan': repeats is '2.5'; expected a whole number from 1 to 10000 (the runs behind the "
     "mean)"),
    ({"repeats": "1e308"}, "mode 'pecan': repeats is '1e308'; expected a whole number from 1 to 10000 (the runs behind "
     "the mean)"),
    ({"tpu_cost_mean": "=cmd|x"}, "mode 'pecan': tpu_cost_mean is '=cmd|x'; expected a number of dollars"),
], ids=["interval-reversed", "no-repeats", "half-a-repeat", "absurd-repeats", "text"])
def test_a_figure_refuses_a_table_whose_spread_is_no_spread(table, tmp_path, capsys, edit, said):
    """An interval whose low end is above its high end and a table of 0 repeats ("N=0") were drawn with
    exit 0; a cost that is text was said to be "a table written before repeats"."""
    rows = list(csv.DictReader(table.open()))
    rows[0].update(edit)
    edited = tmp_path / "ResNet50_v2-8.csv"
    with open(edited, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert _figure(edited, tmp_path) == 1
    assert capsys.readouterr().err == f"repro: error: {edited}: {said}\n"
    assert not (tmp_path / "f.pdf").exists() and not (tmp_path / "v.csv").exists()


@pytest.mark.parametrize("store", ["/proc/1/x", "/etc/passwd/x"])
def test_a_trace_store_that_cannot_be_made_is_named_as_the_setting(tmp_path, capsys, store):
    """`cluster start` with trace_store /proc/1/x said only "/proc/1/x: No such file or directory"."""
    assert main(["cluster", "start", "--state", str(tmp_path / "state.json"), "--settings",
                 json.dumps({"backend": "local", "trace_store": store})]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"repro: error: trace_store: {store}: cannot make the directory (") and err.endswith(
        "); expected a writable directory or gs://bucket/prefix\n"), err
    assert not (tmp_path / "state.json").exists()


@pytest.mark.parametrize("group, command", [("pecan", "comparison-table"), ("pecan", "comparison"),
                                            ("pecan tfdata", "sweep"), ("trims", "summary")])
def test_a_command_groups_usage_names_every_command(capsys, group, command):
    """`repro pecan --help` and its "required" error listed the commands by a hand-written list, which
    lacked comparison-table and comparison (and tfdata's sweep)."""
    with pytest.raises(SystemExit):
        main(group.split())
    listed = capsys.readouterr().err.splitlines()[-1].split(": ")[-1]
    assert command in listed.strip("{}").split(","), listed


def test_trims_summary_reads_the_traces_beside_a_report_read_from_elsewhere(tmp_path, monkeypatch):
    """A report names its requests' traces relative to its own directory: read from another working
    directory (another clone's), the summary read that directory's traces of the same relative path,
    and drew their numbers (a load of 15.5 ms became 5015.5) with exit 0."""
    def trace(directory, dur):
        (directory / "traces").mkdir(parents=True)
        (directory / "traces" / "t.json").write_text(json.dumps({"traceEvents": [
            {"name": "read_params", "cat": "io", "ph": "X", "ts": 1, "dur": dur, "pid": 1, "tid": 1}],
            "otherData": {"model_name": "m", "upr_enabled": True}}))

    trace(tmp_path / "run", 2000)
    trace(tmp_path / "elsewhere", 5000000)  # the same relative path, from where the reader runs
    results = [{"model": "m", "iteration": i, "latency_us": 1000 + i, "trace": "traces/t.json", "ok": True, "hit": True}
               for i in range(3)]
    (tmp_path / "run" / "report.json").write_text(json.dumps({
        "experiment": "compare", "model": "m", "store": {}, "client": {"iterations": 3},
        "modes": {mode: {"results": results, "wall_s": 1} for mode in ("original", "shared")}}))
    (tmp_path / "run" / "d.json").write_text(json.dumps({
        "experiment": "distribution", "distribution": "uniform", "params": [0, 1], "concurrency": 1, "results": results,
        "wall_s": 1, "evictions": 0, "store": {}, "client": {"iterations": 3}}))
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["trims", "summary", "--compare", str(tmp_path / "run" / "report.json"), "--distributions",
                 str(tmp_path / "run" / "d.json"), "-o", str(tmp_path / "s.json")]) == 0
    [row] = json.loads((tmp_path / "s.json").read_text())["compare"]
    assert row["original_load_ms"] == 2.0


def test_a_calibration_named_twice_is_refused(tmp_path):
    """`pecan run|figure|estimate --calibration X X`: ran (or said another pipeline's was missing)."""
    from repro.pecan.calibration_files import load_calibrations
    from test_faults_input import _calibration

    (tmp_path / "r.json").write_text(_calibration("resnet"))
    os.link(tmp_path / "r.json", tmp_path / "link.json")
    for second in ("r.json", "link.json"):
        with pytest.raises(ReproError, match=re.escape(f"--calibration {tmp_path / second}: named twice; expected each "
                                                       "pipeline's calibration once")):
            load_calibrations([tmp_path / "r.json", tmp_path / second])
    assert set(load_calibrations([tmp_path / "r.json"])) == {"resnet"}


def test_a_run_directory_with_the_clients_own_files_is_overwritten(models, tmp_path, monkeypatch, capsys):
    """--profile-output-overwrite refused a directory holding the run's upload receipt (--trace-upload),
    calling it the user's: a run made with trace upload could never be overwritten."""
    from support import run_repro

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yml").write_text(f"micro18:\n  base_path: {models}\n  profile_output_directory: {tmp_path}/p\n"
                                    f"  base_bucket_url: {tmp_path}/bucket\n  upload_bucket_name: traces\n")
    run = ["trims", "client", "run", "--config", "c.yml", "--model", "squeezenet_1.1", "--iterations", "1", "--original",
           "--device", "cpu", "--profile-output", "up", "--trace-upload"]
    for overwrite in ([], ["--profile-output-overwrite"]):
        code, _, err = run_repro([*run, *overwrite], capsys)
        assert code == 0, err
    made = next((tmp_path / "p").rglob("up"))
    assert (made / "upload.json").is_file()
    (made / "notes.json").write_text("{}")  # a file of the user's is still refused
    code, _, err = run_repro([*run, "--profile-output-overwrite"], capsys)
    assert code == 1 and "holds notes.json, which this command does not write" in err


def test_trims_models_publish_names_its_flag(tmp_path, capsys):
    """`trims models --publish DIR` was refused as a "trace store"."""
    assert main(["trims", "models", "squeezenet_1.1", "--base-path", str(tmp_path / "m"), "--publish",
                 str(tmp_path / "assets")]) == 1
    assert capsys.readouterr().err == (f"repro: error: --publish {str(tmp_path / 'assets')!r}: expected "
                                       "gs://bucket[/prefix] (a GCS asset store)\n")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("mode", [[], {"a": 1}], ids=["a-list", "an-object"])
def test_a_cost_table_names_a_summarys_mode_that_is_no_name(config, table, capsys, mode):
    """A summary (edited: `trace summarize` writes no such run field) whose trace mode is a list: an
    'unhashable type' traceback."""
    from repro.rulesettings import cost_settings

    run, summary = table.parent / "run", table.parent / "odd-summary.json"
    summary.write_text(json.dumps({"traces": [{"mode": "pecan"}, {"mode": mode}]}))
    assert main(["pecan", "cost-table", "--settings", json.dumps(cost_settings(config, "ResNet50_v2-8")), "--mode",
                 "pecan", "--log", str(run / "run.log"), "--metrics", str(run / "metrics.json"), "--summary",
                 str(summary), "-o", str(table.parent / "t.csv")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {summary}: traces[1].mode: expected a mode's name, got "
                                       f"{mode}\n")


def test_a_figure_whose_verdicts_cannot_be_written_leaves_no_figure(table, tmp_path, capsys, monkeypatch):
    """A full disk (or a read-only one) where the verdicts go: the command failed, and left the PDF and
    PNG it had drawn, looking complete."""
    import errno

    from repro.pecan import costtable

    written = costtable.write_table

    def full_disk(rows, output, *args, **kwargs):
        if str(output).endswith("v.csv"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(output))
        return written(rows, output, *args, **kwargs)

    monkeypatch.setattr(costtable, "write_table", full_disk)
    assert _figure(table, tmp_path) == 1
    assert capsys.readouterr().err.endswith("v.csv: No space left on device\n")
    assert not (tmp_path / "f.pdf").exists() and not (tmp_path / "f.png").exists() and not (tmp_path / "v.csv").exists()
