"""The tf.data service engine: Pecan's modes as real runs on a dispatcher, worker processes and a
training client (TensorFlow's tf.data service), at miniature scale on one machine.

TensorFlow is an optional dependency (the 'tfdata' extra); it is imported here, lazily, only when
the engine runs, so the default install and the cluster model never need it.
"""

import importlib.abc
import importlib.util
import os
import sys
import types

from repro.errors import ReproError


def cpus_available():
    return len(os.sched_getaffinity(0))


def check_sweep(counts, worker_threads, cpus, key="pecan.tfdata.sweep"):
    """A ReproError naming `key` for a count of remote workers whose CPUs this machine does not have
    (workers are pinned to CPUs of their own: a count beyond them measures sharing, not workers), or
    for a count given twice (each count's run writes <out>/<count>: the second replaced the first)."""
    for i, count in enumerate(counts):
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ReproError(f"{key}: {count!r}: expected a whole number of remote workers, 0 or more")
        if count in counts[:i]:
            raise ReproError(f"{key}: {count} given twice; expected each count once (its run writes <out>/{count})")
        if count * worker_threads > cpus:
            raise ReproError(f"{key}: {count} remote worker(s) of {worker_threads} thread(s) need {count * worker_threads} "
                             f"CPUs; {cpus} available (os.sched_getaffinity); expected at most {cpus // worker_threads}")


# A worker process, idle: 490-500 MB resident (VmRSS, TensorFlow 2.21, CPU) with the whole of
# TensorFlow imported, 310-420 MB with the servers' module alone (service_servers; two installs);
# the budget is the former's, which another TensorFlow layout loads
WORKER_MEMORY_MB = 500


def check_worker_memory(count, label, meminfo="/proc/meminfo"):
    """A ReproError starting with `label` (the flag or setting and its value) where `count` worker
    processes on this machine would need more memory than it has available (MemAvailable; where that
    cannot be read, nothing is checked)."""
    from repro.machine import available_memory_mb

    available_mb = available_memory_mb(meminfo)
    if available_mb is not None and count * WORKER_MEMORY_MB > available_mb:
        raise ReproError(f"{label}: {count} worker process(es) need about {count * WORKER_MEMORY_MB} MB "
                         f"({WORKER_MEMORY_MB} MB each, TensorFlow loaded); {available_mb} MB available (MemAvailable); "
                         f"expected at most {available_mb // WORKER_MEMORY_MB}")


EXTRA_HINT = "the tf.data engine needs the 'tfdata' extra (pip install -e '.[tfdata]')"


class _WithoutKeras(importlib.abc.MetaPathFinder):
    """Refuses Keras' implementation (keras.src) while TensorFlow is imported. TensorFlow's import
    loads it eagerly to register Keras' optimizers, and catches the ImportError when it cannot
    (tensorflow/__init__.py): about 1.5 s of CPU in each of the engine's processes (client,
    dispatcher, every worker), for modules that tf.data never uses."""

    def find_spec(self, name, path=None, target=None):
        if name == "keras.src" or name.startswith("keras.src."):
            raise ImportError(f"{name}: not loaded with TensorFlow for the tf.data engine")
        return None


def tensorflow():
    """The tensorflow module, or a ReproError naming the extra when it is not installed. Keras is
    left out of the import (_WithoutKeras); it is imported as usual afterwards if anything asks."""
    # TensorFlow's C++ start-up banner (oneDNN, CPU features) goes to stderr unless told otherwise
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    without_keras = _WithoutKeras()
    sys.meta_path.insert(0, without_keras)
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ReproError(f"{EXTRA_HINT}: cannot import tensorflow ({exc})") from None
    finally:
        sys.meta_path.remove(without_keras)
    return tf


# The packages above the tf.data service servers' module, whose __init__ files import most of
# TensorFlow (tf.data's Python ops, the eager runtime, the public API's modules)
_SERVER_PACKAGES = ("tensorflow", "tensorflow.python", "tensorflow.python.data", "tensorflow.python.data.experimental",
                    "tensorflow.python.data.experimental.service")


def service_servers():
    """TensorFlow's tf.data service servers' module (server_lib: DispatcherConfig, DispatchServer,
    WorkerConfig, WorkerServer, as tf.data.experimental.service exports them), loaded without the
    rest of TensorFlow. The packages above it are stood in for by empty ones, so their __init__
    files do not run; the module loads TensorFlow's runtime library, which holds every op the
    pipelines run. About 0.3 s of CPU against 2.5 s for tensorflow(), in each dispatcher and worker
    process. Only for a process that runs nothing else of TensorFlow (repro.pecan.tfdata.server): the
    tensorflow package cannot be imported in it afterwards. Where TensorFlow's layout is another,
    the whole of TensorFlow is imported instead."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        spec = importlib.util.find_spec("tensorflow")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ReproError(f"{EXTRA_HINT}: tensorflow is not installed")
    if "tensorflow" in sys.modules:  # imported already: its own modules
        return tensorflow().data.experimental.service
    root = spec.submodule_search_locations[0]
    for name in _SERVER_PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, *name.split(".")[1:])]
        sys.modules[name] = package
    try:
        from tensorflow.python.data.experimental.service import server_lib
    except ImportError:  # another layout: what the stand-ins let load goes, then the whole of it
        for name in [name for name in sys.modules if name == "tensorflow" or name.startswith("tensorflow.")]:
            del sys.modules[name]
        return tensorflow().data.experimental.service
    return server_lib


def require_tensorflow():
    """A ReproError naming the extra unless TensorFlow is installed (without importing it)."""
    try:
        found = importlib.util.find_spec("tensorflow") is not None
    except ImportError:
        found = False
    if not found:
        raise ReproError(f"{EXTRA_HINT}: tensorflow is not installed")
