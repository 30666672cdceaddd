"""Fault injection, an adversarial pass over the tf.data engine's settings: numbers whose arithmetic
overflowed once the run had started (a wait's deadline, a window's steps), and worker caps whose
workers the memory cannot hold.

The command rows run as test_faults_input's rows do (`check_fault`): exit code 1, one line on stderr
naming the flag or key and what was expected, nothing written, no process left running.
"""

import importlib.util
import json

import pytest
import yaml
from support import REPO, run_repro
from test_faults_adversarial import CLIENT, _cluster_run, _store_state, _tfdata
from test_faults_input import CONFIG, Fault, _check_override, _write, check_fault

from repro.errors import ReproError

pytestmark = pytest.mark.fault

SCALES = r"expected a time scale from \S+ to \S+ \(a step time from 0.0001 to 60 s\)$"

COMMAND_FAULTS = [
    # OverflowError tracebacks once the run had written its data: the batch wait's deadline past
    # time_t, a window of infinitely many steps at a step time of 0
    Fault("tfdata-run-batch-timeout-1e308", _tfdata("run", "--batch-timeout", "1e308"),
          r"repro: error: --batch-timeout 1e\+308: expected a positive, finite number of seconds, at most 86400$",
          bounded=True),
    Fault("tfdata-run-subnormal-time-scale", _tfdata("run", "--time-scale", "1e-320"),
          rf"repro: error: --time-scale 9.99989e-321: a step time of \S+ s for ResNet50_v2-8 \(16 examples at \S+ "
          rf"examples/s, times the scale\); {SCALES}", bounded=True),
    # a step of 80 minutes: the run's windows lasted days
    Fault("tfdata-run-time-scale-of-hour-long-steps", _tfdata("run", "--time-scale", "1e6", "--batch-size", "1"),
          rf"repro: error: --time-scale 1e\+06: a step time of 309 s for ResNet50_v2-8 .*; {SCALES}", bounded=True),
    # the flags are bounded by the schema's bounds of the settings they stand for, not by copies of them
    *[Fault(f"tfdata-run-{flag}-past-the-schema", _tfdata("run", f"--{flag}", str(value)),
            rf"repro: error: --{flag}: {flag.replace('-', '_')}: {value} is greater than the maximum of {value - 1}$",
            bounded=True)
      for flag, value in (("batch-size", 257), ("decision-steps", 10001), ("images", 4097))],
    # a ZeroDivisionError traceback: the spec divided the CPUs by the threads before the flags were checked
    *[Fault(f"tfdata-run-no-{flag}", _tfdata("run", f"--{flag}", "0"),
            rf"repro: error: --{flag}: {flag.replace('-', '_')}: 0 is less than the minimum of 1$", bounded=True)
      for flag in ("worker-threads", "collocated-threads")],
    Fault("tfdata-start-workers-past-the-schema",
          lambda ctx: ["pecan", "tfdata", "start", "--state-dir", ctx.dir / "sd", "--workers", "4097"],
          r"repro: error: --workers: workers: 4097 is greater than the maximum of 4096$"),
    # an expectation no service meets was taken as given
    Fault("tfdata-status-expects-negative-workers",
          lambda ctx: ["pecan", "tfdata", "status", "--state-dir", ctx.dir / "sd", "--expect-workers", "-1"],
          r"repro: error: --expect-workers: expect_workers: -1 is less than the minimum of 0$"),
    # `repro config check` passed it; the workflow's runs then failed as the flag did
    Fault("config-tfdata-subnormal-time-scale",
          _check_override({"pecan": {"engine": "tfdata", "tfdata": {"time_scale": 1e-300}}}),
          rf"repro: error: .*my.yaml: pecan.tfdata.time_scale 1e-300: a step time of \S+ s for \S+ .*; {SCALES}"),
]



def _over_users_run_log(command):
    """`command` (a Fault's prepare) with the run directory's run.log the user's notes."""
    def prepare(ctx):
        _write(ctx.dir / "run" / "run.log", "my notes\n")
        return command(ctx)
    return prepare


def _cluster_run_settings():
    from repro.config import load_config
    from repro.rulesettings import run_settings

    return run_settings(load_config(CONFIG), "Getting_started", "short")


# the run's log went over the user's file of that name in the run directory (`pecan run` in test_faults_hostile)
RUN_DIRECTORY_FAULTS = [
    Fault(f"{name}-over-users-run-log", _over_users_run_log(command),
          r"repro: error: run directory .*/run: .*/run/run.log is not a run's log \(its first line names the run\), "
          r"and a run would replace it; it may be yours: move it, or name another run directory$")
    for name, command in (("cluster-run", lambda ctx: _cluster_run(ctx, _cluster_run_settings())),
                          ("tfdata-run", _tfdata("run")))]
# the upload receipt went over the run's own metrics.json (or log, or trace), with exit 0
RUN_DIRECTORY_FAULTS += [
    Fault(f"cluster-run-receipt-is-the-runs-{name.replace('/', '-')}",
          lambda ctx, name=name: [*_cluster_run(ctx, _cluster_run_settings())[:-1], str(ctx.dir / "run" / name)],
          rf"repro: error: --receipt .*/run/{name}: is the run's own {name} in --run-dir .*/run; expected another "
          r"file \(the workflow's: upload.json there\)$")
    for name in ("metrics.json", "run.log", "traces/Getting_started-short.json")]


def _trims_experiment_over_users_report(experiment):
    """`repro trims experiment EXPERIMENT --out out` where out/report.json is the user's."""
    def prepare(ctx):
        _write(ctx.dir / "out" / "report.json", '{"mine": true}')
        chosen = ["compare", "squeezenet_1.1"] if experiment == "compare" else [
            "distribution", "uniform", "--params", "0", "1", "--concurrency", "1", "--models", "squeezenet_1.1"]
        return ["trims", "experiment", *chosen, "--store", _store_state(ctx, {}), "--settings", json.dumps(CLIENT),
                "--out", str(ctx.dir / "out")]
    return prepare


# a title laid out for 50 s
COMMAND_FAULTS += [
    Fault("pecan-plot-title-of-100000-characters",
          lambda ctx: ["pecan", "plot", "-t", "1", "2", "3", "-m", "M" * 100_000, "-o", str(ctx.dir / "f")],
          r"repro: error: -m/--model: 100000 characters; expected a workload's name, the figure's title, of at most 2000$")]

# a name given twice, taken as given: groups by one field twice, a record listing a file twice, a model built twice
COMMAND_FAULTS += [
    Fault("summarize-group-by-a-field-twice", lambda ctx: [
        "trace", "summarize", _write(ctx.dir / "t.json", '{"traceEvents": []}'), "--group-by", "model_name,model_name",
        "-o", str(ctx.dir / "s.json")],
          r"repro: error: --group-by model_name,model_name: 'model_name' named twice; expected each field once$"),
    Fault("provenance-an-input-twice", lambda ctx: [
        "provenance", _write(ctx.dir / "f.pdf", "%PDF"), str(ctx.dir / "." / "f.pdf"), "--settings", "{}",
        "-o", str(ctx.dir / "p.json")],
          r"repro: error: .*/f.pdf: named twice among the inputs; expected each file once$"),
    Fault("trims-models-a-model-twice", lambda ctx: [
        "trims", "models", "squeezenet_1.1", "squeezenet_1.1", "--base-path", str(ctx.dir / "bp")],
          r"repro: error: model 'squeezenet_1.1' named twice; expected each model once$"),
]

def _comparison_tables(*names):
    """`pecan comparison-table` of workloads A and B given the tables `names` (files A.csv, B.csv)."""
    def prepare(ctx):
        for workload in ("A", "B"):
            _write(ctx.dir / f"{workload}.csv", f"workload,preset,mode\n{workload},local,cachew\n")
        return ["pecan", "comparison-table", "--option", "autoorder", "--workload", "A", "B", "--table",
                *(str(ctx.dir / name) for name in names), "-o", str(ctx.dir / "o.csv")]
    return prepare


# tables paired with workloads by position: one workload's numbers drawn under another's name
COMMAND_FAULTS += [
    Fault("comparison-table-tables-swapped", _comparison_tables("B.csv", "A.csv"),
          r"repro: error: .*/B.csv: row 1 holds runs of 'B', not of 'A'; expected A's cost table$"),
    Fault("comparison-table-a-table-twice", _comparison_tables("A.csv", "A.csv"),
          r"repro: error: --table .*/A.csv: named twice; expected each workload's own cost table once$"),
]

def _trims_summary_of_two_distributions(second):
    """`repro trims summary` of a compare report and two uniform runs (concurrency 1 and 2), the second
    changed by `second` (a dict written over it)."""
    def prepare(ctx):
        trace = {"traceEvents": [{"name": "read_params", "cat": "io", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
                 "otherData": {"model_name": "m", "upr_enabled": True}}
        _write(ctx.dir / "c" / "traces" / "t.json", json.dumps(trace))
        results = [{"model": "m", "iteration": i, "latency_us": 1000 + i, "trace": str(ctx.dir / "c" / "traces" / "t.json"),
                    "ok": True, "hit": True} for i in range(3)]
        compare = {"experiment": "compare", "model": "m", "store": {}, "client": {"iterations": 3},
                   "modes": {mode: {"results": results, "wall_s": 1} for mode in ("original", "shared")}}
        run = {"experiment": "distribution", "distribution": "uniform", "params": [0, 1], "concurrency": 1,
               "results": results, "wall_s": 1, "evictions": 0, "store": {"store_budget_bytes": 1 << 20},
               "client": {"iterations": 3}}
        return ["trims", "summary", "--compare", _write(ctx.dir / "c" / "report.json", json.dumps(compare)),
                "--distributions", _write(ctx.dir / "d1" / "report.json", json.dumps(run)),
                _write(ctx.dir / "d2" / "report.json", json.dumps({**run, "concurrency": 2, **second})),
                "-o", str(ctx.dir / "s.json")]
    return prepare


# runs of other parameters, or on another store, drawn as one series
COMMAND_FAULTS += [
    Fault("trims-summary-a-series-of-two-parameter-sets", _trims_summary_of_two_distributions({"params": [0, 5]}),
          r"repro: error: --distributions .*/d2/report.json: uniform parameters \[0, 5\], and .*/d1/report.json's "
          r"\[0, 1\]; expected the runs of one series \(one store, one client's settings, one set of parameters per "
          r"distribution\)$"),
    Fault("trims-summary-a-series-of-two-stores",
          _trims_summary_of_two_distributions({"store": {"store_budget_bytes": 2 << 20}}),
          r"repro: error: --distributions .*/d2/report.json: store settings \{'store_budget_bytes': 2097152\}, and "
          r".*/d1/report.json's \{'store_budget_bytes': 1048576\}; expected the runs of one series"),
]

# the run's report went over the user's report.json in --out (its traces/ was refused already)
RUN_DIRECTORY_FAULTS += [
    Fault(f"trims-experiment-{experiment}-over-users-report", _trims_experiment_over_users_report(experiment),
          r"repro: error: --out .*/out: .*/out/report.json is not an experiment's report.json, and the run would "
          r"replace it; it may be yours: move it, or name another --out$")
    for experiment in ("compare", "distribution")]


@pytest.mark.parametrize("fault", COMMAND_FAULTS + RUN_DIRECTORY_FAULTS,
                         ids=[f.id for f in COMMAND_FAULTS + RUN_DIRECTORY_FAULTS])
def test_command_faults(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def test_a_run_whose_largest_deployment_the_memory_cannot_hold_is_refused_before_it_starts(tf, tmp_path, monkeypatch,
                                                                                          capsys):
    """`repro pecan tfdata run` whose worker caps (pecan.tfdata.max_*_workers or the flags, within
    pecan.cluster's) let its policy start more workers on this machine than the memory holds: `tfdata
    start --workers` refused such a count, a run started them one by one until memory ran out."""
    from repro.pecan.tfdata import WORKER_MEMORY_MB

    monkeypatch.setattr("repro.machine.available_memory_mb", lambda meminfo="/proc/meminfo": 3 * WORKER_MEMORY_MB)
    monkeypatch.chdir(tmp_path)
    short = ["--decision-steps", "8", "--settle-windows", "1", "--max-windows", "1", "--images", "16", "--time-scale", "1"]
    code, out, err = run_repro(["pecan", "tfdata", "run", "--config", REPO / "config" / "config.yaml", "--experiment",
                                "ResNet50_v2-8", "--mode", "pecan", "--out", "run", "--max-remote-workers", "3",
                                "--max-local-workers", "1", *short], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: mode pecan: up to 3 remote worker(s) on this machine and 1 local (max_remote_workers, "
                   "max_local_workers: pecan.tfdata's or --max-remote-workers, --max-local-workers, within pecan.cluster's): "
                   f"4 worker process(es) need about {4 * WORKER_MEMORY_MB} MB ({WORKER_MEMORY_MB} MB each, TensorFlow "
                   f"loaded); {3 * WORKER_MEMORY_MB} MB available (MemAvailable); expected at most 3\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode, remote_here, workers", [
    ("collocated", True, None), ("cachew", True, 4), ("cachew", False, 1), ("pecan", True, 6), ("pecan", False, 2),
    ("fixed", True, 3)])
def test_the_largest_deployment_counts_the_workers_this_machine_runs(tmp_path, mode, remote_here, workers):
    """Cachew scales remote workers only, Pecan's placement both kinds, a fixed deployment holds its own
    workers; remote workers on worker hosts take none of this machine's memory, the transfer probe's
    one worker does."""
    from repro.pecan.tfdata import WORKER_MEMORY_MB
    from repro.pecan.tfdata.spec import check_deployment_memory, spec_from_config

    pecan = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["pecan"]
    pecan["modes"]["fixed"] = {"placement": "fixed", "autoorder": False, "epochs": 1, "steps_per_loop": 1,
                               "remote_workers": 2, "local_workers": 1}
    spec = spec_from_config(pecan, "ResNet50_v2-8", mode, max_remote_workers=4, max_local_workers=2)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemAvailable: {(workers or 1) * WORKER_MEMORY_MB * 1024} kB\n")
    check_deployment_memory(spec, remote_here, meminfo)
    if workers is not None:
        meminfo.write_text(f"MemAvailable: {(workers * WORKER_MEMORY_MB - 1) * 1024} kB\n")
        with pytest.raises(ReproError, match=rf"^mode {mode}: .*: {workers} worker process\(es\) need"):
            check_deployment_memory(spec, remote_here, meminfo)


@pytest.mark.skipif(importlib.util.find_spec("fabric") is None, reason="needs the ssh extra")
def test_a_host_that_does_not_speak_ssh_is_named_in_one_line(tmp_path):
    """`repro cluster start` (ssh backend) against a port that accepts and closes at once: paramiko's
    transport thread printed its "Error reading SSH protocol banner" traceback, 19 lines, before the
    one-line error."""
    import socket
    import subprocess
    import threading

    from support import BIN

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        (tmp_path / "key").write_text("")
        (tmp_path / "known_hosts").write_text("")
        host = {"name": "trainer", "address": "127.0.0.1", "port": listener.getsockname()[1], "user": "u",
                "key_file": str(tmp_path / "key")}
        config.update(backend="ssh", ssh={"known_hosts": str(tmp_path / "known_hosts"), "connect_timeout_s": 5,
                                          "hosts": {"accelerator": host}, "start_commands": {"accelerator": ["true"]}})
        config["plots"]["trims"] = []
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
        done = subprocess.run([str(BIN / "repro"), "cluster", "start", "--config", "c.yaml", "--state", "st.json"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        server.join()
        listener.close()
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("repro: error: "), done.stderr
    assert "trainer (u@127.0.0.1:" in done.stderr and not (tmp_path / "st.json").exists()
