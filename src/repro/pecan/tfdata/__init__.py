"""The tf.data service engine: Pecan's modes as real runs on a dispatcher, worker processes and a
training client (TensorFlow's tf.data service), at miniature scale on one machine.

TensorFlow is an optional dependency (the 'tfdata' extra); it is imported here, lazily, only when
the engine runs, so the default install and the cluster model never need it.
"""

import importlib.util
import os

from repro.errors import ReproError

# Per pipeline, from benchmarks/tfdata.py on this 2-core machine under the load of other work
# (load average 5-11, so rates moved by up to a third between runs): ResNet one 1-vCPU worker
# 130-192 examples/s, two 205-236, so 3234 examples/s (v2-8) / 18 = 180 lies between them;
# RetinaNet one worker 29-31, two 36-41 (78 MB batches over loopback: the transfer, not the
# pipeline, limits two workers), so 196 / 6 = 33. The benchmark prints the factor midway between
# one and two workers on the machine at hand; --time-scale sets it.
# The factors live in each pipeline's record (repro.pecan.pipelines, `time_scale`); a pipeline
# without one needs pecan.tfdata.time_scale (or --time-scale).
def time_scale_of(pipeline, configured=None):
    """The configured time scale, or the pipeline record's; a ReproError naming the key when neither is set."""
    from repro.pecan.pipelines import PIPELINES

    scale = configured if configured is not None else PIPELINES[pipeline].time_scale
    if scale is None:
        raise ReproError(f"pecan.tfdata.time_scale: pipeline {pipeline!r} has no measured time scale; "
                         "set one (benchmarks/tfdata.py prints it for this machine)")
    return scale

EXTRA_HINT = "the tf.data engine needs the 'tfdata' extra (pip install -e '.[tfdata]')"


def tensorflow():
    """The tensorflow module, or a ReproError naming the extra when it is not installed."""
    # TensorFlow's C++ start-up banner (oneDNN, CPU features) goes to stderr unless told otherwise
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ReproError(f"{EXTRA_HINT}: cannot import tensorflow ({exc})") from None
    return tf


def require_tensorflow():
    """A ReproError naming the extra unless TensorFlow is installed (without importing it)."""
    try:
        found = importlib.util.find_spec("tensorflow") is not None
    except ImportError:
        found = False
    if not found:
        raise ReproError(f"{EXTRA_HINT}: tensorflow is not installed")
