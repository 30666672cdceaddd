"""FastFlow as a placement policy: its decision rule, its run in the cluster model, and its worker count."""

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from repro.config import check_config_files
from repro.errors import ReproError
from repro.pecan.cluster import JobSpec, fastflow_capacity, simulate
from repro.pecan.policies import (
    LOCAL_ONLY,
    OFFLOADED,
    PROFILE_LTHP,
    FastFlowPlacement,
    fastflow_decide,
    fastflow_ratio_local,
    fastflow_workers,
)
from repro.pecan.run import fixed_remote_workers, job_spec


def spec(**overrides):
    base = dict(experiment="e", mode="m", placement="fastflow", autoorder=False, batch_size=1024, steps_per_epoch=1251,
                epochs=1, steps_per_loop=500, accelerator_batches_per_s=3.158, cost_per_element=0.05,
                bytes_per_element=602112, collocated_vcpus=21.4, remote_worker_vcpus=8, local_worker_vcpus=8,
                max_remote_workers=20, max_local_workers=10, fixed_remote_workers=2, fixed_local_workers=0,
                network_gbps=32, decision_steps=60, noise_cv=0.0, cachew_threshold_up=0.0, client_cost=4.96,
                worker_cost=0.427319, seed=1)
    return JobSpec(**{**base, **overrides})


def test_ratio_local_splits_by_capacity_when_both_together_fall_short():
    # 400 local + 300 remote < 3000: each source's share in proportion to its rate
    assert fastflow_ratio_local(3000, 400, 300, 1.0, 0.0) == pytest.approx(400 / 700)
    # n counts the workers behind rthp
    assert fastflow_ratio_local(3000, 400, 150, 1.0, 0.0, n=2) == pytest.approx(400 / 700)


def test_ratio_local_when_remote_alone_could_cover_the_deficit():
    # lthp 400 <= rthp 3000: off_data = max(3000, (1000 - 400) x 1) = 3000 -> (1000 - 3000) / 1000 < 0 -> 0
    assert fastflow_ratio_local(1000, 400, 3000, 1.0, 0.0) == 0.0
    # lthp 800 > rthp 500, 800 + 500 >= 1000: off_data = mean(500, (1000 - 800) x 1.5) = 400 -> 0.6
    assert fastflow_ratio_local(1000, 800, 500, 1.0, 0.5) == pytest.approx(0.6)
    # lthp 300 <= rthp 900: off_data = max(900, 700 x 1) -> (1000 - 900) / 1000
    assert fastflow_ratio_local(1000, 300, 900, 1.0, 0.0) == pytest.approx(0.1)
    # the decoded share grows by the candidate's cycles over the local profile's: 200 x (1 + 0.5 / 2) = 250,
    # off_data = mean(500, 250) -> (1000 - 375) / 1000
    assert fastflow_ratio_local(1000, 800, 500, 2.0, 0.5) == pytest.approx(0.625)
    # lthp + rthp = gthp: not short of it, so the offloaded share counts: mean(300, 300 x 1.5) -> 0.625, not 0.7
    assert fastflow_ratio_local(1000, 700, 300, 1.0, 0.5) == pytest.approx(0.625)
    # lthp = rthp: not more, so off_data = max(600, 400) -> (1000 - 600) / 1000
    assert fastflow_ratio_local(1000, 600, 600, 1.0, 0.0) == pytest.approx(0.4)


def test_offloads_only_above_the_threshold():
    remote = {"ELEMENT": (500.0, 0.0), "BATCH": (500.0, 0.0)}
    assert not fastflow_decide(100, 130, remote, 1.0).offload  # 1.3 exactly: not more than the threshold
    kept = fastflow_decide(100, 130, remote, 1.0)
    assert (kept.offload, kept.cut, kept.ratio_local, kept.score) == (False, None, 1.0, {}) and kept.offload is False
    assert fastflow_decide(100, 131, remote, 1.0).offload
    assert not fastflow_decide(100, 131, remote, 1.0, threshold=2.0).offload


def test_the_cut_scores_remote_rate_plus_freed_local_rate_and_ties_go_to_the_first():
    tie = fastflow_decide(100, 1000, {"ELEMENT": (500.0, 0.0), "BATCH": (500.0, 0.0)}, 1.0)
    assert tie.cut == "ELEMENT" and tie.score == {"ELEMENT": 600.0, "BATCH": 600.0}
    # BATCH frees all host CPU (cycles 0), ELEMENT half of it: 500 + 50 < 480 + 100
    better = fastflow_decide(100, 1000, {"ELEMENT": (500.0, 0.5), "BATCH": (480.0, 0.0)}, 1.0)
    assert better.cut == "BATCH" and better.score == {"ELEMENT": 550.0, "BATCH": 580.0}
    assert better.ratio_local == pytest.approx(fastflow_ratio_local(1000, 100, 480, 1.0, 0.0))


def test_the_policy_profiles_once_then_keeps_its_decision():
    policy = FastFlowPlacement(remote=2)
    assert policy.state == "PROFILE_LTHP" and policy.ratio_local == 1.0
    for state, batch_time in (("PROFILE_GTHP", 1 / 0.4), ("PROFILE_RTHP_ELEMENT", 1 / 3.0),
                              ("PROFILE_RTHP_BATCH", 1 / 0.3)):
        assert policy.decide(2, 0, batch_time) == (2, 0)
        assert policy.state == state
    assert policy.decide(2, 0, 1 / 0.3) == (2, 0)
    assert policy.state == OFFLOADED and policy.decision.cut == "ELEMENT"
    assert policy.ratio_local == pytest.approx(0.4 / 0.7)
    for batch_time in (1.0, 100.0):  # decided once: later windows change nothing
        assert policy.decide(2, 0, batch_time) == (2, 0) and policy.ratio_local == pytest.approx(0.4 / 0.7)


def test_the_policy_decides_with_the_hosts_cycles_where_every_profile_measured_them():
    """The tf.data engine passes the client's CPU seconds per batch of each window (FastFlow's cycles)."""
    windows = ((1 / 0.4, 0.5), (1 / 3.0, 0.0), (1 / 0.3, 0.25), (1 / 0.28, 0.05))  # LTHP, GTHP, RTHP x 2 cuts
    policy = FastFlowPlacement(remote=2)
    for batch_time, cpu in windows:
        assert policy.decide(2, 0, batch_time, host_cpu=cpu) == (2, 0)
    assert policy.cycles == {"PROFILE_LTHP": 0.5, "PROFILE_GTHP": 0.0, "PROFILE_RTHP_ELEMENT": 0.25,
                             "PROFILE_RTHP_BATCH": 0.05}
    # ELEMENT: 0.3 + 0.4 x (1 - 0.25 / 0.5) = 0.5; BATCH: 0.28 + 0.4 x (1 - 0.05 / 0.5) = 0.64
    assert policy.decision.cut == "BATCH" and policy.decision.score == pytest.approx({"ELEMENT": 0.5, "BATCH": 0.64})
    assert policy.ratio_local == pytest.approx(fastflow_ratio_local(3.0, 0.4, 0.28, 0.5, 0.05))
    # without them (the cluster model), or with the local profile's missing or zero, the host's cycles
    # are the local profile's 1 against 0: ELEMENT 0.7, BATCH 0.68
    for cpus in ((None,) * 4, (None, 0.0, 0.25, 0.05), (0.5, 0.0, None, 0.05), (0.0, 0.0, 0.25, 0.05)):
        policy = FastFlowPlacement(remote=2)
        for (batch_time, _), cpu in zip(windows, cpus):
            policy.decide(2, 0, batch_time, host_cpu=cpu)
        assert policy.decision.cut == "ELEMENT", cpus
        assert policy.decision.score == pytest.approx({"ELEMENT": 0.7, "BATCH": 0.68}), cpus
        assert policy.ratio_local == pytest.approx(fastflow_ratio_local(3.0, 0.4, 0.3, 1.0, 0.0)), cpus
    # the GTHP profile's cycles are not needed
    policy = FastFlowPlacement(remote=2)
    for (batch_time, cpu), given in zip(windows, (True, False, True, True)):
        policy.decide(2, 0, batch_time, host_cpu=cpu if given else None)
    assert policy.decision.cut == "BATCH"


def test_the_policy_decides_with_its_own_threshold():
    for threshold, decided in ((2.0, LOCAL_ONLY), (1.3, OFFLOADED)):
        policy = FastFlowPlacement(remote=2, threshold=threshold)
        for batch_time in (1.0, 1 / 1.5, 1 / 5.0, 1 / 5.0):  # GTHP / LTHP = 1.5
            policy.decide(2, 0, batch_time)
        assert policy.state == decided, threshold


def test_no_offload_when_the_host_keeps_up():
    policy = FastFlowPlacement(remote=3)
    for batch_time in (1.0, 1 / 1.2, 1 / 5.0, 1 / 5.0):
        policy.decide(3, 0, batch_time)
    assert policy.state == LOCAL_ONLY and policy.ratio_local == 1.0 and policy.remote == 3


def test_the_cluster_model_runs_fastflow_with_its_split():
    s = spec()
    host, far = 21.4 / 0.05, 2 * 8 / 0.05
    sim = simulate(s)
    rates = [w.steps * s.batch_size / w.seconds for w in sim.windows]
    bound = 3.158 * 1024
    assert rates[:4] == pytest.approx([host, bound, far, far])  # LTHP, GTHP, RTHP x 2 cuts
    assert rates[4:] == pytest.approx([host + far] * (len(rates) - 4))  # proportional split: both sources at full rate
    assert {(w.remote, w.local) for w in sim.windows} == {(2, 0)}  # pre-launched workers, billed throughout
    assert fastflow_capacity(s, OFFLOADED, 2, 1.0) == pytest.approx(host)
    assert fastflow_capacity(s, OFFLOADED, 2, 0.0) == pytest.approx(far)
    assert fastflow_capacity(s, OFFLOADED, 2, 0.5) == pytest.approx(2 * far)  # the slower share sets the pace


def test_on_one_machine_fastflows_split_shares_its_cpus():
    """The tf.data engine's miniature: the client's own pipeline (10 ms per element, one CPU), two
    workers (12 ms per element served) and the client receiving their elements (2 ms) share 2 CPUs.
    A fifth of the elements local: the split alone allows 178.6/s (the workers' 142.9/s capped by
    the CPUs, over four fifths), but each element costs 0.2 x 10 + 0.8 x 14 = 13.2 ms of the CPUs."""
    one_machine = spec(cost_per_element=0.01, collocated_vcpus=1, remote_worker_vcpus=1, bytes_per_element=1000,
                       served_s_per_element=0.012, receive_s_per_byte=2e-6)
    assert fastflow_capacity(one_machine, OFFLOADED, 2, 0.2) == pytest.approx(2 / 0.012 / 0.8)  # CPUs of their own
    shared = dataclasses.replace(one_machine, host_cpus=2)
    assert fastflow_capacity(shared, OFFLOADED, 2, 0.2) == pytest.approx(2 / 0.0132)
    assert fastflow_capacity(shared, OFFLOADED, 2, 1.0) == pytest.approx(100)  # all local: the client's one CPU
    assert fastflow_capacity(shared, OFFLOADED, 2, 0.0) == pytest.approx(2 / 0.014)
    assert fastflow_capacity(shared, PROFILE_LTHP, 2, 0.2) == pytest.approx(100)  # the profiles read one source


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_a_worker_count_below_one_is_refused_naming_the_key(value):
    with pytest.raises(ReproError, match=r"^pecan\.modes\.fastflow\.remote_workers: FastFlow needs .* at least 1"):
        fixed_remote_workers("fastflow", {"placement": "fastflow", "remote_workers": value})
    with pytest.raises(ReproError, match=r"^remote_workers: FastFlow needs"):
        fastflow_workers(value)


def test_the_worker_count_defaults_to_two_and_is_configurable():
    assert fastflow_workers(1) == 1 and fastflow_workers(2) == 2  # one worker is enough
    assert fixed_remote_workers("fastflow", {"placement": "fastflow"}) == 2
    assert fixed_remote_workers("fastflow", {"placement": "fastflow", "remote_workers": 5}) == 5
    assert fixed_remote_workers("short", {"placement": "fixed", "remote_workers": 0}) == 0


# -- the modes of Fig 6 and 7 -------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


COSTS = {"resnet": {"declared": 0.05, "autoorder": 0.04, "collocated_vcpus": 21.4, "bytes_per_element": 602112,
                    "preset": "local"}}


@pytest.mark.parametrize("mode, placement, cost", [("autoplacement", "autoplacement", 0.05), ("autoorder", "cachew", 0.04),
                                                    ("fastflow", "fastflow", 0.05), ("cachew", "cachew", 0.05),
                                                    ("pecan", "autoplacement", 0.04)])
def test_each_policy_alone_is_a_mode(config, mode, placement, cost):
    pecan = copy.deepcopy(config["pecan"])
    pecan["experiments"]["ResNet50_v2-8"]["modes"] = [mode]
    s = job_spec(pecan, "ResNet50_v2-8", mode, COSTS, 1)
    assert (s.placement, s.cost_per_element) == (placement, cost)
    assert s.fixed_remote_workers == (2 if mode == "fastflow" else 0)


def test_a_fastflow_mode_with_no_workers_fails_the_config_check(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"pecan": {"modes": {"fastflow": {"placement": "fastflow", "autoorder": False, "epochs": 1,
                                                                       "steps_per_loop": 10, "remote_workers": 0}}}}))
    with pytest.raises(ReproError, match=r"pecan\.modes\.fastflow\.remote_workers: FastFlow needs .*at least 1, found 0$"):
        check_config_files([path])


def test_a_fastflow_run_writes_the_artifacts_log_and_the_cost_rules_read_its_workers(config, tmp_path):
    from repro.pecan.calibrate import calibrate
    from repro.pecan.costs import cost_row
    from repro.pecan.logs import parse_log
    from repro.pecan.run import run_mode

    cfg = copy.deepcopy(config)
    cfg["repeats"] = 2
    metrics = run_mode(cfg, "ResNet50_v2-8", "fastflow", {"resnet": calibrate("resnet", elements=2, repeats=1)}, tmp_path)
    assert (metrics["remote_workers"], metrics["local_workers"]) == (2, 0)
    # one window per profile after the first (LTHP), then one decision for the rest of the run
    assert [d["state"] for d in metrics["decisions"]] == ["PROFILE_GTHP", "PROFILE_RTHP_ELEMENT", "PROFILE_RTHP_BATCH",
                                                          "OFFLOADED"]
    parsed = parse_log(tmp_path / "run.log")
    row = cost_row(parsed, "fastflow", "resnet", cfg["pecan"]["models"]["resnet"], 4.96, 0.427319)
    assert row["worker_cost"] == pytest.approx(2 * row["epoch_time"] / 3600 * 0.427319)
