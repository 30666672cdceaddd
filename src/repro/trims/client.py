"""Inference clients: cold model loading ("original") or weights mapped from the model store ("shared").

Both modes run the same inference path (onnxruntime on the CPU, or the GPU runtime); only where
the weights come from differs: the model file, or the store's shared memory segment or GPU memory. Each
request records the phases of the original TrIMS client as a Chrome trace:
read_params, load_model, create_prediction, set_predict_input, forward_predict, get_output,
free_predictor (and runtime_init, in category 'ignore' when it happens before the timed request).

In original mode a model file shorter or longer than its manifest says fails the request at once,
and the bytes read are checked against the manifest's sha256 once per version of the file (after
the timed request, so the latency is the plain load's): a corrupt model fails its request instead
of answering with wrong predictions. The store checks the same checksum when it loads a model.
"""

import hashlib
import multiprocessing
import os
import re
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from repro.errors import ReproError
from repro.stopsignals import STOP_SIGNALS, as_worker
from repro.traces import write_trace
from repro.trims.cuda import Mappings
from repro.trims.modelstore import AttachedSegment, segment_prefix
from repro.trims.models import GRAPH, PARAMS, load_manifest, model_directory, model_file
from repro.trims.runtimes import CpuRuntime, GpuRuntime
from repro.trims.server import StoreConnection

_SEGMENT_SUFFIX = re.compile(r"[0-9]+_[0-9]+_[0-9]+")  # <owner pid>_<owner start ticks>_<n> (repro.trims.modelstore)
# the paths of the traces clients write in a profile output: [upr_]<model>_<uuid>.json (the original's
# names) or <model>/<mode>-<iteration>.json, under a directory per mode where a run has both; a run
# that finds other files there (a user's) refuses it
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
TRACE_FILES = re.compile(rf"(?:(?:original|shared)/)?(?:(?:upr_)?[^/]+_{_UUID}|[^/]+/(?:original|shared)-[0-9]{{5,}})\.json")
# and what a client run writes beside them in its profile directory (repro.trims.cli): the combined
# and compared traces, the memory samples (--monitor-memory) and the upload receipt (--trace-upload)
RUN_FILES = re.compile(rf"{TRACE_FILES.pattern}|upload\.json|combined-{_UUID}\.json|compared-[^/]+\.json"
                       r"|(?:original|shared)[-/]memory(?:\.csv|-summary\.json)")


def holds_run_file(path):
    """Whether `path`, named as RUN_FILES names a client run's files, holds what the run writes there:
    a trace of a request (otherData.run_id) or one combined from them (otherData.inputs), an upload
    receipt, the memory samples. A user's file of such a name is not removed with the run."""
    from repro.fsutil import read_json
    from repro.tracestore import is_receipt
    from repro.traces import TraceReader
    from repro.trims.monitor import FIELDS

    name = path.name
    if name == "upload.json":
        return is_receipt(path)
    if name.endswith("memory.csv"):
        return _first_line(path) == ",".join(FIELDS)
    if name.endswith("memory-summary.json"):
        summary = read_json(path, "a memory summary")
        return isinstance(summary, dict) and {"samples", "interval_s", "devices"} <= set(summary)
    other = TraceReader(path).other_data
    return "run_id" in other or "inputs" in other


def _first_line(path):
    with open(path, "rb") as fh:
        return fh.readline(4096).decode("utf-8", "replace").rstrip("\r\n")


_IPC_HANDLE = re.compile(r"[0-9a-f]{128}")  # a CUDA IPC memory handle (64 bytes) as hex (repro.trims.cuda)


def store_fields(status):
    """The store's settings a shared run's traces (and so their summaries) carry, from its status:
    eviction policy, budget, device tier and host tier, fields to group by."""
    return {"store_eviction": status.get("policy"), "store_budget_bytes": status.get("budget_bytes"),
            "store_device": status.get("device"),
            "store_host_tier_bytes": (status.get("tiers") or {}).get("host", {}).get("budget_bytes")}


def check_acquired(answer, manifest, socket_path):
    """What the store answered to acquire, checked before anything is mapped: a segment of the server
    on `socket_path` (its name prefix) or a CUDA handle, and the size the model's manifest gives.
    A process of this user answering on the socket is not thereby trusted to name any memory."""
    where = f"model store on {socket_path}"
    device, size = answer.get("device"), answer.get("size")
    if device not in ("cpu", "gpu") or not isinstance(answer.get("hit"), bool):
        raise ReproError(f"{where}: malformed answer to acquire (expected device cpu or gpu, and hit)")
    if size != manifest["params_bytes"] or isinstance(size, bool):
        raise ReproError(f"{where}: handed out {size!r} bytes for {manifest['model']!r}, but its manifest says "
                         f"{manifest['params_bytes']}; refusing to map it")
    if device == "gpu":
        if not isinstance(answer.get("ipc"), str) or not _IPC_HANDLE.fullmatch(answer["ipc"]):
            raise ReproError(f"{where}: malformed answer to acquire (expected a CUDA IPC handle, 128 hex digits)")
        return
    prefix, name = segment_prefix(socket_path), answer.get("shm")
    if not isinstance(name, str) or not name.startswith(prefix) or not _SEGMENT_SUFFIX.fullmatch(name[len(prefix):]):
        raise ReproError(f"{where}: named the shared memory segment {str(name)[:100]!r}, which is not one of its "
                         f"own ({prefix}...); refusing to map it")


@dataclass
class ClientOptions:
    base_path: Path
    socket: Path
    original: bool = False
    eager: bool = False
    eager_async: bool = False
    cold_cache: bool = False
    device: str = "cpu"  # where inference runs: cpu (onnxruntime) or gpu
    profile_output: Path = None
    experiment_description: str = ""
    trace_names: str = "repro"  # repro: <mode>/<model>/<mode>-<n>.json; original: [upr_]<model>_<uuid>.json
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


def _input(manifest, seed):
    """A preprocessed input: a seeded 8-bit image, normalised to NCHW float32."""
    shape = manifest["input"]["shape"]
    image = np.random.default_rng(seed).integers(0, 256, (shape[2], shape[3], 3), dtype=np.uint8)
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    return ((image.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1)[None].copy()


class Client:
    def __init__(self, options):
        self.options = options
        self.runtime = GpuRuntime() if options.device == "gpu" else CpuRuntime()
        self._mappings = Mappings()  # touches the GPU only when a store hands out device memory
        self._local = threading.local()
        self._tids = {}
        self._verified = set()  # (path, device, inode, size, mtime) of model files whose checksum matched

    def _connection(self):
        if getattr(self._local, "connection", None) is None:
            self._local.connection = StoreConnection(self.options.socket)
        return self._local.connection

    def _drop_connection(self):
        connection, self._local.connection = getattr(self._local, "connection", None), None
        if connection is not None:
            connection.close()

    def _verify(self, path, version, data, manifest):
        """Raise ReproError unless `data` (the bytes read from `path`) match the manifest's checksum."""
        if version in self._verified:
            return
        if hashlib.sha256(data).hexdigest() != manifest["sha256"][PARAMS]:
            raise ReproError(f"{path}: checksum mismatch (expected sha256 {manifest['sha256'][PARAMS]}); "
                             "the model file is corrupt")
        self._verified.add(version)

    def _tid(self):
        return self._tids.setdefault(threading.get_ident(), len(self._tids) + 1)

    def request(self, model, iteration):
        """One inference request; returns (latency in us, trace path or None, was it a store hit)."""
        opts = self.options
        directory = model_directory(opts.base_path, model)  # resolved: no symlink leads out of the base path
        manifest = load_manifest(directory)
        graph = model_file(opts.base_path, model, GRAPH)
        params, version = None, None
        if opts.original:
            params_path = model_file(opts.base_path, model, PARAMS)
            info = os.stat(params_path)
            version = (str(params_path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            if opts.cold_cache:
                drop_page_cache(params_path)
        rec = _Recorder(self._tid())
        if opts.eager and not opts.eager_async:
            with rec.span("runtime_init", "ignore"):
                self.runtime.initialise()
        background = self.runtime.initialise_in_background() if opts.eager_async else None
        hit, shm, ipc, mapped, connection = None, None, None, None, None
        start = rec.now()
        with rec.span("predict", "prediction"):
            with rec.span("read_params", "io"):
                if opts.original:
                    params = np.fromfile(params_path, dtype=np.uint8)
                    if params.size != manifest["params_bytes"]:
                        raise ReproError(f"{directory / PARAMS}: {params.size} bytes, but its manifest says "
                                         f"{manifest['params_bytes']}: the model file is truncated or corrupt")
                    buffer = params.data
                else:
                    connection = self._connection()
                    answer = connection.request({"op": "acquire", "model": model})
                    try:
                        check_acquired(answer, manifest, opts.socket)
                    except ReproError:
                        self._drop_connection()  # closing it releases the reference the store gave
                        raise
                    hit = answer["hit"]
                    if answer["device"] == "gpu":
                        ipc = answer["ipc"]
                    else:
                        shm = AttachedSegment(answer["shm"])
                        if shm.size < answer["size"]:
                            shm.close()
                            self._drop_connection()
                            raise ReproError(f"model store on {opts.socket}: segment {answer['shm']} holds {shm.size} "
                                             f"bytes, fewer than the {answer['size']} of {model!r}")
                        buffer = shm.buf
            try:
                with rec.span("load_model", "load"):
                    if ipc is None:
                        weights = self.runtime.host_weights(buffer, manifest)
                    elif self.runtime.device != "gpu":
                        raise ReproError(f"the model store on {opts.socket} holds its models in GPU memory; "
                                         "run the client with --device gpu")
                    else:
                        mapped = self._mappings.open(ipc)
                        weights = self.runtime.device_weights(mapped, manifest)
                with rec.span("set_predict_input", "prediction"):
                    data = _input(manifest, iteration)
                if background is not None:
                    with rec.span("wait_runtime_init", "prediction"):
                        background.join()
                with rec.span("create_prediction", "prediction"):
                    self.runtime.initialise()
                    predict = self.runtime.predictor(graph, weights)
                with rec.span("forward_predict", "prediction"):
                    output = predict(manifest["input"]["name"], data)
                with rec.span("get_output", "prediction"):
                    top5 = np.argsort(output[0])[-5:][::-1].tolist()
            finally:
                with rec.span("free_predictor", "prediction"):
                    predict = weights = buffer = None
                    if shm is not None:
                        shm.close()
                    if mapped is not None:
                        self._mappings.close(ipc)
                    if connection is not None:
                        connection.request({"op": "release", "model": model})
        latency = rec.now() - start
        if params is not None:
            self._verify(params_path, version, params, manifest)
            params = None
        trace = None
        if opts.profile_output:
            mode = "original" if opts.original else "shared"
            if opts.trace_names == "original":
                trace = Path(opts.profile_output) / f"{'' if opts.original else 'upr_'}{model}_{uuid.uuid4()}.json"
            else:
                trace = Path(opts.profile_output) / model / f"{mode}-{iteration:05d}.json"
            other = {"run_id": opts.run_id, "model_name": model, "hostname": socket.gethostname(),
                     "upr_enabled": not opts.original, "eager_mode": opts.eager, "eager_mode_async": opts.eager_async,
                     "experiment_description": opts.experiment_description, "iteration": iteration,
                     "server": None if opts.original else str(opts.socket), "store_hit": hit, "top5": top5,
                     "cold_cache": opts.cold_cache and opts.original, "device": opts.device, **opts.extra}
            write_trace(trace, rec.events, {"displayTimeUnit": "ms", "otherData": other})
        return latency, trace, hit

    def run(self, plan, concurrent=1, processes=False):
        """Run the planned (model, iteration) requests with `concurrent` in flight; never raises per request.

        With processes, every request runs in a new process of its own, as the original TrIMS
        client did (each process initialises its runtime and holds its own memory); otherwise on
        threads of this process."""
        if concurrent < 1:
            raise ReproError(f"--concurrent must be at least 1, got {concurrent}")
        pool = threads = None

        def request(model, iteration):
            if pool is None:
                return self.request(model, iteration)
            return pool.submit(_request_in_new_process, self.options, model, iteration).result()

        stopped = threading.Event()  # a request stopped the run (Ctrl-C in it), or the run is stopping

        def one(item):
            model, iteration = item
            if stopped.is_set():  # queued behind the request that stopped the run: never begun
                return {"model": model, "iteration": iteration, "ok": False, "error": "not begun: the run stopped"}
            try:
                latency, trace, hit = request(model, iteration)
                return {"model": model, "iteration": iteration, "ok": True, "latency_us": latency,
                        "trace": str(trace) if trace else None, "hit": hit}
            except (ReproError, OSError, BrokenProcessPool, *self.runtime.errors) as exc:
                self._local.connection = None  # reconnect next time
                return {"model": model, "iteration": iteration, "ok": False, "error": str(exc)}
            except BaseException:
                stopped.set()
                raise

        started = time.perf_counter()
        try:
            # made with the stop signals blocked, the threads, the request processes they start and
            # multiprocessing's resource tracker keep them blocked: Ctrl-C, SIGTERM or a hang-up sent
            # to the process group reaches this thread alone, which stops the run (a request process
            # cut in its imports printed a traceback, and a hang-up killed the resource tracker)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                if processes:
                    pool = ProcessPoolExecutor(concurrent, mp_context=multiprocessing.get_context("spawn"),
                                               max_tasks_per_child=1, initializer=as_worker)
                    # starting the resource tracker unblocks SIGINT and SIGTERM (multiprocessing's
                    # resource_tracker.ensure_running) rather than restoring the mask
                    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
                threads = ThreadPoolExecutor(max_workers=concurrent)
                outcomes = threads.map(one, plan)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            results = list(outcomes)
        finally:  # requests under way finish; those not begun are not begun
            stopped.set()
            if threads is not None:
                threads.shutdown(cancel_futures=True)
            if pool is not None:
                pool.shutdown()
        return results, time.perf_counter() - started


def _request_in_new_process(options, model, iteration):
    return Client(options).request(model, iteration)

