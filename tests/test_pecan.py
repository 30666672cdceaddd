import copy
import csv
import dataclasses
import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from support import RESNET

from repro.cli import main
from repro.config import validate_config
from repro.errors import ReproError
from repro.pecan import pipelines
from repro.pecan.calibrate import calibrate
from repro.pecan.cluster import JobSpec, capacity, simulate
from repro.pecan.costs import COLUMNS, check_price, cost_row, lookup
from repro.pecan.logs import LogWriter, ParsedLog, parse_log
from repro.pecan.policies import (
    DECREASING_REMOTE,
    INCREASING_LOCAL,
    ONLY_REMOTE,
    STABLE,
    CachewAutoscaler,
    FixedPlacement,
    PecanAutoPlacement,
    autoorder,
    cost_per_batch,
)
from repro.pecan.presets import pipeline_costs
from repro.pecan.run import run_mode
from repro.traces import validate

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "fixtures" / "pecan-logs"
REFERENCE = {  # extract_costs.py's results on the artifact's sample logs (github.com/eth-easl/pecan-experiments)
    "resnet_colloc": (0, 0, 3212.50, 4.4261, 0.0),
    "resnet_cachew": (19, 0, 453.14, 0.6243, 1.0045),
    "resnet_pecan": (4, 10, 396.12, 0.5458, 0.1849),
    "hello_world": (20, 10, 396.89, 0.5468, 0.9261),
}


@pytest.fixture(scope="module")
def calibrations():
    """Small but real measurements of both pipelines."""
    return {p: calibrate(p, elements=4, repeats=1) for p in ("resnet", "retinanet")}


# -- log parsing and costs --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_parser_reproduces_the_artifacts_results_on_its_logs(name):
    remote, local, epoch, tpu, worker = REFERENCE[name]
    parsed = parse_log(LOGS / f"{name}.log")
    assert (parsed.remote_workers, parsed.local_workers) == (remote, local)
    row = cost_row(parsed, "m", "resnet", RESNET, tpu_price=4.96, worker_price=0.42)
    assert f"{row['epoch_time']:.3g}" == f"{epoch:.3g}"
    assert f"{row['tpu_cost']:.3g}" == f"{tpu:.3g}"
    assert f"{row['worker_cost']:.3g}" == f"{worker:.3g}" if worker else row["worker_cost"] == 0
    assert row["epoch_time"] == pytest.approx(epoch, abs=0.01)


def test_costs_command_writes_the_artifacts_csv(tmp_path):
    out = tmp_path / "costs.csv"
    assert main(["pecan", "costs", *(str(LOGS / f"{n}.log") for n in sorted(REFERENCE)), "--experiment", "ResNet50_v2-8",
                 "--config", str(REPO / "config" / "config.yaml"), "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["experiment", "model", "tpu_cost", "worker_cost", "remote_workers", "local_workers",
                             "epoch_time", "batches_sec", "mode"]
    assert {r["mode"]: int(r["remote_workers"]) for r in rows}["resnet_cachew"] == 19


@pytest.mark.parametrize(
    "text, message",
    [
        ("nothing useful here\n", "no throughput lines"),
        ("1.0 examples/second\nX] Worker Address: a:1; Task\nX] End Printing\n", "truncated deployment block"),
        ("1.0 examples/second\nX] --> ClientHeartbeat: Current Tasks\nX] Worker Address: a:1; Task\n", "without its 'End Printing'"),
    ],
)
def test_parser_rejects_bad_logs_naming_the_file(tmp_path, text, message):
    log = tmp_path / "bad.log"
    log.write_text(text)
    with pytest.raises(ReproError, match=message) as info:
        parse_log(log)
    assert "bad.log" in str(info.value)


def test_costs_reject_negative_or_missing_prices():
    parsed = parse_log(LOGS / "resnet_pecan.log")
    with pytest.raises(ReproError, match="price tpu"):
        cost_row(parsed, "m", "resnet", RESNET, tpu_price=-1, worker_price=0.42)
    with pytest.raises(ReproError, match="price worker"):
        cost_row(parsed, "m", "resnet", RESNET, tpu_price=4.96, worker_price=None)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["pecan"]["prices"].update(worker=-0.1), "pecan.prices.worker"),
        (lambda c: c["pecan"]["experiments"]["ResNet50_v2-8"].update(model="bert"), "unknown model 'bert'"),
        (lambda c: c["pecan"]["experiments"]["ResNet50_v2-8"].update(accelerator="v9-8"), "unknown accelerator"),
        (lambda c: c["pecan"]["experiments"]["ResNet50_v2-8"]["modes"].append("turbo"), "unknown mode 'turbo'"),
        (lambda c: c.update(backend="k8s"), "backend"),
        (lambda c: c["pecan"]["modes"]["pecan"].update(epochs="eight"), "pecan.modes.pecan.epochs"),
        (lambda c: c["pecan"].pop("prices"), "'prices' is a required property"),
    ],
)
def test_invalid_config_names_the_key(mutate, message):
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    mutate(raw)
    with pytest.raises(ReproError, match=message):
        validate_config(raw)


def test_the_ssh_example_is_valid_and_trims_figures_need_the_local_backend():
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    example = yaml.safe_load((REPO / "config" / "examples" / "ssh-cluster.yaml").read_text())
    validate_config({**raw, **example, "plots": {**raw["plots"], **example["plots"]}})
    with pytest.raises(ReproError, match="plots.trims: the TrIMS experiments run on the local backend only"):
        validate_config({**raw, **example, "plots": raw["plots"]})


def write_log(path, samples=(100.0,), blocks=()):
    """A log in the artifact's format: throughput samples, then one heartbeat block per worker set."""
    with open(path, "w") as fh:
        writer = LogWriter(fh)
        for i, rate in enumerate(samples):
            writer.time_history(i, 1.0, rate, i * 100, (i + 1) * 100)
        for i, workers in enumerate(blocks):
            writer.heartbeat(len(samples) + i, workers)
    return path


def test_throughput_is_the_mean_of_the_samples_above_95_percent_of_the_peak(tmp_path):
    # 95.0 is exactly 95% of the peak: left out, like the slow first steps
    parsed = parse_log(write_log(tmp_path / "t.log", [50.0, 95.0, 96.0, 100.0]))
    assert parsed.throughput == pytest.approx(98.0) and parsed.samples == 4 and parsed.path == str(tmp_path / "t.log")
    (tmp_path / "bytes.log").write_bytes(b"\xff\xfe garbled line\n12.5 examples/second\n")  # not UTF-8: still read
    assert parse_log(tmp_path / "bytes.log").throughput == 12.5
    assert parse_log(write_log(tmp_path / "one.log", [7.5])).throughput == 7.5


def test_a_throughput_past_a_floats_range_is_named_by_its_line(tmp_path):
    """400 digits of examples/second: the peak was inf, no sample above 95% of it, and the mean of none
    a ZeroDivisionError."""
    log = tmp_path / "inf.log"
    log.write_text("first line\nI0101 TimeHistory: 1.00 seconds, 12.5 examples/second between steps 1 and 2\n"
                   f"I0101 TimeHistory: 1.00 seconds, {'9' * 400} examples/second between steps 2 and 3\n")
    with pytest.raises(ReproError) as error:
        parse_log(log)
    assert str(error.value) == (f"{log}:3: throughput {'9' * 40} examples/second is not a finite number; expected a "
                                "training log's throughput")


def test_a_throughput_that_prices_an_epoch_beyond_any_figure_is_refused():
    """1e-7 examples/second priced an epoch of ResNet with 2 workers at $2.07e10, which every figure then refused."""
    resnet = {"batch_size": 1024, "steps_per_epoch": 1251}
    slow = ParsedLog("slow.log", 1e-7, 1, 2, 0, True, {})
    with pytest.raises(ReproError, match=r"^slow.log: 1e-07 examples/second prices an epoch at \$2.07e\+10; expected "
                                         r"at most \$1e\+09 \(a training log's throughput\)$"):
        cost_row(slow, "pecan", "resnet", resnet, 4.96, 0.427)
    worker_bound = ParsedLog("w.log", 0.003, 1, 10 ** 6, 0, True, {})  # the workers' share passes the bound alone
    with pytest.raises(ReproError, match=r"prices an epoch at \$"):
        cost_row(worker_bound, "pecan", "resnet", resnet, 0.0, 0.427)
    assert cost_row(ParsedLog("ok.log", 0.5, 1, 0, 0, True, {}), "pecan", "resnet", resnet, 4.96, 0.427)["tpu_cost"] < 1e9
    # at the bound: $1 an hour, an hour's steps of one example each, priced at just over $1e9 and at $1e9
    hour = {"batch_size": 1, "steps_per_epoch": 3600}
    with pytest.raises(ReproError, match=r"prices an epoch at \$1e\+09; expected at most"):
        cost_row(ParsedLog("edge.log", 1 / 1.00001e9, 1, 0, 0, True, {}), "m", "resnet", hour, 1.0, 0.0)
    assert cost_row(ParsedLog("edge.log", 1 / 0.99999e9, 1, 0, 0, True, {}), "m", "resnet", hour, 1.0, 0.0)["tpu_cost"] \
        == pytest.approx(0.99999e9)
    with pytest.raises(ReproError) as nothing:  # a throughput so small it rounds to no batches at all
        cost_row(ParsedLog("none.log", 5e-324, 1, 0, 0, True, {}), "m", "resnet", resnet, 1.0, 0.0)
    assert str(nothing.value) == ("none.log: 4.94066e-324 examples/second is 0 batches/second of 1024; expected a "
                                  "throughput to price")
    assert "m:" in str(pytest.raises(ReproError, cost_row, SimpleNamespace(throughput=5e-324, remote_workers=0),
                                     "m", "resnet", resnet, 1.0, 0.0).value)  # no path: named by its mode
    assert str(pytest.raises(ReproError, cost_row, SimpleNamespace(throughput=1e-7, remote_workers=2), "m", "resnet",
                             resnet, 4.96, 0.427).value).startswith("m: 1e-07 examples/second prices an epoch at $")


def test_the_deployment_is_the_last_worker_set_seen_three_times_in_a_row(tmp_path):
    a, b = ["w1:1", "w2:1"], ["w1:1", "w2:1", "w3:1", "localhost:9"]
    # read from the end: b twice, then a three times: a is the converged deployment
    parsed = parse_log(write_log(tmp_path / "c.log", blocks=[b, a, a, a, b, b]))
    assert (parsed.remote_workers, parsed.local_workers, parsed.converged) == (2, 0, True)
    # no set three times in a row: the last complete set, flagged as not converged
    parsed = parse_log(write_log(tmp_path / "n.log", blocks=[a, a, b, a, b, b]))
    assert (parsed.remote_workers, parsed.local_workers, parsed.converged) == (3, 1, False)
    # no data service at all: collocated preprocessing
    parsed = parse_log(write_log(tmp_path / "none.log"))
    assert (parsed.remote_workers, parsed.local_workers, parsed.converged) == (0, 0, True)
    assert parse_log(LOGS / "resnet_pecan.log").converged


def test_log_errors_give_the_line_number(tmp_path):
    cases = {
        "1.0 examples/second\nX] --> ClientHeartbeat: Normal Tasks\nX] End Printing\nX] End Printing\n":
            "t.log:4: deployment block without its 'ClientHeartbeat'",
        "1.0 examples/second\nX] --> ClientHeartbeat: Current Tasks\nX] Worker Address: a:1; T\n":
            "t.log:2: deployment block without its 'End Printing'",
        "1.0 examples/second\nX] Worker Address: a:1; T\nX] End Printing\n": "t.log:3: truncated deployment block",
        "0.0 examples/second\n": "every throughput sample is 0",
    }
    for text, message in cases.items():
        (tmp_path / "t.log").write_text(text)
        with pytest.raises(ReproError) as info:
            parse_log(tmp_path / "t.log")
        assert message in str(info.value)
    with pytest.raises(ReproError, match="missing.log: cannot read log"):
        parse_log(tmp_path / "missing.log")


def test_written_logs_have_the_artifacts_line_format(tmp_path):
    """The local runs' logs look like the artifact's, so one parser (and extract_costs.py) reads both."""
    def shape(line):
        return re.sub(r"[0-9]+", "N", line)

    artifact = (LOGS / "resnet_pecan.log").read_text().splitlines()
    written = write_log(tmp_path / "w.log", [746.58], [["non-admin-nodes-7zjk:31010", "non-admin-nodes-1cbd:31002"]])
    ours = written.read_text().splitlines()
    for line in ours:
        assert any(shape(line) == shape(theirs) for theirs in artifact), line
    assert ours[0].startswith("I0101 00:00:00.000000 ") and "746.58 examples/second between steps 0 and 100" in ours[0]
    assert ours[1].startswith("2026-01-01 00:00:01.000000: I ") and ours[2].endswith("Task id: 4000; Job id: 2000")
    assert ours[3].endswith("Task id: 4001; Job id: 2000")


def test_cost_formula_and_prices():
    parsed = ParsedLog("x.log", throughput=2048.0, samples=1, remote_workers=3, local_workers=2, converged=True)
    model = {"batch_size": 1024, "steps_per_epoch": 3600}
    row = cost_row(parsed, "pecan", "resnet", model, tpu_price=4, worker_price=0.5, tpu_count=2)
    # 2 batches/s, 1800 s per epoch = half an hour: 2 TPUs x 0.5 h x $4, 3 remote workers x 0.5 h x $0.5
    assert row == {"experiment": "resnet_pecan", "model": "resnet", "tpu_cost": 4.0, "worker_cost": 0.75,
                   "remote_workers": 3, "local_workers": 2, "epoch_time": 1800.0, "batches_sec": 2.0, "mode": "pecan"}
    assert list(row) == COLUMNS
    free = cost_row(parsed, "m", "resnet", model, tpu_price=0, worker_price=0)
    assert (free["tpu_cost"], free["worker_cost"]) == (0.0, 0.0)
    assert check_price(3, "tpu") == 3.0 and isinstance(check_price(3, "tpu"), float)
    for bad in (True, float("nan"), float("inf"), "4.96", -0.01):
        with pytest.raises(ReproError, match=r"price tpu must be a non-negative number of dollars per hour, found"):
            check_price(bad, "tpu")
    assert lookup({"a": 1}, "a", "model") == 1
    with pytest.raises(ReproError, match=r"unknown model 'c'; expected one of \['a', 'b'\]"):
        lookup({"b": 2, "a": 1}, "c", "model")


# -- policies ---------------------------------------------------------------------------


def test_cachew_scales_up_until_improvement_drops_below_7_percent_then_reverts():
    policy = CachewAutoscaler(max_workers=20)
    assert policy.next_count(1, 10.0) == 2  # first measurement: always try one more
    assert policy.next_count(2, 5.0) == 3  # 50% better
    assert policy.next_count(3, 4.0) == 4  # 20% better
    assert policy.next_count(4, 3.8) == 3  # 5% < 7%: back to 3 and converge
    assert policy.state == "STABLE" and policy.converged == (3, 4.0)
    for _ in range(21):  # stable: nothing changes unless the batch time grows by 40%
        assert policy.next_count(3, 4.1) == 3
    for _ in range(20):
        assert policy.next_count(3, 6.0) == 3
    assert policy.next_count(3, 6.0) == 4 and policy.state == "SCALING"


def test_cachew_respects_the_cap_and_waits_for_its_target():
    policy = CachewAutoscaler(max_workers=2)
    assert policy.next_count(1, 10.0) == 2
    assert policy.next_count(1, 10.0) == 2  # the new worker has not arrived yet
    assert policy.next_count(2, 1.0) == 2 and policy.state == "STABLE"  # better, but at the cap: converge there
    assert policy.converged == (2, 1.0)
    for _ in range(20):  # 20 stable decisions, then a batch time 40% worse makes it scale again
        assert policy.next_count(2, 2.0) == 2 and policy.state == "STABLE"
    assert policy.next_count(2, 2.0) == 2 and policy.state == "SCALING"


def test_cachew_scaling_down_stops_when_the_loss_exceeds_3_percent():
    policy = CachewAutoscaler(scaling=True, target=4, history=[(5, 2.0)])
    assert policy.next_count(4, 2.02) == 3  # 1% loss is fine: keep removing
    assert policy.next_count(3, 2.2) == 4  # 9% loss: back to 4
    assert policy.state == "STABLE"


def test_autoplacement_walks_through_its_states():
    policy = PecanAutoPlacement(max_remote=20, max_local=2)
    assert policy.decide(1, 0, 10.0) == (2, 0) and policy.state == ONLY_REMOTE
    assert policy.decide(2, 0, 5.0) == (3, 0)
    assert policy.decide(3, 0, 4.95) == (2, 0) and policy.state == INCREASING_LOCAL  # 1% < 3%: revert
    assert policy.decide(2, 0, 5.0) == (2, 1)
    assert policy.decide(2, 1, 5.0) == (2, 2)
    assert policy.decide(2, 2, 5.0) == (1, 2) and policy.state == DECREASING_REMOTE  # local cap reached
    # 1 remote: cost/batch (4.96 + 0.427) * 5.1 = 27.5 < (4.96 + 0.855) * 5.0 = 29.1: keep going
    assert policy.decide(1, 2, 5.1) == (0, 2)
    # 0 remote: 4.96 * 7.0 = 34.7 > 27.5: revert and stay
    assert policy.decide(0, 2, 7.0) == (1, 2) and policy.state == STABLE
    assert policy.decide(1, 2, 5.0) == (1, 2)


def test_autoplacement_stops_adding_local_workers_when_throughput_drops():
    policy = PecanAutoPlacement(state=INCREASING_LOCAL, remote=3, local=0, reference_batch_time=1.0)
    assert policy.decide(3, 0, 1.0) == (3, 1)
    assert policy.decide(3, 1, 1.05) == (3, 2)  # 5% slower is tolerated
    assert policy.decide(3, 2, 1.2) == (3, 1) and policy.state == DECREASING_REMOTE


def test_policy_thresholds_are_strict():
    # thresholds of 25% so that the batch times give the equality exactly
    up = CachewAutoscaler(up_threshold=0.25)
    assert up.next_count(1, 1.0) == 2
    assert up.next_count(2, 0.75) == 1 and up.converged == (1, 1.0)  # exactly 25% better is not better enough
    down = CachewAutoscaler(down_threshold=0.25, target=4, history=[(5, 1.0)])
    assert down.next_count(4, 1.25) == 5 and down.state == "STABLE"  # exactly 25% worse is too much
    regrow = CachewAutoscaler(regrowth=1.5, stable_decisions=0, scaling=False, target=2, converged=(2, 2.0))
    assert regrow.next_count(2, 3.0) == 2 and regrow.state == "STABLE"  # exactly +50%: stay
    assert regrow.next_count(2, 3.01) == 3 and regrow.state == "SCALING"
    pecan = PecanAutoPlacement(up_threshold=0.25)
    assert pecan.decide(1, 0, 1.0) == (2, 0)
    assert pecan.decide(2, 0, 0.75) == (1, 0) and pecan.state == INCREASING_LOCAL
    local = PecanAutoPlacement(state=INCREASING_LOCAL, remote=2, local=1, local_drop=0.25, reference_batch_time=1.0)
    assert local.decide(2, 1, 1.25) == (2, 2)  # exactly 25% slower is tolerated


def test_cachew_scales_down_to_one_worker_then_returns_to_two():
    """Scaling down continues while the loss stays under 3% and more than one worker is left;
    otherwise it reverts to the previous count and converges, so one worker is never the result."""
    policy = CachewAutoscaler(target=2, history=[(3, 1.0)])
    assert policy.decide(2, 0, 1.0) == (1, 0)
    assert policy.decide(1, 0, 1.0) == (2, 0) and policy.state == "STABLE" and policy.converged == (2, 1.0)
    assert (policy.remote, policy.local) == (2, 0)


def test_cachew_regrowth_starts_from_the_converged_count_within_the_cap():
    policy = CachewAutoscaler(max_workers=3, stable_decisions=0, scaling=False, target=3, converged=(3, 1.0))
    assert policy.next_count(3, 2.0) == 3 and policy.state == "SCALING"  # at the cap: no fourth worker
    single = CachewAutoscaler(max_workers=1)
    assert single.next_count(1, 1.0) == 1


def test_autoplacement_at_the_remote_cap_returns_to_one_below_it():
    """ONLY_REMOTE adds workers while they help and the cap allows; otherwise it goes back to the
    previous count, so a job that still improves at the cap settles one below it."""
    policy = PecanAutoPlacement(max_remote=3)
    assert policy.decide(1, 0, 10.0) == (2, 0)
    assert policy.decide(2, 0, 5.0) == (3, 0)
    assert policy.decide(3, 0, 2.0) == (2, 0) and policy.state == INCREASING_LOCAL
    assert policy.reference_batch_time == 2.0  # the better of the two measurements


def test_autoplacement_compares_local_workers_with_the_better_measurement():
    policy = PecanAutoPlacement()
    assert policy.decide(1, 0, 10.0) == (2, 0)
    assert policy.decide(2, 0, 5.0) == (3, 0)
    assert policy.decide(3, 0, 4.9) == (2, 0) and policy.reference_batch_time == 4.9  # 2% better: revert
    assert policy.decide(2, 0, 5.0) == (2, 1)
    assert policy.decide(2, 1, 5.4) == (2, 0) and policy.state == DECREASING_REMOTE  # 5.4 > 4.9 x 1.1
    assert policy.decide(2, 0, 5.0) == (1, 0)


def test_autoplacement_without_local_workers_keeps_adding_them():
    policy = PecanAutoPlacement(state=INCREASING_LOCAL, remote=1, local=0, reference_batch_time=1.0)
    assert policy.decide(1, 0, 5.0) == (1, 1)  # slower, but no local worker to blame yet
    assert policy.decide(0, 0, 5.0) == (1, 1)  # the new placement has not taken effect yet
    assert policy.state == INCREASING_LOCAL


def test_autoplacement_removes_remote_workers_down_to_none_then_stops():
    policy = PecanAutoPlacement(state=DECREASING_REMOTE, remote=1, local=2, client_cost=1.0, worker_cost=1.0)
    assert policy.decide(1, 2, 1.0) == (0, 2)  # no previous measurement at a different count: try one fewer
    assert policy.decide(0, 2, 1.5) == (0, 2) and policy.state == STABLE  # 1.5 < 2.0: cheaper, and none left
    same = PecanAutoPlacement(state=DECREASING_REMOTE, remote=1, local=0, client_cost=1.0, worker_cost=1.0)
    assert same.decide(1, 0, 1.0) == (0, 0)
    assert same.decide(0, 0, 2.0) == (1, 0) and same.state == STABLE  # the same cost per batch: keep the worker
    assert cost_per_batch(2, 3.0, 4.0, 0.5) == 15.0  # (accelerator + 2 workers) $/h x batch time
    assert FixedPlacement(5, 3).decide(1, 0, 9.0) == (5, 3)


def op(name, **kw):
    return pipelines.Op(name, fn=None, **kw)


def test_autoorder_moves_inflating_elementwise_maps_late_and_respects_constraints():
    ops = [op("decode", keep_position=True), op("to_float", shape_preserving=True), op("crop"), op("resize"),
           op("flip", shape_preserving=True), op("normalize", shape_preserving=True, requires=("to_float",))]
    inflation = {"decode": 6.0, "to_float": 4.0, "crop": 0.4, "resize": 0.6, "flip": 1.0, "normalize": 1.0}
    order, moves = autoorder(ops, inflation)
    assert [o.name for o in order] == ["decode", "crop", "resize", "flip", "to_float", "normalize"]
    assert moves == ["to_float after crop", "to_float after resize", "to_float after flip"]
    # any inflation counts, however small
    order, _ = autoorder(ops, {**inflation, "to_float": 1.5})
    assert [o.name for o in order] == ["decode", "crop", "resize", "flip", "to_float", "normalize"]
    # an inflating op (pad) is not something to move an inflating map past
    inflation.update(resize=1.3)
    order, _ = autoorder(ops, inflation)
    assert [o.name for o in order] == ["decode", "crop", "to_float", "resize", "flip", "normalize"]
    # a map to a cheaper dtype moves upstream, but never past a keep_position op
    quantize = [op("decode", keep_position=True), op("resize"), op("to_half", shape_preserving=True)]
    order, _ = autoorder(quantize, {"decode": 6.0, "resize": 1.0, "to_half": 0.5})
    assert [o.name for o in order] == ["decode", "to_half", "resize"]
    # a cheaper dtype moves one place per pass: here it takes two passes to reach the decode
    quantize.insert(2, op("pad"))
    order, moves = autoorder(quantize, {"decode": 6.0, "resize": 1.0, "pad": 1.0, "to_half": 0.5})
    assert [o.name for o in order] == ["decode", "to_half", "resize", "pad"]
    assert moves == ["pad after to_half", "resize after to_half"]


# -- calibration and pipelines ----------------------------------------------------------


def test_calibration_measures_both_orders(calibrations):
    resnet = calibrations["resnet"]
    assert resnet["declared"]["order"][:2] == ["decode", "to_float"]
    assert resnet["autoorder"]["order"] == ["decode", "random_resized_crop", "resize_224", "random_flip", "to_float", "normalize", "batch"]
    assert all(r["cpu_s_per_element"] > 0 for r in resnet["declared"]["ops"])
    ops = {r["op"]: r for r in resnet["declared"]["ops"]}
    assert ops["to_float"]["inflation"] == pytest.approx(4.0)
    assert resnet["autoorder"]["bytes_out_per_element"] == 224 * 224 * 3 * 4
    assert resnet["image_bytes_per_element"] > 20_000  # textured JPEGs, not flat colour
    assert resnet["machine"]["logical_cpus"] >= 1


def test_calibration_passes_are_one_setting_everywhere():
    """The workflow's config (the schema's default: config.yaml does not restate it), `repro pecan
    calibrate` and the functions all measure the same number of passes (the module docstring of
    repro.pecan.calibrate says why)."""
    from repro.cli import build_parser
    from repro.pecan.calibrate import REPEATS, calibrate_together

    assert REPEATS == 20
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert "repeats" not in raw["calibration"]
    validate_config(raw)
    assert raw["calibration"]["repeats"] == REPEATS
    args = build_parser().parse_args(["pecan", "calibrate", "--pipeline", "resnet", "-o", "resnet.json"])
    assert args.repeats == REPEATS
    for fn in (calibrate, calibrate_together):
        assert inspect.signature(fn).parameters["repeats"].default == REPEATS


def test_pipelines_produce_model_inputs():
    rng = np.random.default_rng(0)
    element = pipelines.synthetic_jpegs("retinanet", 1, seed=3)[0]
    for step in pipelines.PIPELINES["retinanet"].ops:
        element = step.fn(element, rng)
    assert element["image"].shape == (640, 640, 3) and element["image"].dtype == np.float32
    assert element["boxes"].shape == (4, 4) and (element["boxes"] >= 0).all() and (element["boxes"] <= 1).all()
    assert pipelines.synthetic_jpegs("resnet", 2, seed=5)[1]["image"] == pipelines.synthetic_jpegs("resnet", 2, seed=5)[1]["image"]


# -- the cluster model ------------------------------------------------------------------


def spec(**overrides):
    base = dict(experiment="e", mode="m", placement="cachew", autoorder=False, batch_size=1024, steps_per_epoch=1251,
                epochs=1, steps_per_loop=500, accelerator_batches_per_s=3.158, cost_per_element=0.05, bytes_per_element=602112,
                collocated_vcpus=21.4, remote_worker_vcpus=8, local_worker_vcpus=8, max_remote_workers=20,
                max_local_workers=10, fixed_remote_workers=0, fixed_local_workers=0, network_gbps=32, decision_steps=60,
                noise_cv=0.0, cachew_threshold_up=0.0, client_cost=4.96, worker_cost=0.427319, seed=1)
    return JobSpec(**{**base, **overrides})


def test_a_shared_machine_caps_capacity_at_its_cpus():
    assert capacity(spec(), 3, 2) == pytest.approx(5 * 8 / 0.05)  # every worker its own CPUs
    shared = spec(remote_worker_vcpus=1, local_worker_vcpus=1, host_cpus=2)
    assert [capacity(shared, remote, 0) for remote in range(4)] == pytest.approx([0, 20, 40, 40])
    assert capacity(shared, 1, 2) == pytest.approx(40)
    assert capacity(spec(placement="collocated", collocated_vcpus=4, host_cpus=2), 0, 0) == pytest.approx(40)


def test_more_workers_never_lower_throughput_and_the_accelerator_bounds_it():
    s = spec()
    bound = s.accelerator_batches_per_s * s.batch_size
    rates = [min(bound, capacity(s, remote, local)) for remote in range(21) for local in (0, 5)]
    for remote in range(20):
        for local in (0, 5):
            assert min(bound, capacity(s, remote + 1, local)) >= min(bound, capacity(s, remote, local))
    assert max(rates) == bound


def test_simulated_time_matches_throughput_and_noise_is_seeded():
    quiet = simulate(spec(placement="collocated"))
    rate = min(21.4 / 0.05, 3.158 * 1024)
    assert quiet.seconds == pytest.approx(1251 * 1024 / rate)
    noisy = [simulate(spec(noise_cv=0.05, seed=seed)).seconds for seed in (1, 1, 2)]
    assert noisy[0] == noisy[1] != noisy[2]


def test_artifact_preset_lands_near_the_artifacts_runs(config, calibrations, tmp_path):
    cfg = copy.deepcopy(config)
    cfg["calibration"]["preset"] = "artifact"
    results = {}
    for mode in ("collocated", "cachew", "pecan"):
        run_mode(cfg, "ResNet50_v2-8", mode, calibrations, tmp_path / mode)
        results[mode] = cost_row(parse_log(tmp_path / mode / "run.log"), mode, "resnet", RESNET, 4.96, 0.42)
    assert results["collocated"]["epoch_time"] == pytest.approx(3212.5, rel=0.02)
    assert results["pecan"]["epoch_time"] == pytest.approx(396.12, rel=0.02)
    assert (results["pecan"]["remote_workers"], results["pecan"]["local_workers"]) == (4, 10)
    # Cachew: the artifact's run converged at 19 workers; the model reaches the cluster's 20
    assert results["cachew"]["epoch_time"] == pytest.approx(453.14, rel=0.06)
    assert abs(results["cachew"]["remote_workers"] - 19) <= 1
    assert results["cachew"]["worker_cost"] == pytest.approx(1.0045, rel=0.05)
    total = {m: r["tpu_cost"] + r["worker_cost"] for m, r in results.items()}
    assert total["pecan"] < total["cachew"] < total["collocated"]


def test_run_directory_holds_log_metrics_and_a_valid_trace(config, calibrations, tmp_path):
    metrics = run_mode(config, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "run")
    log = parse_log(tmp_path / "run" / "run.log")
    assert (log.remote_workers, log.local_workers) == (metrics["remote_workers"], metrics["local_workers"])
    assert "calibration=local" in (tmp_path / "run" / "run.log").read_text().splitlines()[0]
    trace = tmp_path / "run" / "traces" / "ResNet50_v2-8-pecan.json"
    report = validate(trace)
    assert report["phases"]["C"] > 0 and report["phases"]["i"] > 0
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["spec"] == dataclasses.asdict(JobSpec(**saved["spec"]))
    assert saved["remote_workers"] == log.remote_workers and saved["throughput"] == pytest.approx(log.throughput)


def test_pipeline_costs_reject_unknown_presets(config, calibrations):
    pecan = config["pecan"]
    with pytest.raises(ReproError, match="preset 'cloud'"):
        pipeline_costs("cloud", pecan["cluster"], calibrations)


def test_rule_settings_reach_a_shell_command_as_json_and_keep_their_rerun_trigger(config):
    import argparse
    import shlex

    from repro.rulesettings import run_settings, settings_argument

    settings = run_settings(config, "ResNet50_v2-8", "pecan")
    assert repr(settings) == repr(dict(settings))  # what Snakemake's params trigger records
    passed = shlex.split(f"--settings {shlex.quote(format(settings))}")[1]  # {params.settings:q}
    assert settings_argument(passed) == settings
    for text, message in (("[1, 2]", "expected a JSON object"), ("{'seed': 1}", "not JSON")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            settings_argument(text)


# -- the run command and run directories ---------------------------------------------------


@pytest.fixture
def calibration_files(calibrations, tmp_path):
    from repro.fsutil import write_json

    paths = []
    for pipeline, calibration in calibrations.items():
        paths.append(tmp_path / f"{pipeline}.json")
        write_json(paths[-1], calibration)
    return [str(p) for p in paths]


def test_fewer_repeats_leave_only_that_runs_repeat_logs(config, calibrations, tmp_path):
    run_dir = tmp_path / "run"
    run_mode({**config, "repeats": 5}, "ResNet50_v2-8", "pecan", calibrations, run_dir)
    assert sorted(p.name for p in (run_dir / "repeats").iterdir()) == [f"run-{r}.log" for r in range(1, 5)]
    metrics = run_mode({**config, "repeats": 3}, "ResNet50_v2-8", "pecan", calibrations, run_dir)
    assert sorted(p.name for p in (run_dir / "repeats").iterdir()) == ["run-1.log", "run-2.log"]
    assert [r["log"] for r in metrics["repeats"]] == ["run.log", "repeats/run-1.log", "repeats/run-2.log"]
    assert all((run_dir / r["log"]).is_file() for r in metrics["repeats"])
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.json", "repeats", "run.log", "traces"]
    run_mode({**config, "repeats": 1}, "ResNet50_v2-8", "pecan", calibrations, run_dir)
    assert not (run_dir / "repeats").exists()


def test_a_failed_run_leaves_the_earlier_run_whole_and_none_of_its_own_repeats(config, calibrations, tmp_path,
                                                                                monkeypatch):
    from repro.pecan import run as run_module

    run_dir = tmp_path / "run"
    run_mode({**config, "repeats": 4}, "ResNet50_v2-8", "pecan", calibrations, run_dir)
    earlier = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
    real, calls = run_module.simulate, []

    def failing(spec):
        calls.append(spec)
        if len(calls) == 3:
            raise ReproError("simulated failure")
        return real(spec)

    monkeypatch.setattr(run_module, "simulate", failing)
    with pytest.raises(ReproError, match="simulated failure"):
        run_mode({**config, "repeats": 4}, "ResNet50_v2-8", "pecan", calibrations, run_dir)
    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == earlier
    assert len(list((run_dir / "repeats").iterdir())) == 3


def test_run_refuses_a_backend_it_does_not_have(calibration_files, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["pecan", "run", "--experiment", "ResNet50_v2-8", "--mode", "pecan", "--calibration", *calibration_files,
              "--out", str(out), "--backend", "gcp"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--backend" in err and "'gcp'" in err and "'local'" in err and "'ssh'" in err
    assert not out.exists()


@pytest.mark.parametrize("experiment, mode, message", [
    ("Nope", "pecan", "unknown experiment 'Nope'"),
    ("ResNet50_v2-8", "turbo", "unknown mode 'turbo'"),
    ("ResNet50_v2-8", "short",
     "experiment 'ResNet50_v2-8' has no mode 'short' (its modes: collocated, cachew, pecan, autoplacement, autoorder, fastflow)"),
])
def test_run_refuses_an_experiment_or_mode_and_leaves_nothing(calibration_files, tmp_path, capsys, experiment, mode,
                                                               message):
    out = tmp_path / "out"
    code = main(["pecan", "run", "--config", str(REPO / "config" / "config.yaml"), "--experiment", experiment,
                 "--mode", mode, "--calibration", *calibration_files, "--out", str(out)])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_run_settings_refuse_a_mode_the_experiment_does_not_list(config):
    from repro.rulesettings import run_settings

    with pytest.raises(ReproError, match=r"experiment 'ResNet50_v2-8' has no mode 'short' \(its modes: "
                                         r"collocated, cachew, pecan, autoplacement, autoorder, fastflow\)"):
        run_settings(config, "ResNet50_v2-8", "short")


@pytest.mark.fault
def test_a_run_whose_repeats_would_fill_the_disk_stops_after_its_first_and_leaves_nothing(config, calibrations,
                                                                                          tmp_path, monkeypatch):
    """repeats 10000 of a run of 10^5 log lines (550 MB each) passed every check and wrote until the
    disk was full. Here the disk has room for two logs of the five."""
    import collections

    from repro.pecan import run as run_module

    probe = run_mode({**config, "repeats": 1}, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "probe")
    one_log = (tmp_path / "probe" / probe["repeats"][0]["log"]).stat().st_size
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(run_module.shutil, "disk_usage", lambda path: usage(10 * one_log, 8 * one_log, 2 * one_log))
    with pytest.raises(ReproError, match=r"^repeats: 5: a repeat.s log is about [0-9]+ [KM]iB, and the 4 left need "
                                         rf"[0-9]+ [KM]iB, more than the [0-9]+ [KM]iB free in "
                                         rf"{re.escape(str(tmp_path / 'run'))}; expected fewer repeats"):
        run_mode({**config, "repeats": 5}, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    run_mode({**config, "repeats": 3}, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "run")  # two more fit


def test_a_cost_row_refuses_another_models_settings(config, calibrations, tmp_path):
    """`pecan cost-table --settings` of RetinaNet (batch 64) over a ResNet run (batch 1024): the row
    priced the run's examples/s as RetinaNet's batches, $0.05 for $0.55, with exit 0."""
    from repro.pecan.costtable import mode_row
    from repro.rulesettings import cost_settings

    run_mode(config, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "run")
    log, metrics = tmp_path / "run" / "run.log", tmp_path / "run" / "metrics.json"
    settings = cost_settings(config, "ResNet50_v2-8")
    assert mode_row(log, metrics, "pecan", settings)["model"] == "resnet"
    other = {**settings, "model_name": "retinanet", "model": config["pecan"]["models"]["retinanet"]}
    with pytest.raises(ReproError, match=rf"^{re.escape(str(metrics))}: a run of batch_size 1024, not the --settings "
                                         r"model's 64; expected the settings of the run's model$"):
        mode_row(log, metrics, "pecan", other)


def test_pecan_costs_refuses_a_log_of_another_experiment_and_names_the_runs_mode(config, calibrations, tmp_path,
                                                                                  capsys):
    """`repro pecan costs --experiment RetinaNet run.log` of a ResNet50_v2-8 run priced it as RetinaNet's
    (exit 0), and its mode column read the file's name, `run`."""
    run_mode(config, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "run")
    log = str(tmp_path / "run" / "run.log")
    for flag, name in (("--experiment", "RetinaNet"), ("--model", "retinanet")):
        assert main(["pecan", "costs", flag, name, log]) == 1
        assert capsys.readouterr().err == f"repro: error: {log}: a run of experiment 'ResNet50_v2-8', not of {flag} '{name}'\n"
    assert main(["pecan", "costs", "--experiment", "ResNet50_v2-8", log, "-o", str(tmp_path / "c.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert [(row["model"], row["mode"]) for row in rows] == [("resnet", "pecan")]


def test_a_cost_row_refuses_a_log_and_metrics_of_two_runs(config, calibrations, tmp_path):
    """`pecan cost-table --log A/run.log --metrics B/metrics.json` of two runs of one mode (seeds 7 and
    1): the row mixed them, with exit 0."""
    from repro.pecan.costtable import mode_row
    from repro.rulesettings import cost_settings

    run_mode(config, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "a")
    run_mode({**config, "seed": 7}, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "b")
    settings = cost_settings(config, "ResNet50_v2-8")
    with pytest.raises(ReproError, match=r"b/run.log: the log of a run of seed 7, and .*a/metrics.json of a run of seed "
                                         r"1; expected the log and the metrics of one run$"):
        mode_row(tmp_path / "b" / "run.log", tmp_path / "a" / "metrics.json", "pecan", settings)
    assert mode_row(tmp_path / "b" / "run.log", tmp_path / "b" / "metrics.json", "pecan", settings)["mode"] == "pecan"


@pytest.mark.parametrize("placement", ["cachew", "autoplacement"])
def test_a_deployment_that_preprocesses_nothing_is_named_not_divided_by(placement):
    """Settings written by hand to `cluster run` (not checked as a config is): a cluster of no workers
    for a placement that starts them from it ended in ZeroDivisionError."""
    with pytest.raises(ReproError, match=rf"^mode m: 0 remote and 0 local workers \(placement {placement}\) "
                                         r"preprocess nothing; expected a deployment of at least one worker"):
        simulate(spec(placement=placement, max_remote_workers=0, max_local_workers=0))
    with pytest.raises(ReproError, match=rf"pecan.modes.{placement}: placement '{placement}' starts its workers within "
                                         rf"pecan.cluster.max_remote_workers( and pecan.modes.{placement}.max_local_workers)?, "
                                         "which allow none; expected at least 1"):
        config = yaml.safe_load((Path(__file__).parents[1] / "config" / "config.yaml").read_text())
        config["pecan"]["cluster"].update(max_remote_workers=0, max_local_workers=0)
        config["pecan"]["modes"] = {placement: {**config["pecan"]["modes"][placement], "max_local_workers": 0}
                                    if placement == "autoplacement" else config["pecan"]["modes"][placement]}
        for experiment in config["pecan"]["experiments"].values():
            experiment["modes"] = [placement]
        validate_config(config)


def test_a_log_is_read_line_by_line_with_a_bound_on_each(tmp_path):
    """A line of MAX_LINE characters (its line break included) is read; one longer is refused by number."""
    from repro.pecan.logs import MAX_LINE

    log = tmp_path / "long.log"
    sample = "I0101 TimeHistory: 1.00 seconds, 12.50 examples/second between steps 0 and 1\n"
    log.write_text(sample + "x" * (MAX_LINE - 1 - len(sample)) + " " + sample)  # the second line: MAX_LINE - 1 + 1
    assert parse_log(log, infer_workers=False).samples == 2
    log.write_text(sample + "x" * (MAX_LINE - len(sample)) + " " + sample)
    with pytest.raises(ReproError) as error:
        parse_log(log, infer_workers=False)
    assert str(error.value) == f"{log}:2: line longer than {MAX_LINE} characters; expected a training log"
    (tmp_path / "dir.log").mkdir()
    with pytest.raises(ReproError) as error:
        parse_log(tmp_path / "dir.log")
    assert str(error.value) == f"{tmp_path / 'dir.log'}: is a directory; expected a regular file (a training log)"


def test_a_value_of_the_run_line_may_hold_an_equals_sign(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("I0101 12:00:00.0 1 x.py:1] repro tfdata engine: experiment=E mode=m note=a=b\n"
                   "I0101 TimeHistory: 1.00 seconds, 12.50 examples/second between steps 0 and 1\n")
    assert parse_log(log, infer_workers=False).run == {"experiment": "E", "mode": "m", "note": "a=b"}


@pytest.mark.parametrize("number", ["-5", "1e3", "nan", "1" * 39 + "e" + "9" * 20])
def test_a_throughput_a_training_log_never_writes_is_refused_by_line(tmp_path, number):
    log = tmp_path / "run.log"
    log.write_text(f"I0101 TimeHistory: 1.00 seconds, {number} examples/second between steps 0 and 1\n")
    with pytest.raises(ReproError) as error:
        parse_log(log, infer_workers=False)
    assert str(error.value) == (f"{log}:1: throughput {number[:40]} examples/second; expected digits with an optional "
                                "fraction (12.34), as a training log writes them")


def test_a_bootstrap_draw_of_a_calibration_prices_its_cost_in_reference_kernels():
    """The local preset reads each order's cost per reference kernel: a draw recomputes it from the drawn
    cost; a calibration without a reference kernel draws none."""
    from repro.pecan.calibrate import resample

    orders = {"declared": {"cpu_s_per_element": 0.02, "bytes_out_per_element": 10, "element_cpu_s": [0.01, 0.03]},
              "autoorder": {"cpu_s_per_element": 0.01, "bytes_out_per_element": 10, "element_cpu_s": [0.005, 0.015]}}
    calibration = {"pipeline": "resnet", "autoorder_saving": 0.5, **orders, "reference_kernel": {"cpu_s": 0.004}}
    drawn = resample(calibration, np.random.default_rng(3))
    for order in ("declared", "autoorder"):
        assert drawn[order]["cpu_s_per_element"] in (0.01, 0.02, 0.03, 0.005, 0.01, 0.015)
        assert drawn[order]["per_reference_kernel"] == pytest.approx(drawn[order]["cpu_s_per_element"] / 0.004)
    without = resample({key: value for key, value in calibration.items() if key != "reference_kernel"},
                       np.random.default_rng(3))
    assert "per_reference_kernel" not in without["declared"]
