"""Fault injection, continued: what a hostile user gives the commands that the other fault files do
not try. Settings written by hand with values of the wrong type or past their bounds, model store
requests with names no model has, size flags without bounds, output paths.

Each row runs as test_faults_input's rows do (`check_fault`): exit code 1 (2 for argparse's usage
errors), one line on stderr naming the key, flag or file and what was expected, nothing written,
changed or deleted under the test's directory, no process left running.
"""

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_faults_input import CONFIG, LOGS, Fault, _calibration, _fifo, _write, check_fault

pytestmark = pytest.mark.fault


def _config_settings(make, *args):
    from repro.config import load_config

    return make(load_config(CONFIG), *args)


def _changed(settings, keys, value):
    settings = copy.deepcopy(dict(settings))
    node = settings
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return settings


def _calibrations(ctx):
    return [_write(ctx.dir / f"{p}.json", _calibration(p)) for p in ("resnet", "retinanet")]


def _run_settings(keys, value):
    """`repro pecan run --settings FILE` with the workflow's run settings, one value changed."""
    def prepare(ctx):
        from repro.rulesettings import run_settings

        settings = _changed(_config_settings(run_settings, "ResNet50_v2-8", "pecan"), keys, value)
        return ["pecan", "run", "--settings", _write(ctx.dir / "settings.json", json.dumps(settings)),
                "--experiment", "ResNet50_v2-8", "--mode", "pecan", "--calibration", *_calibrations(ctx),
                "--out", str(ctx.dir / "run")]

    return prepare


def _estimate_settings(keys, value):
    def prepare(ctx):
        from repro.rulesettings import estimate_settings

        settings = _changed(_config_settings(estimate_settings), keys, value)
        return ["pecan", "estimate", "--settings", json.dumps(settings), "--calibration", *_calibrations(ctx),
                "--output", str(ctx.dir / "estimate.txt")]

    return prepare


def _cluster_settings(keys, value):
    def prepare(ctx):
        from repro.rulesettings import cluster_settings

        settings = _changed(_config_settings(cluster_settings), keys, value)
        return ["cluster", "start", "--settings", json.dumps(settings), "--state", str(ctx.dir / "cluster" / "state.json")]

    return prepare


def _store_settings(keys, value):
    def prepare(ctx):
        from repro.rulesettings import trims_store_settings

        settings = _changed(_config_settings(trims_store_settings), keys, value)
        return ["trims", "store", "start", "--settings", json.dumps(settings), "--state", str(ctx.dir / "store" / "state.json")]

    return prepare


SETTINGS_FAULTS = [
    # -- settings written by hand: a wrong type or an absurd value, named by key --------------------
    Fault("run-settings-seed-a-string", _run_settings(["seed"], "x"),
          r"repro: error: --settings .*/settings.json: seed: 'x' is not of type 'integer'"),
    Fault("run-settings-repeats-a-billion", _run_settings(["repeats"], 10 ** 9),
          r"repro: error: --settings .*/settings.json: repeats: 1000000000 is greater than the maximum of 10000", bounded=True),
    Fault("run-settings-batch-size-a-string", _run_settings(["pecan", "models", "resnet", "batch_size"], "big"),
          r"repro: error: --settings .*: pecan.models.resnet.batch_size: 'big' is not of type 'integer'"),
    Fault("run-settings-mode-a-list", _run_settings(["pecan", "modes", "pecan"], [1]),
          r"repro: error: --settings .*: pecan.modes.pecan: \[1\] is not of type 'object'"),
    Fault("run-settings-cluster-a-list", _run_settings(["pecan", "cluster"], []),
          r"repro: error: --settings .*: pecan.cluster: \[\] is not of type 'object'"),
    Fault("run-settings-epochs-fractional", _run_settings(["pecan", "modes", "pecan", "epochs"], 2.5),
          r"repro: error: --settings .*: pecan.modes.pecan.epochs: 2.5 is not of type 'integer'"),
    Fault("run-settings-calibration-a-string", _run_settings(["calibration"], "x"),
          r"repro: error: --settings .*: calibration: 'x' is not of type 'object'"),
    Fault("run-settings-network-a-string", _run_settings(["pecan", "cluster", "network_gbps"], "32"),
          r"repro: error: --settings .*: pecan.cluster.network_gbps: '32' is not of type 'number'"),
    Fault("run-settings-policy-prices-null", _run_settings(["pecan", "cluster", "policy_prices"], None),
          r"repro: error: --settings .*: pecan.cluster.policy_prices: None is not of type 'object'"),
    Fault("run-settings-modes-a-string", _run_settings(["pecan", "experiments", "ResNet50_v2-8", "modes"], "pecan"),
          r"repro: error: --settings .*: pecan.experiments.ResNet50_v2-8.modes: 'pecan' is not of type 'array'"),
    Fault("run-settings-autoorder-yes", _run_settings(["pecan", "modes", "pecan", "autoorder"], "yes"),
          r"repro: error: --settings .*: pecan.modes.pecan.autoorder: 'yes' is not of type 'boolean'"),
    Fault("estimate-settings-seed-a-string", _estimate_settings(["seed"], "x"),
          r"repro: error: --settings: seed: 'x' is not of type 'integer'"),
    Fault("estimate-settings-models-a-list", _estimate_settings(["pecan", "models"], []),
          r"repro: error: --settings: pecan.models: \[\] is not of type 'object'"),
    Fault("estimate-settings-worker-price-a-string", _estimate_settings(["pecan", "prices", "worker"], "1"),
          r"repro: error: --settings: pecan.prices.worker: '1' is not of type 'number'"),
    Fault("estimate-settings-worker-price-1e308", _estimate_settings(["pecan", "prices", "worker"], 1e308),
          r"repro: error: --settings: pecan.prices.worker: 1e\+308 is greater than the maximum of 1000000"),
    Fault("estimate-settings-preset-a-number", _estimate_settings(["calibration", "preset"], 5),
          r"repro: error: --settings: calibration.preset: 5 is not of type 'string'"),
    Fault("cluster-start-settings-trace-store-empty", _cluster_settings(["trace_store"], ""),
          r"repro: error: --settings: trace_store: '' should be non-empty"),
    Fault("cluster-start-settings-trace-store-a-number", _cluster_settings(["trace_store"], 5),
          r"repro: error: --settings: trace_store: 5 is not of type 'string'"),
    Fault("cluster-start-settings-backend-a-list", _cluster_settings(["backend"], []),
          r"repro: error: --settings: backend: \[\] is not of type 'string'"),
    Fault("cluster-start-settings-ssh-a-string", _cluster_settings(["ssh"], "x"),
          r"repro: error: --settings: ssh: 'x' is not of type 'object'"),
    Fault("cluster-start-settings-engine-a-number", _cluster_settings(["engine"], 5),
          r"repro: error: --settings: engine: 5 is not of type 'string'"),
    Fault("store-start-settings-base-path-a-number", _store_settings(["base_path"], 5),
          r"repro: error: --settings: base_path: 5 is not of type 'string'"),
    Fault("store-start-settings-server-a-list", _store_settings(["server"], []),
          r"repro: error: --settings: server: \[\] is not of type 'object'"),
    Fault("store-start-settings-memory-a-string", _store_settings(["server", "memory_mb"], "x"),
          r"repro: error: --settings: server.memory_mb: 'x' is not of type 'integer'"),
    Fault("store-start-settings-memory-1e30", _store_settings(["server", "memory_mb"], 10**30),
          r"repro: error: --settings: server.memory_mb: 10{30} is greater than the maximum of \d+"),
    # a whole number written as a float passed jsonschema's `integer`, then failed where it was used
    Fault("store-start-settings-memory-a-float", _store_settings(["server", "memory_mb"], 512.0),
          r"repro: error: --settings: server.memory_mb: 512.0 is not of type 'integer'$"),
    Fault("store-start-settings-eviction-a-number", _store_settings(["server", "eviction"], 3),
          r"repro: error: --settings: server.eviction: 3 is not of type 'string'"),
]



def _trace(*events):
    return lambda ctx: _write(ctx.dir / "t.json", json.dumps({"traceEvents": [
        {"name": "a", "ph": "X", "pid": 1, "tid": 1, **event} for event in events]}))


def _original_summary(*events):
    return lambda ctx: ["trace", "summarize", "--format", "original", _trace(*events)(ctx), "-o", str(ctx.dir / "s.json")]


TRACE_FAULTS = [
    # a file name that would break the error's line or drive the terminal is shown escaped
    Fault("summarize-a-name-with-control-characters", lambda ctx: ["trace", "summarize", "bad\x1b[31mname\nnext.json"],
          r"repro: error: bad\\x1b\[31mname\\nnext.json: no such file or directory$"),
    Fault("summarize-an-existing-name-with-a-newline", lambda ctx: ["trace", "summarize", _write(ctx.dir / "a\nb.json", "[")],
          r"repro: error: .*/a\\nb.json: "),
    # -- the original tools' summary: integer nanoseconds and dates from any finite microseconds --
    Fault("original-summary-duration-past-nanoseconds", _original_summary({"ts": 1, "dur": 1e308}),
          r"repro: error: .*/t.json: end_to_end_process_time of 1e\+308 us is not a finite number of nanoseconds"),
    Fault("original-summary-timestamp-past-9999", _original_summary({"ts": 1e300, "dur": 1}),
          r"repro: error: .*/t.json: timestamp 1e\+300 us is no date between the years 1 and 9999"),
    Fault("original-summary-timestamp-before-year-1", _original_summary({"ts": -1e17, "dur": 1}),
          r"repro: error: .*/t.json: timestamp -1e\+17 us is no date"),
    # -o left out: the default summary.json was written over whatever held that name (the user's notes)
    Fault("summarize-default-output-a-users-file",
          lambda ctx: [_write(ctx.dir / "summary.json", "my notes\n"), "trace", "summarize", _trace({"ts": 1, "dur": 1})(ctx)][1:],
          r"repro: error: -o/--output summary.json: holds a file that is not a trace summary; name the output with -o"),
    Fault("combine-default-output-a-users-file",
          lambda ctx: [_write(ctx.dir / "combined.json", '{"mine": true}'), "trace", "combine",
                       _trace({"ts": 1, "dur": 1})(ctx)][1:],
          r"repro: error: -o/--output combined.json: holds a file that is not a combined trace; name the output with -o"),
    Fault("summarize-each-directory-over-a-users-summary",
          lambda ctx: [_write(ctx.dir / "d" / "summary.json", '{"mine": true}'),
                       _write(ctx.dir / "d" / "t.json", '{"traceEvents": []}'), "trace", "summarize", "--each-directory",
                       str(ctx.dir / "d")][2:],
          r"repro: error: -o/--output .*/d/summary.json: holds a file that is not a trace summary"),
    # a top-level key twice: the last value was read, so a second, empty traceEvents list stood in for the events
    Fault("summarize-trace-events-twice",
          lambda ctx: ["trace", "summarize", _write(ctx.dir / "t.json", TRACE_JSON[:-1] + ', "traceEvents": []}'),
                       "-o", str(ctx.dir / "s.json")],
          r"repro: error: .*/t.json: not a Chrome trace: the key 'traceEvents' appears twice at the top level"),
    Fault("combine-other-data-twice",
          lambda ctx: ["trace", "combine", _write(ctx.dir / "t.json", TRACE_JSON.replace(" ", "")[:-1]
                                                  + ',"otherData":{},"otherData":{"model_name":"m"}}'),
                       "-o", str(ctx.dir / "c.json")],
          r"repro: error: .*/t.json: not a Chrome trace: the key 'otherData' appears twice at the top level"),
]

STYLE = {"font_size": 9, "width_in": 5, "height_in": 3.6, "dpi": 100, "show_reference": False}


def _engine_metrics(**changed):
    """A tf.data engine run's metrics.json as the validation reads it, top-level or spec keys changed."""
    from test_tfdata import ONE, TWO
    from test_tfdata import _engine_metrics as metrics

    run = metrics(windows=[(ONE, ONE, 1.0), (TWO, TWO, 0.5), (TWO, TWO, 0.5)])
    for key, value in changed.items():
        (run["spec"] if key in run["spec"] else run)[key] = value
    return run


def _window(**changed):
    """A decision window of two workers that held still, `changed` written over it."""
    return {"steps": 4, "seconds": 0.5, "workers": ["a:1", "b:1"], "workers_after": ["a:1", "b:1"], **changed}


def _validation(style=STYLE, network="32", output=("v.pdf", "v.png"), **metrics):
    def prepare(ctx):
        return ["pecan", "validation", "E", "--metrics", _write(ctx.dir / "m.json", json.dumps(_engine_metrics(**metrics))),
                "--calibration", _write(ctx.dir / "resnet.json", _calibration("resnet")), "--network-gbps", network,
                "--style", json.dumps(style), "--output", *(str(ctx.dir / o) for o in output), "--table", str(ctx.dir / "v.csv")]

    return prepare


COMPARE_RESULTS = [{"model": "m", "iteration": i, "latency_us": 1000 + i, "trace": "traces/t.json", "ok": True, "hit": True}
                   for i in range(3)]


def _trims_summary(compare=None, output="s.json"):
    """`repro trims summary` of a compare report (`compare`: the report, changed) and a distribution report."""
    def prepare(ctx):
        trace = {"traceEvents": [{"name": "read_params", "cat": "io", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
                 "otherData": {"model_name": "m", "upr_enabled": True}}
        _write(ctx.dir / "c" / "traces" / "t.json", json.dumps(trace))
        results = [{**r, "trace": str(ctx.dir / "c" / r["trace"])} for r in COMPARE_RESULTS]
        report = {"experiment": "compare", "model": "m", "store": {}, "client": {"iterations": 3},
                  "modes": {"original": {"results": results, "wall_s": 1}, "shared": {"results": results, "wall_s": 1}}}
        distribution = {"experiment": "distribution", "distribution": "uniform", "params": [], "concurrency": 1,
                        "results": results, "wall_s": 1, "evictions": 0, "store": {}, "client": {"iterations": 3}}
        text = json.dumps(compare(report) if compare else report).replace('"traces/t.json"', json.dumps(
            str(ctx.dir / "c" / "traces" / "t.json")))
        return ["trims", "summary", "--compare", _write(ctx.dir / "c" / "report.json", text),
                "--distributions", _write(ctx.dir / "d" / "report.json", json.dumps(distribution)), "-o", str(ctx.dir / output)]

    return prepare


def _mode_results(results):
    def change(report):
        report["modes"]["original"]["results"] = results
        return report

    return change


SUMMARY_ROW = {"model": "m", "speedup": 2, **{f"{m}_{f}": v for m in ("original", "shared") for f, v in (
    ("latency_ms", 1.0), ("latency_ci_ms", [0.5, 1.5]), ("requests", 3))}}


def _trims_plot(style=None, output=("p.pdf", "p.png"), **row):
    return lambda ctx: ["trims", "plot", "trims_model_load", "--summary", _write(ctx.dir / "s.json", json.dumps(
        {"compare": [{**SUMMARY_ROW, **row}]})), "--style", json.dumps(style or {}), "--output",
                        *(str(ctx.dir / o) for o in output)]


FIGURE_FAULTS = [
    # -- a figure's style by hand: the schema's types and bounds (a dpi of 1e9 fills the memory) ------
    Fault("validation-style-dpi-a-string", _validation(style={**STYLE, "dpi": "x"}),
          r"repro: error: --style: dpi: 'x' is not of type 'integer'"),
    Fault("validation-style-dpi-1e9", _validation(style={**STYLE, "dpi": 10 ** 9}),
          r"repro: error: --style: dpi: 1000000000 is greater than the maximum of 1200", bounded=True),
    Fault("validation-style-width-1e300", _validation(style={**STYLE, "width_in": 1e300}),
          r"repro: error: --style: width_in: 1e\+300 is greater than the maximum of 100", bounded=True),
    Fault("validation-style-width-0", _validation(style={**STYLE, "width_in": 0}),
          r"repro: error: --style: width_in: 0 is less than the minimum of 1"),
    Fault("validation-style-unknown-key", _validation(style={**STYLE, "colour": 1}),
          r"repro: error: --style: \(top level\): Additional properties are not allowed \('colour' was unexpected\)"),
    Fault("trims-plot-style-width-a-string", _trims_plot(style={"width_in": "5"}),
          r"repro: error: --style: width_in: '5' is not of type 'number'"),
    # -- a figure's file: a suffix matplotlib writes, known before the work is done ----------------
    Fault("validation-output-txt", _validation(output=("v.txt", "v.png")),
          r"repro pecan validation: error: argument --output: '.*v.txt': expected a file name ending in one of .pdf", code=2),
    Fault("trims-plot-output-json", _trims_plot(output=("p.json", "p.png")),
          r"repro trims plot: error: argument --output: '.*p.json': expected a file name ending in one of", code=2),
    # -- a run's metrics.json that is not one: named, not an IndexError or ValueError traceback -----
    Fault("validation-metrics-decision-steps-0", _validation(decision_steps=0),
          r"repro: error: --metrics .*/m.json: not a tf.data engine run's metrics.json \(IndexError"),
    Fault("validation-metrics-windows-a-mapping", _validation(windows={}),
          r"repro: error: .*/m.json: windows: expected a list of its decision windows, as the engine writes them$"),
    Fault("validation-metrics-spec-a-string", _validation(spec="x"),
          r"repro: error: .*/m.json: spec: expected an object: the run's settings, as the engine writes them$"),
    Fault("validation-metrics-scale-a-string", _validation(scale="x"),
          r"repro: error: .*/m.json: scale: expected an object: how its time scale was set, as the engine writes them$"),
    Fault("validation-metrics-no-remote-workers", _validation(remote_workers=None),
          r"repro: error: .*/m.json: remote_workers: expected the whole number of workers the run ended with, from 0 to "),
    # a window's phase and workers as the engine never writes them: raw AttributeError text, or a worker
    # counted twice
    Fault("validation-metrics-phase-a-number", _validation(windows=[_window(phase=5)]),
          r"repro: error: .*/m.json: windows\[0\].phase: '5'; expected none \(a phase is FastFlow's state; this run's "
          r"placement is not fastflow\)$"),
    Fault("validation-metrics-phase-unknown-to-fastflow", _validation(placement="fastflow", windows=[_window(phase="X")]),
          r"repro: error: .*/m.json: windows\[0\].phase: 'X'; expected none or one of FastFlow's states PROFILE_LTHP, "),
    Fault("validation-metrics-a-worker-twice", _validation(windows=[_window(workers=["a:1", "a:1"])]),
          r"repro: error: .*/m.json: windows\[0\].workers: expected each worker address once$"),
    Fault("validation-network-1e308", _validation(network="1e308"),
          r"repro: error: --network-gbps: network_gbps: 1e\+308 is greater than the maximum of 100000$"),
    # a transfer time of 1e317 s: the config's minimum, a megabit/s, was not the flag's
    Fault("validation-network-subnormal", _validation(network="1e-320"),
          r"repro: error: --network-gbps: network_gbps: 1e-320 is less than the minimum of 0.001$"),
    # -- trims summary: its output is not one of its reports; a report that is not one is named ------
    Fault("trims-summary-output-is-a-report", _trims_summary(output="c/report.json"),
          r"repro: error: -o/--output .*/c/report.json: is one of the inputs"),
    Fault("trims-summary-modes-a-list", _trims_summary(lambda r: {**r, "modes": []}),
          r"repro: error: .*/c/report.json: modes: \[\], not a mapping; expected 'original' and 'shared', a compare "
          r"run's two modes"),
    Fault("trims-summary-no-shared-mode", _trims_summary(lambda r: {**r, "modes": {"original": r["modes"]["original"]}}),
          r"repro: error: .*/c/report.json: modes: 'original'; expected 'original' and 'shared', a compare run's two "
          r"modes \(its speedup divides their latencies\)$"),
    Fault("trims-summary-no-requests", _trims_summary(_mode_results([])),
          r"repro: error: .*/c/report.json: not an experiment's report.json \(ValueError: original mode made no requests\)"),
    Fault("trims-summary-latency-a-string", _trims_summary(_mode_results([{**COMPARE_RESULTS[0], "latency_us": "x"}])),
          r"repro: error: .*/c/report.json: original mode request 0: latency_us \"x\"; expected microseconds above 0, "
          r"at most 1e\+12$"),
    Fault("trims-summary-lacks-model", _trims_summary(lambda r: {k: v for k, v in r.items() if k != "model"}),
          r"repro: error: .*/c/report.json: model: missing; expected the name of the model the run compared$"),
    # -- trims plot: numbers a figure's axis cannot hold ---------------------------------------------
    Fault("trims-plot-latency-1e308", _trims_plot(original_latency_ms=1e308),
          r"repro: error: .*/s.json: compare\[0\].original_latency_ms: expected a number from 0 to 1e\+09, got 1e\+308"),
    Fault("trims-plot-latency-negative", _trims_plot(shared_latency_ms=-1),
          r"repro: error: .*/s.json: compare\[0\].shared_latency_ms: expected a number from 0 to 1e\+09, got -1"),
    Fault("trims-plot-interval-low-above-high", _trims_plot(original_latency_ci_ms=[500, 1]),
          r"repro: error: .*/s.json: compare\[0\].original_latency_ci_ms: expected a \[low, high\] pair of numbers "
          r"from 0 to 1e\+09, low at most high, got \[500, 1\]"),
    Fault("trims-plot-a-model-twice", lambda ctx: ["trims", "plot", "trims_model_load", "--summary", _write(
        ctx.dir / "s.json", json.dumps({"compare": [SUMMARY_ROW] * 200})), "--style", "{}", "--output",
        str(ctx.dir / "p.pdf"), str(ctx.dir / "p.png")],
          r"repro: error: .*/s.json: compare\[1\]: a second row of m \(first: compare\[0\]\); expected one row each"),
    # -- trims summary: a report's requests as a finished experiment writes them ----------------------
    *[Fault(f"trims-summary-request-{name}", _trims_summary(_mode_results(
        [{**COMPARE_RESULTS[0], **change}, *COMPARE_RESULTS[1:]])), r"repro: error: .*/c/report.json: original mode "
        + error) for name, change, error in [
        ("latency-negative", {"latency_us": -5}, r"request 0: latency_us -5; expected microseconds above 0, at most 1e\+12"),
        ("latency-1e308", {"latency_us": 1e308}, r"request 0: latency_us 1e\+308; expected microseconds"),
        ("latency-a-string", {"latency_us": "5"}, r"request 0: latency_us \"5\"; expected microseconds"),
        ("failed", {"ok": False}, r"request 0: failed or not marked ok; expected the requests of a finished experiment")]],
]


def _comparison_table_over_its_input(ctx):
    table = _write(ctx.dir / "t.csv", "mode,tpu_cost_mean\ncollocated,1.0\n")
    return ["pecan", "comparison-table", "--option", "autoorder", "--workload", "W", "--table", table, "-o", table]


OUTPUT_FAULTS = [
    Fault("comparison-table-output-is-its-table", _comparison_table_over_its_input,
          r"repro: error: -o/--output .*/t.csv: is one of the inputs"),
    Fault("trims-store-status-output-is-its-state", lambda ctx: [
        "trims", "store", "status", "--state", _write(ctx.dir / "state.json", '{"base_path": "b", "socket": "s"}'),
        "--expect", "x", "-o", str(ctx.dir / "state.json")], r"repro: error: -o/--output .*/state.json: is one of the inputs"),
    Fault("calibrate-one-output-named-twice", lambda ctx: [
        "pecan", "calibrate", "--pipeline", "resnet", "retinanet", "-o", "c.json", "./c.json"],
          r"repro: error: -o/--output \./c.json: named twice as an output"),
    Fault("plot-comparison-over-its-table", lambda ctx: [
        "pecan", "plot", "-e", "autoorder", "--table", _write(ctx.dir / "plots" / "AutoOrder_Cost.png",
                                                      "workload,mode,total_cost_mean\nW,cachew,1\nW,autoorder,1\n")],
          r"repro: error: -o/--out_file plots/AutoOrder_Cost.png: holds a file that is not a figure this command drew"),
]



def _doctor(text):
    return lambda ctx: ["doctor", "--profile", str(Path(_write(ctx.dir / "profile" / "config.yaml", text)).parent)]


DOCTOR_FAULTS = [
    Fault(f"doctor-{option}-{kind}", _doctor(f"{option}: {value}\n"),
          rf"repro: error: .*/config.yaml: {option}: expected a plugin name \(letters, digits, - and _\), got {got}")
    for option in ("executor", "default-storage-provider")
    for kind, value, got in (("a-list", "[a]", r"\"\['a'\]\""), ("a-mapping", "{a: 1}", r"\"\{'a': 1\}\""),
                             ("a-number", "5", "'5'"), ("a-path", "../x", r"'\.\./x'"))
] + [
    # envvars (the variables passed to the jobs) of the wrong kind: Snakemake read a number as a name
    Fault(f"doctor-envvars-{kind}", _doctor(f"envvars: {value}\n"),
          rf"repro: error: .*/config.yaml: envvars: expected a list of environment variable names \(letters, digits "
          rf"and _\), got {got}$")
    for kind, value, got in (("a-number", "5", "'5'"), ("a-mapping", "{a: 1}", r"\"\{'a': 1\}\""),
                             ("a-list-with-a-number", "[HOME, 5]", r"\"\['HOME', 5\]\""),
                             ("a-name-with-a-dash", "[a-b]", r"\"\['a-b'\]\""))
] + [
    Fault("doctor-envvars-not-set", _doctor("envvars: [HOME, REPRO_TEST_NEVER_SET]\n"),
          r"repro: error: .*/config.yaml: environment variable \$REPRO_TEST_NEVER_SET is not set \(used by envvars\)$"),
]

CLIENT = {"eager": True, "eager_async": False, "cold_cache": True, "seed": 0,
          "server": {"eviction": "lru", "memory_mb": 300, "device": "cpu"}, "iterations": 5}


def _experiment(kind="compare", settings=CLIENT, extra=()):
    """`repro trims experiment` with a store state that records no settings to start a store with: what is
    refused is refused before the store would be started."""
    words = ["compare", "squeezenet_1.1"] if kind == "compare" else [
        "distribution", "pareto", "--params", "1", "1.5", "--concurrency", "2", "--models", "squeezenet_1.1"]
    return lambda ctx: ["trims", "experiment", *words, *extra, "--store", _write(
        ctx.dir / "state.json", json.dumps({"base_path": str(ctx.dir / "models"), "socket": str(ctx.dir / "s.sock")})),
                        "--settings", json.dumps(settings), "--out", str(ctx.dir / "out")]


def _users(path, command, link_to=None):
    """`command` with a file of the user's at `path` (or a symlink to `link_to`) under the test's directory."""
    def prepare(ctx):
        target = ctx.dir / path
        if link_to is None:
            _write(target, "the user's")
        else:
            target.parent.mkdir(parents=True)
            target.symlink_to(ctx.dir / link_to)
        return command(ctx)
    return prepare


EXPERIMENT_FAULTS = [
    Fault("experiment-settings-eager-a-string", _experiment(settings={**CLIENT, "eager": "yes"}),
          r"repro: error: --settings: eager: 'yes' is not of type 'boolean'"),
    Fault("experiment-settings-iterations-1e12", _experiment(settings={**CLIENT, "iterations": 10 ** 12}),
          r"repro: error: --settings: iterations: 1000000000000 is greater than the maximum of 1000000"),
    Fault("experiment-settings-server-a-list", _experiment("distribution", {**CLIENT, "server": []}),
          r"repro: error: --settings: server: \[\] is not of type 'object'"),
    Fault("experiment-settings-lacks-seed", _experiment(settings={k: v for k, v in CLIENT.items() if k != "seed"}),
          r"repro: error: --settings: lacks key 'seed'"),
    Fault("experiment-model-dot-dot", lambda ctx: [a if a != "squeezenet_1.1" else ".." for a in _experiment()(ctx)],
          r"repro: error: model name '\.\.': expected a directory name, one path component"),
    Fault("experiment-concurrency-1e6", _experiment("distribution", extra=["--concurrency", "1000000"]),
          r"repro: error: --concurrency: expected 1 to 1024 clients, got 1000000"),
    Fault("experiment-params-infinite", _experiment("distribution", extra=["--params", "inf"]),
          r"repro: error: --params: expected finite numbers"),
    # a user's directory where the traces would go is never deleted
    Fault("experiment-compare-out-holds-users-traces", _users("out/traces/shared/mine.txt", _experiment()),
          r"repro: error: --out .*/out/traces/shared: holds files this command did not write"),
    Fault("experiment-distribution-out-holds-users-traces", _users("out/traces/mine.txt", _experiment("distribution")),
          r"repro: error: --out .*/out/traces: holds files this command did not write"),
    Fault("experiment-compare-traces-a-symlink", _users("out/traces/original", _experiment(), link_to="."),
          r"repro: error: --out .*/out/traces/original: is not a directory this command made"),
]

def _comparison_table(content):
    """`pecan comparison-table` of one workload whose cost table holds `content` (text, bytes, or a
    function that makes them; None: a FIFO)."""
    def prepare(ctx):
        text = content() if callable(content) else content
        table = _write(ctx.dir / "t.csv", text) if text is not None else _fifo(ctx, "t.csv")
        return ["pecan", "comparison-table", "--option", "autoorder", "--workload", "W", "--table", table,
                "-o", str(ctx.dir / "o.csv")]
    return prepare


def _spread_table(*rows):
    """A cost table of workload W with the spread columns: (mode, value) rows, every number `value`
    but the total's, twice it (the TPU's and the workers' together)."""
    from repro.pecan.comparisons import COLUMNS

    def number(column, value):
        return str(2 * float(value)) if column.startswith("total_cost") else str(value)

    return "\n".join([",".join(COLUMNS), *(",".join(["W", "local", mode, "3", *[number(c, value) for c in COLUMNS[4:]]])
                                           for mode, value in rows)])


# A comparison's cost tables are read as every other table is: bounded, regular, UTF-8, one row per mode
TABLE_FAULTS = [
    Fault("comparison-table-cost-table-binary", _comparison_table(b"\xff\xfe\x00mode\n"),
          r"repro: error: .*/t.csv: not a text file \(expected a cost table\)"),
    Fault("comparison-table-cost-table-with-a-byte-order-mark", _comparison_table(
        lambda: b"\xef\xbb\xbf" + _spread_table(("cachew", 1)).encode()),
          r"repro: error: .*/t.csv: no row for mode 'autoorder'"),
    Fault("comparison-table-cost-table-a-fifo", _comparison_table(None),
          r"repro: error: .*/t.csv: is a FIFO; expected a regular file"),
    Fault("comparison-table-cost-table-mode-twice", _comparison_table(
        lambda: _spread_table(("cachew", 1), ("cachew", 99), ("autoorder", 1))),
          r"repro: error: .*/t.csv: two rows for mode 'cachew'; expected one row per mode"),
    Fault("comparison-table-cost-table-a-negative-cost", _comparison_table(
        lambda: _spread_table(("cachew", 1), ("autoorder", -2))),
          r"repro: error: .*/t.csv: mode 'autoorder': tpu_cost \[-2.0, -2.0, -2.0\] \(mean, interval\); expected non-negative "
          r"dollars, at most 1e\+09$"),
    Fault("comparison-table-cost-table-an-infinite-cost", _comparison_table(
        lambda: _spread_table(("cachew", "inf"), ("autoorder", 1))),
          r"repro: error: .*/t.csv: mode 'cachew': tpu_cost \[inf, inf, inf\] \(mean, interval\); expected non-negative "
          r"dollars, at most 1e\+09$"),
    Fault("comparison-table-cost-table-no-repeats", _comparison_table(
        lambda: _spread_table(("cachew", 1), ("autoorder", 1)).replace(",3,", ",0,")),
          r"repro: error: .*/t.csv: mode 'cachew': repeats is '0'; expected a whole number from 1 to 10000 \(the runs behind "
          r"the mean\)$"),
]


def _download(keys, existing=None):
    """`trace download` of a receipt listing `keys` of a store under the test's directory (each object
    its key as content); `existing`: a user's file already in the output directory, by name."""
    def prepare(ctx):
        import hashlib

        objects = []
        for key in keys:
            _write(ctx.dir / "store" / key, key)
            digest = hashlib.sha256(key.encode()).hexdigest()
            _write(ctx.dir / "store" / f"{key}.sha256", digest + "\n")
            objects.append({"key": key, "sha256": digest})
        if existing:
            _write(ctx.dir / "dl" / existing, "the user's")
        receipt = _write(ctx.dir / "upload.json", json.dumps({"store": str(ctx.dir / "store"), "objects": objects}))
        return ["trace", "download", receipt, "-o", str(ctx.dir / "dl")]
    return prepare


DOWNLOAD_FAULTS = [
    # two objects of one file name: the second replaced the first, both reported verified
    Fault("download-two-keys-one-file-name", _download(["a/x.json", "b/x.json"]),
          r"repro: error: .*/upload.json: objects 'a/x.json' and 'b/x.json' both go to .*/dl/x.json"),
    # a user's file of that name is kept (it was overwritten)
    Fault("download-over-a-users-file", _download(["a/x.json"], existing="x.json"),
          r"repro: error: -o/--output-dir: .*/dl/x.json holds a file that is not 'a/x.json'"),
]

def _fetch_from(kind):
    """`trims fetch M` from an asset store whose M/model.onnx is a link to `kind` (a device that never ends)."""
    def prepare(ctx):
        model = ctx.dir / "assets" / "m"
        _write(model / "manifest.json", json.dumps({
            "model": "m", "input": {"name": "data", "shape": [1, 3, 2, 2]}, "output": "out", "params_bytes": 0,
            "tensors": [], "sha256": {"model.onnx": "0" * 64, "model.params": "0" * 64}}))
        _write(model / "model.params", b"")
        (model / "model.onnx").symlink_to(kind)
        return ["trims", "fetch", "m", "--asset-store", str(ctx.dir / "assets"), "--base-path", str(ctx.dir / "base")]
    return prepare


# A model in a local asset store: its files were copied however long they ran (/dev/zero: till the disk was full)
FETCH_FAULTS = [
    Fault("fetch-a-model-file-linked-to-dev-zero", _fetch_from("/dev/zero"),
          r"repro: error: .*/assets/m/model.onnx: is a character device; expected a regular file", bounded=True),
]


def _plot_comparison(edit):
    """`pecan plot -e autoorder --table T`, T a comparison table of one workload with `edit` applied
    to its text."""
    def prepare(ctx):
        from repro.pecan.comparisons import COLUMNS

        rows = [",".join(["W", "local", mode, "3", *["1.0"] * (len(COLUMNS) - 4)]) for mode in ("cachew", "autoorder")]
        return ["pecan", "plot", "-e", "autoorder", "--table",
                _write(ctx.dir / "t.csv", edit("\n".join([",".join(COLUMNS), *rows]) + "\n"))]
    return prepare


def _figure_settings(command, metrics=None, **changed):
    """`pecan figure F` or `pecan comparison AutoOrder_Cost` with its settings, `changed` written over them
    (and `metrics`, a run's metrics.json, given to `pecan figure`'s --metrics)."""
    def prepare(ctx):
        from repro.pecan.comparisons import COLUMNS

        rows = [",".join(["W", "local", mode, "3", *["1.0"] * (len(COLUMNS) - 4)]) for mode in ("cachew", "autoorder")]
        table = _write(ctx.dir / "t.csv", "\n".join([",".join(COLUMNS), *rows]) + "\n")
        settings = {"backend": "local", "preset": "local", "engine_caption": None,
                    "style": {"font_size": 9, "width_in": 5, "height_in": 3.6, "dpi": 100, "show_reference": False},
                    **({"option": "autoorder", "workloads": ["W"]} if command == "comparison"
                       else {"experiment": "W", "model": "resnet", "accelerator": "v2-8", "reference": None}),
                    **changed}
        return ["pecan", command, "AutoOrder_Cost" if command == "comparison" else "F", "--table", table,
                "--calibration", _write(ctx.dir / "r.json", _calibration("resnet")), "--settings", json.dumps(settings),
                "--output", str(ctx.dir / "f.pdf"), str(ctx.dir / "f.png"), "--verdicts", str(ctx.dir / "v.csv"),
                *(["--metrics", _write(ctx.dir / "m.json", json.dumps(metrics))] if metrics is not None else [])]
    return prepare


# Figure settings written by hand, a value of the wrong type: TypeError tracebacks ('argument of type 'int' is
# not iterable', 'unhashable type: 'list'')
HUGE = {"font_size": 9, "width_in": 100, "height_in": 100, "dpi": 1200, "show_reference": False}
PIXELS = r"100 x 100 in at 1200 dpi is 14400000000 pixels; expected at most 50000000$"

FIGURE_SETTINGS_FAULTS = [
    # each value within its bounds, the figure 57 GB of pixels: `repro config check` refused it, a
    # plot command given the style by hand allocated it (a MemoryError traceback)
    Fault("validation-style-of-14-gigapixels", _validation(style=HUGE), rf"repro: error: --style: {PIXELS}",
          bounded=True),
    Fault("trims-plot-style-of-14-gigapixels", _trims_plot(style=HUGE), rf"repro: error: --style: {PIXELS}",
          bounded=True),
    *[Fault(f"{command}-settings-style-of-14-gigapixels", _figure_settings(command, style=HUGE),
            rf"repro: error: --settings style: {PIXELS}", bounded=True) for command in ("figure", "comparison")],
    Fault("comparison-settings-workloads-a-number", _figure_settings("comparison", workloads=5),
          r"repro: error: --settings: workloads: 5 is not of type 'array'"),
    Fault("comparison-settings-option-a-list", _figure_settings("comparison", option=["autoorder"]),
          r"repro: error: --settings: option: \['autoorder'\] is not of type 'string'"),
    Fault("figure-settings-reference-a-list", _figure_settings("figure", reference=["x"]),
          r"repro: error: --settings: reference: \['x'\] is not of type 'string'"),
    # a table of Fig 7 (autoorder) drawn as Fig 6: the KeyError of its missing row was blamed on --settings
    Fault("comparison-table-of-the-other-option", _figure_settings("comparison", option="autoplacement"),
          r"repro: error: .*/t.csv: no row for W mode collocated; option autoplacement draws collocated, cachew, "
          r"fastflow, autoplacement$"),
    # the bars of the table's workload W, the caption and the paper's values of SimCLR, exit 0
    Fault("comparison-settings-workloads-not-the-tables", _figure_settings("comparison", workloads=["SimCLR"]),
          r"repro: error: --settings: workloads: \['SimCLR'\], but .*/t.csv holds \['W'\]; expected the workloads of "
          r"the table, in its order$"),
    # a verdict file of no verdicts, exit 0: the config's check refuses such a pair
    Fault("figure-settings-reference-of-no-mode-drawn", _figure_settings("figure", reference="Getting_started"),
          r"repro: error: --settings: reference: 'Getting_started' holds values for modes short, none of "
          r"them drawn \(cachew, autoorder\); expected a reference of the figure's modes, or none$"),
    # RetinaNet's values judged the bars of ResNet-50 (the workflow's config check refuses it; by hand it passed)
    Fault("figure-settings-reference-of-another-workload", _figure_settings("figure", reference="RetinaNet"),
          r"repro: error: --settings: reference: 'RetinaNet' holds the values of retinanet on v2-8; experiment 'W' "
          r"runs resnet on v2-8; expected a reference of its workload, or none$"),
    Fault("figure-settings-accelerator-a-number", _figure_settings("figure", accelerator=8),
          r"repro: error: --settings: accelerator: 8 is not of type 'string'$"),
    Fault("figure-settings-modes-a-number", _figure_settings("figure", modes=5),
          r"repro: error: --settings: modes: 5 is not of type 'array'"),
    # a caption that is not text was drawn as its Python repr
    # the caption's machine limits (engine runs given): what they are computed from, checked
    Fault("figure-settings-network-gbps-a-string", _figure_settings("figure", network_gbps="32"),
          r"repro: error: --settings: network_gbps: '32' is not of type 'number'$"),
    Fault("figure-metrics-without-network-gbps", _figure_settings("figure", _engine_metrics(experiment="W")),
          r"repro: error: --metrics: the settings hold no network_gbps \(pecan.cluster.network_gbps\)"),
    Fault("figure-metrics-of-another-experiment", _figure_settings("figure", _engine_metrics(), network_gbps=32),
          r"repro: error: --metrics .*m.json: a run of experiment 'E'; expected W's$"),
    Fault("figure-metrics-of-a-model-run", _figure_settings("figure", _engine_metrics(experiment="W", engine="model"),
                                                            network_gbps=32),
          r"repro: error: --metrics .*m.json: not a tf.data engine run \(engine 'model'\)$"),
    Fault("figure-metrics-with-a-negative-cpu-cost",
          _figure_settings("figure", _engine_metrics(experiment="W", pipeline_cost={
              "order": "declared", "cpu_s_per_element": -1, "bytes_per_element": 1.0}), network_gbps=32),
          r"repro: error: .*m.json: pipeline_cost.cpu_s_per_element"),
    Fault("figure-settings-engine-caption-a-number", _figure_settings("figure", engine_caption=5),
          r"repro: error: --settings: engine_caption: 5 is not of type 'string'$"),
    Fault("comparison-settings-engine-caption-a-mapping", _figure_settings("comparison", engine_caption={"a": 1}),
          r"repro: error: --settings: engine_caption: \{'a': 1\} is not of type 'string'$"),
]

def _cost_table_settings(keys, value):
    """`pecan cost-table --settings S` with the workflow's cost settings, one value changed (settings checked
    before any log is read: the logs named need not exist)."""
    def prepare(ctx):
        from repro.rulesettings import cost_settings

        settings = _changed(_config_settings(cost_settings, "Getting_started"), keys, value)
        return ["pecan", "cost-table", "--settings", json.dumps(settings), "--mode", "short", "--log", "run.log",
                "--metrics", "metrics.json", "--summary", "summary.json", "-o", str(ctx.dir / "t.csv")]
    return prepare


# Cost settings written by hand: ZeroDivisionError and TypeError tracebacks
COST_TABLE_SETTINGS_FAULTS = [
    Fault("cost-table-settings-batch-size-0", _cost_table_settings(["model", "batch_size"], 0),
          r"repro: error: --settings: model.batch_size: 0 is less than the minimum of 1"),
    Fault("cost-table-settings-steps-a-string", _cost_table_settings(["model", "steps_per_epoch"], "x"),
          r"repro: error: --settings: model.steps_per_epoch: 'x' is not of type 'integer'"),
    Fault("cost-table-settings-model-a-number", _cost_table_settings(["model"], 5),
          r"repro: error: --settings: model: 5 is not of type 'object'"),
    Fault("cost-table-settings-tpu-price-a-list", _cost_table_settings(["tpu_price"], [1]),
          r"repro: error: --settings: tpu_price: \[1\] is not of type 'number'"),
    Fault("cost-table-settings-model-name-a-list", _cost_table_settings(["model_name"], [1]),
          r"repro: error: --settings: model_name: \[1\] is not of type 'string'"),
]

# A comparison table drawn by `pecan plot`: its columns, one row per bar, numbers a bar can show
PLOT_TABLE_FAULTS = [
    Fault("plot-comparison-table-lacks-columns", _plot_comparison(lambda t: "\n".join(",".join(line.split(",")[:6])
                                                                                      for line in t.splitlines())),
          r"repro: error: .*/t.csv: not a comparison table \(no column\(s\) tpu_cost_ci_high"),
    Fault("plot-comparison-table-row-twice", _plot_comparison(lambda t: t + t.splitlines()[-1] + "\n"),
          r"repro: error: .*/t.csv: row 3: a second row for workload 'W' and mode 'autoorder'"),
    Fault("plot-comparison-table-1e308", _plot_comparison(lambda t: t.replace("1.0", "1e308")),
          r"repro: error: .*/t.csv: row 1: tpu_cost_mean is 1e308; expected a non-negative number of at most"),
    Fault("plot-comparison-table-negative", _plot_comparison(lambda t: t.replace(",1.0", ",-1.0", 1)),
          r"repro: error: .*/t.csv: row 1: tpu_cost_mean is -1.0; expected a non-negative number"),
]

def _status_of_unstarted_service(ctx):
    """`cluster status` of a state naming a tf.data service that no start recorded (no directory)."""
    (ctx.dir / "ts").mkdir()
    state = {"backend": "local", "trace_store": str(ctx.dir / "ts"), "engine_service": {"engine": "tfdata", "address": "x:1"}}
    return ["cluster", "status", "--state", _write(ctx.dir / "state.json", json.dumps(state))]


# a status check makes nothing: the service's lock (and its directory) was made for a service never started
STATUS_FAULTS = [
    Fault("cluster-status-of-a-service-never-started", _status_of_unstarted_service,
          r"repro: error: cluster status: 1 check\(s\) FAILED: tf.data service \(.*/tfdata\)$"),
]

# an output path through a file: the file that is no directory is named (mkdir said "File exists"); an
# output named as a directory (a trailing '/') was written as a file of that name, an empty one as '.'
PATH_FAULTS = [
    Fault("costs-output-a-new-directory", lambda ctx: [
        "pecan", "costs", "--config", str(CONFIG), "--model", "resnet", str(LOGS / "resnet_pecan.log"), "-o", "new/"],
          r"repro: error: -o/--output 'new/': expected a file name, not a directory$"),
    Fault("combine-output-empty", lambda ctx: ["trace", "combine", _write(ctx.dir / "t.json", TRACE_JSON), "-o", ""],
          r"repro: error: -o/--output '': expected a file name, not an empty one$"),
    Fault("costs-output-under-a-file", lambda ctx: [
        "pecan", "costs", "--config", str(CONFIG), "--model", "resnet", str(LOGS / "resnet_pecan.log"),
        "-o", str(Path(_write(ctx.dir / "f", "the user's")) / "sub" / "c.csv")],
          r"repro: error: .*/f/sub/c.csv: cannot write: .*/f is not a directory$"),
]

def _estimate_two_calibrations(ctx):
    """`pecan estimate` given two different calibrations of one pipeline (the last named was used)."""
    calibrations = [_write(ctx.dir / f"{p}.json", _calibration(p)) for p in ("resnet", "retinanet", "simclr", "asr")]
    other = _write(ctx.dir / "resnet-again.json", _calibration("resnet", cost=0.5))
    return ["pecan", "estimate", "--config", str(CONFIG), "--calibration", *calibrations, other,
            "-o", str(ctx.dir / "estimate.txt")]


CALIBRATION_FAULTS = [
    Fault("estimate-two-calibrations-of-one-pipeline", _estimate_two_calibrations,
          r"repro: error: --calibration .*/resnet-again.json: a second calibration of pipeline 'resnet', other than "
          r".*/resnet.json's; expected one per pipeline"),
]

def _run_over_users(name, content="the user's"):
    """`pecan run --out run` where run/<name> (under repeats/, which a run replaces) is the user's."""
    command = _run_settings(["seed"], 1)

    def prepare(ctx):
        _write(ctx.dir / "run" / name, content)
        return command(ctx)
    return prepare


# A run replaces the repeats/, run.log and metrics.json of an earlier run in its directory; a user's
# files of those names were deleted or overwritten with them
REPEATS_FAULTS = [
    Fault("run-out-holds-users-run-log", _run_over_users("run.log", "my notes\n"),
          r"repro: error: run directory .*/run: .*/run/run.log is not a run's log \(its first line names the run\), "
          r"and a run would replace it; it may be yours: move it, or name another run directory$"),
    *[Fault(f"run-out-holds-users-trace-{name.split('.')[0]}", _run_over_users(f"traces/{name}", '{"traceEvents": []}'),
            rf"repro: error: run directory .*/run: .*/run/traces/{name} is not a run's trace \(otherData.run_id\), and "
            r"a run would upload it, or replace it, as its own; it may be yours")
      for name in ("mine.json", "ResNet50_v2-8-pecan.json")],
    Fault("run-out-holds-users-metrics", _run_over_users("metrics.json", '{"throughput": 1}'),
          r"repro: error: run directory .*/run: .*/run/metrics.json is not a run's metrics \(experiment, mode, "
          r"throughput\), and a run would replace it; it may be yours"),
    Fault("run-out-holds-users-repeats-directory", _run_over_users("repeats/notes.txt"),
          r"repro: error: run directory .*/run: .*/run/repeats is not the repeats/ directory a run writes"),
    Fault("run-out-holds-users-repeats-file", _run_over_users("repeats"),
          r"repro: error: run directory .*/run: .*/run/repeats is not the repeats/ directory a run writes"),
    # named as a run's repeat logs, told by their content: deleted (run-99.log) or overwritten (run-1.log)
    *[Fault(f"run-out-holds-users-{name.split('.')[0]}", _run_over_users(f"repeats/{name}", "my notes\n"),
            r"repro: error: run directory .*/run: .*/run/repeats is not the repeats/ directory a run writes \(run-<n>.log "
            r"files only, each a run's log\)") for name in ("run-1.log", "run-99.log")],
]

TRACE_JSON = '{"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
NOT_UTF8 = "t\udcff"  # the byte 0xff in a file name, as the file system's names come to Python

# A file name that is not UTF-8 goes into no output (a CSV row, a JSON string cannot hold it): refused, named
NAME_FAULTS = [
    Fault("combine-a-trace-named-in-latin-1", lambda ctx: ["trace", "combine", _write(ctx.dir / f"{NOT_UTF8}.json", TRACE_JSON),
                                                         "-o", str(ctx.dir / "c.json")],
          r"repro: error: .*/t\\udcff.json: the file name is not UTF-8 text"),
    Fault("summarize-a-directory-with-a-trace-named-in-latin-1",
          lambda ctx: ["trace", "summarize", str(Path(_write(ctx.dir / "d" / f"{NOT_UTF8}.json", TRACE_JSON)).parent),
                       "-o", str(ctx.dir / "s.json")],
          r"repro: error: .*/d/t\\udcff.json: the file name is not UTF-8 text"),
    Fault("provenance-an-input-named-in-latin-1",
          lambda ctx: ["provenance", "--settings", "{}", "-o", str(ctx.dir / "p.json"), _write(ctx.dir / NOT_UTF8, "x")],
          r"repro: error: .*/t\\udcff: the file name is not UTF-8 text"),
    Fault("costs-a-log-named-in-latin-1",
          lambda ctx: ["pecan", "costs", "--config", str(CONFIG), "--model", "resnet", "-o", str(ctx.dir / "c.csv"),
                       _write(ctx.dir / f"{NOT_UTF8}.log", (LOGS / "resnet_pecan.log").read_bytes())],
          r"repro: error: .*/t\\udcff.log: the file name is not UTF-8 text"),
]

SCRATCH_FAULTS = [
    Fault(f"check-reproducibility-scratch-holds-users-{name}", _users(
        f"scratch/{name}/mine.txt", lambda ctx: ["pecan", "check-reproducibility", "--config", str(CONFIG), "--scratch",
                                                 str(ctx.dir / "scratch"), "-o", str(ctx.dir / "o.csv")]),
          rf"repro: error: --scratch .*/scratch/{name}: holds files this command did not write")
    for name in ("run-1", "run-2")
]

FAULTS = [*SETTINGS_FAULTS, *TRACE_FAULTS, *FIGURE_FAULTS, *OUTPUT_FAULTS, *DOCTOR_FAULTS, *EXPERIMENT_FAULTS,
          *SCRATCH_FAULTS, *NAME_FAULTS, *TABLE_FAULTS, *DOWNLOAD_FAULTS, *PLOT_TABLE_FAULTS,
          *STATUS_FAULTS, *PATH_FAULTS, *CALIBRATION_FAULTS, *REPEATS_FAULTS, *FETCH_FAULTS,
          *FIGURE_SETTINGS_FAULTS, *COST_TABLE_SETTINGS_FAULTS]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.id for f in FAULTS])
def test_hostile_input(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("name, written", [("p.pdf", ["p.pdf"]), ("p.PNG", ["p.PNG"]), ("p", ["p.pdf", "p.png"])],
                         ids=["pdf", "png-upper-case", "basename"])
def test_pecan_plot_writes_the_file_named(tmp_path, monkeypatch, capsys, name, written):
    """-o names a file in full, or a basename as the artifact's fig8.py takes it (BASE.pdf and BASE.png)."""
    from support import run_repro

    monkeypatch.chdir(tmp_path)
    code, _, err = run_repro(["pecan", "plot", "-t", "1", "2", "3", "-o", name], capsys)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == written


@pytest.mark.parametrize("experiment, modes", [("autoorder", ("cachew", "autoorder")),
                                               ("autoplacement", ("collocated", "cachew", "fastflow", "autoplacement"))])
def test_pecan_plot_of_a_comparison_writes_the_file_named(tmp_path, monkeypatch, capsys, experiment, modes):
    """-e autoorder/autoplacement with -o: the file named, and nothing else (plots/AutoOrder_Cost.pdf and .png
    were written over, -o left unsaid)."""
    from support import run_repro

    from repro.pecan.comparisons import COLUMNS

    monkeypatch.chdir(tmp_path)
    rows = [",".join(["W", "local", mode, "3", *["1.0"] * (len(COLUMNS) - 4)]) for mode in modes]
    _write(tmp_path / "t.csv", "\n".join([",".join(COLUMNS), *rows]) + "\n")
    code, _, err = run_repro(["pecan", "plot", "-e", experiment, "--table", "t.csv", "-o", "mine.pdf"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.pdf", "t.csv"]


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`repro list | head -1`: the reader gone, the command ends as SIGPIPE ends a tool (128 + 13), with
    nothing on stderr ('repro: error: Broken pipe' was shown)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "repro.cli", "list"], stdout=write, stderr=subprocess.PIPE,
                                cwd=tmp_path, timeout=60)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (141, b"")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [["list"], ["list", "backends"], ["doctor", "--profile", "profile"]],
                         ids=["list", "list-one-registry", "doctor"])
def test_output_to_a_full_device_names_standard_output(tmp_path, buffered, argv):
    """`repro list > /dev/full`: one line naming standard output, exit status 1. Buffered (a file), the
    write failed at exit: Python's 'Exception ignored ... OSError' lines, status 120; unbuffered, a
    nameless 'repro: error: No space left on device'."""
    import os
    import subprocess
    import sys

    _write(tmp_path / "profile" / "config.yaml", "jobs: 1\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "repro.cli", *argv], stdout=full, stderr=subprocess.PIPE,
                                cwd=tmp_path, timeout=60, env=env if buffered else {**env, "PYTHONUNBUFFERED": "1"})
    assert (result.returncode, result.stderr) == (1, b"repro: error: standard output: No space left on device\n")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [[], ["--help"], ["help"], ["info", "config"]],
                         ids=["no-command", "help-flag", "help", "info-config"])
def test_trims_tools_usage_to_a_full_device_names_standard_output(buffered, argv):
    """`trims-tools --help > /dev/full`, `trims-tools info config > /dev/full`: one line naming standard
    output, exit status 1, as repro's commands; the text was printed outside them: an OSError traceback
    unbuffered, Python's 'Exception ignored' lines and status 120 buffered."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "repro.trims.originals", *argv], stdout=full,
                                stderr=subprocess.PIPE, timeout=60, env=env if buffered else {**env, "PYTHONUNBUFFERED": "1"})
    assert (result.returncode, result.stderr) == (1, b"trims-tools: error: standard output: No space left on device\n")


@pytest.mark.parametrize("argv", [["--help"], ["info", "config"]], ids=["help", "info-config"])
def test_trims_tools_output_to_a_closed_pipe_ends_quietly(tmp_path, argv):
    """`trims-tools info config | head -c0` (the reader gone): status 141 and nothing on stderr, as
    `repro list` ends; it was a BrokenPipeError traceback."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "repro.trims.originals", *argv], stdout=write,
                                stderr=subprocess.PIPE, cwd=tmp_path, timeout=60)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (141, b"")


CONCURRENT_RUNS_FILES = {"run.log": "the other run's log\n", "traces/ResNet50_v2-8-pecan.json": '{"traceEvents": []}'}


@pytest.mark.parametrize("others", [{}, CONCURRENT_RUNS_FILES], ids=["alone", "with-a-concurrent-run"])
def test_a_failed_run_removes_only_what_it_wrote(tmp_path, monkeypatch, capsys, others):
    """`pecan run --out run`, run/ new, fails. Alone, it leaves no run/; where a concurrent run into run/
    has meanwhile moved its run.log and trace into place (not yet its metrics.json), its own staging
    goes and the other run's files stay (the run directory it had made was removed whole, with them)."""
    from support import run_repro

    from repro.errors import ReproError
    from repro.pecan import run as run_module

    monkeypatch.chdir(tmp_path)
    argv = _run_settings(["seed"], 1)(SimpleNamespace(dir=tmp_path))

    def failing_beside_a_concurrent_run(spec):
        for name, text in others.items():
            _write(tmp_path / "run" / name, text)
        raise ReproError("simulated failure")

    monkeypatch.setattr(run_module, "simulate", failing_beside_a_concurrent_run)
    code, _, err = run_repro(argv, capsys)
    assert (code, err) == (1, "repro: error: simulated failure\n")
    if not others:
        assert not (tmp_path / "run").exists()
        return
    left = sorted(str(p.relative_to(tmp_path / "run")) for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert left == sorted(others)
    assert all((tmp_path / "run" / name).read_text() == text for name, text in others.items())


def test_a_run_removes_a_stale_staging_directory_but_no_directory_of_the_users(tmp_path, monkeypatch, capsys):
    """`pecan run --out DIR` where DIR holds hidden directories named as a killed run's staging (or the
    temporary repeats of an older version) but holding the user's files: they were deleted with them. A
    killed run's own staging (its files only) still goes."""
    from support import run_repro

    monkeypatch.chdir(tmp_path)
    argv = _run_settings(["seed"], 1)(SimpleNamespace(dir=tmp_path))
    run = tmp_path / "run"
    users = {".run.1-2.notes.tmp/notes.txt": "mine\n", ".repeats.mine.tmp/thesis.txt": "mine too\n",
             ".run.1-2.x.tmp/run.log": "a log\n", ".run.1-2.x.tmp/draft.md": "beside it, the user's\n"}
    for name, text in users.items():
        _write(run / name, text)
    _write(run / ".run.1-3.killed.tmp" / "run.log", "a killed run's log\n")
    _write(run / ".run.1-3.killed.tmp" / "traces" / "t.json", "{}")
    code, _, err = run_repro(argv, capsys)
    assert code == 0, err
    assert all((run / name).read_text() == text for name, text in users.items())
    assert not (run / ".run.1-3.killed.tmp").exists()
