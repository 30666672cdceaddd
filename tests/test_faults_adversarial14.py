"""Fault cases found by the fourth round of adversarial passes over the whole surface."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from repro.cli import main
from support import REPO, path_env
from test_faults_adversarial import _compare_results_into
from test_faults_input import Fault, _calibration, _check_override, _pecan_run, check_fault

pytestmark = pytest.mark.fault


def _started(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["cluster", "start", "--config", str(REPO / "config" / "config.yaml"), "--state", "state.json"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("kind, make", [("a directory", os.mkdir), ("a FIFO", os.mkfifo)])
def test_cluster_status_names_a_calibration_that_is_not_a_file(tmp_path, monkeypatch, capsys, kind, make):
    """A directory or a FIFO named as a calibration was reported "missing", which it was not."""
    _started(tmp_path, monkeypatch, capsys)
    make(tmp_path / "cal.json")
    assert main(["cluster", "status", "--state", "state.json", "--calibration", "cal.json"]) == 1
    out, err = capsys.readouterr()
    assert f"[FAILED] calibration cal.json present: {kind}, not a file" in out, out
    assert err.startswith("repro: error: cluster status: 1 check(s) FAILED: calibration cal.json present")


@pytest.mark.parametrize("second", ["cal.json", "link.json"])
def test_cluster_status_fails_a_calibration_named_twice(tmp_path, monkeypatch, capsys, second):
    """A calibration named twice (or through a symlink) passed the status check, exit 0, where the run
    after it refuses it."""
    _started(tmp_path, monkeypatch, capsys)
    assert main(["pecan", "calibrate", "--pipeline", "resnet", "--elements", "2", "--repeats", "1", "-o", "cal.json"]) == 0
    os.symlink("cal.json", tmp_path / "link.json")
    capsys.readouterr()
    assert main(["cluster", "status", "--state", "state.json", "--calibration", "cal.json", second]) == 1
    out, err = capsys.readouterr()
    assert (f"[FAILED] calibration {second} named once: --calibration {second}: named twice; expected each pipeline's "
            "calibration once") in out, out
    assert err.startswith(f"repro: error: cluster status: 1 check(s) FAILED: calibration {second} named once")


def _calibration_with(order, key, value):
    data = json.loads(_calibration("resnet"))
    (data[order] if order else data)[key] = value
    return json.dumps(data)


CALIBRATION = r"repro: error: --calibration .*/resnet.json: "
CPU_S = "a positive number of CPU seconds, 1e-09 to 3600"
# a calibration's fields that a run reads but that were checked only in part: each gave a traceback
CALIBRATION_FAULTS = [
    Fault("calibration-declared-draws-null", _pecan_run(_calibration_with("declared", "element_cpu_s", None)),
          CALIBRATION + f"declared.element_cpu_s: expected a non-empty list, each element's cost {CPU_S}$"),
    Fault("calibration-autoorder-draws-null", _pecan_run(_calibration_with("autoorder", "element_cpu_s", None)),
          CALIBRATION + f"autoorder.element_cpu_s: expected a non-empty list, each element's cost {CPU_S}$"),
    Fault("calibration-draw-of-1e300-s", _pecan_run(_calibration_with("autoorder", "element_cpu_s", [1e300, 0.01])),
          CALIBRATION + f"autoorder.element_cpu_s: expected a non-empty list, each element's cost {CPU_S}$"),
    Fault("calibration-draws-of-other-elements", _pecan_run(_calibration_with("autoorder", "element_cpu_s", [0.01])),
          CALIBRATION + "declared.element_cpu_s has 2 element\\(s\\), autoorder.element_cpu_s 1; expected both orders "
                        "measured on the same elements$"),
    Fault("calibration-bytes-of-1e300", _pecan_run(_calibration_with("autoorder", "bytes_out_per_element", 1e300)),
          CALIBRATION + "autoorder.bytes_out_per_element is 1e\\+300; expected a positive number of bytes, at most 1e\\+12$"),
    *(Fault(f"calibration-reference-kernel-{name}", _pecan_run(_calibration_with(None, "reference_kernel", kernel)),
            CALIBRATION + f"reference_kernel.cpu_s: expected {CPU_S}$")
      for name, kernel in (("text", {"cpu_s": "x"}), ("zero", {"cpu_s": 0}), ("negative", {"cpu_s": -1}),
                           ("a-list", [1]))),
]


@pytest.mark.parametrize("fault", CALIBRATION_FAULTS, ids=[f.id for f in CALIBRATION_FAULTS])
def test_calibration_faults(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


@pytest.mark.service
def store_in_a_clone(tmp_path, monkeypatch):
    """A model store started as the workflow starts it, in tmp_path made a clone's directory (its
    Makefile, results/, plots/, the cwd); returns the store's record."""
    from repro.trims import service

    shutil.copy(REPO / "Makefile", tmp_path)
    (tmp_path / "plots").mkdir()
    (tmp_path / "results" / "trims" / "models").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    settings = {"base_path": "results/trims/models", "server": {"eviction": "lru", "memory_mb": 50, "device": "cpu"}}
    assert main(["trims", "store", "start", "--settings", json.dumps(settings), "--state",
                 "results/cluster/local/trims-store.json"]) == 0
    return json.loads(service._record_path(tmp_path).read_text())


def test_make_clean_stops_the_model_store_when_results_cluster_is_gone(tmp_path, monkeypatch):
    """`rm -rf results/*`, then `make clean`: it stopped what each results/cluster/*/ named, found none,
    exit 0, and the store (and its watchdog) ran on, its models' directory deleted."""
    from repro.processes import matches
    from repro.trims import service

    record = store_in_a_clone(tmp_path, monkeypatch)
    try:
        shutil.rmtree(tmp_path / "results" / "cluster")
        proc = subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=path_env())
        assert proc.returncode == 0, proc.stderr
        assert "model store stopped" in proc.stdout
        assert not matches(record["process"]) and not matches(record["watchdog"])
    finally:
        service.stop(tmp_path)


@pytest.fixture(scope="module")
def pecan_run(tmp_path_factory):
    """A run of the model engine: its run.log and metrics.json."""
    from repro.config import load_config
    from repro.pecan.calibrate import calibrate
    from repro.pecan.run import run_mode

    directory = tmp_path_factory.mktemp("run") / "pecan"
    config = load_config(REPO / "config" / "config.yaml")
    config["calibration"]["preset"] = "artifact"
    calibrations = {p: calibrate(p, elements=2, repeats=1) for p in ("resnet", "retinanet")}
    run_mode(config, "ResNet50_v2-8", "pecan", calibrations, directory)
    return directory, config


@pytest.mark.parametrize("cut", ["after-its-first-throughput", "mid-line"])
def test_a_cost_row_refuses_a_log_cut_short_since_the_run(pecan_run, tmp_path, cut):
    """A run's log cut after its first throughput line (or in the middle of a line) priced the mode from
    what was left, exit 0: a Pecan row of $2.81 and no workers where the run's whole log gave $0.57."""
    from repro.errors import ReproError
    from repro.pecan.costtable import mode_row
    from repro.rulesettings import cost_settings

    directory, config = pecan_run
    settings = cost_settings(config, "ResNet50_v2-8")
    whole = (directory / "run.log").read_text()
    assert mode_row(directory / "run.log", directory / "metrics.json", "pecan", settings)["remote_workers"] > 0
    lines = whole.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if "examples/second" in line)
    text = "".join(lines[:first + 1]) if cut == "after-its-first-throughput" else whole[:whole.index("TimeHistory", len(whole) // 2) + 20]
    (tmp_path / "run.log").write_text(text)
    with pytest.raises(ReproError) as error:
        mode_row(tmp_path / "run.log", directory / "metrics.json", "pecan", settings)
    assert str(error.value).startswith(f"{tmp_path / 'run.log'}: reads local_workers ")
    assert str(error.value).endswith(f"({directory / 'metrics.json'}: repeats[0]); expected the log as the run wrote it "
                                     "(cut short or edited since?): rerun the run")


@pytest.mark.parametrize("url", ["gs:///x", "gs://B/x", "gs://a", "gs://-ab/x", "gs://a b/x"])
def test_a_gcs_store_of_a_malformed_bucket_is_refused_before_credentials_are_looked_for(url):
    """A receipt naming `gs:///x` (an empty bucket) went on to a credentials lookup and its retries,
    then "no Google credentials found", where `gs://` was refused as malformed."""
    from repro.errors import ReproError
    from repro.tracestore import open_store

    with pytest.raises(ReproError) as error:
        open_store(url)
    assert str(error.value) == (f"trace store {url!r}: expected gs://bucket[/prefix], the bucket's name 3 to 222 "
                                "lowercase letters, digits, dots, dashes and underscores")


@pytest.mark.parametrize("target", ["/dev/zero", "dir"])
def test_doctor_names_a_profile_config_that_is_not_a_file(tmp_path, capsys, target):
    """`repro doctor --profile DIR`, DIR/config.yaml a link to /dev/zero (or a directory): "not a Snakemake
    profile (expected a directory with config.yaml)", which it has."""
    profile = tmp_path / "profile"
    profile.mkdir()
    if target == "dir":
        (profile / "config.yaml").mkdir()
    else:
        (profile / "config.yaml").symlink_to(target)
    assert main(["doctor", "--profile", str(profile)]) == 1
    kind = "a directory" if target == "dir" else "a character device"
    assert capsys.readouterr().err == (f"repro: error: {profile / 'config.yaml'}: {kind}; expected the Snakemake "
                                       "profile's config file\n")


def test_an_empty_group_by_puts_every_trace_in_one_group(tmp_path, monkeypatch, capsys):
    """As --help says: `--group-by ''` is one group of all the traces (a field list, none named)."""
    from repro.traces import write_trace

    monkeypatch.chdir(tmp_path)
    for model in ("a", "b"):
        write_trace(tmp_path / "t" / f"{model}.json", [{"name": "step", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}],
                    {"otherData": {"model_name": model, "upr_enabled": False}})
    assert main(["trace", "summarize", "t", "--group-by", "", "-o", "one.json"]) == 0
    assert main(["trace", "summarize", "t", "-o", "two.json"]) == 0
    groups = [len(json.loads((tmp_path / name).read_text())["groups"]) for name in ("one.json", "two.json")]
    assert groups == [1, 2]


def test_a_sweep_refuses_a_later_counts_run_directory_before_any_run(tmp_path, monkeypatch, capsys):
    """`tfdata sweep --counts 0 2` where 2/run.log is the user's: the count 0 ran for minutes first, then
    the count 2 was refused; and `tfdata run` refused a user's run.log only after TensorFlow's import."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sw" / "2").mkdir(parents=True)
    (tmp_path / "sw" / "2" / "run.log").write_text("my notes\n")
    assert main(["pecan", "tfdata", "sweep", "--config", str(REPO / "config" / "config.yaml"), "--experiment",
                 "ResNet50_v2-8", "--mode", "cachew", "--counts", "0", "2", "--out", "sw"]) == 1
    assert capsys.readouterr().err.startswith(f"repro: error: run directory {os.path.join('sw', '2')}: ")
    assert sorted(p.name for p in (tmp_path / "sw").iterdir()) == ["2"]  # no count ran


ROW = "short,ResNet50_v2-8,{preset},{cost},0.5\n"
HEADER = "mode,workload,preset,tpu_cost_mean,worker_cost_mean\n"
# compare-results read tables that the figure and the comparison tables refuse, and said "all within tolerance"
COMPARE_FAULTS = [
    Fault("compare-results-two-rows-of-a-mode",
          lambda ctx: _compare_results_into(ctx, "c.csv", HEADER + ROW.format(preset="local", cost=15.0)
                                            + ROW.format(preset="local", cost=1.5)),
          r"repro: error: .*/r2/tables/ResNet50_v2-8.csv: two rows for mode 'short' of ResNet50_v2-8; expected one row per "
          r"mode and workload$"),
    Fault("compare-results-another-preset",
          lambda ctx: _compare_results_into(ctx, "c.csv", HEADER + ROW.format(preset="artifact", cost=1.5)),
          r"repro: error: .*/r2/tables/ResNet50_v2-8.csv: row 1 holds runs of calibration preset 'artifact', not of "
          r"'local'"),
]


@pytest.mark.parametrize("fault", COMPARE_FAULTS, ids=[f.id for f in COMPARE_FAULTS])
def test_compare_results_refuses_the_tables_the_figures_refuse(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def test_a_comparisons_table_of_two_rows_for_one_mode_or_another_preset_is_refused():
    from repro.config import load_config
    from repro.errors import ReproError
    from repro.pecan.reproducibility import _check_table_of

    config = load_config(REPO / "config" / "config.yaml")
    workloads = config["plots"]["comparisons"]["Cachew_AP_FF"]["workloads"]
    rows = [{"workload": w, "preset": "local", "mode": "cachew"} for w in workloads]
    _check_table_of(config, "Cachew_AP_FF", "t.csv", rows)
    for bad, said in (([*rows, dict(rows[-1])], f"two rows for mode 'cachew' of {workloads[-1]}"),
                      ([dict(rows[0], preset="artifact"), *rows[1:]], "row 1 holds runs of calibration preset 'artifact'")):
        with pytest.raises(ReproError) as error:
            _check_table_of(config, "Cachew_AP_FF", "t.csv", bad)
        assert str(error.value).startswith(f"t.csv: {said}")


def test_a_tool_config_as_info_config_prints_it_is_refused_naming_where_its_settings_belong(tmp_path, capsys):
    """`trims-tools info config > f.yml`, edited, then `--config f.yml`: every key was outside `micro18:`
    (`micro18.base_path:`, `serverinfopath:`), ignored without a word, exit 0, the defaults used."""
    from repro.trims.originals import main as original_main

    printed = tmp_path / "printed.yml"
    assert original_main(["info", "config"]) == 0
    text = capsys.readouterr().out
    printed.write_text(text.replace("micro18.base_path: ", f"micro18.base_path: {tmp_path}/models #"))
    assert original_main(["info", "config", "--config", str(printed)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"trims-tools: error: {printed}: ['micro18.base_bucket_url', 'micro18.base_path', "), err
    assert err.endswith("'micro18.visible_devices', 'serverinfopath'] at the top level; expected them under 'micro18:' "
                        "(as base_bucket_url, base_path, build_timeout, client_build_cmd, client_relative_path, "
                        "client_run_cmd, polling_interval, profile_output_directory, server_build_cmd, "
                        "server_relative_path, server_run_cmd, src_path, upload_bucket_name, visible_devices, "
                        "server_info_path), where the tools read their settings\n"), err
    assert main(["trims", "config", "--config", str(printed)]) == 1


# a store inside a run directory passed the check; the workflow uploaded the other modes' traces into
# that run's traces/, and the run failed half-way, refusing them as not its own
TRACE_STORE_FAULTS = [
    Fault(f"trace-store-in-results-{name}", _check_override({"trace_store": store}),
          rf"repro: error: .*: trace_store: '{store}' lies in results/{name}, which the workflow's rules write; expected "
          r"a directory of its own, such as results/store$")
    for name, store in (("runs", "results/runs/ResNet50_v2-8/pecan"), ("tables", "results/tables/s"),
                        ("calibration", "results/calibration"))]


@pytest.mark.parametrize("fault", TRACE_STORE_FAULTS, ids=[f.id for f in TRACE_STORE_FAULTS])
def test_a_trace_store_where_the_rules_write_is_refused(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def test_a_rerun_stopped_while_the_earlier_runs_repeats_go_leaves_no_earlier_run_looking_complete(tmp_path, monkeypatch,
                                                                                                    capsys):
    """Ctrl-C while `cluster run` removed the earlier run's repeats/: the earlier metrics.json (naming every
    repeat log) and upload.json stayed beside a repeats/ with logs gone, and the cost table took them."""
    from types import SimpleNamespace

    from repro.config import load_config
    from repro.pecan import run as pecan_run
    from repro.rulesettings import run_settings
    from test_faults_adversarial import _cluster_run

    monkeypatch.chdir(tmp_path)
    settings = run_settings(load_config(REPO / "config" / "config.yaml"), "Getting_started", "short")
    settings["repeats"] = 3
    argv = [str(a) for a in _cluster_run(SimpleNamespace(dir=tmp_path), settings)]
    assert main(argv) == 0
    run_dir = tmp_path / "run"
    assert (run_dir / "metrics.json").exists() and len(list((run_dir / "repeats").iterdir())) == 2
    removing = pecan_run.remove_repeats

    def stopped(directory, *args, **kwargs):
        next((Path(directory) / "repeats").iterdir()).unlink()  # half-way
        raise KeyboardInterrupt

    monkeypatch.setattr(pecan_run, "remove_repeats", stopped)
    assert main(argv) == 130  # as after Ctrl-C
    monkeypatch.setattr(pecan_run, "remove_repeats", removing)
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "upload.json").exists()


@pytest.mark.parametrize("proc_file", ["/proc/self/pagemap", "/proc/self/status"])
def test_provenance_refuses_a_proc_file_that_holds_more_than_its_size_says(tmp_path, capsys, proc_file):
    """/proc/self/pagemap is a "regular" file of size 0 that reads hundreds of GiB: `repro provenance`
    hashed it until killed, without a word."""
    assert main(["provenance", "--settings", "{}", "-o", str(tmp_path / "p.json"), str(REPO / "README.md"),
                 proc_file]) == 1
    assert capsys.readouterr().err == (f"repro: error: {proc_file}: holds more than the 0 bytes its size gives (a file "
                                       "of /proc or /sys?); expected a regular file\n")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("column, value, expected", [
    ("tpu_cost", "x", "a non-negative number of dollars, at most 1e+09"),
    ("epoch_time", "nan", "a non-negative number of seconds, at most 1e+12"),
    ("batches_sec", "-1", "a non-negative number of batches per second, at most 1e+12"),
    ("remote_workers", "-4", "a whole number of workers, at most 1e+12"),
    ("local_workers", "1.5", "a whole number of workers, at most 1e+12"),
    ("worker_cost", "", "a non-negative number of dollars, at most 1e+09"),
])
def test_a_figure_refuses_a_table_whose_undrawn_run_columns_no_run_gives(tmp_path, column, value, expected):
    """`pecan figure` checked the columns it draws (mean, interval) and drew a table whose run columns
    held 'x', -4 workers or NaN, exit 0: 40 of 65 single-cell changes went through."""
    import csv

    from repro.errors import ReproError
    from repro.plots import plot_costs
    from test_plots import _six_mode_table

    style = {"width_in": 5.0, "height_in": 3.6, "dpi": 50, "font_size": 9, "show_reference": False}
    table = _six_mode_table(tmp_path / "t.csv")
    plot_costs(table, [tmp_path / "f.png"], "t", "c", style)  # as written
    rows = list(csv.DictReader(open(table)))
    rows[1][column] = value
    with open(table, "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(ReproError) as error:
        plot_costs(table, [tmp_path / "g.png"], "t", "c", style)
    assert str(error.value) == f"{table}: mode 'cachew': {column} is {value!r}; expected {expected}"
    assert not (tmp_path / "g.png").exists()


@pytest.mark.parametrize("value", [[], None, "x", 1e308, "NaN", "missing"])
def test_a_cost_row_refuses_a_calibration_that_names_no_preset(pecan_run, tmp_path, value):
    """metrics.json's `calibration` was copied into the table's preset column as it was: `[]`, null or
    any text, exit 0, where the figures and comparisons read it."""
    from repro.errors import ReproError
    from repro.pecan.costtable import mode_row
    from repro.rulesettings import cost_settings

    directory, config = pecan_run
    metrics = json.loads((directory / "metrics.json").read_text())
    if value == "missing":
        del metrics["calibration"]
    else:
        metrics["calibration"] = value
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(ReproError) as error:
        mode_row(directory / "run.log", tmp_path / "metrics.json", "pecan", cost_settings(config, "ResNet50_v2-8"))
    shown = None if value == "missing" else value
    assert str(error.value) == (f"{tmp_path / 'metrics.json'}: calibration: {str(shown)[:40]!r}; expected the calibration "
                                "preset of the run, one of ['local', 'artifact']; rerun the run")


def test_a_cost_table_refuses_runs_of_two_presets(pecan_run, tmp_path):
    """A run under the artifact preset beside one under local made one table, exit 0: costs of two
    calibrations drawn side by side under one caption."""
    import copy

    from repro.errors import ReproError
    from repro.pecan.calibrate import calibrate
    from repro.pecan.costtable import cost_table
    from repro.pecan.run import run_mode
    from repro.rulesettings import cost_settings

    directory, config = pecan_run
    assert json.loads((directory / "metrics.json").read_text())["calibration"] == "artifact"
    local = copy.deepcopy(config)
    local["calibration"]["preset"] = "local"
    run_mode(local, "ResNet50_v2-8", "cachew", {p: calibrate(p, elements=2, repeats=1) for p in ("resnet", "retinanet")},
             tmp_path / "cachew")
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"traces": [{"mode": "pecan"}, {"mode": "cachew"}]}))
    runs = [directory, tmp_path / "cachew"]
    with pytest.raises(ReproError) as error:
        cost_table(cost_settings(config, "ResNet50_v2-8"), ["pecan", "cachew"], [run / "run.log" for run in runs],
                   [run / "metrics.json" for run in runs], summary)
    assert str(error.value) == (f"{tmp_path / 'cachew' / 'metrics.json'}: a run of calibration preset 'local', and "
                                f"{directory / 'metrics.json'} of 'artifact'; expected the runs of one preset: rerun the "
                                "runs")


@pytest.mark.parametrize("matches", [3, 99])
def test_costs_says_where_no_worker_set_settled(capsys, matches):
    """`pecan costs --worker-matches N` gave the same row for any N up to 1e17, with nothing to say
    that no deployment was seen N times in a row: the row prices the last worker set."""
    log = REPO / "tests" / "fixtures" / "pecan-logs" / "resnet_pecan.log"
    assert main(["pecan", "costs", "--experiment", "ResNet50_v2-8", "--worker-matches", str(matches), str(log)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1].split(",")[4:6] == ["4", "10"]
    if matches == 3:  # the artifact's log settles at 4 remote and 10 local workers
        assert err == ""
    else:
        assert err == (f"note: {log}: no worker set is seen 99 times in a row (--worker-matches); the row prices the last "
                       "one, 4 remote and 10 local\n")
