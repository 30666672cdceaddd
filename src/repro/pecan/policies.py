"""The decision rules of Cachew and Pecan, as plain functions and small state machines.

Constants and their sources (the policies' code in github.com/eth-easl/cachew,
tensorflow/core/data/service/easl/, and the settings the Pecan artifact, github.com/eth-easl/pecan-experiments,
experiments/pecan, runs them with; the Pecan paper, USENIX ATC'24, describes AutoPlacement and AutoOrder):
- Cachew autoscaling (eth-easl/cachew, tensorflow/core/data/service/easl/scaling_utils.cc):
  scale up by one worker while the batch-time improvement exceeds the threshold (7%,
  kMinBatchTimeRelativeImprovementUp, by default; the cluster model passes the job's own
  "scaling threshold up", which the artifact's runs log as 0.0), otherwise return to the previous
  count and converge (at the cluster's size it converges there);
  scale down while the loss stays under 3% (kMinBatchTimeRelativeImprovementDown); after 20
  stable decisions (kInStabilityBeforeScaling) scale up again if the batch time grew by 40%
  (kMinBatchTimeRelativeGrowth).
- Pecan AutoPlacement: ONLY_REMOTE adds remote workers while the improvement exceeds 3%
  (scaling_threshold_up), at most 20 (the artifact's cluster size); INCREASING_LOCAL adds local
  workers up to 10 while throughput does not drop by more than 10%; DECREASING_REMOTE removes
  remote workers while that lowers the cost per batch at client_cost 4.96 $/h and worker_cost
  0.427319 $/h (the artifact's settings, printed in its logs); then STABLE.
- Pecan AutoOrder: reorder maps by their data-inflation factor (bytes produced / consumed).
"""

from dataclasses import dataclass, field

from repro.errors import ReproError

# -- AutoOrder --------------------------------------------------------------------------


def autoorder(ops, inflation):
    """Return `ops` reordered so that data-inflating elementwise maps run as late as possible.

    Two neighbours (a, b) swap when neither keeps its position, b does not require a, and
    either a is shape-preserving and inflates the data (factor > 1) while b does not, or b is
    shape-preserving and shrinks the data (a cheaper dtype, factor < 1) while a does not.
    `inflation` maps op name -> measured bytes out / bytes in. Returns (ops, moves) where moves
    lists the swaps made, in order.
    """
    order = list(ops)
    moves = []
    changed = True
    while changed:
        changed = False
        for i in range(len(order) - 1):
            a, b = order[i], order[i + 1]
            if a.keep_position or b.keep_position or a.name in b.requires:
                continue
            fa, fb = inflation[a.name], inflation[b.name]
            inflating_first = a.shape_preserving and fa > 1 and fb <= 1
            shrinking_second = b.shape_preserving and fb < 1 and fa >= 1
            if inflating_first or shrinking_second:
                order[i], order[i + 1] = b, a
                moves.append(f"{a.name} after {b.name}")
                changed = True
    return order, moves


# -- Cachew autoscaling -----------------------------------------------------------------


@dataclass
class CachewAutoscaler:
    up_threshold: float = 0.07
    down_threshold: float = 0.03
    stable_decisions: int = 20
    regrowth: float = 1.4
    max_workers: int = 20
    scaling: bool = True
    target: int = 1
    history: list = field(default_factory=list)  # (workers, batch_time) per decision
    converged: tuple = None
    same_scale: int = 0

    local = 0  # Cachew places no workers on the accelerator host

    @property
    def state(self):
        return "SCALING" if self.scaling else "STABLE"

    @property
    def remote(self):
        return self.target

    def decide(self, remote, local, batch_time):
        """Observe the batch time measured with `remote` workers; return the next (remote, local)."""
        return self.next_count(remote, batch_time), 0

    def next_count(self, workers, batch_time):
        """The scaling rule itself: the worker count after observing `batch_time` with `workers`."""
        self.history.append((workers, batch_time))
        if workers != self.target:
            return self.target  # the previous decision has not taken effect yet
        if not self.scaling:
            return self._stable(batch_time)
        previous = next((h for h in reversed(self.history[:-1]) if h[0] != workers), None)
        if previous is None:
            self.target = min(workers + 1, self.max_workers)
            return self.target
        improvement = 1.0 - batch_time / previous[1]
        if previous[0] < workers:
            keep_going, step = improvement > self.up_threshold, 1
            if keep_going and workers >= self.max_workers:  # better, but the cluster has no more workers
                self.converged, self.scaling, self.same_scale = (workers, batch_time), False, 0
                return self.target
        else:
            keep_going = improvement > -self.down_threshold and workers > 1
            step = -1
        if keep_going:
            self.target = workers + step
        else:
            self.target, self.converged, self.scaling, self.same_scale = previous[0], previous, False, 0
        return self.target

    def _stable(self, batch_time):
        self.same_scale += 1
        if self.same_scale > self.stable_decisions:
            self.same_scale = 0
            if self.converged and batch_time / self.converged[1] > self.regrowth:
                self.target = min(self.converged[0] + 1, self.max_workers)
                self.scaling = True
        return self.target


# -- Pecan AutoPlacement ----------------------------------------------------------------

ONLY_REMOTE, INCREASING_LOCAL, DECREASING_REMOTE, STABLE = "ONLY_REMOTE", "INCREASING_LOCAL", "DECREASING_REMOTE", "STABLE"


def cost_per_batch(remote, batch_time, client_cost, worker_cost):
    """Dollars per batch (up to a constant): (accelerator + remote workers) $/h x batch time."""
    return (client_cost + remote * worker_cost) * batch_time


@dataclass
class PecanAutoPlacement:
    up_threshold: float = 0.03
    max_remote: int = 20
    max_local: int = 10
    local_drop: float = 0.10
    client_cost: float = 4.96
    worker_cost: float = 0.427319
    state: str = ONLY_REMOTE
    remote: int = 1
    local: int = 0
    last: tuple = None  # (remote, local, batch_time) of the previous decision
    reference_batch_time: float = None  # before local workers were added

    def decide(self, remote, local, batch_time):
        """Observe the batch time with (remote, local) workers; return the next (remote, local)."""
        last, self.last = self.last, (remote, local, batch_time)
        if (remote, local) != (self.remote, self.local):
            return self.remote, self.local
        if self.state == ONLY_REMOTE:
            self._only_remote(last, batch_time)
        elif self.state == INCREASING_LOCAL:
            self._increasing_local(batch_time)
        elif self.state == DECREASING_REMOTE:
            self._decreasing_remote(last, batch_time)
        return self.remote, self.local

    def _only_remote(self, last, batch_time):
        if last is None:
            self.remote = min(self.remote + 1, self.max_remote)
            return
        if 1.0 - batch_time / last[2] > self.up_threshold and self.remote < self.max_remote:
            self.remote += 1
            return
        self.remote = last[0]
        self.reference_batch_time = min(batch_time, last[2])
        self.state = INCREASING_LOCAL

    def _increasing_local(self, batch_time):
        if self.local and batch_time > self.reference_batch_time * (1 + self.local_drop):
            self.local -= 1
            self.state = DECREASING_REMOTE
        elif self.local >= self.max_local:
            self.state = DECREASING_REMOTE
            self._try_fewer_remote()
        else:
            self.local += 1

    def _try_fewer_remote(self):
        if self.remote > 0:
            self.remote -= 1
        else:
            self.state = STABLE

    def _decreasing_remote(self, last, batch_time):
        if last is None or last[0] == self.remote:
            self._try_fewer_remote()
            return
        before = cost_per_batch(last[0], last[2], self.client_cost, self.worker_cost)
        now = cost_per_batch(self.remote, batch_time, self.client_cost, self.worker_cost)
        if now < before:
            self._try_fewer_remote()
        else:
            self.remote = last[0]
            self.state = STABLE


@dataclass
class FixedPlacement:
    """All workers at all times (the artifact's hello-world 'short' run)."""

    remote: int
    local: int
    state: str = "FIXED"

    def decide(self, remote, local, batch_time):
        return self.remote, self.local


# -- FastFlow ---------------------------------------------------------------------------
# FastFlow (Um et al., VLDB'23; github.com/SamsungLabs/FastFlow, commit f2e3a33) profiles once at the
# start of training and decides once: fastflow/model.py FastFlowModel.fit (lines 128-320) measures
# the local pipeline's throughput (LTHP), the accelerator-bound throughput with one cached batch
# re-consumed (GTHP) and the remote throughput for each cut point (RTHP); it offloads only when
# GTHP / LTHP exceeds cpu_bottleneck_threshold (1.3), picks the cut with the best
# rthp + lthp x (1 - cycles / pcycle), and splits elements between the local pipeline and the
# remote workers by utils.calculate_ratio_local_optimal. Its workers are launched by the user (the
# non-AWS mode the Pecan comparison ran it in), so their number is fixed; the Pecan paper's FastFlow
# costs price exactly 2 remote workers on every workload.

FASTFLOW_THRESHOLD = 1.3  # FastFlowConfig.cpu_bottleneck_threshold
FASTFLOW_WORKERS = 2
# ELEMENT: distribute() before the outermost batch; BATCH: before the outermost prefetch. MIDDLE needs
# a map the user named 'prep_begin', which these pipelines do not have.
FASTFLOW_CUTS = ("ELEMENT", "BATCH")
PROFILE_LTHP, PROFILE_GTHP, LOCAL_ONLY, OFFLOADED = "PROFILE_LTHP", "PROFILE_GTHP", "LOCAL_ONLY", "OFFLOADED"


def fastflow_workers(value, key="remote_workers"):
    """FastFlow's fixed remote worker count, or a ReproError naming `key` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReproError(f"{key}: FastFlow needs a fixed remote worker count of at least 1, found {value!r}")
    return value


def fastflow_ratio_local(gthp, lthp, rthp, pcycle, dcycle, n=1):
    """The share of elements FastFlow produces locally (utils.calculate_ratio_local_optimal, lines 55-74).

    rthp x n is the aggregate remote rate (without autoscaling FastFlow passes n = 1 and rthp was
    measured against every pre-launched worker). Below the accelerator's need, local and remote
    split in proportion to their capacity; otherwise the local share is what remains of gthp once
    the offloaded rate is taken off. Negative results become 0.
    """
    remote = rthp * n
    decode_off = (gthp - lthp) * (1 + dcycle / pcycle)
    off_data = (remote + decode_off) / 2 if lthp > remote else max(remote, decode_off)
    if lthp + remote < gthp:
        ratio = lthp / (lthp + remote)
    else:
        ratio = (gthp - off_data) / gthp
    return max(ratio, 0.0)


@dataclass(frozen=True)
class FastFlowDecision:
    offload: bool
    cut: str | None
    ratio_local: float
    score: dict


def fastflow_decide(lthp, gthp, remote, pcycle, threshold=FASTFLOW_THRESHOLD):
    """FastFlow's one decision from its profiles.

    lthp, gthp: local and accelerator-bound throughput; remote: {cut: (rthp, cycles)} in FastFlow's
    order of preference (a tie goes to the first); pcycle: local CPU seconds of the LTHP profile,
    cycles those of the candidate's. Offloads only if gthp / lthp > threshold.
    """
    if not gthp > threshold * lthp:
        return FastFlowDecision(False, None, 1.0, {})
    score = {cut: rthp + lthp * (1 - cycles / pcycle) for cut, (rthp, cycles) in remote.items()}
    cut = max(score, key=lambda c: (score[c], -list(score).index(c)))
    rthp, dcycle = remote[cut]
    return FastFlowDecision(True, cut, fastflow_ratio_local(gthp, lthp, rthp, pcycle, dcycle), score)


@dataclass
class FastFlowPlacement:
    """FastFlow's run as a placement policy: one profiling window per profile, then its decision for
    good. `remote` pre-launched workers are deployed (and billed) throughout; `ratio_local` is the share
    of elements the accelerator host's own pipeline produces (1.0 before offloading and without it).

    The cluster model sets the deployment of each profiling window from `state`; the host's CPU
    seconds per element are the same in every cut there (batching is not modelled apart), so the
    candidates' cycles are 0 of the local profile's 1. The tf.data engine measures them: its
    client's CPU seconds per batch in each profile (`host_cpu`), as FastFlow counts the host's cycles.
    """

    remote: int = FASTFLOW_WORKERS
    threshold: float = FASTFLOW_THRESHOLD
    local: int = 0
    state: str = PROFILE_LTHP
    ratio_local: float = 1.0
    profiles: dict = field(default_factory=dict)  # profile state -> batches per second observed in it
    cycles: dict = field(default_factory=dict)  # profile state -> host CPU seconds per batch, where measured
    decision: FastFlowDecision = None

    def __post_init__(self):
        fastflow_workers(self.remote)
        self._order = [PROFILE_LTHP, PROFILE_GTHP] + [f"PROFILE_RTHP_{cut}" for cut in FASTFLOW_CUTS]

    def decide(self, remote, local, batch_time, host_cpu=None):
        """Record the window's profile (and the host's CPU seconds per batch, `host_cpu`, where
        measured); after the last one, decide. The deployment never changes."""
        if self.state in (LOCAL_ONLY, OFFLOADED):
            return self.remote, self.local
        self.profiles[self.state] = 1.0 / batch_time
        if host_cpu is not None:
            self.cycles[self.state] = host_cpu
        following = self._order.index(self.state) + 1
        if following < len(self._order):
            self.state = self._order[following]
            return self.remote, self.local
        p = self.profiles
        # FastFlow's cycles where every profile measured them, else the local profile's 1 against 0
        measured = set(self._order) - {PROFILE_GTHP} <= set(self.cycles) and self.cycles[PROFILE_LTHP] > 0
        pcycle = self.cycles[PROFILE_LTHP] if measured else 1.0
        self.decision = fastflow_decide(p[PROFILE_LTHP], p[PROFILE_GTHP],
                                        {cut: (p[f"PROFILE_RTHP_{cut}"],
                                               self.cycles[f"PROFILE_RTHP_{cut}"] if measured else 0.0)
                                         for cut in FASTFLOW_CUTS}, pcycle, self.threshold)
        self.ratio_local = self.decision.ratio_local
        self.state = OFFLOADED if self.decision.offload else LOCAL_ONLY
        return self.remote, self.local
