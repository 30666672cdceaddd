"""The trace store: put, get and list with checksums. A local directory by default."""

import hashlib
import json
import shutil
from pathlib import Path

from repro.errors import ReproError
from repro.fsutil import atomic_path, write_json


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LocalStore:
    """Objects under `root/<key>`, each with a `<key>.sha256` sidecar written after the object."""

    def __init__(self, root):
        self.root = Path(root)

    def put(self, path, key):
        target = self.root / key
        with atomic_path(target) as tmp:
            shutil.copyfile(path, tmp)
        digest = sha256(target)
        (self.root / f"{key}.sha256").write_text(digest + "\n")
        return {"key": key, "sha256": digest, "bytes": target.stat().st_size}

    def get(self, key, destination):
        source = self.root / key
        sidecar = self.root / f"{key}.sha256"
        if not source.is_file() or not sidecar.is_file():
            raise ReproError(f"trace store {self.root}: no object {key!r}")
        expected = sidecar.read_text().strip()
        with atomic_path(destination) as tmp:
            shutil.copyfile(source, tmp)
            actual = sha256(tmp)
            if actual != expected:
                raise ReproError(f"trace store {self.root}: checksum mismatch for {key!r} "
                                 f"(expected sha256 {expected}, got {actual})")
        return {"key": key, "sha256": actual}

    def list(self, prefix=""):
        return sorted(
            str(p.relative_to(self.root)) for p in self.root.rglob("*")
            if p.is_file() and not p.name.endswith(".sha256") and str(p.relative_to(self.root)).startswith(prefix)
        )


def upload_traces(store, trace_paths, prefix, receipt):
    """Put each trace under `prefix/<file name>`; write a receipt listing keys and checksums."""
    entries = [store.put(path, f"{prefix}/{Path(path).name}") for path in trace_paths]
    write_json(receipt, {"store": str(store.root), "objects": entries})
    return entries


def download_traces(store, receipt, destination_dir):
    """Fetch every object a receipt lists into destination_dir, verifying checksums."""
    objects = json.loads(Path(receipt).read_text())["objects"]
    fetched = []
    for entry in objects:
        result = store.get(entry["key"], Path(destination_dir) / Path(entry["key"]).name)
        if result["sha256"] != entry["sha256"]:
            raise ReproError(f"trace store {store.root}: {entry['key']!r} changed since upload "
                             f"(receipt {receipt} says sha256 {entry['sha256']})")
        fetched.append(result)
    return fetched
