"""Fault injection, continued: what a hostile user gives the commands that the other fault files do
not try. Settings written by hand with values of the wrong type or past their bounds, model store
requests with names no model has, size flags without bounds, output paths.

Each row runs as test_faults_input's rows do (`check_fault`): exit code 1 (2 for argparse's usage
errors), one line on stderr naming the key, flag or file and what was expected, nothing written,
changed or deleted under the test's directory, no process left running.
"""

import copy
import json

import pytest
from test_faults_input import CONFIG, Fault, _calibration, _write, check_fault

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
    Fault("store-start-settings-memory-1e30", _store_settings(["server", "memory_mb"], 1e30),
          r"repro: error: --settings: server.memory_mb: 1e\+30 is greater than the maximum of \d+"),
    Fault("store-start-settings-eviction-a-number", _store_settings(["server", "eviction"], 3),
          r"repro: error: --settings: server.eviction: 3 is not of type 'string'"),
]



def _trace(*events):
    return lambda ctx: _write(ctx.dir / "t.json", json.dumps({"traceEvents": [
        {"name": "a", "ph": "X", "pid": 1, "tid": 1, **event} for event in events]}))


def _original_summary(*events):
    return lambda ctx: ["trace", "summarize", "--format", "original", _trace(*events)(ctx), "-o", str(ctx.dir / "s.json")]


TRACE_FAULTS = [
    # -- the original tools' summary: integer nanoseconds and dates from any finite microseconds --
    Fault("original-summary-duration-past-nanoseconds", _original_summary({"ts": 1, "dur": 1e308}),
          r"repro: error: .*/t.json: end_to_end_process_time of 1e\+308 us is not a finite number of nanoseconds"),
    Fault("original-summary-timestamp-past-9999", _original_summary({"ts": 1e300, "dur": 1}),
          r"repro: error: .*/t.json: timestamp 1e\+300 us is no date between the years 1 and 9999"),
    Fault("original-summary-timestamp-before-year-1", _original_summary({"ts": -1e17, "dur": 1}),
          r"repro: error: .*/t.json: timestamp -1e\+17 us is no date"),
]

FAULTS = [*SETTINGS_FAULTS, *TRACE_FAULTS]


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
