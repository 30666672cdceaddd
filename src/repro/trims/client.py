"""Inference clients: cold model loading ("original") or weights mapped from the model store ("shared").

Both modes run the same onnxruntime path; only where the weights come from differs. Each
request records the phases of the original TrIMS client as a Chrome trace:
read_params, load_model, create_prediction, set_predict_input, forward_predict, get_output,
free_predictor (and runtime_init, in category 'ignore' when it happens before the timed request).
"""

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from repro.errors import ReproError
from repro.traces import write_trace
from repro.trims.models import GRAPH, PARAMS, load_manifest, params_view
from repro.trims.server import StoreConnection


@dataclass
class ClientOptions:
    base_path: Path
    socket: Path
    original: bool = False
    eager: bool = False
    eager_async: bool = False
    cold_cache: bool = False
    profile_output: Path = None
    experiment_description: str = ""
    run_id: str = ""
    extra: dict = field(default_factory=dict)  # more run metadata for the traces


def drop_page_cache(path):
    """Evict a file from the page cache (posix_fadvise DONTNEED) so the next read is cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class Runtime:
    """onnxruntime's process-wide set-up (environment, thread pools), done once per process."""

    def __init__(self):
        self._done = threading.Event()
        self._lock = threading.Lock()

    def initialise(self):
        with self._lock:
            if self._done.is_set():
                return
            graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "init",
                                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            self._done.set()

    def initialise_in_background(self):
        thread = threading.Thread(target=self.initialise, daemon=True)
        thread.start()
        return thread


class _Recorder:
    """B/E events in microseconds since the epoch, for one request on one thread."""

    def __init__(self, tid):
        self.events, self.tid, self.pid = [], tid, os.getpid()

    def now(self):
        return time.time_ns() / 1000

    def span(self, name, cat):
        recorder = self

        class _Span:
            def __enter__(self):
                recorder.events.append({"name": name, "cat": cat, "ph": "B", "ts": recorder.now(), "pid": recorder.pid,
                                        "tid": recorder.tid})

            def __exit__(self, *exc):
                recorder.events.append({"name": name, "cat": cat, "ph": "E", "ts": recorder.now(), "pid": recorder.pid,
                                        "tid": recorder.tid})

        return _Span()


def _session_options(values):
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")  # no packed copies of the weights
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    for name, value in values.items():
        options.add_initializer(name, value)
    return options


def _input(manifest, seed):
    """A preprocessed input: a seeded 8-bit image, normalised to NCHW float32."""
    shape = manifest["input"]["shape"]
    image = np.random.default_rng(seed).integers(0, 256, (shape[2], shape[3], 3), dtype=np.uint8)
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    return ((image.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1)[None].copy()


class Client:
    def __init__(self, options):
        self.options = options
        self.runtime = Runtime()
        self._local = threading.local()
        self._tids = {}

    def _connection(self):
        if getattr(self._local, "connection", None) is None:
            self._local.connection = StoreConnection(self.options.socket)
        return self._local.connection

    def _tid(self):
        return self._tids.setdefault(threading.get_ident(), len(self._tids) + 1)

    def request(self, model, iteration):
        """One inference request; returns (latency in us, trace path or None, was it a store hit)."""
        opts = self.options
        directory = Path(opts.base_path) / model
        manifest = load_manifest(directory)
        if opts.original and opts.cold_cache:
            drop_page_cache(directory / PARAMS)
        rec = _Recorder(self._tid())
        if opts.eager and not opts.eager_async:
            with rec.span("runtime_init", "ignore"):
                self.runtime.initialise()
        background = self.runtime.initialise_in_background() if opts.eager_async else None
        hit, shm, connection = None, None, None
        start = rec.now()
        with rec.span("predict", "prediction"):
            with rec.span("read_params", "io"):
                if opts.original:
                    weights = np.fromfile(directory / PARAMS, dtype=np.uint8)
                    buffer = weights.data
                else:
                    connection = self._connection()
                    answer = connection.request({"op": "acquire", "model": model})
                    hit = answer["hit"]
                    shm = shared_memory.SharedMemory(name=answer["shm"])
                    # the server owns the segment: keep this process's tracker from unlinking it
                    resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
                    buffer = shm.buf
            try:
                with rec.span("load_model", "load"):
                    views = params_view(buffer, manifest)
                    values = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in views.items()}
                with rec.span("set_predict_input", "prediction"):
                    data = _input(manifest, iteration)
                if background is not None:
                    with rec.span("wait_runtime_init", "prediction"):
                        background.join()
                with rec.span("create_prediction", "prediction"):
                    self.runtime.initialise()
                    session = ort.InferenceSession(str(directory / GRAPH), _session_options(values),
                                                   providers=["CPUExecutionProvider"])
                with rec.span("forward_predict", "prediction"):
                    output = session.run(None, {manifest["input"]["name"]: data})[0]
                with rec.span("get_output", "prediction"):
                    top5 = np.argsort(output[0])[-5:][::-1].tolist()
            finally:
                with rec.span("free_predictor", "prediction"):
                    session = values = views = buffer = None
                    if shm is not None:
                        shm.close()
                        connection.request({"op": "release", "model": model})
        latency = rec.now() - start
        trace = None
        if opts.profile_output:
            mode = "original" if opts.original else "shared"
            trace = Path(opts.profile_output) / model / f"{mode}-{iteration:05d}.json"
            other = {"run_id": opts.run_id, "model_name": model, "hostname": socket.gethostname(),
                     "upr_enabled": not opts.original, "eager_mode": opts.eager, "eager_mode_async": opts.eager_async,
                     "experiment_description": opts.experiment_description, "iteration": iteration,
                     "server": None if opts.original else str(opts.socket), "store_hit": hit, "top5": top5,
                     "cold_cache": opts.cold_cache and opts.original, **opts.extra}
            write_trace(trace, rec.events, {"displayTimeUnit": "ms", "otherData": other})
        return latency, trace, hit

    def run(self, plan, concurrent=1):
        """Run the planned (model, iteration) requests with `concurrent` in flight; never raises per request."""
        if concurrent < 1:
            raise ReproError(f"--concurrent must be at least 1, got {concurrent}")
        results = []

        def one(item):
            model, iteration = item
            try:
                latency, trace, hit = self.request(model, iteration)
                return {"model": model, "iteration": iteration, "ok": True, "latency_us": latency,
                        "trace": str(trace) if trace else None, "hit": hit}
            except (ReproError, OSError, ort.capi.onnxruntime_pybind11_state.Fail) as exc:
                self._local.connection = None  # reconnect next time
                return {"model": model, "iteration": iteration, "ok": False, "error": str(exc)}

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrent) as pool:
            results = list(pool.map(one, plan))
        return results, time.perf_counter() - started

