import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from repro.cli import main
from repro.errors import ReproError
from repro.traces import summarize, validate
from repro.trims.client import Client, ClientOptions
from repro.trims.models import generate, load_manifest
from repro.trims.server import StoreConnection, serve
from repro.trims.modelstore import ModelStore
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


def fake_models(tmp_path, sizes):
    """Tiny model directories of given params sizes (the store only reads params and manifest)."""
    import hashlib

    for name, size in sizes.items():
        directory = tmp_path / name
        directory.mkdir()
        data = bytes(size)
        (directory / "model.params").write_bytes(data)
        (directory / "manifest.json").write_text(json.dumps(
            {"params_bytes": size, "tensors": [], "sha256": {"model.params": hashlib.sha256(data).hexdigest()}}))
    return tmp_path


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


@pytest.mark.parametrize(
    "name, params, message",
    [("gamma", None, "unknown distribution"), ("pareto", [1], "takes 2 parameter"),
     ("exponential", [-1], "rate=-1"), ("uniform", [2, 1], "must exceed"), ("weibull", [1, float("nan")], "lambda=nan")],
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
