import hashlib
import json
import math
import os
import time
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

from repro.cli import main
from repro.errors import ReproError
from repro.traces import summarize, validate
from repro.trims.client import Client, ClientOptions
from repro.trims.models import generate, load_manifest
from repro.trims.server import StoreConnection, serve
from repro.trims.eviction import POLICIES, POLICY_ALIASES
from repro.trims.modelstore import _CHUNK, GpuMemory, ModelStore
from repro.trims.workload import distribution, plan_requests

# -- models -----------------------------------------------------------------------------


def test_generated_models_are_real_and_deterministic(models, tmp_path):
    manifest = load_manifest(models / "resnet18_v1", verify=True)
    assert 11_000_000 < manifest["params_bytes"] / 4 < 12_000_000  # ResNet-18 has 11.7M parameters
    session = ort.InferenceSession(str(models / "resnet18_v1" / "model.onnx"), providers=["CPUExecutionProvider"])
    out = session.run(None, {"data": np.ones((1, 3, 224, 224), np.float32)})[0]
    assert out.shape == (1, 1000) and np.isfinite(out).all()
    again = generate("resnet18_v1", tmp_path / "again", seed=1)
    assert again["sha256"]["model.params"] == manifest["sha256"]["model.params"]
    with pytest.raises(ReproError, match="unknown model 'resnet9000'"):
        generate("resnet9000", tmp_path / "x")


def test_corrupt_model_file_is_named(models, tmp_path):
    broken = tmp_path / "broken"
    generate("squeezenet_1.1", broken / "squeezenet_1.1", seed=1)
    with open(broken / "squeezenet_1.1" / "model.params", "r+b") as fh:
        fh.seek(100)
        fh.write(b"\xff\xff\xff\xff")
    with pytest.raises(ReproError, match="model.params: checksum mismatch"):
        load_manifest(broken / "squeezenet_1.1", verify=True)
    store = ModelStore(broken, 1 << 30)
    with pytest.raises(ReproError, match="checksum mismatch"):
        store.acquire("squeezenet_1.1")
    assert store.used_bytes == 0


# -- the store's policies ---------------------------------------------------------------


def write_model(base, name, data):
    """A model directory whose params are `data` (the store only reads params and manifest)."""
    directory = base / name
    directory.mkdir(exist_ok=True)
    (directory / "model.params").write_bytes(data)
    (directory / "manifest.json").write_text(json.dumps(
        {"params_bytes": len(data), "tensors": [], "sha256": {"model.params": hashlib.sha256(data).hexdigest()}}))


def fake_models(tmp_path, sizes):
    """Tiny model directories of given params sizes, all zeros."""
    for name, size in sizes.items():
        write_model(tmp_path, name, bytes(size))
    return tmp_path


def random_bytes(size, seed=0):
    """Weights worth comparing after a copy (not all zeros)."""
    return np.random.default_rng(seed).integers(0, 256, size, np.uint8).tobytes()


def resident_bytes(handle, size):
    """What a client mapping the host segment in `handle` reads."""
    segment = shared_memory.SharedMemory(name=handle["shm"])
    resource_tracker.unregister(segment._name, "shared_memory")  # the store owns the segment
    try:
        return bytes(segment.buf[:size])
    finally:
        segment.close()


def test_each_policy_picks_its_victims_when_called():
    def entry(model, last_used, uses, order):
        return SimpleNamespace(model=model, last_used=last_used, uses=uses, order=order)

    recent, rare, first = entry("recent", 1.0, 5, 2), entry("rare", 3.0, 1, 1), entry("first", 2.0, 9, 0)
    unused = [recent, rare, first]
    picked = {name: [e.model for e in policy(unused)] for name, policy in POLICIES.items()}
    assert picked == {"lru": ["recent"], "lfu": ["rare"], "fifo": ["first"], "never": [],
                      "flush": ["recent", "rare", "first"], "all": ["recent", "rare", "first"]}
    assert all(policy([]) == [] for policy in POLICIES.values())
    # ties: lru by load order; lfu by recency, then load order
    assert POLICIES["lru"]([entry("late", 1.0, 1, 4), entry("early", 1.0, 2, 3)])[0].model == "early"
    assert POLICIES["lfu"]([entry("newer", 2.0, 1, 0), entry("older", 1.0, 1, 5)])[0].model == "older"
    assert POLICIES["lfu"]([entry("late", 1.0, 1, 4), entry("early", 1.0, 1, 3)])[0].model == "early"
    assert POLICY_ALIASES == {"lcu": "lfu"} and ModelStore(Path("."), 1, "lcu").policy == "lfu"


@pytest.mark.parametrize("policy, evicted", [("lru", "b"), ("lfu", "a"), ("fifo", "a")])
def test_eviction_policies(tmp_path, policy, evicted):
    store = ModelStore(fake_models(tmp_path, {"a": 400, "b": 400, "c": 400}), 1000, policy)
    for model in ("a", "b", "b", "b", "a"):  # a loaded first and used last; b used most
        store.acquire(model)
        store.release(model)
    store.acquire("c")
    assert evicted not in store.entries and "c" in store.entries and store.evictions == 1


def test_models_in_use_are_never_evicted_and_oversized_models_refused(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 600, "b": 600, "big": 2000}), 1000, "lru", wait_s=0.2)
    store.acquire("a")
    with pytest.raises(ReproError, match="every resident model stayed in use"):
        store.acquire("b")
    assert "a" in store.entries
    store.release("a")
    assert store.acquire("b")[2] is False and "a" not in store.entries
    with pytest.raises(ReproError, match="more than the store's budget"):
        store.acquire("big")
    with pytest.raises(ReproError, match="unknown model 'zzz'"):
        store.acquire("zzz")
    store.close()


def test_a_load_waits_for_a_model_in_use_to_be_released(tmp_path):
    import threading

    store = ModelStore(fake_models(tmp_path, {"a": 600, "b": 600}), 1000, "lru", wait_s=10)
    store.acquire("a")
    threading.Timer(0.3, store.release, ["a"]).start()
    started = time.monotonic()
    assert store.acquire("b")[2] is False
    assert time.monotonic() - started >= 0.25 and "a" not in store.entries
    store.close()


def test_a_model_larger_than_one_read_chunk_is_loaded_whole(tmp_path):
    size = 2 * _CHUNK + 12345
    data = np.random.default_rng(0).integers(0, 256, size, np.uint8).tobytes()
    fake_models(tmp_path, {"big": 0})
    (tmp_path / "big" / "model.params").write_bytes(data)
    manifest = json.loads((tmp_path / "big" / "manifest.json").read_text())
    manifest.update(params_bytes=size, sha256={"model.params": hashlib.sha256(data).hexdigest()})
    (tmp_path / "big" / "manifest.json").write_text(json.dumps(manifest))
    store = ModelStore(tmp_path, size)  # a model exactly the size of the budget fits
    handle, loaded, hit = store.acquire("big")
    segment = shared_memory.SharedMemory(name=handle["shm"])
    try:
        assert handle["device"] == "cpu" and (loaded, hit) == (size, False) and bytes(segment.buf[:size]) == data
    finally:
        segment.close()
        store.close()


def test_a_model_held_by_two_clients_stays_until_both_release_it(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 500, "b": 500, "c": 500}), 1000, wait_s=0.1)
    assert store.acquire("a")[2] is False and store.acquire("a")[2] is True
    store.acquire("a")
    store.release("a")
    store.acquire("b")
    store.release("b")  # two models of 500 fill the budget of 1000 exactly: nothing evicted so far
    assert store.evictions == 0
    store.release("a")
    store.acquire("c")  # a is still held by one client: b goes
    assert set(store.entries) == {"a", "c"}
    assert store.status()["models"]["a"] == {"bytes": 500, "refs": 1, "uses": 3, "hits": 2}
    store.release("a")
    with pytest.raises(ReproError, match="model 'a' is not held by anyone"):
        store.release("a")
    store.release("c")
    store.acquire("c")
    store.flush()  # c is in use: only a goes
    assert set(store.entries) == {"c"} and store.evictions == 2 and store.used_bytes == 500
    status = store.status()
    assert (status["policy"], status["device"], status["budget_bytes"], status["used_bytes"]) == ("lru", "cpu", 1000, 500)
    assert (status["pid"], status["evictions"]) == (os.getpid(), 2)
    store.close()
    assert store.entries == {}


def test_store_messages_give_sizes_in_mib(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 3 << 20, "b": 3 << 20, "big": 5 << 20}), 4 << 20, wait_s=0.05)
    with pytest.raises(ReproError, match=r"model 'big' needs 5 MiB, more than the store's budget of 4 MiB"):
        store.acquire("big")
    store.acquire("a")
    started = time.monotonic()
    with pytest.raises(ReproError, match=r"model 'b' needs 3 MiB but every resident model stayed in use for 0 s "
                                         r"\(3 of 4 MiB\)"):
        store.acquire("b")
    assert time.monotonic() - started < 0.9  # waits wait_s (0.05 s), not longer
    for name in ("", None, 5):
        with pytest.raises(ReproError, match="model name must be a non-empty string"):
            store.acquire(name)
    for name in ("../x", "."):
        with pytest.raises(ReproError, match="expected a directory name, one path component"):
            store.acquire(name)
    with open(tmp_path / "a" / "model.params", "r+b") as fh:  # a truncated model file
        fh.truncate(1 << 20)
    store.release("a")
    store.flush()
    with pytest.raises(ReproError, match="model.params: checksum mismatch"):
        store.acquire("a")
    assert store.used_bytes == 0
    for bad, message in (({"policy": "mru"}, "unknown eviction policy 'mru'"), ({"device": "tpu"}, "unknown store device")):
        with pytest.raises(ReproError, match=message):
            ModelStore(tmp_path, 1, **bad)
    store.close()


def test_host_segments_are_named_after_the_server_and_stale_ones_removed(tmp_path, monkeypatch):
    from repro.processes import describe
    from repro.trims import modelstore as store_module

    prefix = store_module.segment_prefix(tmp_path / "a.sock")
    assert prefix == store_module.segment_prefix(tmp_path / "." / "a.sock") != store_module.segment_prefix(tmp_path / "b.sock")
    assert prefix.startswith("repro_trims_") and prefix.endswith("_") and len(prefix) == len("repro_trims_") + 17
    store = ModelStore(fake_models(tmp_path, {"a": 10}), 100, segment_prefix=prefix)
    me = describe(os.getpid(), "x")
    name = store.acquire("a")[0]["shm"]
    assert name == f"{prefix}{me['pid']}_{me['start_ticks']}_0"
    monkeypatch.setattr(store_module, "SHM_DIR", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    # gone: a dead pid, and a live pid that started at another time (reused); kept: ours, and other names
    stale = [f"{prefix}999999999_{me['start_ticks']}_0", f"{prefix}{me['pid']}_1_0"]
    for segment in (name, *stale, f"{prefix}0junk", "other_1_2_3"):
        (tmp_path / "shm" / segment).touch()
    assert store_module.remove_stale_segments(prefix) == sorted(stale)
    gone = tmp_path / "shm" / stale[0]  # another server removed it between the listing and the unlink

    class Listing:
        def glob(self, pattern):
            return [gone]

    monkeypatch.setattr(store_module, "SHM_DIR", Listing())
    assert store_module.remove_stale_segments(prefix) == [stale[0]]
    assert sorted(p.name for p in (tmp_path / "shm").iterdir()) == sorted([name, f"{prefix}0junk", "other_1_2_3"])
    store.close()


class FakeDriver:
    """Device memory as a bytearray: what the GPU store asks of the CUDA driver."""

    def __init__(self, fail_export=False):
        self.memory, self.freed, self.fail_export, self.copied_out = {}, [], fail_export, []

    def allocate(self, size):
        pointer = 1 << 20 * (len(self.memory) + 1)
        self.memory[pointer] = bytearray(size)
        return pointer

    def export(self, pointer):
        if self.fail_export:
            raise ReproError("no IPC")
        return f"ipc-{pointer}"

    def copy_to_device(self, address, buffer, length):
        base = max(p for p in self.memory if p <= address)
        self.memory[base][address - base : address - base + length] = bytes(buffer[:length])

    def copy_to_host(self, buffer, pointer, length):
        self.copied_out.append((pointer, length))
        buffer[:length] = self.memory[pointer][:length]

    def free(self, pointer):
        self.freed.append(pointer)


def test_gpu_store_copies_every_chunk_to_its_place(tmp_path, monkeypatch):
    from repro.trims import cuda

    fake = FakeDriver()
    monkeypatch.setattr(cuda, "driver", lambda: fake)
    size = _CHUNK + 1000
    data = np.random.default_rng(1).integers(0, 256, size, np.uint8).tobytes()
    fake_models(tmp_path, {"m": 0})
    (tmp_path / "m" / "model.params").write_bytes(data)
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(
        {"params_bytes": size, "tensors": [], "sha256": {"model.params": hashlib.sha256(data).hexdigest()}}))
    store = ModelStore(tmp_path, size, device="gpu")
    handle, _, _ = store.acquire("m")
    (pointer, device_bytes), = fake.memory.items()
    assert handle == {"device": "gpu", "ipc": f"ipc-{pointer}"} and bytes(device_bytes) == data
    assert store.entries["m"].memory.buffer is None  # the host staging buffer is dropped once loaded
    store.release("m")
    store.close()
    assert fake.freed == [pointer]
    failing = FakeDriver(fail_export=True)
    monkeypatch.setattr(cuda, "driver", lambda: failing)
    with pytest.raises(ReproError, match="no IPC"):
        GpuMemory(10)
    assert failing.freed == list(failing.memory)


@pytest.mark.parametrize("policy", ["flush", "all"])
def test_flush_and_all_evict_every_unused_model(tmp_path, policy):
    store = ModelStore(fake_models(tmp_path, {"a": 300, "b": 300, "c": 300, "d": 300}), 1000, policy)
    for model in ("a", "b", "c"):
        store.acquire(model)
        store.release(model)
    store.acquire("a")  # held: stays
    store.acquire("d")
    assert set(store.entries) == {"a", "d"} and store.evictions == 2
    store.close()


def test_never_evicts_nothing_and_refuses_what_does_not_fit(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 3 << 20, "b": 3 << 20}), 4 << 20, "never", wait_s=5)
    store.acquire("a")
    store.release("a")
    started = time.monotonic()
    with pytest.raises(ReproError, match=r"^model 'b' needs 3 MiB but the store \(eviction 'never'\) has 1 of 4 MiB free$"):
        store.acquire("b")
    assert set(store.entries) == {"a"} and store.evictions == 0 and time.monotonic() - started < 4  # no waiting
    store.close()


# -- the store's tiers (TrIMS's persist_cpu) ----------------------------------------------------


def test_an_evicted_model_is_promoted_from_the_host_tier_without_its_file(tmp_path):
    size = 2 * _CHUNK + 12345  # promoted chunk by chunk
    weights = random_bytes(size)
    write_model(tmp_path, "a", weights)
    write_model(tmp_path, "b", random_bytes(size, seed=1))
    store = ModelStore(tmp_path, size + 7, "lru", persist_bytes=size + 3)
    for model in ("a", "b"):  # b evicts a from the store into the host tier
        store.acquire(model)
        store.release(model)
    assert list(store.tier) == ["a"] and store.tier["a"] == weights
    (tmp_path / "a" / "model.params").unlink()  # the file is not read again
    handle, loaded, hit = store.acquire("a")  # promoted, evicting b into the tier
    assert (loaded, hit) == (size, False) and resident_bytes(handle, size) == weights
    store.release("a")
    for _ in range(2):
        assert store.acquire("a")[2] is True
        store.release("a")
    assert store.status() == {
        "pid": os.getpid(), "policy": "lru", "device": "cpu", "budget_bytes": size + 7, "used_bytes": size,
        "evictions": 2,
        "tiers": {
            "cpu": {"hits": 2, "evictions": 2, "used_bytes": size, "budget_bytes": size + 7},
            "host": {"promotions": 1, "evictions": 0, "models": ["b"], "used_bytes": size, "budget_bytes": size + 3},
            "file": {"loads": 2},
        },
        "models": {"a": {"bytes": size, "refs": 0, "uses": 3, "hits": 2}},
    }
    store.close()


def test_the_host_tier_keeps_what_fits_its_budget_dropping_the_oldest_copies(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 400, "b": 400, "c": 400, "d": 400}), 400, "fifo",
                       persist_bytes=800)
    for model in ("a", "b", "c"):
        store.acquire(model)
        store.release(model)
    assert list(store.tier) == ["a", "b"] and store.tier_evictions == 0  # 800 of 800: full, nothing dropped
    segment = store.entries["c"].memory.shm.name
    store.acquire("d")  # c joins the tier; a, the oldest copy, is dropped
    store.release("d")
    assert list(store.tier) == ["b", "c"] and store.tier_evictions == 1 and store.evictions == 3
    with pytest.raises(FileNotFoundError):  # the evicted model's segment is gone
        shared_memory.SharedMemory(name=segment)
    store.acquire("a")  # read from its file again; d joins the tier, b is dropped
    assert list(store.tier) == ["c", "d"] and store.status()["tiers"]["host"]["evictions"] == 2
    assert (store.file_loads, store.promotions) == (5, 0)
    store.close()


def test_only_models_that_fit_the_host_tier_are_kept(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"fits": 500, "larger": 501, "empty": 0, "one": 1}), 1000,
                       persist_bytes=500)
    for model in ("empty", "larger", "fits"):
        store.acquire(model)
        store.release(model)
    store.flush()
    assert list(store.tier) == ["fits"] and store.evictions == 3  # larger fit the store, not the tier
    store.persist_bytes = 1
    store.acquire("one")
    store.release("one")
    store.flush()  # fits is dropped for it
    assert list(store.tier) == ["one"] and (store.evictions, store.tier_evictions) == (4, 1)


def test_a_regenerated_model_is_read_from_its_file_not_the_host_tier(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 600, "b": 600}), 1000, persist_bytes=1000)
    for model in ("a", "b"):
        store.acquire(model)
        store.release(model)
    weights = random_bytes(300)
    write_model(tmp_path, "a", weights)  # regenerated, another size, while its old copy is in the tier
    handle, size, _ = store.acquire("a")
    assert size == 300 and resident_bytes(handle, size) == weights and "a" not in store.tier
    assert (store.promotions, store.file_loads) == (0, 3)
    store.close()


def test_a_promotion_that_finds_no_room_keeps_the_copy_in_the_host_tier(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 600, "b": 600}), 1000, persist_bytes=1000, wait_s=0.05)
    store.acquire("a")
    store.release("a")
    store.acquire("b")  # held: a cannot come back
    copy = store.tier["a"]
    with pytest.raises(ReproError, match="every resident model stayed in use"):
        store.acquire("a")
    assert store.tier == {"a": copy} and store.promotions == 0
    with pytest.raises(ReproError, match="unknown model 'c'"):
        store.acquire("c")
    store.close()


def test_without_a_host_tier_evicted_models_are_read_again(tmp_path):
    store = ModelStore(fake_models(tmp_path, {"a": 600, "b": 600}), 1000, "lru")
    for model in ("a", "b", "a"):
        store.acquire(model)
        store.release(model)
    assert store.status()["tiers"]["file"]["loads"] == 3 and not store.tier
    store.close()


def test_gpu_store_keeps_evicted_weights_in_the_host_tier(tmp_path, monkeypatch):
    from repro.trims import cuda

    fake = FakeDriver()
    monkeypatch.setattr(cuda, "driver", lambda: fake)
    size = _CHUNK + 1000
    weights = random_bytes(size)
    write_model(tmp_path, "a", weights)
    write_model(tmp_path, "b", random_bytes(size, seed=1))
    store = ModelStore(tmp_path, size, device="gpu", persist_bytes=size)
    for model in ("a", "b"):
        store.acquire(model)
        store.release(model)
    first = min(fake.memory)
    assert store.tier == {"a": weights} and fake.copied_out == [(first, size)] and fake.freed == [first]
    (tmp_path / "a" / "model.params").unlink()
    handle, _, _ = store.acquire("a")  # promoted chunk by chunk into new device memory
    pointer = int(handle["ipc"].removeprefix("ipc-"))
    assert bytes(fake.memory[pointer]) == weights and store.status()["tiers"]["gpu"]["evictions"] == 2
    store.release("a")
    store.acquire("b")  # the second promotion
    assert (store.promotions, store.file_loads) == (2, 2)
    store.close()
    empty = GpuMemory(0)  # the driver is given at least one byte
    assert empty.copy_out(0) == bytearray() and fake.copied_out[-1] == (empty.pointer, 1)


# -- workloads --------------------------------------------------------------------------


def test_distribution_plans_are_seeded_and_follow_popularity():
    models = [f"m{i}" for i in range(5)]
    plan = plan_requests(models, 2000, "pareto", [1, 1.5], seed=3)
    assert plan == plan_requests(models, 2000, "pareto", [1, 1.5], seed=3)
    assert plan != plan_requests(models, 2000, "pareto", [1, 1.5], seed=4)
    counts = np.bincount([models.index(m) for m, _ in plan], minlength=5)
    weights = distribution("pareto", [1, 1.5]).rvs(size=5, random_state=np.random.default_rng(3))
    assert np.argmax(counts) == np.argmax(weights)
    for name in ("uniform", "exponential", "weibull", "poisson"):
        assert len(plan_requests(models, 50, name, None, seed=1)) == 50


def test_model_iterations_caps_each_model_and_ends_early():
    plan = plan_requests(["a", "b", "c"], 100, "uniform", [0, 1], model_iterations=4, seed=0)
    assert len(plan) == 12 and all(sum(m == x for m, _ in plan) == 4 for x in "abc")
    assert plan_requests(["a", "b"], 3) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    assert len(plan_requests(["a", "b"], 3, model_iterations=1)) == 2


def test_a_cap_changes_nothing_until_a_model_reaches_it():
    """Under --model-iterations the draws keep following popularity; a model drops out once capped."""
    models = ["a", "b", "c", "d"]
    free = plan_requests(models, 60, "pareto", [1, 1.0], seed=7)
    capped = plan_requests(models, 60, "pareto", [1, 1.0], model_iterations=10, seed=7)
    counts = dict.fromkeys(models, 0)
    for n, (model, _) in enumerate(free):
        counts[model] += 1
        if counts[model] > 10:
            break
    assert capped[:n] == free[:n] and n >= 10
    assert max(sum(m == x for m, _ in capped) for x in models) == 10
    assert plan_requests(models, 60, "pareto", [1, 1.0]) == plan_requests(models, 60, "pareto", [1, 1.0], seed=0)
    # only c is popular (Poisson draws 0, 0, 1 for this seed); once it is capped the others share evenly
    plan = plan_requests(["a", "b", "c"], 10, "poisson", [0.4], model_iterations=1, seed=2)
    assert plan[0] == ("c", 0) and sorted(m for m, _ in plan) == ["a", "b", "c"]


def test_popularity_weights_and_distribution_laws():
    from repro.trims.workload import check_params, popularity

    weights = popularity(["a", "b", "c"], "pareto", [1, 1.5], np.random.default_rng(2))
    assert weights.sum() == pytest.approx(1.0) and len(set(weights.tolist())) == 3
    small = popularity(["a", "b", "c"], "uniform", [0, 0.1], np.random.default_rng(2))  # draws summing under 1
    assert small.sum() == pytest.approx(1.0) and len(set(small.tolist())) == 3
    nothing = popularity(["a", "b"], "poisson", [1e-12], np.random.default_rng(0))  # every draw is 0
    assert nothing.tolist() == [0.5, 0.5]
    assert distribution("exponential", [4.0]).mean() == pytest.approx(0.25)
    assert distribution("uniform", [2.0, 5.0]).support() == (2.0, 5.0)
    assert distribution("pareto", [2.0, 3.0]).mean() == pytest.approx(3.0)  # alpha xm / (alpha - 1)
    assert distribution("weibull", [2.0, 3.0]).mean() == pytest.approx(3.0 * math.gamma(1.5))  # lambda G(1 + 1/k)
    assert distribution("poisson", [2.5]).mean() == pytest.approx(2.5)
    assert check_params("pareto") == [1.0, 1.5] and check_params("pareto", []) == [1.0, 1.5]
    assert check_params("uniform", [0, 0.5]) == [0, 0.5]  # a range may start at 0
    huge = popularity(["a", "b", "c"], "uniform", [1e308, 1.7e308], np.random.default_rng(2))  # draws whose sum overflows
    assert huge.sum() == pytest.approx(1.0) and len(set(huge.tolist())) == 3


def test_plans_refuse_nothing_to_run_and_a_cap_of_zero_plans_nothing():
    with pytest.raises(ReproError, match="no models to run"):
        plan_requests([], 3)
    with pytest.raises(ReproError, match="--iterations must be at least 1, got 0"):
        plan_requests(["a"], 0)
    assert plan_requests(["a"], 1) == [("a", 0)]
    assert plan_requests(["a"], 3, model_iterations=0) == []
    assert plan_requests(["a"], 3, "uniform", None, model_iterations=0) == []
    assert plan_requests(["a", "b"], 2, model_iterations=None) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert [i for _, i in plan_requests(["a", "b"], 5, "uniform", None)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "name, params, message",
    [("gamma", None, "unknown distribution"), ("pareto", [1], "takes 2 parameter"),
     ("exponential", [-1], "rate=-1"), ("uniform", [2, 1], "must exceed"), ("weibull", [1, float("nan")], "lambda=nan"),
     # finite parameters whose draws are not weights: numpy's ValueError ('lam value too large', 'Probabilities
     # contain NaN', 'do not sum to 1') was a traceback
     ("poisson", [1e300], "out of range for poisson"), ("pareto", [1e308, 0.001], "out of range for pareto"),
     ("exponential", [1e-320], "out of range for exponential"), ("uniform", [-1e308, 1e308], "min=-1e\\+308 must be >= 0"),
     ("uniform", [-1, 1], "min=-1 must be >= 0")],
)
def test_bad_distributions_are_refused(name, params, message):
    with pytest.raises(ReproError, match=message):
        plan_requests(["a"], 5, name, params)


# -- server and clients as real processes -----------------------------------------------


def test_shared_and_original_requests_give_the_same_answer(models, server, tmp_path):
    sock, _ = server
    outputs = {}
    for original in (True, False):
        options = ClientOptions(base_path=models, socket=sock, original=original, profile_output=tmp_path / str(original),
                                eager=True)
        results, _ = Client(options).run([("resnet18_v1", 0), ("resnet18_v1", 1)], concurrent=2)
        assert all(r["ok"] for r in results), results
        outputs[original] = [json.loads(Path(r["trace"]).read_text())["otherData"]["top5"] for r in results]
        for r in results:
            report = validate(r["trace"])
            assert report["phases"]["B"] == report["phases"]["E"]
    assert outputs[True] == outputs[False]
    status = StoreConnection(sock).request({"op": "status"})
    resnet = status["models"]["resnet18_v1"]
    assert (resnet["refs"], resnet["uses"], resnet["hits"]) == (0, 2, 1)  # loaded once, then found resident
    doc = summarize([tmp_path / "False"])
    phases = set(doc["traces"][0]["events"])
    assert {"read_params", "load_model", "create_prediction", "set_predict_input", "forward_predict", "get_output",
            "free_predictor"} <= phases
    assert "runtime_init" not in phases  # eager: initialised before the timed request, category 'ignore'


def test_client_compare_writes_compared_traces(models, server, tmp_path, monkeypatch):
    sock, _ = server
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {models}\n  server_socket: {sock}\n  profile_output_directory: {tmp_path}/p\n")
    code = main(["trims", "client", "compare", "--config", str(config), "--distribution", "uniform", "--iterations", "6",
                 "--concurrent", "2", "--eager-async", "--profile-output", "cmp", "--monitor-memory",
                 "--results", "r.json"])
    assert code == 0
    compared = list((tmp_path / "p").rglob("compared-*.json"))
    assert compared and all(validate(p)["events"] > 0 for p in compared)
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["original"]["results"]) == len(report["shared"]["results"]) == 6
    assert (tmp_path / "p").rglob("memory-summary.json")


def test_server_refuses_a_second_instance_on_the_same_socket(models, server, tmp_path):
    sock, _ = server
    with pytest.raises(ReproError, match="already runs"):
        serve(sock, models, 1 << 20, "lru")


def test_socket_paths_too_long_for_unix_sockets(tmp_path):
    long = tmp_path / ("d" * 120) / "trims.sock"
    with pytest.raises(ReproError, match="--socket .*: longer than the 107 bytes a Unix socket path may have"):
        serve(long, tmp_path, 1 << 20, "lru")


def test_a_client_maps_a_segment_without_the_resource_tracker(monkeypatch):
    """multiprocessing's SharedMemory registers a segment it maps with the resource tracker that a
    client's worker processes share: two of them mapping one segment unregistered it twice, and the
    tracker printed a KeyError traceback (2 of 3 runs with --concurrent 4)."""
    from multiprocessing import resource_tracker

    from repro.trims.modelstore import AttachedSegment, HostMemory

    store = HostMemory(4096)
    store.shm.buf[:5] = b"model"
    try:
        monkeypatch.setattr(resource_tracker, "register", lambda *args: pytest.fail("registered with the tracker"))
        monkeypatch.setattr(resource_tracker, "unregister", lambda *args: pytest.fail("unregistered from the tracker"))
        mapped = AttachedSegment(store.shm.name)
        assert (mapped.size, bytes(mapped.buf[:5])) == (4096, b"model")
        mapped.close()
    finally:
        monkeypatch.undo()
        store.close()


def test_a_profiling_store_records_each_acquire_and_eviction_as_a_trace_event(tmp_path, monkeypatch):
    """The server's trace (--profile): each acquire a complete event, from where the model came (file,
    host tier or already resident) and its length, each eviction an instant one; past the bound the
    events are counted, not kept."""
    import threading

    from repro.trims import modelstore

    clock = iter(range(10**9, 2 * 10**9, 500))  # ns: each reading 0.5 us after the last
    monkeypatch.setattr(modelstore.time, "time_ns", lambda: next(clock))
    monkeypatch.setattr(modelstore, "MAX_PROFILE_EVENTS", 6)
    store = ModelStore(fake_models(tmp_path, {"a": 600, "b": 600}), 1000, "lru", persist_bytes=1000, events=[])
    try:
        for model in ("a", "a", "b", "a", "a"):  # b evicts a to the host tier, a comes back from it
            store.acquire(model)
            store.release(model)
    finally:
        store.close()
    common = {"cat": "server", "pid": os.getpid(), "tid": threading.get_ident() % (1 << 31)}
    assert [{k: v for k, v in e.items() if k not in ("ts", "dur")} for e in store.events] == [
        {"name": "acquire", **common, "args": {"model": "a", "bytes": 600, "source": "file"}, "ph": "X"},
        {"name": "acquire", **common, "args": {"model": "a", "bytes": 600, "source": "resident"}, "ph": "X"},
        {"name": "evict", **common, "args": {"model": "a", "bytes": 600}, "ph": "i", "s": "p"},
        {"name": "acquire", **common, "args": {"model": "b", "bytes": 600, "source": "file"}, "ph": "X"},
        {"name": "evict", **common, "args": {"model": "b", "bytes": 600}, "ph": "i", "s": "p"},
        {"name": "acquire", **common, "args": {"model": "a", "bytes": 600, "source": "host tier"}, "ph": "X"},
    ]
    assert store.events_dropped == 2  # the last acquire, the close's eviction of a
    assert store.events[1]["dur"] == 0.5  # a hit: the clock read twice
    assert all(e["dur"] >= 0.5 for e in store.events if e["ph"] == "X")
    stamps = [e["ts"] for e in store.events]  # us, from the clock's readings in ns
    assert all(10**6 <= ts < 2 * 10**6 and (ts * 2).is_integer() for ts in stamps), stamps
    # a thread's identifier fits the trace's 31 bits
    monkeypatch.setattr(modelstore.threading, "get_ident", lambda: (1 << 40) + (1 << 31) + 5)
    store.events, store.events_dropped = [], 0
    store._record("x", 1.0)
    monkeypatch.undo()
    assert store.events[0]["tid"] == 5


def test_the_store_refuses_weights_longer_than_the_manifest_and_closes_what_it_read(tmp_path):
    """The manifest's size and checksum hold for the file's first bytes only: a file longer than that is
    refused too; and the file read is closed once the model is resident."""
    models = fake_models(tmp_path, {"a": 600, "b": 600})
    with open(models / "b" / "model.params", "ab") as fh:
        fh.write(b"\0")
    store = ModelStore(models, 10_000, "lru")
    try:
        store.acquire("a")
        opened = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")]
        assert str(models / "a" / "model.params") not in opened
        with pytest.raises(ReproError) as error:
            store.acquire("b")
        assert str(error.value).startswith(f"{models / 'b' / 'model.params'}: checksum mismatch (expected sha256 ")
    finally:
        store.close()


def test_a_host_segment_is_sized_as_asked_and_refuses_sizes_that_are_not_bytes_or_do_not_fit(monkeypatch):
    from repro.trims import modelstore

    for size in (True, -1, 1.5):
        with pytest.raises(ReproError) as error:
            modelstore.HostMemory(size)
        assert str(error.value) == f"a model's size must be a whole number of bytes, got {size!r}"
    empty = modelstore.HostMemory(0)
    try:
        assert empty.shm.size == 1  # a segment holds at least a byte
    finally:
        empty.close()
    free = SimpleNamespace(f_bavail=10, f_frsize=1 << 20)  # 10 MiB free in /dev/shm
    monkeypatch.setattr(modelstore.os, "statvfs", lambda path: free)
    modelstore.HostMemory(10 << 20).close()  # exactly what is free fits
    with pytest.raises(ReproError) as error:
        modelstore.HostMemory((10 << 20) + 1)
    assert str(error.value) == (f"{modelstore.SHM_DIR}: 10 MiB free, a model of 10 MiB does not fit; expected a larger "
                                "/dev/shm (docker run --shm-size) or a smaller model")


@pytest.mark.parametrize("name, params, message", [
    ("pareto", [1], "pareto takes 2 parameter(s) (xm, alpha), got 1"),
    ("uniform", [1, 1], "out of range for uniform: max=1 must exceed min=1"),
    ("uniform", [2, 1], "out of range for uniform: max=1 must exceed min=2"),
    ("exponential", [0], "out of range for exponential: rate=0 must be > 0"),
    ("weibull", [-1, -2], "out of range for weibull: k=-1 must be > 0, lambda=-2 must be > 0"),
])
def test_a_distribution_out_of_range_is_refused_in_words_naming_each_parameter(name, params, message):
    with pytest.raises(ReproError) as error:
        plan_requests(["a"], 5, name, params)
    assert str(error.value) == f"--distribution-params: {message}"
    with pytest.raises(ReproError) as error:
        plan_requests([], 3)
    assert str(error.value) == "no models to run"


def test_draws_that_overflow_are_refused_without_numpy_warnings():
    import warnings

    from repro.trims.workload import popularity

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow RuntimeWarning: kept quiet, the refusal says it
        with pytest.raises(ReproError) as error:
            popularity(["a", "b"], "pareto", [1e308, 1.5], np.random.default_rng(0))
    assert str(error.value) == ("--distribution-params: out of range for pareto: [1e+308, 1.5] gives draws that are not "
                                "finite numbers")


def test_weights_that_cannot_be_opened_are_named(tmp_path, monkeypatch):
    from repro.trims import models as model_files

    models = fake_models(tmp_path, {"a": 600})
    opened = os.open

    def refused(path, flags, *args):
        if str(path).endswith("model.params"):
            raise PermissionError(13, "Permission denied")
        return opened(path, flags, *args)

    monkeypatch.setattr(model_files.os, "open", refused)
    store = ModelStore(models, 10_000, "lru")
    try:
        with pytest.raises(ReproError) as error:
            store.acquire("a")
    finally:
        monkeypatch.undo()
        store.close()
    assert str(error.value) == f"{models / 'a' / 'model.params'}: cannot read the weights of 'a' (Permission denied)"
