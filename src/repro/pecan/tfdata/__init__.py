"""The tf.data service engine: Pecan's modes as real runs on a dispatcher, worker processes and a
training client (TensorFlow's tf.data service), at miniature scale on one machine.

TensorFlow is an optional dependency (the 'tfdata' extra); it is imported here, lazily, only when
the engine runs, so the default install and the cluster model never need it.
"""

import importlib.util
import os

from repro.errors import ReproError


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
