"""One mode's run on the tf.data engine: a training client reads real batches and writes the
artifact's log from what happened.

The client reads the pipeline's batches: in-process for collocated, every thread of the client
pinned to `collocated_threads` CPUs (the host's budget); otherwise through
`distribute(processing_mode="parallel_epochs")` from the service's WorkerServer processes,
uncompressed (on loopback, compression would only spend the CPUs the workers need). It emulates
the accelerator by sleeping its step time after each batch (no CPU spent); the next batch is
prefetched meanwhile, as a TPU host's infeed does.

Miniature scale: the accelerator's step time is the real one times one factor,
    step_time_s = batch_size x time_scale / accelerator examples per second
(the accelerator's bound is the config's max_batches_per_s x the model's batch size). Unless the
config sets `time_scale`, it is derived (derive_scale) from the declared pipeline's CPU cost per
element in TF ops, the collocated thread budget and the CPUs this machine lets it use, so that
collocated preprocessing is input-bound and the largest deployment the machine holds reaches the
accelerator. The cost is the pipeline's calibration (scale_from_calibration: one scale for every
mode of an experiment, and its sweep) or, where a run has none, the run's own measurement; every
log and metrics.json records the factor and how it was found.

Every `decision_steps` steps is one window: its measured batch time is logged as a `TimeHistory`
line, the workers that served it (the processes that run, report a task and whose record still
matches) as a `ClientHeartbeat` block, and the placement policy (repro.pecan.policies, as the
cluster model uses them) decides the next deployment, which the engine starts or stops as real
processes. A window in which the worker set changed is logged but not shown to the policy.

FastFlow (repro.pecan.policies.FastFlowPlacement) keeps its remote workers, started before training,
for the whole run and changes what the client reads instead (FastFlowSource): one window per
profile (the client's own pipeline; one cached batch; every element from the workers, cut before
or after the batching), then, decided once, its own pipeline alone or both, the client's share of
elements (or batches) fixed by FastFlow's formula. Stock tf.data has no partial offload (FastFlow's
fork adds it to distribute()); here the client interleaves its pipeline and the service's in that
fixed proportion. The profiles are logged as info lines, not as training throughput.
"""

import contextlib
import dataclasses
import itertools
import math
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import atomic_path, write_json
from repro.pecan.cluster import JobSpec, make_policy
from repro.pecan.logs import LogWriter, parse_log
from repro.pecan.policies import LOCAL_ONLY, OFFLOADED, PROFILE_GTHP, PROFILE_LTHP, FastFlowPlacement
from repro.pecan.tfdata import check_sweep, cpus_available, ops, tensorflow
from repro.pecan.tfdata.service import BATCH_TIMEOUT_S, Service, exclusive
from repro.pecan.tfdata.spec import (
    check_cpus,
    check_deployment_memory,
    derive_scale,
    scale_from_calibration,
    spec_from_config,
    window_steps,
)

tf = tensorflow()

STOPPED = ("STABLE", "FIXED", LOCAL_ONLY, OFFLOADED)  # policy states after which the deployment no longer changes
# Batches read, not timed, after FastFlow switches what the client reads (graph set-up, a new job)
SWITCH_WARMUP_BATCHES = 4
# Before every run, its pipeline's own cost (measure_pipeline_cost): batches read and discarded
# first, then batches each measured on its own. TensorFlow's one-time work on a new pipeline runs on
# background threads through its first batches, and the process's CPU time counts it: read 2 first,
# the same pipeline measured 3.1-4.5 ms per element in one fresh process after another; 12, 3.0-3.4.
COST_WARMUP_BATCHES, COST_BATCHES = 12, 6
# How long a run waits at a deployment short of the one its policy asked for (a worker started
# imports TensorFlow, then registers: seconds, more under load) before it ends at the deployment
# that serves, saying so: a worker that runs but is never given the job's task would keep the policy
# waiting to the run's last window.
DEPLOYMENT_WAIT_S = 60.0
# The transfer probe (measure_transfer_cost): batches read first (for the same reason, in the worker),
# then at least this many (and at least the run's spec.probe_seconds)
TRANSFER_WARMUP_BATCHES, TRANSFER_BATCHES = 12, 8


def policy_for(spec):
    """The same policy objects the cluster model makes (repro.pecan.cluster.make_policy)."""
    model_spec = JobSpec(
        experiment=spec.experiment, mode=spec.mode, placement=spec.placement, autoorder=spec.autoorder,
        batch_size=spec.batch_size, steps_per_epoch=0, epochs=0, steps_per_loop=spec.decision_steps,
        accelerator_batches_per_s=0.0, cost_per_element=0.0, bytes_per_element=0.0, collocated_vcpus=0.0,
        remote_worker_vcpus=spec.worker_threads, local_worker_vcpus=spec.worker_threads,
        max_remote_workers=spec.max_remote_workers, max_local_workers=spec.max_local_workers,
        fixed_remote_workers=spec.fixed_remote_workers, fixed_local_workers=spec.fixed_local_workers,
        network_gbps=0.0, decision_steps=spec.decision_steps, noise_cv=0.0,
        cachew_threshold_up=spec.cachew_threshold_up, client_cost=spec.client_cost, worker_cost=spec.worker_cost,
        seed=spec.seed)
    return make_policy(model_spec)


@dataclass
class MeasuredWindow:
    """A decision window as the engine measured it, with the serving workers' addresses (the
    cluster model's repro.pecan.cluster.Window holds only counts)."""

    start_s: float
    first_step: int
    steps: int
    seconds: float
    workers: list  # serving at the window's start
    workers_after: list  # serving at its end
    cpu_share: dict = field(default_factory=dict)  # {worker or "collocated": its CPU share (Sharing)}
    phase: str = ""  # FastFlow: the policy's state while the window ran (what the client read)

    @property
    def counts(self):
        local = sum("localhost" in name for name in self.workers)
        return len(self.workers) - local, local


class Deployment:
    """Brings the service's running workers to the (remote, local) counts the policy asks for."""

    def __init__(self, service, threads):
        self.service, self.threads, self.target = service, threads, (0, 0)

    def running(self, kind):
        return sum(1 for w in self.service.state["workers"] if w["kind"] == kind)

    def apply(self, remote, local, wait=False):
        self.target = remote, local
        self.service.prune()
        for kind, target in (("remote", remote), ("local", local)):
            while self.running(kind) > target:
                self.service.remove_worker(kind)
            while self.running(kind) < target:
                self.service.add_worker(kind, self.threads, wait=wait)


@contextlib.contextmanager
def process_cpus(count):
    """Run the block with every thread of this process on the first `count` CPUs it may use.

    Affinity is per thread, and TensorFlow's pools may exist already: each thread is pinned
    (threads created later inherit it), and the previous affinity is restored afterwards.
    """
    previous = sorted(os.sched_getaffinity(0))
    chosen = previous[:count]

    def pin(cpus):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that has exited meanwhile
                os.sched_setaffinity(int(tid), cpus)

    pin(chosen)
    try:
        yield chosen
    finally:
        pin(previous)


def measure_pipeline_cost(spec, manifest, warmup=COST_WARMUP_BATCHES, batches=COST_BATCHES, order=None):
    """The run's own pipeline (its TF ops, in the run's order) in this process on one CPU: CPU
    seconds and bytes per element, what the cluster model needs to predict this run.

    The dataset is the one a worker with one thread runs (ops.dataset, one-thread pool), and every
    thread of the process is pinned to one CPU while it runs, so the process's CPU time between
    two batches is the CPU one worker spends on one batch (the pipeline's maps, the tf.data
    machinery, batching). Process CPU time, not wall time: time spent descheduled by other work
    on the machine does not count. The estimate is the median over the measured batches (what a
    worker running batch after batch typically pays on this machine as loaded now; interference
    with other processes' caches and memory is in it, as it is in the engine's workers); the
    spread (quartiles) and the minimum are recorded with it. Bytes per element: the batch's
    tensors (images and boxes) over its size, what a worker sends per element.
    """
    from repro.pecan.calibrate import spread

    order = order or ("autoorder" if spec.autoorder else "declared")
    cpu, wall, started = [], [], time.monotonic()
    with process_cpus(1):
        dataset, names = ops.dataset(manifest, order, spec.batch_size, 1)
        iterator = iter(dataset)
        for _ in range(warmup):
            next(iterator)
        for _ in range(batches):
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            batch = next(iterator)
            cpu.append((time.process_time() - cpu_start) / spec.batch_size)
            wall.append((time.perf_counter() - wall_start) / spec.batch_size)
        del iterator
    nbytes = sum(int(tensor.numpy().nbytes) for tensor in batch.values()) / spec.batch_size
    cpu_spread = spread(cpu)
    layout = {name: [list(tensor.shape), tensor.dtype.name] for name, tensor in batch.items()}
    return {"pipeline": spec.pipeline, "order": order, "ops": names, "threads": 1, "batch_size": spec.batch_size,
            "batch_layout": layout,
            "warmup_batches": warmup, "batches": batches,
            "statistic": "median over batches of the process's CPU seconds per element, pinned to one CPU",
            "cpu_s_per_element": cpu_spread["median"], "cpu_s": cpu_spread, "cpu_s_min": min(cpu),
            "wall_s_per_element": spread(wall)["median"], "bytes_per_element": nbytes,
            "load_average": list(os.getloadavg()), "seconds": time.monotonic() - started}


def measure_transfer_cost(spec, manifest, layout, service, batch_timeout_s, *, min_seconds,
                          warmup=TRANSFER_WARMUP_BATCHES, batches=TRANSFER_BATCHES):
    """CPU seconds to move a batch of the run's layout from a worker to this client over the service,
    on each side, and what a worker pays per element serving the run's own pipeline: the model's
    inputs for a deployment with workers, measured before the run's deployment starts.

    One worker of the run's threads serves twice. First one batch of that layout (`layout`: {name:
    [shape, dtype]}, measure_pipeline_cost's `batch_layout`) made once and cached, so that it spends
    its CPU only on sending (the service's encoding, gRPC, the socket); the client reads it as
    training reads batches (uncompressed, _distribute), spending its CPU on receiving and decoding.
    Then the run's pipeline (`manifest`, in the run's order), read as fast as the worker serves it:
    the worker's CPU per element as a deployment's workers pay it, every thread of it busy and the
    client receiving beside it, which on a shared machine is more than the pipeline's cost measured
    alone on one CPU plus the sending. The worker's CPU time comes from its threads' schedstat, the
    client's from this process's CPU time, over at least `batches` batches and `min_seconds` in
    each phase. The probe worker runs on this machine (with ssh workers too: the same software
    sends there) and is stopped before the run's deployment starts. Batches are read as the run
    reads them (Batches): a service that dies fails the probe after `batch_timeout_s`, and signals
    reach it meanwhile.
    """
    started = time.monotonic()
    entry = service.add_worker("local", spec.worker_threads, wait=True)
    try:
        shapes = {name: tf.TensorShape(shape) for name, (shape, _) in layout.items()}
        dtypes = {name: tf.as_dtype(dtype) for name, (_, dtype) in layout.items()}
        cached = ops.traced_map(tf.data.Dataset.range(1),
                                lambda _: {name: tf.ones(shapes[name], dtypes[name]) for name in layout})
        job = f"{spec.experiment}-{spec.mode}"
        count, worker_s, client_s = _probe(_distribute(cached.cache().repeat(), service, f"{job}-transfer"), service,
                                           entry, batch_timeout_s, warmup, batches, min_seconds)
        pipeline, _ = ops.dataset(manifest, "autoorder" if spec.autoorder else "declared", spec.batch_size,
                                  spec.worker_threads)
        served, served_worker_s, served_client_s = _probe(_distribute(pipeline, service, f"{job}-served"), service,
                                                          entry, batch_timeout_s, warmup, batches, min_seconds)
    finally:
        service.remove_worker("local")
    nbytes = count * sum(math.prod(shape) * tf.as_dtype(dtype).size for shape, dtype in layout.values())
    elements, served_elements = count * spec.batch_size, served * spec.batch_size
    return {"statistic": "CPU seconds over the probe's batches, a cached batch sent by one worker to this client; "
                         "then the run's pipeline served by that worker",
            "batches": count, "bytes_per_element": nbytes / elements,
            "worker_s_per_element": worker_s / elements, "client_s_per_element": client_s / elements,
            "send_s_per_byte": worker_s / nbytes, "receive_s_per_byte": client_s / nbytes,
            "served_batches": served, "served_s_per_element": served_worker_s / served_elements,
            "served_client_s_per_element": served_client_s / served_elements,
            "seconds": time.monotonic() - started}


def _probe(dataset, service, entry, batch_timeout_s, warmup, batches, min_seconds):
    """(batches, worker CPU seconds, client CPU seconds) reading `dataset` from the probe's worker
    (`entry`) for at least `batches` batches and `min_seconds`, after `warmup` batches."""
    iterator = Batches(lambda: iter(dataset), batch_timeout_s, lambda: stalled(service))
    try:
        for _ in range(warmup):
            next(iterator)
        count, worker_start = 0, sched_times(entry["pid"])
        client_start, wall_start = time.process_time(), time.monotonic()
        while count < batches or time.monotonic() - wall_start < min_seconds:
            next(iterator)
            count += 1
        worker_end, client_s = sched_times(entry["pid"]), time.process_time() - client_start
    finally:
        iterator.close()
    if worker_start is None or worker_end is None:
        raise ReproError(f"{service.state_path}: the transfer probe's worker (pid {entry['pid']}) stopped while probed")
    # per thread: a thread that exited meanwhile takes its whole time with it, one started since counts all of its
    worker_s = sum(ran - worker_start.get(tid, (0.0, 0.0))[0] for tid, (ran, _) in worker_end.items())
    return count, worker_s, client_s


def resolve_scale(spec, manifest, pipeline_cost, given=None):
    """(spec, scale): the spec with its time scale and window length, derived (derive_scale) from the
    declared pipeline's measured CPU time per element on one pinned CPU when the config sets none
    (the same pipeline for every mode, so an experiment's modes share the accelerator; Pecan's run
    measures it besides its own order). `given`: a scale derived already (a calibration's, a
    sweep's first run's)."""
    if not spec.derived:
        return spec, {"rule": "configured", "time_scale": spec.time_scale}
    if given is None:
        declared = pipeline_cost if pipeline_cost["order"] == "declared" else measure_pipeline_cost(
            spec, manifest, order="declared")
        # CPU time, not wall time: what a whole CPU makes, so that collocated stays under its share
        # of the demand however much of its CPU the machine's other work leaves it
        given = derive_scale(declared["cpu_s_per_element"], spec.accelerator_examples_per_s, spec.collocated_threads,
                             spec.worker_threads, cpus_available())
        # a window's length: ~WINDOW_S of the slowest deployment (collocated's CPUs, as loaded now:
        # wall time), not of the accelerator's step, which input-bound deployments never reach
        given = {**given, "source": "this run's measurement of the declared order"}
        given["slowest_batch_s"] = spec.batch_size * declared["wall_s_per_element"] / spec.collocated_threads
    elif "slowest_batch_s" not in given:  # a calibration's: the window from this run's pipeline, as loaded now
        given = {**given, "slowest_batch_s": spec.batch_size * pipeline_cost["wall_s_per_element"] / spec.collocated_threads}
    spec = dataclasses.replace(spec, time_scale=given["time_scale"])
    if not spec.decision_steps:
        spec = dataclasses.replace(spec, decision_steps=window_steps(max(spec.step_time_s, given["slowest_batch_s"])))
    return spec, given


def _distribute(dataset, service, job_name):
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode="parallel_epochs", service=f"grpc://{service.address}", job_name=job_name, compression=None))


def client_dataset(spec, manifest, service):
    order = "autoorder" if spec.autoorder else "declared"
    threads = spec.collocated_threads if service is None else spec.worker_threads
    dataset, names = ops.dataset(manifest, order, spec.batch_size, threads)
    if service is not None:
        dataset = _distribute(dataset, service, f"{spec.experiment}-{spec.mode}")
    return dataset.prefetch(2), names


def local_share(ratio):
    """FastFlow's fixed split as a choice sequence: 0 (the client's pipeline) for `ratio` of the
    items, evenly spread, 1 (the service) for the rest."""
    steps = tf.data.Dataset.range(2**62)  # endless: item i is local when floor((i+1)r) passes an integer
    return ops.traced_map(steps, lambda i: tf.cast(tf.math.floor(tf.cast(i + 1, tf.float64) * ratio)
                                                   == tf.math.floor(tf.cast(i, tf.float64) * ratio), tf.int64))


def offloaded(local, remote, ratio_local, ahead):
    """FastFlow's partial offload: the client's own pipeline and the service's, read in the
    decision's fixed split (local_share), each source running `ahead` items ahead into a buffer of
    its own, as FastFlow's client fetches from its own pipeline and its remote workers at once.
    Read in step instead, each source would idle while the other's item is awaited, and the pair
    would deliver less than the split of the two rates (the model's) allows."""
    return tf.data.Dataset.choose_from_datasets([local.prefetch(ahead), remote.prefetch(ahead)],
                                                local_share(ratio_local))


def fastflow_dataset(spec, manifest, service, phase, decision):
    """What the client reads in FastFlow's `phase`: its own pipeline on `collocated_threads` threads
    (the host's budget; LTHP and LOCAL_ONLY), one cached batch of it re-read (GTHP: only the
    accelerator bounds it), the service's elements at a cut (RTHP_<cut>: ELEMENT sends elements and
    the client batches them, BATCH sends batches) or, offloaded, both in the decision's split at its
    cut. Returns (dataset, op names)."""
    order = "autoorder" if spec.autoorder else "declared"
    job = f"{spec.experiment}-{spec.mode}-{phase.lower()}"
    if phase in (PROFILE_LTHP, LOCAL_ONLY, PROFILE_GTHP):
        dataset, names = ops.dataset(manifest, order, spec.batch_size, spec.collocated_threads)
        if phase == PROFILE_GTHP:
            dataset = dataset.take(1).cache().repeat()
        return dataset.prefetch(2), names
    cut = decision.cut if phase == OFFLOADED else phase.removeprefix("PROFILE_RTHP_")
    batched = cut == "BATCH"
    remote, names = ops.dataset(manifest, order, spec.batch_size, spec.worker_threads, batched)
    dataset = _distribute(remote, service, job)
    if phase == OFFLOADED:
        local, _ = ops.dataset(manifest, order, spec.batch_size, spec.collocated_threads, batched)
        dataset = offloaded(local, dataset, decision.ratio_local, ahead=1 if batched else spec.batch_size)
    if not batched:
        dataset = ops.batch(dataset, manifest, spec.batch_size)
    return dataset.prefetch(2), names


class FastFlowSource:
    """The client's batches under FastFlow: read from what the policy's state asks for, made anew
    (fastflow_dataset) when the state changes. Used by one thread at a time (Batches' reader)."""

    def __init__(self, spec, manifest, service, policy):
        self.spec, self.manifest, self.service, self.policy = spec, manifest, service, policy
        self.phase, self.names, self._iterator = None, [], None

    def __iter__(self):
        return self

    def __next__(self):
        if self.policy.state != self.phase:
            self._iterator = None  # the previous phase's job is released with its iterator
            dataset, self.names = fastflow_dataset(self.spec, self.manifest, self.service, self.policy.state,
                                                   self.policy.decision)
            self._iterator, self.phase = iter(dataset), self.policy.state
        return next(self._iterator)


class Batches:
    """The client's iterator, made and read on a thread of its own so that waiting has a deadline.

    TensorFlow's data-service client waits without end, and without returning to Python (deaf to
    Ctrl-C and SIGTERM), once its dispatcher or every worker is gone: when it registers the dataset,
    creates the job or reads a batch. Here the main thread waits on a queue instead: after
    `timeout_s` the run fails with what `diagnose()` tells, and signals reach it meanwhile.
    `open_iterator()` runs at the first request; batches are then read one at a time as asked, as
    the iterator itself reads them.
    """

    def __init__(self, open_iterator, timeout_s, diagnose):
        self.timeout_s, self.diagnose = timeout_s, diagnose
        self._asked, self._answers = queue.Queue(), queue.Queue()
        threading.Thread(target=self._read, args=(open_iterator,), daemon=True, name="batches").start()

    def _read(self, open_iterator):
        iterator = None
        while self._asked.get():
            try:
                iterator = iterator or open_iterator()
                self._answers.put((next(iterator), None))
            except BaseException as exc:  # the main thread raises it (StopIteration included)
                self._answers.put((None, exc))

    def __iter__(self):
        return self

    def __next__(self):
        self._asked.put(True)
        try:
            batch, error = self._answers.get(timeout=self.timeout_s)
        except queue.Empty:
            raise ReproError(f"no batch within {self.timeout_s:g} s: {self.diagnose()}; the run stops") from None
        if error is not None:
            raise error
        return batch

    def close(self):
        """End the reading thread once it is done with the batch it reads (if any)."""
        self._asked.put(False)


def stalled(service):
    """Why a run's client gets no batch, as far as the service's records tell."""
    if service is None:
        return "the pipeline in this process produced none"
    if not service.dispatcher_running():
        return f"the tf.data dispatcher (pid {service.state['dispatcher']['pid']}) is not running"
    try:
        serving = service.serving()  # forgets the workers that no longer run
    except ReproError as exc:  # a worker host that does not answer
        return f"its workers not checked: {exc}"
    if not service.state["workers"]:
        return "none of the run's tf.data workers runs"
    return f"{len(service.state['workers'])} tf.data worker(s) run, {len(serving)} serve the job"


def sched_times(pid):
    """{thread id: (on a CPU, runnable but waiting for one) seconds} of the process's threads
    (/proc/PID/task/*/schedstat); None once it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    times = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                fields = fh.read().split()
        except OSError:  # a thread that has exited meanwhile
            continue
        times[tid] = int(fields[0]) / 1e9, int(fields[1]) / 1e9
    return times


class Sharing:
    """The CPU share each preprocessing process of this machine got in a window, while it wanted one.

    Workers and the collocated client are pinned to their CPUs (service.py, process_cpus), but the
    machine's other work, the client and the dispatcher run on the same CPUs, so a pinned process
    does not get its whole CPUs. Its share is the CPU time all its threads got (the pipeline's, and
    those sending what it makes) over the time its busiest thread, the pipeline's, was runnable (on
    a CPU or waiting for one, /proc/PID/task/*/schedstat), per CPU it is pinned to, at most 1: what
    it got while it had work, not how much work it had, so a worker idle at the accelerator's bound
    is not counted as slow; and its own threads taking turns on its CPU are not counted as lost to
    others (the model charges sending to the worker's CPU per element). The validation's engine-fed
    model gives each worker this share of its CPUs. Workers on other hosts (ssh) are not measured.
    """

    def __init__(self, service, collocated_threads=1, client=False):
        self.service, self.collocated_threads = service, collocated_threads
        self.client = client or service is None  # the client runs a pipeline of its own (collocated, FastFlow)

    def processes(self):
        """{name: (pid, CPUs it is pinned to)} of the preprocessing processes on this machine; the
        client's own pipeline is "collocated"."""
        found = {"collocated": (os.getpid(), self.collocated_threads)} if self.client else {}
        if self.service is None:
            return found
        from repro.pecan.tfdata.service import _fresh

        for entry in self.service.state.get("workers", []):
            status = None if "host" in entry else _fresh(entry["status"], entry["pid"])
            if status:
                found[status["address"]] = entry["pid"], entry.get("threads", 1)
        return found

    def snapshot(self):
        return {name: (pid, cpus, sched_times(pid)) for name, (pid, cpus) in self.processes().items()}

    @staticmethod
    def shares(before, after):
        result = {}
        for name, (pid, cpus, first) in before.items():
            second = after.get(name, (None, None, None))
            if first is None or second[0] != pid or second[2] is None:
                continue
            deltas = [(after_t[0] - first[tid][0], after_t[1] - first[tid][1])
                      for tid, after_t in second[2].items() if tid in first]
            ran, waited = max(deltas, default=(0, 0))
            if ran + waited > 0:
                got = sum(delta[0] for delta in deltas)
                result[name] = round(min(1.0, got / cpus / (ran + waited)), 4)
        return result


def train(spec, iterator, service, policy, deployment, on_window=None):
    """Run windows until the deployment settles (or max_windows); return (windows, decisions)."""
    fastflow = isinstance(policy, FastFlowPlacement)
    sharing = Sharing(service, spec.collocated_threads, client=fastflow)
    if service is None:
        serving = list
    elif fastflow:  # its workers are deployed (and billed) whether the client reads from them or not
        def serving():
            return service.serving(idle=True)
    else:
        serving = service.serving
    windows, decisions = [], []
    step, start, settled = 0, time.monotonic(), 0
    waiting_since = None  # since when the deployment has fallen short of the policy's
    while len(windows) < spec.max_windows and settled < spec.settle_windows:
        before = serving()
        phase = policy.state if fastflow else ""
        shares_before = sharing.snapshot()
        window_start, cpu_start = time.monotonic(), time.process_time()
        for _ in range(spec.decision_steps):
            next(iterator)
            time.sleep(spec.step_time_s)
        seconds = time.monotonic() - window_start
        host_cpu = (time.process_time() - cpu_start) / spec.decision_steps
        shares = Sharing.shares(shares_before, sharing.snapshot())
        if service is not None:  # a worker that runs but serves no task yet is no part of the deployment
            shares = {name: share for name, share in shares.items() if name in before or name == "collocated"}
        window = MeasuredWindow(window_start - start, step, spec.decision_steps, seconds, before, serving(), shares, phase)
        windows.append(window)
        step += spec.decision_steps
        if on_window:
            on_window(window)
        if policy is None:
            settled += 1
            continue
        if sorted(window.workers) != sorted(window.workers_after):
            settled = 0
            continue
        # FastFlow counts the host's cycles per batch in each profile (the client's CPU: its pipeline, receiving)
        extra = {"host_cpu": host_cpu} if fastflow else {}
        target = policy.decide(*window.counts, window.seconds / window.steps, **extra)
        if not decisions or (decisions[-1]["state"], decisions[-1]["remote"], decisions[-1]["local"]) != (
                policy.state, *target):
            decisions.append({"time_s": time.monotonic() - start, "state": policy.state, "remote": target[0],
                              "local": target[1]})
        if target == (0, 0):
            # Pecan's DECREASING_REMOTE can remove the last remote worker when no local one runs
            # (a noisy window told INCREASING_LOCAL that local workers hurt); a data-service job
            # without workers would wait forever, so the run ends at the deployment it has
            decisions[-1]["note"] = "the policy asked for no workers: not applied, the run ends"
            break
        if target == window.counts or target != deployment.target:
            waiting_since = None
        if fastflow and policy.state != phase:  # the client reads something else from now on
            settled = 0
            for _ in range(SWITCH_WARMUP_BATCHES):
                next(iterator)
        elif target != deployment.target:  # a worker that died is not replaced: the run goes on without it
            settled = 0
            deployment.apply(*target)
        elif target != window.counts:
            settled = 0
            waiting_since = waiting_since or window_start
            waited = time.monotonic() - waiting_since
            if waited > DEPLOYMENT_WAIT_S:
                served = "{} + {}".format(*window.counts)
                try:
                    workers = "; ".join(service.describe_workers()) or "none"
                except ReproError as exc:  # a worker host that no longer answers: the run still ends as it should
                    workers = f"not known: {exc}"
                decisions[-1]["note"] = (f"{served} workers served for {waited:.0f} s after the policy asked for "
                                         f"{target[0]} + {target[1]}: the run ends at the deployment that served "
                                         f"(workers: {workers})")
                print(f"repro: {spec.experiment} {spec.mode}: {decisions[-1]['note']}", file=sys.stderr)
                break
        elif policy.state in STOPPED:
            settled += 1
    return windows, decisions


def write_log(spec, windows, path, started, order_names, notes=()):
    """The artifact's log format: a heartbeat block per window (the workers that served it), then its
    TimeHistory line; `notes` (why the run ended where a decision says so) before the last line."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        writer = LogWriter(fh, start=started)
        writer.info(0.0, f"repro tfdata engine: experiment={spec.experiment} mode={spec.mode} "
                         f"placement={spec.placement} autoorder={spec.autoorder} time_scale={spec.time_scale:.4g} "
                         f"step_time_s={spec.step_time_s:.4f} batch_size={spec.batch_size} "
                         f"order={','.join(order_names)}")
        for window in windows:
            if spec.placement != "collocated":
                writer.heartbeat(window.start_s, window.workers_after)
            end = window.start_s + window.seconds
            rate = window.steps * spec.batch_size / window.seconds
            if window.phase.startswith("PROFILE_"):  # FastFlow's profiles: not training throughput (GTHP re-reads a batch)
                writer.info(end, f"FastFlow profile {window.phase}: {rate:.2f} examples per second over "
                                 f"{window.steps} steps")
                continue
            writer.time_history(end, window.seconds, rate, window.first_step, window.first_step + window.steps)
        last = windows[-1]
        for note in notes:
            writer.info(last.start_s + last.seconds, f"repro tfdata engine: {note}")
        writer.info(last.start_s + last.seconds, f"Training finished: {len(windows)} windows")


def _forget_service(directory, fresh):
    """Remove the service directory a run made for itself (its state, logs and work_dir), once its
    processes are stopped; one that was there before the run is left alone."""
    import shutil

    if fresh:
        shutil.rmtree(directory, ignore_errors=True)


def _remote_workers_here(service_dir):
    """Whether a run's remote workers run on this machine: not where the service it uses has worker hosts."""
    return service_dir is None or Service(service_dir).remote is None


def run(spec, out_dir, data_dir, service_dir=None, on_window=None, batch_timeout_s=BATCH_TIMEOUT_S, scale=None):
    """Run `spec` into out_dir (run.log, metrics.json); return the metrics.

    Data-service modes use the service recorded in `service_dir` when its dispatcher runs (and
    leave the dispatcher running), else start one in out_dir/service and stop it afterwards.
    Every worker the run started is stopped when it ends, however it ends; a run that gets no
    batch within `batch_timeout_s` fails (Batches). `scale`: a derived scale to use instead of
    deriving one (a sweep's).
    """
    from repro.pecan.run import check_run_directory

    out = Path(out_dir)
    check_run_directory(out)
    if spec.derived:  # before anything is written
        check_cpus(spec.collocated_threads, spec.worker_threads, cpus_available())
    check_deployment_memory(spec, _remote_workers_here(service_dir))
    manifest = ops.write_data(spec.pipeline, spec.images, data_dir, seed=spec.seed)
    # the model's inputs for this run, measured before any of its workers start
    pipeline_cost = measure_pipeline_cost(spec, manifest)
    spec, scale = resolve_scale(spec, manifest, pipeline_cost, scale)
    policy = policy_for(spec)
    service, own_service = None, False
    wall = time.monotonic()
    if spec.placement != "collocated":
        if service_dir is not None:
            service = Service(service_dir, owned=True)  # the run's workers; the dispatcher stays
            if not service.dispatcher_running():  # none recorded, dead, or another directory's (a copied state)
                why = service.checks(probe=False, workers=False)[0][1]
                raise ReproError(f"--service-dir {service_dir}: [FAILED] {why}; no run started (repro pecan tfdata start)")
        else:
            Service(out / "service").stop()  # what an interrupted run here left running
            fresh = not (out / "service").exists()
            try:
                service, own_service = Service.start(out / "service", owned=True), True
            except BaseException:
                _forget_service(out / "service", fresh)
                raise
    deployment = Deployment(service, spec.worker_threads) if service else None
    fastflow = isinstance(policy, FastFlowPlacement)
    # collocated and FastFlow (its own pipeline and what it receives): the host's thread budget is its
    # CPUs; with the service alone the client is not pinned
    budget = process_cpus(spec.collocated_threads) if service is None or fastflow else contextlib.nullcontext()
    transfer_cost = None
    try:
        if service:  # the model's other input: what moving the run's batches from a worker to the client costs
            transfer_cost = measure_transfer_cost(spec, manifest, pipeline_cost["batch_layout"], service,
                                                  batch_timeout_s, min_seconds=spec.probe_seconds)
        if deployment:  # FastFlow's workers are started before training, as its user launches them
            deployment.apply(policy.remote, policy.local, wait=fastflow)
        with budget:
            names = []

            def open_iterator():  # registering the dataset and creating the job wait on the service too
                if fastflow:
                    source = FastFlowSource(spec, manifest, service, policy)
                    next(source)  # the first batch; the names are then known
                    names.extend(source.names)
                    return itertools.chain([None], source)
                dataset, order = client_dataset(spec, manifest, service)
                names.extend(order)
                return iter(dataset)

            batches = Batches(open_iterator, batch_timeout_s, lambda: stalled(service))
            try:
                for _ in range(spec.decision_steps):  # warm-up, not logged: graph set-up, the job's creation
                    next(batches)
                started = datetime.now()
                windows, decisions = train(spec, batches, service, policy, deployment, on_window)
            finally:
                batches.close()
    except BaseException:
        if own_service:  # a failed or interrupted run leaves no output: not its service's logs either
            try:
                service.stop()
            except ReproError:  # a worker left: its record stays, and the stop below names it
                pass
            else:
                _forget_service(out / "service", fresh)
        raise
    finally:
        if own_service:
            service.stop()
        elif deployment:
            try:
                service.stop_workers()  # on every host it can reach, even when one does not answer
            finally:
                service.close()
    write_log(spec, windows, out / "run.log", started, names, [d["note"] for d in decisions if "note" in d])
    parsed = parse_log(out / "run.log")
    metrics = {
        "engine": "tfdata",
        "experiment": spec.experiment,
        "mode": spec.mode,
        "spec": dataclasses.asdict(spec),
        "step_time_s": spec.step_time_s,
        "scale": scale,
        "accelerator_bound_miniature": spec.accelerator_examples_per_s / spec.time_scale,
        "order": names,
        "wall_s": time.monotonic() - wall,
        "windows": [{**dataclasses.asdict(w), "examples_per_s": w.steps * spec.batch_size / w.seconds}
                    for w in windows],
        "decisions": decisions,
        "throughput": parsed.throughput,
        "remote_workers": parsed.remote_workers,
        "local_workers": parsed.local_workers,
        "converged": parsed.converged,
        "worker_hosts": [h["name"] for h in service.remote.hosts] if service and service.remote else [],
        "pipeline_cost": pipeline_cost,
        **({"transfer_cost": transfer_cost} if transfer_cost else {}),
        # FastFlow's profiles (batches/s), the host's CPU seconds per batch in each, and its one decision
        **({"fastflow": {"profiles": policy.profiles, "cycles": policy.cycles,
                         "decision": dataclasses.asdict(policy.decision) if policy.decision else None}}
           if fastflow else {}),
        # the CPUs this process may use: on the local backend, the ones the client, the dispatcher and
        # every worker share (workers are pinned among them, service.py)
        "cpus": cpus_available(),
    }
    write_json(out / "metrics.json", metrics)
    return metrics


def sweep(spec, counts, out_dir, data_dir, service_dir=None, on_window=None, batch_timeout_s=BATCH_TIMEOUT_S,
          scale=None):
    """Throughput against the number of remote workers, measured directly: for each of `counts`, a
    run of its own (out_dir/<count>: run.log, metrics.json) with that many remote workers held
    fixed for `settle_windows` windows (0: the client's own pipeline, as collocated), in the
    order of `spec`'s mode. Every count runs at one scale: `scale` (scale_from_calibration), else the
    first count's, derived as a run derives it, unless `spec` has a configured one. Returns the runs'
    metrics, in `counts`' order."""
    from repro.pecan.run import check_run_directory

    check_sweep(counts, spec.worker_threads, cpus_available())
    runs = [dataclasses.replace(spec, mode="sweep", placement="collocated" if count == 0 else "fixed",
                                fixed_remote_workers=count, fixed_local_workers=0, max_remote_workers=count,
                                max_local_workers=0) for count in counts]
    remote_here = _remote_workers_here(service_dir)
    for count, fixed in zip(counts, runs):  # every count's, before the first run
        check_deployment_memory(fixed, remote_here)
        check_run_directory(Path(out_dir) / str(count))
    results = []
    for count, fixed in zip(counts, runs):
        metrics = run(fixed, Path(out_dir) / str(count), data_dir, service_dir, on_window, batch_timeout_s, scale)
        scale = scale or (metrics["scale"] if spec.derived else None)
        results.append(metrics)
    return results


def run_for_workflow(settings, experiment, mode, out_dir, backend="local", service_dir=None, calibration=None):
    """The `run` rule's job with `pecan.engine: tfdata`: one real run of experiment x mode with the
    config's miniature settings (`pecan.tfdata`), written as every engine writes it: run.log,
    metrics.json (with its one run as `repeats`: a real run is not repeated) and the trace. The
    scale is derived from the pipeline's `calibration` where it has the TF cost, so that every mode
    of the experiment shares it (scale_from_calibration)."""
    from repro.pecan.run import remove_run_traces, window_events
    from repro.traces import write_trace

    out = Path(out_dir)
    miniature = dict(settings["pecan"].get("tfdata", {}))
    miniature.pop("sweep", None)  # `repro pecan tfdata sweep`'s, not a run's
    spec = spec_from_config(settings["pecan"], experiment, mode, seed=settings["seed"],
                            time_scale=miniature.pop("time_scale", None),
                            decision_steps=miniature.pop("decision_steps", None), **miniature)
    with exclusive(service_dir) if service_dir else contextlib.nullcontext():  # one run at a time on a shared one
        metrics = run(spec, out, out / "data", service_dir, scale=scale_from_calibration(spec, calibration))
    windows = [(w["start_s"], w["seconds"], w["first_step"], w["steps"], *MeasuredWindow(**{
        k: w[k] for k in ("start_s", "first_step", "steps", "seconds", "workers", "workers_after")}).counts)
        for w in metrics["windows"]]
    decisions = [(d["time_s"], d["state"], d["remote"], d["local"]) for d in metrics["decisions"]]
    (out / "traces").mkdir(parents=True, exist_ok=True)
    remove_run_traces(out)  # another experiment's or mode's, which would stay beside this run's
    write_trace(out / "traces" / f"{experiment}-{mode}.json",
                window_events(f"{experiment} {mode}", spec.batch_size, windows, decisions),
                {"otherData": {"run_id": f"{experiment}-{mode}-seed{spec.seed}", "experiment": experiment, "mode": mode,
                               "backend": backend, "engine": "tfdata",
                               "time_scale": metrics["spec"]["time_scale"]}})
    metrics.update(backend=backend, repeats=[{"repeat": 0, "seed": spec.seed, "log": "run.log", **{
        key: metrics[key] for key in ("converged", "throughput", "remote_workers", "local_workers")}}])
    write_json(out / "metrics.json", metrics)
    return metrics
