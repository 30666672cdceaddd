"""Atomic output: write to a temporary file beside the target, then rename over it.

A reader (or Snakemake after a crash) never sees a half-written file under the final name.
"""

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target):
    """Yield a temporary path in the target's directory; rename it to `target` on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(target, text):
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def write_json(target, obj):
    write_text(target, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
