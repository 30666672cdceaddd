"""Miniature runs on the tf.data engine, one per placement (collocated, Cachew, a sweep of fixed
worker counts, FastFlow), whose logs the artifact's parser reads and whose metrics the validation
reads; a worker killed mid-run leaves the run going on the others.

Needs the 'tfdata' extra (TensorFlow); without it these tests are skipped, unless
REPRO_REQUIRE_TFDATA=1 (as in CI), where that is a failure.
"""

import dataclasses
import os
import signal

import pytest

from repro.pecan.logs import parse_log
from repro.processes import matches

from support import ENGINE_TEST_SETTINGS, engine_spec


def test_collocated_run_writes_the_artifacts_log(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import run

    spec = engine_spec(pecan_config, "collocated", settle_windows=4)
    metrics = run(spec, tmp_path / "run", data)
    parsed = parse_log(tmp_path / "run" / "run.log")
    assert (parsed.remote_workers, parsed.local_workers, parsed.samples) == (0, 0, 4)
    # the emulated accelerator bounds it: never faster than one step per step time
    assert 0 < parsed.throughput <= spec.batch_size / metrics["step_time_s"] * 1.05
    assert metrics["throughput"] == parsed.throughput
    assert "ClientHeartbeat" not in (tmp_path / "run" / "run.log").read_text()
    # the run measured its own pipeline before it started: the model's inputs for this run
    cost = metrics["pipeline_cost"]
    assert cost["order"] == "declared" and cost["ops"] == metrics["order"] and cost["threads"] == 1
    assert cost["cpu_s"]["n"] == cost["batches"] and cost["cpu_s"]["q1"] <= cost["cpu_s_per_element"] <= cost["cpu_s"]["q3"]
    assert 0 < cost["cpu_s_min"] <= cost["cpu_s_per_element"] < 1
    assert cost["bytes_per_element"] == 224 * 224 * 3 * 4  # a float32 image
    assert metrics["cpus"] == len(os.sched_getaffinity(0))
    # the share of its CPU the pinned client got, per window (the engine-fed model's CPUs)
    assert all(0 < w["cpu_share"]["collocated"] <= 1 for w in metrics["windows"])
    assert metrics["scale"]["collocated_share"] <= 0.6 <= 1 <= metrics["scale"]["largest_share"]


def test_cachew_starts_real_workers_and_the_parser_reads_the_worker_set(tf, tmp_path, pecan_config, data, monkeypatch):
    from repro.pecan.tfdata import engine
    from repro.pecan.tfdata.engine import run

    probes = []  # the transfer probe's least seconds per phase: the spec's
    measure = engine.measure_transfer_cost
    monkeypatch.setattr(engine, "measure_transfer_cost", lambda *a, **kw: probes.append(kw["min_seconds"]) or measure(*a, **kw))
    # windows enough to wait out the second worker's start on a busy machine (40 windows, about 4 s
    # here, were not always): the run waits for it up to its 60 s deployment wait, and ends a few
    # windows after it serves
    metrics = run(engine_spec(pecan_config, "cachew", max_remote_workers=2, max_windows=400), tmp_path / "run", data)
    assert probes == [metrics["spec"]["probe_seconds"]] == [ENGINE_TEST_SETTINGS["probe_seconds"]]
    log = (tmp_path / "run" / "run.log").read_text()
    parsed = parse_log(tmp_path / "run" / "run.log")
    # Cachew scales up from one worker: a second one joins, with its own address
    assert metrics["decisions"][0]["remote"] == 2
    addresses = {line.split("Worker Address: ")[1].split(";")[0] for line in log.splitlines() if "Worker Address" in line}
    assert len(addresses) >= 2, metrics["decisions"]  # a run that ends short names each worker's state there
    assert parsed.converged and parsed.remote_workers in (1, 2) and parsed.local_workers == 0
    assert metrics["remote_workers"] == parsed.remote_workers
    # the transfer probe: a float32 image per element, sent and received at some CPU per byte
    transfer = metrics["transfer_cost"]
    assert transfer["bytes_per_element"] == metrics["pipeline_cost"]["bytes_per_element"] == 224 * 224 * 3 * 4
    assert transfer["batches"] >= 8 and 0 < transfer["send_s_per_byte"] < 1e-7 and 0 < transfer["receive_s_per_byte"] < 1e-7
    # then the run's pipeline, served by that worker: its CPU per element, pipeline and sending
    assert transfer["served_batches"] >= 8 and 0 < transfer["served_s_per_element"] < 1
    for window in metrics["windows"]:  # each serving worker's CPU share, measured on this machine
        assert set(window["cpu_share"]) <= set(window["workers"]) | set(window["workers_after"])
        assert all(0 < share <= 1 for share in window["cpu_share"].values())
    assert any(window["cpu_share"] for window in metrics["windows"])
    # every worker the run started has been stopped
    service_log_dir = tmp_path / "run" / "service"
    assert not (service_log_dir / "state.json").exists()


def test_a_sweep_holds_each_count_of_remote_workers_at_one_scale(tf, tmp_path, pecan_config, data):
    from repro.pecan.tfdata.engine import sweep
    from repro.pecan.validation import validation_rows

    spec = dataclasses.replace(engine_spec(pecan_config, "cachew", settle_windows=2, max_windows=6), decision_steps=0)
    runs = sweep(spec, [0, 2], tmp_path / "sweep", data)
    assert [(m["spec"]["placement"], m["remote_workers"]) for m in runs] == [("collocated", 0), ("fixed", 2)]
    assert runs[0]["spec"]["time_scale"] == runs[1]["spec"]["time_scale"] == runs[0]["scale"]["time_scale"]
    assert runs[1]["scale"] == runs[0]["scale"]  # the first count's derived scale, recorded by each
    held = [w for w in runs[1]["windows"] if sorted(w["workers"]) == sorted(w["workers_after"])]
    assert held and all(len(w["workers"]) == 2 for w in held)
    assert not (tmp_path / "sweep" / "2" / "service" / "state.json").exists()  # its service stopped
    rows = validation_rows(runs[1], {"resnet": {o: {"cpu_s_per_element": 0.005, "bytes_out_per_element": 1.0}
                                                for o in ("declared", "autoorder")}}, 32)
    assert [(r["mode"], r["remote_workers"]) for r in rows] == [("sweep", 2)]


@pytest.mark.fault
def test_a_worker_killed_mid_run_leaves_the_run_going_on_the_others(tf, tmp_path, pecan_config, data):
    """On a service started beforehand (as the workflow's cluster_start will): the run starts its
    workers there, one is killed, the run goes on; afterwards the dispatcher still runs and the
    run's workers are gone."""
    from repro.pecan.tfdata.engine import run
    from repro.pecan.tfdata.service import Service

    spec = engine_spec(pecan_config, "short", max_remote_workers=2, max_local_workers=0, max_windows=12,
                 settle_windows=12)
    assert (spec.fixed_remote_workers, spec.fixed_local_workers) == (2, 0)
    killed = []

    def kill_one(window):
        if len(window.workers_after) == 2 and not killed:
            victim = Service(tmp_path / "service").state["workers"][0]
            assert matches(victim)
            os.kill(victim["pid"], signal.SIGKILL)
            killed.append(victim)

    service = Service.start(tmp_path / "service")
    try:
        metrics = run(spec, tmp_path / "run", data, service_dir=tmp_path / "service", on_window=kill_one)
        after = Service(tmp_path / "service")
        assert after.dispatcher_running() and after.state["workers"] == []
    finally:
        service.stop()
    assert killed, "both workers never served together"
    assert len(metrics["windows"]) == 12  # the run went on to its end
    parsed = parse_log(tmp_path / "run" / "run.log")
    assert (parsed.remote_workers, parsed.local_workers) == (1, 0)
    assert metrics["windows"][-1]["workers_after"] != []



# -- FastFlow on the engine --------------------------------------------------------------------

FASTFLOW_PROFILES = ["PROFILE_LTHP", "PROFILE_GTHP", "PROFILE_RTHP_ELEMENT", "PROFILE_RTHP_BATCH"]


def test_fastflows_split_reads_its_share_from_the_clients_pipeline(tf):
    from repro.pecan.tfdata.engine import local_share

    for ratio, local in ((0.3, 30), (0.0, 0), (1.0, 100), (4 / 7, 57)):
        choices = list(local_share(ratio).take(100).as_numpy_iterator())
        assert choices.count(0) == local and set(choices) <= {0, 1}, ratio
    # evenly spread: every 10 items hold 3 of the client's own at 0.3
    choices = list(local_share(0.3).take(100).as_numpy_iterator())
    assert all(choices[i:i + 10].count(0) == 3 for i in range(0, 100, 10))


@pytest.mark.parametrize("time_scale, decided", [(3.0, "OFFLOADED"), (60.0, "LOCAL_ONLY")])
def test_fastflow_profiles_once_decides_once_and_keeps_its_workers(tf, tmp_path, pecan_config, data, time_scale, decided):
    """A bound far above what the client's one CPU makes (time scale 3): FastFlow offloads and the
    client reads both its own pipeline and the service's; a bound the client keeps up with (60): it
    does not. Either way its two workers run, and are billed, from start to end."""
    from repro.pecan.costs import cost_row
    from repro.pecan.policies import fastflow_decide
    from repro.pecan.tfdata.engine import run

    spec = engine_spec(pecan_config, "fastflow", time_scale=time_scale)
    assert (spec.placement, spec.fixed_remote_workers) == ("fastflow", 2)
    metrics = run(spec, tmp_path / "run", data)
    assert [d["state"] for d in metrics["decisions"]] == FASTFLOW_PROFILES[1:] + [decided]
    phases = [w["phase"] for w in metrics["windows"]]
    assert phases[:4] == FASTFLOW_PROFILES and set(phases[4:]) == {decided} and len(phases) >= 4 + spec.settle_windows
    assert all(len(w["workers"]) == len(w["workers_after"]) == 2 for w in metrics["windows"])
    # the decision is FastFlow's rule on what the engine measured: throughput and the client's CPU per profile
    ff = metrics["fastflow"]
    profiles, cycles = ff["profiles"], ff["cycles"]
    assert set(profiles) == set(FASTFLOW_PROFILES) and set(cycles) == set(FASTFLOW_PROFILES)
    expected = fastflow_decide(profiles["PROFILE_LTHP"], profiles["PROFILE_GTHP"],
                               {cut: (profiles[f"PROFILE_RTHP_{cut}"], cycles[f"PROFILE_RTHP_{cut}"])
                                for cut in ("ELEMENT", "BATCH")}, cycles["PROFILE_LTHP"])
    assert ff["decision"]["offload"] == expected.offload == (decided == "OFFLOADED")
    assert ff["decision"]["ratio_local"] == pytest.approx(expected.ratio_local)
    if decided == "OFFLOADED":
        assert 0 < expected.ratio_local < 1 and expected.cut in ("ELEMENT", "BATCH")
        # the host makes batches itself only in the local profile
        assert cycles["PROFILE_RTHP_BATCH"] < cycles["PROFILE_LTHP"]
    # the log: the profiles as info lines, training throughput only after the decision, two workers
    log = (tmp_path / "run" / "run.log").read_text()
    assert [line.split("FastFlow profile ")[1].split(":")[0] for line in log.splitlines()
            if "FastFlow profile" in line] == FASTFLOW_PROFILES
    parsed = parse_log(tmp_path / "run" / "run.log")
    assert (parsed.remote_workers, parsed.local_workers, parsed.converged) == (2, 0, True)
    assert parsed.samples == len(phases) - 4
    assert metrics["throughput"] <= spec.accelerator_examples_per_s / spec.time_scale * 1.05
    row = cost_row(parsed, "fastflow", "resnet", pecan_config["models"]["resnet"], 4.96, 0.427319)
    assert row["worker_cost"] == pytest.approx(2 * row["epoch_time"] / 3600 * 0.427319)
    assert not (tmp_path / "run" / "service" / "state.json").exists()  # every worker stopped
