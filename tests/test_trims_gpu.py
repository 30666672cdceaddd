"""The GPU-resident model store and GPU clients. They need an NVIDIA GPU and PyTorch with CUDA and
are skipped elsewhere; the tests that run everywhere check what a machine without them gets."""

import json
import os
import signal
import time

import numpy as np
import pytest

from repro.errors import ReproError
from repro.trims.client import Client, ClientOptions
from repro.trims.cuda import driver
from repro.trims.models import generate
from repro.trims.monitor import MemoryMonitor
from repro.trims.device import resolve_device
from repro.trims.server import budget_bytes, start_daemon
from repro.trims.modelstore import ModelStore

MODELS = ("squeezenet_1.1", "resnet18_v1")
ON_GPU = resolve_device("auto") == "gpu"
needs_gpu = pytest.mark.skipif(not ON_GPU, reason="needs an NVIDIA GPU and PyTorch with CUDA")


def test_without_a_gpu_the_device_flag_is_refused_clearly():
    if ON_GPU:
        pytest.skip("this machine has a GPU")
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ReproError, match="--device gpu: "):
        resolve_device("gpu")
    with pytest.raises(ReproError, match="--device must be one of cpu, gpu, auto; got 'tpu'"):
        resolve_device("tpu")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    if not ON_GPU:
        pytest.skip("needs an NVIDIA GPU and PyTorch with CUDA")
    base = tmp_path_factory.mktemp("models")
    return base, {name: generate(name, base / name, seed=3) for name in MODELS}


@needs_gpu
def test_store_keeps_models_in_gpu_memory_under_a_budget(models):
    base, manifests = models
    sizes = {m: manifests[m]["params_bytes"] for m in MODELS}
    free_before = driver().memory()[0]
    store = ModelStore(base, max(sizes.values()) + (1 << 20), "lru", device="gpu")
    for model in (*MODELS, MODELS[0]):
        handle, size, _ = store.acquire(model)
        assert handle["device"] == "gpu" and len(bytes.fromhex(handle["ipc"])) == 64 and size == sizes[model]
        store.release(model)
        assert store.used_bytes <= store.budget_bytes
    assert store.evictions == 2  # each model pushes the other out
    store.close()
    assert abs(driver().memory()[0] - free_before) < 64 << 20  # device memory given back


@needs_gpu
def test_a_model_evicted_from_gpu_memory_is_promoted_from_the_host_tier(models):
    base, manifests = models
    sizes = {m: manifests[m]["params_bytes"] for m in MODELS}
    store = ModelStore(base, max(sizes.values()) + (1 << 20), "lru", device="gpu", persist_bytes=sum(sizes.values()))
    for model in (*MODELS, MODELS[0]):
        store.acquire(model)
        store.release(model)
    tiers = store.status()["tiers"]
    assert tiers["host"]["promotions"] == 1 and tiers["file"]["loads"] == 2 and tiers["host"]["models"] == [MODELS[1]]
    promoted = store.entries[MODELS[0]]
    data = promoted.memory.copy_out(promoted.size)  # the promoted copy is the file's bytes
    assert bytes(data) == (base / MODELS[0] / "model.params").read_bytes()
    store.close()


@needs_gpu
def test_gpu_budget_is_a_fraction_of_gpu_memory():
    total = driver().memory()[1]
    assert budget_bytes(0.25, device="gpu") == int(total * 0.25)


@needs_gpu
def test_gpu_store_refuses_a_corrupt_model_and_frees_its_memory(models, tmp_path):
    generate("squeezenet_1.1", tmp_path / "squeezenet_1.1", seed=3)
    with open(tmp_path / "squeezenet_1.1" / "model.params", "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x01\x02\x03\x04")
    store = ModelStore(tmp_path, 1 << 30, device="gpu")
    with pytest.raises(ReproError, match="model.params: checksum mismatch"):
        store.acquire("squeezenet_1.1")
    assert store.used_bytes == 0


@pytest.fixture
def gpu_server(models, tmp_path):
    base, _ = models
    sock = tmp_path / "store.sock"
    pid = start_daemon(sock, base, 2 << 30, "lru", tmp_path / "store.pid", tmp_path / "server.log", device="gpu")
    yield sock, pid
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)


def _top5(result):
    return json.loads(open(result["trace"]).read())["otherData"]["top5"]


@needs_gpu
def test_gpu_clients_share_the_store_and_agree_with_the_cpu(models, gpu_server, tmp_path):
    base, _ = models
    sock, _ = gpu_server
    plan = [(m, i) for m in MODELS for i in range(3)]
    runs = {}
    for label, device, original in (("cpu", "cpu", True), ("gpu-original", "gpu", True), ("gpu-shared", "gpu", False)):
        client = Client(ClientOptions(base_path=base, socket=sock, original=original, device=device, eager=True,
                                      profile_output=tmp_path / label))
        results, _ = client.run(plan, concurrent=2 if label == "gpu-shared" else 1)
        assert all(r["ok"] for r in results), [r.get("error") for r in results]
        runs[label] = {(r["model"], r["iteration"]): r for r in results}
    for key in runs["cpu"]:
        assert _top5(runs["gpu-shared"][key]) == _top5(runs["gpu-original"][key])
        # float32 sums in another order: the best class must match, the rest nearly always does
        assert _top5(runs["gpu-shared"][key])[0] == _top5(runs["cpu"][key])[0]
    assert sum(r["hit"] for r in runs["gpu-shared"].values()) >= len(plan) - len(MODELS)
    # a CPU client cannot use device memory: a clear error, not a crash
    cpu_client = Client(ClientOptions(base_path=base, socket=sock, device="cpu", profile_output=tmp_path / "x"))
    results, _ = cpu_client.run([(MODELS[0], 0)])
    assert not results[0]["ok"] and "run the client with --device gpu" in results[0]["error"]


@needs_gpu
def test_monitor_samples_the_gpu(models, gpu_server, tmp_path):
    base, _ = models
    sock, pid = gpu_server
    client = Client(ClientOptions(base_path=base, socket=sock, device="gpu", profile_output=tmp_path / "t"))
    with MemoryMonitor(store_pid=pid) as monitor:
        client.run([(m, i) for m in MODELS for i in range(2)])
        time.sleep(0.3)  # a few more of the monitor's samples after the last request
    monitor.write(tmp_path / "memory.csv", tmp_path / "summary.json")
    gpu = [s for s in monitor.samples if s["device"] == 0]
    assert len(gpu) >= 5 and all(s["memory_used_bytes"] > 0 for s in gpu)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["devices"]["0"]["memory_used_bytes"]["peak"] >= max(s["memory_used_bytes"] for s in gpu)
    assert np.isfinite(summary["devices"]["0"]["store_rss_bytes"]["average"])
