"""The local model of one training job on the Pecan artifact's cluster.

Time advances in decision windows of `decision_steps` training steps. In each window:
  producer capacity (examples/s) = vCPUs preprocessing / vCPU-seconds per element
      collocated: the host's effective preprocessing vCPUs;
      data service: remote workers x remote vCPUs + local workers x local vCPUs, the remote part
      also limited by the accelerator host's network (preprocessed bytes per element);
      where the job runs on one machine of `host_cpus` CPUs (the tf.data engine's miniature
      cluster), no deployment preprocesses on more CPUs than that machine has, and moving an
      element from worker to client costs CPU on both sides (send_s_per_byte, receive_s_per_byte),
      or a worker's CPU per element served is measured whole (served_s_per_element);
  throughput = min(accelerator bound, capacity) x seeded log-normal noise.
The placement policy observes the window's batch time and picks the next deployment, which takes
effect in the next window. FastFlow (repro.pecan.policies.FastFlowPlacement) runs one window per
profile, then splits elements between the host's pipeline and its fixed remote workers.
The run is written as the artifact's log, a Chrome trace and metrics.
"""

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from repro.errors import ReproError
from repro.pecan.policies import (
    LOCAL_ONLY,
    PROFILE_GTHP,
    PROFILE_LTHP,
    CachewAutoscaler,
    FastFlowPlacement,
    FixedPlacement,
    PecanAutoPlacement,
)

PLACEMENTS = ("collocated", "cachew", "autoplacement", "fixed", "fastflow")


@dataclass(frozen=True)
class JobSpec:
    """Everything one simulated run depends on (all of it recorded in metrics.json)."""

    experiment: str
    mode: str
    placement: str
    autoorder: bool
    batch_size: int
    steps_per_epoch: int
    epochs: int
    steps_per_loop: int
    accelerator_batches_per_s: float
    cost_per_element: float  # vCPU-seconds on the modelled machines
    bytes_per_element: float
    collocated_vcpus: float
    remote_worker_vcpus: int
    local_worker_vcpus: int
    max_remote_workers: int
    max_local_workers: int
    fixed_remote_workers: int
    fixed_local_workers: int
    network_gbps: float
    decision_steps: int
    noise_cv: float
    cachew_threshold_up: float  # the improvement Cachew needs to add a worker
    client_cost: float
    worker_cost: float
    seed: int
    # CPUs that every worker and the client share (one machine); 0: every worker has CPUs of its
    # own (the artifact's cluster), and capacity grows with every worker added
    host_cpus: float = 0.0
    # CPU seconds per byte to move an element from a worker to the client (serialising, the
    # socket, decoding), on the worker and on the client: measured on one machine over loopback
    # (repro.pecan.tfdata.engine.measure_transfer_cost); 0 where the cluster's network term is
    # the only cost of moving it
    send_s_per_byte: float = 0.0
    receive_s_per_byte: float = 0.0
    # CPU seconds a worker spends per element it serves, pipeline and sending together, measured
    # with a worker serving the run's pipeline (measure_transfer_cost); 0: the pipeline's cost plus
    # the sending, each measured apart
    served_s_per_element: float = 0.0


@dataclass
class Window:
    start_s: float
    first_step: int
    steps: int
    seconds: float
    remote: int
    local: int


@dataclass
class Simulation:
    spec: JobSpec
    windows: list = field(default_factory=list)
    decisions: list = field(default_factory=list)  # (time, state, remote, local)

    @property
    def seconds(self):
        return sum(w.seconds for w in self.windows)


def served_s_per_element(spec):
    """A worker's CPU seconds per element it serves: measured whole, or its pipeline and sending."""
    return spec.served_s_per_element or spec.cost_per_element + spec.send_s_per_byte * spec.bytes_per_element


def capacity(spec, remote, local):
    """Examples per second the preprocessing side can deliver with this deployment."""
    if spec.placement == "collocated":
        cap = spec.host_cpus / spec.cost_per_element if spec.host_cpus > 0 else math.inf
        return min(spec.collocated_vcpus / spec.cost_per_element, cap)
    served = served_s_per_element(spec)
    # one machine: the workers' CPU and the client's receiving share its CPUs
    cap = spec.host_cpus / (served + spec.receive_s_per_byte * spec.bytes_per_element) if spec.host_cpus > 0 else math.inf
    remote_rate = remote * spec.remote_worker_vcpus / served
    network_rate = spec.network_gbps * 1e9 / 8 / spec.bytes_per_element
    return min(local * spec.local_worker_vcpus / served + min(remote_rate, network_rate), cap)


def fastflow_capacity(spec, state, remote, ratio_local):
    """Examples per second under FastFlow: its profiles run the local pipeline alone (LTHP), one cached
    batch (GTHP: only the accelerator bounds it) or every element remote (RTHP); after the decision the
    host's own pipeline produces `ratio_local` of the elements and the remote workers the rest, each
    share at its source's rate (a fixed split: the slower source sets the pace). On one machine
    (host_cpus) the host's pipeline, the workers and the client's receiving also share its CPUs."""
    host = capacity(dataclasses.replace(spec, placement="collocated"), 0, 0)
    far = capacity(spec, remote, 0)
    if state in (PROFILE_LTHP, LOCAL_ONLY):
        return host
    if state == PROFILE_GTHP:
        return math.inf
    if state.startswith("PROFILE_RTHP"):
        return far
    split = min(host / ratio_local if ratio_local > 0 else math.inf,
                far / (1 - ratio_local) if ratio_local < 1 else math.inf)
    if spec.host_cpus <= 0:
        return split
    remote_element = served_s_per_element(spec) + spec.receive_s_per_byte * spec.bytes_per_element
    return min(split, spec.host_cpus / (ratio_local * spec.cost_per_element + (1 - ratio_local) * remote_element))


def make_policy(spec):
    if spec.placement == "cachew":
        return CachewAutoscaler(up_threshold=spec.cachew_threshold_up, max_workers=spec.max_remote_workers)
    if spec.placement == "autoplacement":
        return PecanAutoPlacement(
            max_remote=spec.max_remote_workers,
            max_local=spec.max_local_workers,
            client_cost=spec.client_cost,
            worker_cost=spec.worker_cost,
        )
    if spec.placement == "fixed":
        return FixedPlacement(spec.fixed_remote_workers, spec.fixed_local_workers)
    if spec.placement == "fastflow":
        return FastFlowPlacement(remote=spec.fixed_remote_workers)
    if spec.placement == "collocated":
        return None
    raise ReproError(f"unknown placement {spec.placement!r}; expected one of {list(PLACEMENTS)}")


def simulate(spec):
    policy = make_policy(spec)
    rng = np.random.default_rng(spec.seed)
    sigma = math.sqrt(math.log(1 + spec.noise_cv**2))
    bound = spec.accelerator_batches_per_s * spec.batch_size
    remote, local = (policy.remote, policy.local) if policy else (0, 0)
    sim = Simulation(spec)
    total = spec.epochs * spec.steps_per_epoch
    step, now = 0, 0.0
    while step < total:
        steps = min(spec.decision_steps, total - step)
        if spec.placement == "fastflow":
            supply = fastflow_capacity(spec, policy.state, remote, policy.ratio_local)
        else:
            supply = capacity(spec, remote, local)
        if not supply > 0:  # settings not checked as a config is (a hand-written --settings)
            raise ReproError(f"mode {spec.mode}: {remote} remote and {local} local workers (placement "
                             f"{spec.placement}) preprocess nothing; expected a deployment of at least one worker "
                             f"(pecan.cluster.max_remote_workers {spec.max_remote_workers}, max_local_workers "
                             f"{spec.max_local_workers})")
        rate = min(bound, supply) * rng.lognormal(-sigma**2 / 2, sigma)
        seconds = steps * spec.batch_size / rate
        sim.windows.append(Window(now, step, steps, seconds, remote, local))
        now, step = now + seconds, step + steps
        if policy:
            new = policy.decide(remote, local, seconds / steps)
            if new != (remote, local) or not sim.decisions or sim.decisions[-1][1] != policy.state:
                sim.decisions.append((now, policy.state, *new))
            remote, local = new
    return sim


def step_times(sim):
    """Cumulative seconds at the end of every logging loop (steps_per_loop), plus the last step."""
    spec = sim.spec
    total = spec.epochs * spec.steps_per_epoch
    marks = list(range(spec.steps_per_loop, total, spec.steps_per_loop)) + [total]
    starts = np.array([w.first_step for w in sim.windows] + [total], float)
    times = np.concatenate([[0.0], np.cumsum([w.seconds for w in sim.windows])])
    return [(mark, float(np.interp(mark, starts, times))) for mark in marks]


def worker_names(remote, local):
    """Names as the artifact's data service prints them; local workers run on 'localhost'."""
    return [f"model-worker-{i:02d}:{31001 + i}" for i in range(remote)] + [f"localhost:{38000 + i}" for i in range(local)]
