"""The model store: model weights resident in host shared memory or GPU memory, under a memory budget.

A model is loaded once (its checksum verified) and handed to any number of clients, which map the
same memory instead of reading and copying the weights: a POSIX shared memory segment on the host,
or a CUDA inter-process handle to device memory on a GPU. Models in use are reference counted and
never evicted; unused ones are evicted by the chosen policy when a new model needs room.

With a host tier (persist_bytes > 0, TrIMS's persist_cpu) an evicted model's weights are kept in
this process's memory, least recently evicted dropped first when the tier is full, and the next
request promotes them back without reading the model file. Statistics per tier: hits, promotions,
loads from file, evictions.

Host segments are named <prefix><owner pid>_<owner start time>_<n>, the prefix derived from the
server's socket: a segment outlives a killed server (nothing unlinks it), and the next server on
the same socket, or a stop (`repro trims server stop`, `repro cluster stop`), removes the ones
whose owner is gone.
"""

import contextlib
import hashlib
import itertools
import mmap
import os
import threading
import time
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path

from repro.errors import ReproError
from repro.processes import describe, matches
from repro.trims.eviction import POLICIES, POLICY_ALIASES
from repro.trims.models import PARAMS, check_model_name, load_manifest, model_directory, model_file, open_regular

DEVICES = ("cpu", "gpu")  # where a store keeps models
# what a user may ask for: auto is the GPU when an NVIDIA device and PyTorch with CUDA are present
# (repro.trims.device.resolve_device)
DEVICE_CHOICES = (*DEVICES, "auto")
_CHUNK = 8 << 20
SHM_DIR = Path("/dev/shm")  # where Linux keeps POSIX shared memory segments
MAX_PROFILE_EVENTS = 100_000  # a profiling server's trace, held until it stops (about 70 MB of events)


def segment_prefix(socket_path):
    """The name prefix of the segments of the server on `socket_path`."""
    digest = hashlib.sha256(os.fsencode(Path(socket_path).resolve())).hexdigest()[:16]
    return f"repro_trims_{digest}_"


def remove_stale_segments(prefix):
    """Unlink the segments named with `prefix` whose owning server no longer runs; return their names."""
    me = describe(os.getpid(), "trims-server")
    removed = []
    for path in sorted(SHM_DIR.glob(f"{prefix}*")):
        try:
            pid, ticks, _ = path.name[len(prefix):].split("_")
            owner = {**me, "pid": int(pid), "start_ticks": int(ticks)}
        except ValueError:
            continue  # not a name this store gives
        if not matches(owner):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


class HostMemory:
    """Weights in a POSIX shared memory segment; clients map it by name."""

    def __init__(self, size, name=None):
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            # SharedMemory creates the segment before it sizes it, and leaves it behind when sizing fails
            raise ReproError(f"a model's size must be a whole number of bytes, got {size!r}")
        # a segment is sized without being backed: writing past what /dev/shm holds kills the server (SIGBUS)
        stats = os.statvfs(SHM_DIR)
        if size > stats.f_bavail * stats.f_frsize:
            raise ReproError(f"{SHM_DIR}: {stats.f_bavail * stats.f_frsize >> 20} MiB free, a model of {size >> 20} MiB "
                             "does not fit; expected a larger /dev/shm (docker run --shm-size) or a smaller model")
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=max(size, 1))

    def staging(self, offset):
        return self.shm.buf[offset : offset + _CHUNK]

    def commit(self, offset, length):
        """The bytes were read in place: nothing to copy."""

    def loaded(self):
        """Nothing to release: the segment was the staging area."""

    def handle(self):
        return {"device": "cpu", "shm": self.shm.name}

    def copy_out(self, size):
        return bytearray(self.shm.buf[:size])

    def close(self):
        self.shm.close()
        self.shm.unlink()


class AttachedSegment:
    """A store's segment as a client maps it, by name: opened in SHM_DIR, not through multiprocessing's
    SharedMemory, which registers it with the resource tracker a client's worker processes share (two
    of them mapping one segment unregistered it twice, and the tracker printed a KeyError traceback)."""

    def __init__(self, name):
        descriptor = os.open(SHM_DIR / name, os.O_RDWR | os.O_NOFOLLOW)
        try:
            self.size = os.fstat(descriptor).st_size
            self._map = mmap.mmap(descriptor, self.size)
        finally:
            os.close(descriptor)
        self.buf = memoryview(self._map)

    def close(self):
        self.buf.release()
        self._map.close()


class GpuMemory:
    """Weights in device memory; clients open it through a CUDA inter-process handle."""

    def __init__(self, size):
        from repro.trims.cuda import driver

        self.driver = driver()
        self.pointer = self.driver.allocate(max(size, 1))
        try:
            self.ipc = self.driver.export(self.pointer)
        except ReproError:
            self.driver.free(self.pointer)
            raise
        self.buffer = bytearray(_CHUNK)  # host staging for the copies, dropped once loaded

    def staging(self, offset):
        return memoryview(self.buffer)

    def commit(self, offset, length):
        self.driver.copy_to_device(self.pointer + offset, self.buffer, length)

    def loaded(self):
        self.buffer = None

    def handle(self):
        return {"device": "gpu", "ipc": self.ipc}

    def copy_out(self, size):
        data = bytearray(max(size, 1))
        self.driver.copy_to_host(data, self.pointer, max(size, 1))
        return data[:size]

    def close(self):
        self.driver.free(self.pointer)


@dataclass
class Entry:
    model: str
    memory: HostMemory | GpuMemory
    size: int
    loaded_at: float
    last_used: float
    uses: int = 0  # acquisitions since loaded: LFU's frequency
    hits: int = 0  # acquisitions it was already resident for
    refs: int = 0
    order: int = 0  # load order, for FIFO and for ties


@dataclass
class ModelStore:
    base_path: Path
    budget_bytes: int
    policy: str = "lru"
    device: str = "cpu"
    entries: dict = field(default_factory=dict)
    evictions: int = 0
    wait_s: float = 60.0  # how long a load waits for models in use to be released
    segment_prefix: str = ""  # name host segments after the server (see segment_prefix); empty: random names
    persist_bytes: int = 0  # the host tier's budget; 0: no tier
    tier: dict = field(default_factory=dict)  # model -> its weights (bytearray), oldest eviction first
    hits: int = 0  # acquisitions served by a resident model
    promotions: int = 0  # loads served from the host tier
    file_loads: int = 0  # loads that read the model file
    tier_evictions: int = 0  # copies dropped from the host tier to make room
    events: list = None  # the server's trace (Chrome trace events) when it profiles; None: not recorded
    events_dropped: int = 0  # events past MAX_PROFILE_EVENTS, counted, not kept
    lock: threading.RLock = field(default_factory=threading.RLock)
    freed: threading.Condition = None
    _sequence: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self):
        self.policy = POLICY_ALIASES.get(self.policy, self.policy)
        if self.policy not in POLICIES:
            raise ReproError(f"unknown eviction policy {self.policy!r}; expected one of {list(POLICIES)}")
        if self.device not in DEVICES:
            raise ReproError(f"unknown store device {self.device!r}; expected one of {list(DEVICES)}")
        self.base_path = Path(self.base_path)
        self.freed = threading.Condition(self.lock)
        me = describe(os.getpid(), "trims-server")
        self._owner = f"{self.segment_prefix}{me['pid']}_{me['start_ticks']}_"

    @property
    def used_bytes(self):
        return sum(e.size for e in self.entries.values())

    def _victims(self):
        """The unused models to evict next, as the policy picks them (repro.trims.eviction)."""
        return POLICIES[self.policy]([e for e in self.entries.values() if e.refs == 0])

    def _make_room(self, size, model):
        if size > self.budget_bytes:
            raise ReproError(f"model {model!r} needs {size >> 20} MiB, more than the store's budget of "
                             f"{self.budget_bytes >> 20} MiB; run it with --original or raise the budget")
        deadline = time.monotonic() + self.wait_s
        while self.used_bytes + size > self.budget_bytes:
            victims = self._victims()
            if self.policy == "never":
                raise ReproError(f"model {model!r} needs {size >> 20} MiB but the store (eviction 'never') has "
                                 f"{(self.budget_bytes - self.used_bytes) >> 20} of {self.budget_bytes >> 20} MiB free")
            for victim in victims:
                self._evict(victim)
            if not victims and not self.freed.wait(timeout=max(0.0, deadline - time.monotonic())):
                raise ReproError(f"model {model!r} needs {size >> 20} MiB but every resident model stayed in use "
                                 f"for {self.wait_s:.0f} s ({self.used_bytes >> 20} of {self.budget_bytes >> 20} MiB)")

    def _record(self, name, start_us, end_us=None, **args):
        """A complete event (or an instant one without end) in the server's trace, when it profiles."""
        if self.events is None:
            return
        if len(self.events) >= MAX_PROFILE_EVENTS:  # held until the server stops: bounded
            self.events_dropped += 1
            return
        event = {"name": name, "cat": "server", "pid": os.getpid(), "tid": threading.get_ident() % (1 << 31),
                 "ts": start_us, "args": args}
        event.update({"ph": "i", "s": "p"} if end_us is None else {"ph": "X", "dur": max(end_us - start_us, 0.0)})
        self.events.append(event)

    def _evict(self, entry):
        self._record("evict", time.time_ns() / 1000, model=entry.model, bytes=entry.size)
        del self.entries[entry.model]
        try:
            if 0 < entry.size <= self.persist_bytes:
                self._persist(entry.model, entry.memory.copy_out(entry.size))
        finally:
            entry.memory.close()
        self.evictions += 1

    def _persist(self, model, data):
        """Keep an evicted model's weights in the host tier, dropping the oldest copies to make room."""
        while sum(map(len, self.tier.values())) + len(data) > self.persist_bytes:
            del self.tier[next(iter(self.tier))]
            self.tier_evictions += 1
        self.tier[model] = data

    def _directory(self, model):
        """base_path/model, refused unless it lies inside base_path once resolved (no '..', no absolute names,
        no symlinks leading out)."""
        return model_directory(self.base_path, model)

    def _load(self, model):
        directory = self._directory(model)
        persisted = self.tier.pop(model, None)  # before making room: that may put other models in the tier
        source = None
        try:
            if persisted is None and not (directory / PARAMS).is_file():
                raise ReproError(f"unknown model {model!r}: no {PARAMS} under {directory}")
            manifest = load_manifest(directory, complete=False)  # what the store reads of it
            size = manifest["params_bytes"]
            if persisted is not None and len(persisted) != size:
                persisted = None  # the model was regenerated since: read the new file
            if persisted is None:  # opened before room is made: a file that cannot be read evicts nothing
                source = open_regular(model_file(self.base_path, model, PARAMS), f"the weights of {model!r}")
            self._make_room(size, model)  # may wait, releasing the lock: another client may load it meanwhile
        except BaseException:
            if source is not None:
                source.close()
            if persisted is not None:
                self._persist(model, persisted)
            raise
        with source if source is not None else contextlib.nullcontext():
            return self._place(model, directory, manifest, persisted, source)

    def _place(self, model, directory, manifest, persisted, source):
        size = manifest["params_bytes"]
        if model in self.entries:
            return self.entries[model]
        sequence = next(self._sequence)
        if self.device == "gpu":
            memory = GpuMemory(size)
        else:
            memory = HostMemory(size, f"{self._owner}{sequence}" if self.segment_prefix else None)
        try:
            if persisted is not None:
                self._promote(memory, persisted)
            else:
                self._read_file(memory, directory, manifest, source)
            memory.loaded()
        except BaseException:
            memory.close()
            raise
        now = time.monotonic()
        entry = Entry(model, memory, size, now, now, order=sequence)
        self.entries[model] = entry
        return entry

    def _promote(self, memory, data):
        """Copy weights kept in the host tier (checked when first read from the file) into `memory`."""
        source = memoryview(data)
        for done in range(0, len(data), _CHUNK):
            n = min(_CHUNK, len(data) - done)
            view = memory.staging(done)
            view[:n] = source[done : done + n]
            view = None  # a host segment cannot close while a view of it is alive
            memory.commit(done, n)
        self.promotions += 1

    def _read_file(self, memory, directory, manifest, fh):
        size = manifest["params_bytes"]
        digest, done, view = hashlib.sha256(), 0, None
        try:
            while done < size:
                view = memory.staging(done)
                n = fh.readinto(view[: size - done])
                if not n:
                    break
                digest.update(view[:n])
                memory.commit(done, n)
                done += n
        finally:
            view = None  # a host segment cannot close while a view of it is alive
        if done != size or fh.read(1) or digest.hexdigest() != manifest["sha256"][PARAMS]:
            raise ReproError(f"{directory / PARAMS}: checksum mismatch (expected sha256 "
                             f"{manifest['sha256'][PARAMS]}); the model file is corrupt")
        self.file_loads += 1

    def acquire(self, model):
        """Make `model` resident and take a reference; return (how to map it, size, was it a hit)."""
        check_model_name(model)
        with self.lock:
            start = time.time_ns() / 1000
            entry = self.entries.get(model)
            hit = entry is not None
            promotions = self.promotions
            if not hit:
                entry = self._load(model)
            source = "resident" if hit else "host tier" if self.promotions > promotions else "file"
            self._record("acquire", start, time.time_ns() / 1000, model=model, bytes=entry.size, source=source)
            entry.refs += 1
            entry.uses += 1
            entry.hits += hit
            self.hits += hit
            entry.last_used = time.monotonic()
            return entry.memory.handle(), entry.size, hit

    def release(self, model):
        with self.lock:
            entry = self.entries.get(model)
            if entry is None or entry.refs == 0:
                raise ReproError(f"model {model!r} is not held by anyone")
            entry.refs -= 1
            if entry.refs == 0:
                self.freed.notify_all()

    def flush(self):
        """Evict every model not in use (so an experiment starts from an empty store)."""
        with self.lock:
            for entry in [e for e in self.entries.values() if e.refs == 0]:
                self._evict(entry)

    def status(self):
        with self.lock:
            return {
                "pid": os.getpid(),
                "policy": self.policy,
                "device": self.device,
                "budget_bytes": self.budget_bytes,
                "used_bytes": self.used_bytes,
                "evictions": self.evictions,
                "tiers": {
                    self.device: {"hits": self.hits, "evictions": self.evictions,
                                  "used_bytes": self.used_bytes, "budget_bytes": self.budget_bytes},
                    "host": {"promotions": self.promotions, "evictions": self.tier_evictions,
                             "models": sorted(self.tier), "used_bytes": sum(map(len, self.tier.values())),
                             "budget_bytes": self.persist_bytes},
                    "file": {"loads": self.file_loads},
                },
                "models": {e.model: {"bytes": e.size, "refs": e.refs, "uses": e.uses, "hits": e.hits} for e in self.entries.values()},
            }

    def close(self):
        with self.lock:
            for entry in list(self.entries.values()):
                entry.refs = 0
                self._evict(entry)
