"""The pipeline reproducing itself: robust calibration statistics, repeats through the cost table,
the self-check's table and the reference verdicts."""

import copy
import csv
import json
import platform
from pathlib import Path

import numpy as np
import pytest
from support import RESNET, configfiles, copy_workflow, snakemake, stop_clusters

from repro.cli import main
from repro.errors import ReproError
from repro.machine import other_work
from repro.pecan import calibrate as cal
from repro.pecan.costs import COLUMNS, cost_row
from repro.pecan.costtable import SPREAD_COLUMNS, with_spread
from repro.pecan.logs import parse_log
from repro.pecan.pipelines import PIPELINES, Op
from repro.pecan.reproducibility import (
    CHECK_COLUMNS,
    VERDICT_COLUMNS,
    check,
    compare,
    outside,
    plotted_numbers,
    reference_verdicts,
    tolerance_of,
)
from repro.pecan.run import run_mode
from repro.stats import bootstrap_interval, mean_interval, verdict

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = {"cost_relative": 0.05, "cost_dollars": 0.05, "calibration_relative": 0.05, "saving_points": 3}


@pytest.fixture(scope="module")
def calibrations():
    return cal.calibrate_together(["resnet", "retinanet"], elements=4, repeats=2)


# -- statistics -------------------------------------------------------------------------


def test_mean_interval_is_the_student_t_interval():
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert high - mean == pytest.approx(4.302653 / np.sqrt(3))  # t(0.975, 2 df) x s / sqrt(n), s = 1
    assert mean - low == pytest.approx(high - mean)
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)
    assert mean_interval([2.0, 2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ReproError):
        mean_interval([])


def test_bootstrap_interval_is_seeded_and_brackets_the_median():
    samples = np.random.default_rng(3).lognormal(0, 0.5, 200)
    value, low, high = bootstrap_interval(samples)
    assert value == pytest.approx(np.median(samples))
    assert low < value < high
    assert bootstrap_interval(samples) == (value, low, high)
    assert bootstrap_interval(samples[:20])[2] - bootstrap_interval(samples[:20])[1] > high - low  # fewer, wider


def test_verdict_says_inside_or_by_how_much_outside():
    assert verdict(1.0, 0.9, 1.1) == (True, 0.0)
    assert verdict(1.3, 0.9, 1.1) == (False, pytest.approx(0.2))
    assert verdict(0.5, 0.9, 1.1) == (False, pytest.approx(-0.4))
    # give or take its rounding: inside up to the rounding's edge, and outside only by what is beyond it
    assert verdict(1.15, 0.9, 1.1, 0.05) == (True, 0.0) and verdict(0.85, 0.9, 1.1, 0.05) == (True, 0.0)
    assert verdict(1.3, 0.9, 1.1, 0.05) == (False, pytest.approx(0.15))
    assert verdict(0.5, 0.9, 1.1, 0.05) == (False, pytest.approx(-0.35))


@pytest.mark.parametrize("batch_values", [30 * 7, 30 * 500, 1], ids=["batches-of-7", "one-batch", "one-at-a-time"])
def test_a_bootstrap_in_batches_draws_the_resamples_one_draw_would(batch_values, monkeypatch):
    """Resamples drawn a batch at a time (bounded memory) are those one draw of them all gives, the
    last batch only what is left (500 draws in batches of 7: 71 of 7, then 3)."""
    from repro import stats

    monkeypatch.setattr(stats, "BOOTSTRAP_BATCH_VALUES", batch_values)
    samples = np.random.default_rng(4).normal(10, 2, 30)
    picks = np.random.default_rng(5).integers(0, 30, (500, 30))
    expected = tuple(np.percentile(samples[picks].mean(axis=1), [5, 95]))
    assert bootstrap_interval(samples, statistic=np.mean, confidence=0.9, draws=500, seed=5)[1:] == expected


def test_intervals_follow_the_confidence_asked_for_and_include_their_bounds():
    mean, low, high = mean_interval([1.0, 2.0, 3.0], confidence=0.5)
    assert high - mean == pytest.approx(0.8164966 / np.sqrt(3))  # t(0.75, 2 df) x s / sqrt(n)
    samples = np.random.default_rng(4).normal(10, 2, 30)
    value, low, high = bootstrap_interval(samples, statistic=np.mean, confidence=0.9, draws=500, seed=5)
    # the percentile bootstrap: the 5th and 95th percentiles of the statistic over the seeded resamples
    picks = np.random.default_rng(5).integers(0, 30, (500, 30))
    assert (low, high) == tuple(np.percentile(samples[picks].mean(axis=1), [5, 95]))
    assert value == pytest.approx(samples.mean())
    with pytest.raises(ReproError, match="no samples to bootstrap"):
        bootstrap_interval([])
    with pytest.raises(ReproError, match="no values to summarise"):
        mean_interval([])
    assert verdict(0.9, 0.9, 1.1) == (True, 0.0) and verdict(1.1, 0.9, 1.1) == (True, 0.0)
    assert bootstrap_interval(samples) == bootstrap_interval(samples, seed=0)  # seeded by default: reruns agree
    assert bootstrap_interval([5.0]) == (5.0, 5.0, 5.0)
    mean, low, high = mean_interval([1.0, 3.0])  # s = sqrt(2)
    assert (mean, high - mean) == (2.0, pytest.approx(12.7062047 * np.sqrt(2) / np.sqrt(2)))
    # identical values: zero width, even where the mean is not exactly the value
    assert mean_interval([0.1, 0.1, 0.1]) == (np.mean([0.1, 0.1, 0.1]),) * 3


def test_calibration_statistics_by_hand():
    assert cal.spread([[4.0, 1.0], [3.0, 2.0]]) == {"median": 2.5, "q1": 1.75, "q3": 3.25, "iqr": 1.5, "n": 4}
    assert cal.saving(2.0, 1.5) == 0.25
    ops = list(PIPELINES["resnet"].ops[:2])
    passes = np.array([[[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]])  # one pass, two elements
    summary = cal.summarize_order(ops, passes, {"decode": [100, 400], "to_float": [400, 1600]}, 2)
    assert summary["order"] == ["decode", "to_float", "batch"]
    assert not any(row["shared"] for row in summary["ops"])  # on its own an order shares nothing
    rows = {row["op"]: row for row in summary["ops"]}
    assert (rows["decode"]["bytes_in_per_element"], rows["decode"]["bytes_out_per_element"]) == (50, 200)
    assert rows["to_float"]["inflation"] == 4.0 and rows["to_float"]["cpu_s_per_element"] == 3.0
    assert (rows["batch"]["bytes_in_per_element"], rows["batch"]["inflation"]) == (800, 1.0)
    assert summary["bytes_out_per_element"] == 800 and summary["element_cpu_s"] == [6.0, 12.0]
    assert summary["cpu_s_per_element"] == 9.0 and summary["pass_cpu_s_per_element"] == [9.0]
    calibration = {"pipeline": "resnet", "autoorder_saving": 0.0,
                   "declared": {"cpu_s_per_element": 2.0, "element_cpu_s": [1.0, 2.0, 3.0]},
                   "autoorder": {"cpu_s_per_element": 1.0, "element_cpu_s": [0.5, 1.0, 1.5]}}
    drawn = cal.resample(calibration, np.random.default_rng(8))
    picks = np.random.default_rng(8).integers(0, 3, 3)
    assert drawn["declared"]["cpu_s_per_element"] == pytest.approx(np.mean(np.array([1.0, 2.0, 3.0])[picks]))
    assert drawn["autoorder_saving"] == pytest.approx(0.5) and calibration["declared"]["cpu_s_per_element"] == 2.0
    del calibration["declared"]["element_cpu_s"]
    with pytest.raises(ReproError) as info:
        cal.resample(calibration, np.random.default_rng(0))
    assert str(info.value) == ("calibration of 'resnet' has no per-element costs (an older file); "
                               "measure it again (snakemake --forcerun calibrate)")


def test_per_element_minima_ignore_a_disturbed_pass():
    ops = list(PIPELINES["resnet"].ops[:2])
    quiet = np.full((3, 4, 3), 0.001)  # repeats x elements x (ops + batch)
    disturbed = quiet.copy()
    disturbed[1] *= 3.0  # one whole pass under heavy interference
    disturbed[2, 0, 0] *= 10.0  # and one element's op preempted
    sizes = {"decode": [100, 400], "to_float": [400, 1600]}
    for passes in (quiet, disturbed):
        summary = cal.summarize_order(ops, passes, sizes, 4)
        assert summary["cpu_s_per_element"] == pytest.approx(0.003)
        assert summary["element_cpu_s"] == pytest.approx([0.003] * 4)
    spread = cal.summarize_order(ops, disturbed, sizes, 4)["ops"][0]["cpu_s"]
    assert spread["n"] == 12 and spread["median"] == pytest.approx(0.001) and spread["q3"] > spread["q1"]
    assert cal.summarize_order(ops, disturbed, sizes, 4)["pass_cpu_s_per_element"][1] == pytest.approx(0.009)


RESNET_ORDERS = (["decode", "to_float", "random_resized_crop", "resize_224", "random_flip", "normalize"],
                 ["decode", "random_resized_crop", "resize_224", "random_flip", "to_float", "normalize"])


def test_shared_columns_are_the_common_start_and_the_common_end_on_the_same_bytes():
    declared, autoorder = RESNET_ORDERS
    sizes = {"declared": {"decode": [1, 9], "to_float": [9, 36], "random_resized_crop": [36, 20], "resize_224": [20, 12],
                          "random_flip": [12, 12], "normalize": [12, 12]},
             "autoorder": {"decode": [1, 9], "random_resized_crop": [9, 5], "resize_224": [5, 3], "random_flip": [3, 3],
                           "to_float": [3, 12], "normalize": [12, 12]}}
    # decode sees the identical data; normalize and stacking the same bytes; the rest is what AutoOrder changed
    assert cal.shared_columns(declared, autoorder, sizes) == [True, False, False, False, False, True, True]
    # the same op on different bytes is not the same work, and ends the common end there
    sizes["autoorder"]["normalize"] = [12, 24]
    assert cal.shared_columns(declared, autoorder, sizes) == [True, False, False, False, False, False, False]
    # nothing moved: every column is shared
    same = {"declared": sizes["declared"], "autoorder": sizes["declared"]}
    assert cal.shared_columns(declared, declared, same) == [True] * 7


def test_shared_ops_take_one_minimum_over_both_orders_so_their_noise_leaves_the_saving():
    """Two elements, two repeats; columns: decode (shared), the moved op, batch (shared)."""
    declared = np.array([[[1.0, 2.0, 0.1], [1.2, 3.0, 0.2]],
                         [[1.1, 2.5, 0.1], [1.4, 2.0, 0.3]]])  # repeats x elements x columns
    autoorder = np.array([[[0.9, 1.0, 0.2], [1.6, 1.5, 0.2]],
                          [[1.3, 1.2, 0.1], [1.5, 1.0, 0.2]]])
    minima = cal.order_minima(declared, autoorder, [True, False, True])
    assert minima["declared"].tolist() == [[0.9, 2.0, 0.1], [1.2, 2.0, 0.2]]
    assert minima["autoorder"].tolist() == [[0.9, 1.0, 0.1], [1.2, 1.0, 0.2]]
    # per element the two orders differ by the moved op alone (1.0 each): the saving is 1.0 over the declared cost
    totals = {order: minima[order].sum(axis=1).mean() for order in minima}
    assert cal.saving(totals["declared"], totals["autoorder"]) == pytest.approx(1.0 / 3.2)
    # each order's own minima would have put decode's noise (1.0 and 1.2 against 0.9 and 1.5) into it
    own = 1 - autoorder.min(axis=0).sum(axis=1).mean() / declared.min(axis=0).sum(axis=1).mean()
    assert own == pytest.approx(1 - 2.35 / 3.25)
    # a slower pass of a shared op (an order run first after the other pipeline) changes neither order's cost
    slower = declared.copy()
    slower[1, :, 0] += 0.5
    assert np.array_equal(cal.order_minima(slower, autoorder, [True, False, True])["declared"], minima["declared"])


def test_summaries_of_shared_ops_agree_in_both_orders_and_resample_in_pairs():
    ops = {"declared": list(PIPELINES["resnet"].ops[:2]), "autoorder": list(PIPELINES["resnet"].ops[:2])[::-1]}
    sizes = {"decode": [100, 400], "to_float": [400, 1600]}
    declared = np.array([[[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]], [[2.0, 2.5, 3.5], [2.0, 4.5, 4.0]]])
    autoorder = declared[:, :, ::-1] * 0.5  # the other order's draws
    shared = [False, False, True]
    minima = cal.order_minima(declared, autoorder, shared)
    summary = {o: cal.summarize_order(ops[o], {"declared": declared, "autoorder": autoorder}[o], sizes, 2, minima[o], shared)
               for o in ops}
    assert [row["shared"] for row in summary["declared"]["ops"]] == shared
    assert summary["declared"]["ops"][2]["cpu_s_per_element"] == summary["autoorder"]["ops"][2]["cpu_s_per_element"] == 0.75
    assert summary["declared"]["ops"][2]["cpu_s"]["n"] == 4  # the spread of this order's own draws
    assert summary["declared"]["element_cpu_s"] == [3.0 + 0.5, 6.0 + 1.0]
    calibration = {"pipeline": "resnet", **summary}
    for seed in range(5):
        drawn = cal.resample(calibration, np.random.default_rng(seed))
        picks = np.random.default_rng(seed).integers(0, 2, 2)
        expect = {o: np.mean(np.array(summary[o]["element_cpu_s"])[picks]) for o in ops}
        assert drawn["autoorder_saving"] == pytest.approx(1 - expect["autoorder"] / expect["declared"])


def test_other_work_is_the_machine_s_busy_time_less_this_process_s_own():
    before, after = {"busy": 100.0, "steal": 1.0}, {"busy": 130.0, "steal": 2.0}
    assert other_work(before, after, own_cpu_s=10.0, seconds=20.0) == {
        "other_processes_cpus": 1.0, "steal_cpus": 0.05, "seconds": 20.0}
    assert other_work(before, {"busy": 105.0, "steal": 1.0}, own_cpu_s=5.5, seconds=5.0)["other_processes_cpus"] == 0.0
    assert other_work(None, after, 1.0, 1.0) is None and other_work(before, after, 1.0, 0.0) is None


def test_pipelines_calibrated_together_are_measured_element_by_element_in_turn():
    """Interleaving is what keeps the pipelines' cost ratio still under changing load."""
    calls = []

    def op(run):
        return Op(run, lambda element, rng: calls.append((run, element["image"])) or element)

    runs = {"a": ([op("a")], [{"image": b"a0"}, {"image": b"a1"}]), "b": ([op("b")], [{"image": b"b0"}, {"image": b"b1"}])}
    cal.measure_pass(runs, seed=0)
    assert calls == [("a", b"a0"), ("b", b"b0"), ("a", b"a1"), ("b", b"b1")]
    calls.clear()
    cal.measure_pass(runs, seed=0, flip=True)
    assert calls == [("b", b"b0"), ("a", b"a0"), ("b", b"b1"), ("a", b"a1")]


def test_calibration_records_the_spread_and_resamples_in_pairs(calibrations):
    assert all(c["measured_with"] == ["resnet", "retinanet"] for c in calibrations.values())
    assert calibrations["retinanet"]["load_average"] == calibrations["resnet"]["load_average"]
    resnet = calibrations["resnet"]
    assert resnet["repeats"] == 2 and resnet["warmup_passes"] >= 1 and len(resnet["load_average"]) == 3
    if platform.system() == "Linux":  # what else ran during the passes, measured over them
        work = resnet["other_work"]
        assert work["seconds"] > 0 and work["other_processes_cpus"] >= 0 and work["steal_cpus"] >= 0
    if platform.libc_ver()[0] == "glibc":  # large blocks reused, whatever the process did before
        assert resnet["allocator"] == {"mmap_threshold": 32 * 2**20, "trim_threshold": 2**30}
    for order in ("declared", "autoorder"):
        assert len(resnet[order]["element_cpu_s"]) == 4 and len(resnet[order]["pass_cpu_s_per_element"]) == 2
        for row in resnet[order]["ops"]:
            assert row["cpu_s"]["n"] == 8 and row["cpu_s"]["iqr"] >= 0 and row["cpu_s_minima"]["n"] == 4
            assert row["cpu_s"]["q1"] <= row["cpu_s"]["median"] <= row["cpu_s"]["q3"]
    assert resnet["declared"]["cpu_s_per_element"] == pytest.approx(np.mean(resnet["declared"]["element_cpu_s"]))
    # the machine's speed, timed beside the same elements: one record for the pipelines measured together
    kernel = resnet["reference_kernel"]
    assert kernel == calibrations["retinanet"]["reference_kernel"] and "JPEG" in kernel["work"]
    assert kernel["cpu_s_draws"]["n"] == 8 and kernel["cpu_s_minima"]["n"] == 4 and kernel["cpu_s"] > 0
    for c in calibrations.values():
        for order in ("declared", "autoorder"):
            assert c[order]["per_reference_kernel"] == pytest.approx(c[order]["cpu_s_per_element"] / kernel["cpu_s"])
    # the work both orders share is measured once: its cost is the same in both
    assert resnet["shared_ops"] == ["decode", "normalize", "batch"]
    assert calibrations["retinanet"]["shared_ops"] == ["decode", "resize_and_pad_640", "normalize", "batch"]
    for c in calibrations.values():
        rows = {order: {row["op"]: row for row in c[order]["ops"]} for order in ("declared", "autoorder")}
        for op, row in rows["declared"].items():
            assert row["shared"] == rows["autoorder"][op]["shared"] == (op in c["shared_ops"])
            if row["shared"]:
                assert row["cpu_s_per_element"] == rows["autoorder"][op]["cpu_s_per_element"]
    drawn = [cal.resample(resnet, np.random.default_rng(seed)) for seed in range(20)]
    assert len({d["declared"]["cpu_s_per_element"] for d in drawn}) > 1
    for d in drawn:  # the same elements in both orders: the saving follows from the two drawn costs
        assert d["autoorder_saving"] == pytest.approx(1 - d["autoorder"]["cpu_s_per_element"] / d["declared"]["cpu_s_per_element"])
    assert resnet["declared"]["cpu_s_per_element"] == pytest.approx(np.mean(resnet["declared"]["element_cpu_s"]))


# -- repeats through the cost table -----------------------------------------------------


def test_repeats_reach_the_cost_table(config, calibrations, tmp_path):
    cfg = {**copy.deepcopy(config), "repeats": 4}
    metrics = run_mode(cfg, "ResNet50_v2-8", "pecan", calibrations, tmp_path)
    repeats = metrics["repeats"]
    assert [r["repeat"] for r in repeats] == [0, 1, 2, 3] and len({r["seed"] for r in repeats}) == 4
    assert repeats[0]["seed"] == config["seed"] and repeats[0]["log"] == "run.log"
    first = parse_log(tmp_path / "run.log")
    assert (repeats[0]["throughput"], repeats[0]["remote_workers"]) == (first.throughput, first.remote_workers)
    for r in repeats[1:]:
        assert parse_log(tmp_path / r["log"]).throughput == pytest.approx(r["throughput"])
    assert len({r["throughput"] for r in repeats}) == 4

    row = with_spread(cost_row(first, "pecan", "resnet", RESNET, 4.96, 0.42), repeats, "pecan", "resnet", RESNET, 4.96, 0.42)
    assert set(row) == set(COLUMNS + SPREAD_COLUMNS) and row["repeats"] == 4
    tpu = [cost_row(parse_log(tmp_path / r["log"]), "pecan", "resnet", RESNET, 4.96, 0.42)["tpu_cost"] for r in repeats]
    assert row["tpu_cost_mean"] == pytest.approx(np.mean(tpu))
    assert row["tpu_cost_ci_low"] < row["tpu_cost_mean"] < row["tpu_cost_ci_high"]
    assert row["total_cost_mean"] == pytest.approx(row["tpu_cost_mean"] + row["worker_cost_mean"])

    single = run_mode({**cfg, "repeats": 1}, "ResNet50_v2-8", "pecan", calibrations, tmp_path / "one")
    assert not (tmp_path / "one" / "repeats").exists()
    assert single["throughput"] == metrics["throughput"]  # repeat 0 does not depend on how many follow


# -- the self-check and the verdicts ----------------------------------------------------


def test_check_table_compares_each_number_within_its_tolerance():
    first = {"calibration resnet declared per reference kernel": 2.50, "calibration resnet declared ms/element": 4.0,
             "calibration resnet reference kernel ms": 1.6, "calibration resnet AutoOrder saving %": 30.0,
             "fig8 pecan tpu_cost $": 0.55, "fig8 pecan worker_cost $": 0.30, "fig8 collocated worker_cost $": 0.0}
    second = {"calibration resnet declared per reference kernel": 2.64, "calibration resnet declared ms/element": 4.4,
              "calibration resnet reference kernel ms": 1.7, "calibration resnet AutoOrder saving %": 32.5,
              "fig8 pecan tpu_cost $": 0.56, "fig8 pecan worker_cost $": 0.36, "fig8 collocated worker_cost $": 0.0}
    rows = compare(first, second, TOLERANCE)
    assert [list(r) for r in rows] == [CHECK_COLUMNS] * 7
    within = {r["number"]: r["within"] for r in rows}
    # absolute CPU times follow the machine's speed: shown, not held to a tolerance
    assert within == {"calibration resnet declared per reference kernel": "no",
                      "calibration resnet declared ms/element": "-", "calibration resnet reference kernel ms": "-",
                      "calibration resnet AutoOrder saving %": "yes", "fig8 pecan tpu_cost $": "yes",
                      "fig8 pecan worker_cost $": "no", "fig8 collocated worker_cost $": "yes"}
    assert rows[1]["tolerance"] == "none: the machine's speed" and rows[1]["difference"] == pytest.approx(0.4)
    assert rows[3]["difference"] == pytest.approx(2.5) and rows[3]["tolerance"] == "±3 points"
    assert outside(rows) == ([n for n in first if "ms" not in n],
                             ["calibration resnet declared per reference kernel", "fig8 pecan worker_cost $"])
    second["calibration resnet declared per reference kernel"] = 2.62  # within 5% of 2.62
    assert compare(first, second, TOLERANCE)[0]["within"] == "yes"


def test_each_number_gets_its_kind_of_tolerance():
    tolerance = {"cost_relative": 0.1, "cost_dollars": 0.2, "calibration_relative": 0.3, "saving_points": 4}
    assert tolerance_of("calibration resnet AutoOrder saving %", tolerance) == ("points", 4)
    for name in ("calibration resnet reference kernel ms", "calibration resnet declared ms/element"):
        assert tolerance_of(name, tolerance) == ("none", None)
    assert tolerance_of("calibration resnet autoorder per reference kernel", tolerance) == ("relative", 0.3)
    assert tolerance_of("fig8 pecan tpu_cost $", tolerance) == ("relative_or_dollars", (0.1, 0.2))
    assert tolerance_of("fig8 pecan tpu_cost ms $", tolerance)[0] == "relative_or_dollars"  # by the end only


def test_check_table_limits_are_inclusive_and_each_kind_uses_its_own():
    # differences exactly at the limit (binary fractions: no rounding) are within it
    tolerance = {"cost_relative": 0.5, "cost_dollars": 0.25, "calibration_relative": 0.25, "saving_points": 3}
    first = {"calibration r AutoOrder saving %": 30.0, "calibration r declared per reference kernel": 3.0,
             "fig8 a tpu_cost $": 0.125, "fig8 b tpu_cost $": 2.0, "fig8 c tpu_cost $": 2.0}
    second = {"calibration r AutoOrder saving %": 33.0, "calibration r declared per reference kernel": 4.0,
              "fig8 a tpu_cost $": 0.375, "fig8 b tpu_cost $": 3.0, "fig8 c tpu_cost $": 4.5}
    rows = compare(first, second, tolerance)
    # saving: 3 points; per kernel: 25% of 4; a: $0.25 (above 50% of 0.375); b: 50% of 3 (above $0.25);
    # c: 2.5, beyond 50% of 4.5
    assert [r["within"] for r in rows] == ["yes", "yes", "yes", "yes", "no"]
    assert [r["tolerance"] for r in rows] == ["±3 points", "±25%"] + ["±50% or $0.25"] * 3
    beyond = dict(second, **{"calibration r AutoOrder saving %": 33.5,
                             "calibration r declared per reference kernel": 4.0625, "fig8 a tpu_cost $": 0.4375})
    assert [r["within"] for r in compare(first, beyond, tolerance)][:3] == ["no", "no", "no"]
    assert outside(rows) == (list(first), ["fig8 c tpu_cost $"])
    # the table shows four decimals of each value and of the difference
    row = compare({"fig8 a tpu_cost $": 0.123456}, {"fig8 a tpu_cost $": 0.654321}, tolerance)[0]
    assert (row["first"], row["second"], row["difference"]) == (0.1235, 0.6543, 0.5309)


def test_plotted_numbers_are_the_calibrations_in_ms_and_percent_and_the_bars_in_dollars():
    calibration = {"reference_kernel": {"cpu_s": 0.0016}, "autoorder_saving": 0.125,
                   "declared": {"cpu_s_per_element": 0.004, "per_reference_kernel": 2.5},
                   "autoorder": {"cpu_s_per_element": 0.0035, "per_reference_kernel": 2.1875}}
    rows = {"fig8": [{"mode": "pecan", "tpu_cost_mean": "0.55", "worker_cost_mean": "0.3"}]}
    numbers = plotted_numbers(["fig8"], {"resnet": calibration}, rows)
    assert numbers == pytest.approx({
        "calibration resnet reference kernel ms": 1.6,
        "calibration resnet declared ms/element": 4.0, "calibration resnet declared per reference kernel": 2.5,
        "calibration resnet autoorder ms/element": 3.5, "calibration resnet autoorder per reference kernel": 2.1875,
        "calibration resnet AutoOrder saving %": 12.5, "fig8 pecan tpu_cost $": 0.55, "fig8 pecan worker_cost $": 0.3})


def test_reference_kernel_takes_the_ops_statistic():
    draws = np.array([[3.0, 2.0, 9.0], [1.0, 4.0, 5.0]])  # repeats x element slots
    kernel = cal.reference_kernel(draws)
    assert kernel["cpu_s"] == pytest.approx((1 + 2 + 5) / 3)
    assert kernel["cpu_s_draws"]["n"] == 6 and kernel["cpu_s_minima"]["median"] == 2.0


def test_the_figures_checked_twice_are_by_default_every_figure_the_config_draws(tmp_path):
    """Without reproducibility.figures, every figure of plots.figures and plots.comparisons: a config
    that draws fewer figures than config/config.yaml is not refused for the ones it left out."""
    import yaml

    from repro.config import load_config

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    del config["reproducibility"]["figures"]
    config["plots"] = {"figures": {"mine": {"experiment": "RetinaNet"}},
                       "comparisons": {"Fig7": {"option": "autoorder", "workloads": ["RetinaNet"]}}}
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(config))
    assert load_config(tmp_path / "my.yaml")["reproducibility"]["figures"] == ["mine", "Fig7"]


def test_check_rejects_unknown_figures(config, tmp_path):
    with pytest.raises(ReproError, match="reproducibility.figures: unknown figure"):
        check(config, ["fig9"], tmp_path)


def _results(root, calibrations, worker_cost, workload="ResNet50_v2-8"):
    """A finished results/ directory as the workflow leaves it: calibrations and fig8's cost table (of
    `workload`'s runs)."""
    for pipeline, calibration in calibrations.items():
        (root / "calibration").mkdir(parents=True, exist_ok=True)
        (root / "calibration" / f"{pipeline}.json").write_text(json.dumps(calibration))
    (root / "tables").mkdir()
    with open(root / "tables" / "ResNet50_v2-8.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["mode", "workload", "preset", "tpu_cost_mean", "worker_cost_mean"], restval="local")
        writer.writeheader()
        writer.writerows([{"mode": "collocated", "workload": workload, "tpu_cost_mean": 4.43, "worker_cost_mean": 0.0},
                          {"mode": "pecan", "workload": workload, "tpu_cost_mean": 0.55, "worker_cost_mean": worker_cost}])
    return root


def test_compare_results_checks_two_clones_number_by_number(calibrations, tmp_path, capsys):
    first = _results(tmp_path / "a", calibrations, 0.30)
    same = _results(tmp_path / "b", calibrations, 0.31)
    moved = _results(tmp_path / "c", calibrations, 0.45)
    out = tmp_path / "check.csv"
    assert main(["pecan", "compare-results", str(first), str(same), "--figure", "fig8_ResNet50_v2-8", "-o", str(out)]) == 0
    with open(out, newline="") as fh:
        rows = {r["number"]: r for r in csv.DictReader(fh)}
    assert len(rows) == 1 * 6 + 4 and {r["within"] for r in rows.values()} == {"yes", "-"}  # fig8 reads resnet's calibration only
    assert rows["calibration resnet declared ms/element"]["within"] == "-"
    assert rows["fig8_ResNet50_v2-8 pecan worker_cost $"]["second"] == "0.31"
    assert main(["pecan", "compare-results", str(first), str(moved), "--figure", "fig8_ResNet50_v2-8"]) == 1
    out, err = capsys.readouterr()
    assert "fig8_ResNet50_v2-8 pecan worker_cost $,0.3,0.45,0.15,±5% or $0.06,no" in out
    assert "6 of 7 numbers within tolerance" in err  # the 3 absolute CPU times are shown, not held
    assert main(["pecan", "compare-results", str(first), str(tmp_path / "nowhere"), "--figure", "fig8_ResNet50_v2-8"]) == 1
    assert "nowhere: not a finished workflow's results directory" in capsys.readouterr().err
    assert main(["pecan", "compare-results", str(first), str(same), "--figure", "fig9"]) == 1
    assert "repro: error: --figure: unknown figure(s) ['fig9']" in capsys.readouterr().err
    # the flag before the directories, as the usage line shows it
    assert main(["pecan", "compare-results", "--figure", "fig8_ResNet50_v2-8", str(first), str(same)]) == 0
    capsys.readouterr()
    older = {p: {k: v for k, v in c.items() if k != "reference_kernel"} for p, c in calibrations.items()}
    _results(tmp_path / "older", older, 0.30)
    assert main(["pecan", "compare-results", str(first), str(tmp_path / "older"), "--figure", "fig8_ResNet50_v2-8"]) == 1
    assert ("calibration of 'resnet' has no reference kernel (an older file); measure it again "
            "(snakemake --forcerun calibrate)") in capsys.readouterr().err
    # a table of another workload's runs under fig8's name: its numbers were compared as ResNet's
    _results(tmp_path / "other", calibrations, 0.30, workload="RetinaNet")
    assert main(["pecan", "compare-results", str(first), str(tmp_path / "other"), "--figure", "fig8_ResNet50_v2-8"]) == 1
    assert capsys.readouterr().err == (f"repro: error: {tmp_path / 'other' / 'tables' / 'ResNet50_v2-8.csv'}: row 1 "
                                       "holds runs of 'RetinaNet', not of 'ResNet50_v2-8'; expected ResNet50_v2-8's "
                                       "cost table\n")


def test_reference_verdicts():
    row = {"mode": "cachew", "repeats": 5}
    for quantity, (mean, low, high) in {"total_cost": (1.6, 1.5, 1.7), "tpu_cost": (0.6, 0.59, 0.61),
                                        "worker_cost": (1.0, 0.9, 1.1)}.items():
        row.update({f"{quantity}_mean": mean, f"{quantity}_ci_low": low, f"{quantity}_ci_high": high})
    verdicts = reference_verdicts("fig8", [row, {"mode": "other"}], {"cachew": [0.62, 1.0]})
    assert [list(v) for v in verdicts] == [VERDICT_COLUMNS] * 3
    by = {v["quantity"]: v for v in verdicts}
    assert by["total_cost"]["verdict"] == "inside" and by["total_cost"]["reference"] == pytest.approx(1.62)
    # 0.62 is a label in cents: outside by what is left beyond half a cent
    assert by["tpu_cost"]["verdict"] == "outside" and by["tpu_cost"]["outside_by"] == pytest.approx(0.005)
    assert by["tpu_cost"]["outside_by_pct"] == pytest.approx(0.8)
    assert by["tpu_cost"]["reference_rounding"] == 0.005 and by["total_cost"]["reference_rounding"] == 0.01
    assert reference_verdicts("x", [row], None) == []


@pytest.mark.parametrize("low, high, verdict, outside_by", [
    (4.4238, 4.4282, "inside", 0.0),  # the interval ends within half a cent of the label
    (4.4, 4.42, "outside", 0.005),  # signed: the label lies above the interval
    (4.44, 4.45, "outside", -0.005),
    (4.4351, 4.44, "outside", -0.0001),
])
def test_a_reference_labelled_in_cents_stands_for_the_half_cent_around_it(low, high, verdict, outside_by):
    row = {"mode": "collocated", "repeats": 3, "total_cost_mean": (low + high) / 2, "total_cost_ci_low": low,
           "total_cost_ci_high": high}
    [judged] = reference_verdicts("fig8", [row], {"collocated": 4.43})
    assert judged["verdict"] == verdict and judged["outside_by"] == pytest.approx(outside_by, abs=1e-9)


@pytest.mark.workflow
def test_workflow_carries_repeats_to_tables_figures_verdicts_and_the_check(tmp_path):
    copy_workflow(tmp_path)
    override = {"repeats": 3, "reproducibility": {"figures": ["fig8_ResNet50_v2-8"]}}
    try:
        snakemake(tmp_path, "plots/fig8_ResNet50_v2-8.pdf", "reproducibility_check", *configfiles(tmp_path, override))
    finally:
        stop_clusters(tmp_path)
    with open(tmp_path / "results" / "tables" / "ResNet50_v2-8.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["mode"] for r in table] == ["collocated", "cachew", "pecan", "autoplacement", "autoorder", "fastflow"]
    assert {r["repeats"] for r in table} == {"3"}
    metrics = json.loads((tmp_path / "results" / "runs" / "ResNet50_v2-8" / "pecan" / "metrics.json").read_text())
    assert len(metrics["repeats"]) == 3
    with open(tmp_path / "results" / "reference" / "fig8_ResNet50_v2-8.csv", newline="") as fh:
        verdicts = list(csv.DictReader(fh))
    assert {v["mode"] for v in verdicts} == {"collocated", "cachew", "pecan"}
    assert {v["verdict"] for v in verdicts} <= {"inside", "outside"}
    with open(tmp_path / "results" / "reproducibility" / "check.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == CHECK_COLUMNS
    names = [r["number"] for r in rows]
    assert "calibration resnet AutoOrder saving %" in names and "fig8_ResNet50_v2-8 pecan worker_cost $" in names
    # 2 plotted segments per mode of the table; 6 numbers per pipeline its runs read (resnet alone)
    assert len(names) == 6 * 2 + 1 * 6
    # the model's noise is seeded: collocated differs between the chains only through the calibration
    collocated = next(r for r in rows if r["number"] == "fig8_ResNet50_v2-8 collocated tpu_cost $")
    assert collocated["within"] == "yes"


def test_trims_distribution_table_gives_bootstrap_intervals():
    from repro.trims.experiments import distribution_table

    rng = np.random.default_rng(0)
    results = [{"latency_us": float(v), "hit": bool(h), "ok": True} for v, h in zip(rng.lognormal(10, 0.3, 60), rng.random(60) < 0.7)]
    row = distribution_table([{"distribution": "pareto", "params": [1.5], "concurrency": 2, "results": results, "wall_s": 3.0,
                               "evictions": 1}])[0]
    assert row["requests"] == 60
    for q in (50, 90, 99):
        low, high = row[f"p{q}_ci_ms"]
        assert low <= row[f"p{q}_ms"] <= high
    assert row["p50_ms"] == pytest.approx(np.median([r["latency_us"] for r in results]) / 1000)
    assert row["hit_rate_ci"][0] < row["hit_rate"] < row["hit_rate_ci"][1]


def test_a_scratch_directory_is_emptied_of_what_the_chain_wrote_only(config, tmp_path):
    """A check's run-1/run-2 made by an earlier check: a file of the user's put there since was deleted
    with it. What the chain writes (calibrations, runs with their repeats, tables) is its own; anything
    else is refused and kept."""
    from repro.fsutil import check_fresh_directory, fresh_directory
    from repro.pecan.reproducibility import run_chain, scratch_files

    cfg = {**copy.deepcopy(config), "repeats": 2}
    cfg["calibration"].update(elements=2, repeats=1)
    scratch = fresh_directory(tmp_path / "run-1", "--scratch", scratch_files(config))
    run_chain(cfg, ["Getting_started"], scratch)
    assert (scratch / "runs" / "Getting_started" / "short" / "repeats" / "run-1.log").is_file()
    check_fresh_directory(scratch, "--scratch", scratch_files(config))  # all of it the chain's own
    (scratch / "runs" / "notes.txt").write_text("the user's")
    with pytest.raises(ReproError, match=r"--scratch .*run-1: holds runs/notes.txt, which this command does not write"):
        fresh_directory(scratch, "--scratch", scratch_files(config))
    assert (scratch / "runs" / "notes.txt").read_text() == "the user's"
