"""The trace store: put, get and list with checksums. A local directory, or a GCS bucket (gs://bucket/prefix).

Keys are `traces/<experiment>/<mode>/<file>` rather than the original tools'
`traces/<start time>/<trace id>.json`: one run's traces then list under one prefix, and a rerun
replaces its own objects instead of adding new ones.
"""

import contextlib
import os
import re
import shutil
from pathlib import Path

from repro.errors import OutputError, ReproError
from repro.fsutil import (atomic_path, check_output, check_regular, copy_limited, not_a_directory, open_regular,
                          read_bounded, read_json, read_text, refuse_overwriting, write_json, write_text)
from repro.fsutil import sha256_file as sha256


class LocalStore:
    """Objects under `root/<key>`, each with a `<key>.sha256` sidecar written after the object."""

    def __init__(self, root):
        self.root = Path(root)

    def put(self, path, key):
        target, sidecar = self._path(key), self.root / f"{key}.sha256"
        check_output(sidecar, str(sidecar))  # before the object: a symlink would have been written through
        with atomic_path(target) as tmp:
            shutil.copyfile(path, tmp)
        digest = sha256(target)
        write_text(sidecar, digest + "\n")
        return {"key": key, "sha256": digest, "bytes": target.stat().st_size}

    def _path(self, key):
        """The object's file; a key that resolves outside the store (a symlink inside it) is refused."""
        path = self.root / check_key(key)
        if not path.resolve().is_relative_to(self.root.resolve()):
            raise ReproError(f"trace store {self.root}: key {key!r} leads outside the store")
        return path

    def get(self, key, destination, expected_sha256=None, expected_bytes=None):
        """Copy the object `key` to `destination`, verified against its sidecar and, where given, the
        checksum and size (`expected_bytes`) its upload recorded: an object larger than that is refused
        once that many bytes are copied, not copied whole."""
        source = self._path(key)
        sidecar = self.root / f"{key}.sha256"
        if not source.is_file() or not sidecar.is_file():
            raise ReproError(f"trace store {self.root}: no object {key!r}")
        stored = read_text(sidecar, f"trace store {self.root}: {key}.sha256", "a checksum", 4096).strip()
        with atomic_path(destination) as tmp:
            _copy_bounded(source, tmp, expected_bytes, f"trace store {self.root}: {key!r}")
            actual = sha256(tmp)
            if actual != stored:
                raise ReproError(f"trace store {self.root}: checksum mismatch for {key!r} "
                                 f"(expected sha256 {stored}, got {actual})")
            _check_expected(self.root, key, actual, expected_sha256)
        return {"key": key, "sha256": actual}

    def list(self, prefix=""):
        return sorted(
            str(p.relative_to(self.root)) for p in self.root.rglob("*")
            if p.is_file() and not p.name.endswith(".sha256") and str(p.relative_to(self.root)).startswith(prefix)
        )


def _copy_bounded(source, target, limit, label):
    """Copy the regular file `source` to `target`, at most `limit` bytes of it (None: all of it);
    ReproError naming `label` where it is no regular file or holds more."""
    with open_regular(source, label, "a stored trace") as src, open(target, "wb") as out:
        if limit is None:
            shutil.copyfileobj(src, out, 1 << 20)
            return
        copied = copy_limited(src, out, limit + 1)
    if copied > limit:
        raise ReproError(f"{label}: larger than the {limit} bytes its upload recorded; expected the trace "
                         "that was uploaded")
    if copied < limit:  # as a gs:// store compares them: the receipt or the object changed since
        raise ReproError(f"{label} changed since upload (uploaded {limit} bytes, stored {copied})")


# Cloud Storage's rule for bucket names (its documentation's "Bucket naming requirements"): refused here,
# an empty or malformed one went on to a credentials lookup and its retries
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


class GCSStore:
    """Objects under gs://bucket/prefix. Downloads are checked against the object's CRC32C by
    google-cloud-storage; transient errors (429, 5xx, timeouts) are retried with backoff. The
    project and credentials come from the usual Google environment (application default
    credentials, GOOGLE_CLOUD_PROJECT); STORAGE_EMULATOR_HOST points the client at an emulator."""

    def __init__(self, url, client=None, retry_deadline_s=60.0, what="trace store"):
        bucket, _, prefix = url[5:].partition("/")
        if not url.startswith("gs://") or not BUCKET_NAME.fullmatch(bucket):
            raise ReproError(f"{what} {url!r}: expected gs://bucket[/prefix], the bucket's name 3 to 222 lowercase "
                             "letters, digits, dots, dashes and underscores")
        try:  # a receipt or flag naming gs:// on an install without the extra (config check names it earlier)
            from google.auth.exceptions import DefaultCredentialsError
            from google.cloud.storage.retry import DEFAULT_RETRY
        except ImportError:
            raise ReproError(f"{what} {url}: needs the 'gcs' extra (pip install -e '.[gcs]')") from None
        self.url, self.prefix, self.what = url, prefix.strip("/"), what  # what it is to the user: named in errors
        self.root = url
        named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        try:
            self.client = client or _gcs_client()
        except DefaultCredentialsError as exc:
            if named:  # google-auth's reason: the file is missing, or not credentials it can load
                reason = " ".join(str(exc).split())[:300]
                raise ReproError(f"{what} {url}: GOOGLE_APPLICATION_CREDENTIALS {named}: not credentials Google's "
                                 f"libraries can load ({reason}); expected a service account or user credentials "
                                 "JSON file") from None
            raise ReproError(f"{what} {url}: no Google credentials found; set them up with `gcloud auth "
                             "application-default login` or GOOGLE_APPLICATION_CREDENTIALS, or name a local "
                             "directory") from None
        except OSError as exc:  # google-cloud's "Project was not passed and could not be determined ..."
            if "Project was not passed" not in str(exc):
                raise
            source = f"the credentials (GOOGLE_APPLICATION_CREDENTIALS {named})" if named else "the credentials"
            raise ReproError(f"{what} {url}: no Google Cloud project: GOOGLE_CLOUD_PROJECT is not set and {source} "
                             "name none, or could not be read; set GOOGLE_CLOUD_PROJECT to the project the bucket is "
                             "billed to, or check the credentials") from None
        self.bucket = self.client.bucket(bucket)
        self.retry = DEFAULT_RETRY.with_delay(initial=0.2, maximum=5.0).with_timeout(retry_deadline_s)

    def _name(self, key):
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextlib.contextmanager
    def _credentials_named(self):
        """Google's credentials failing at a request (a token that cannot be refreshed, a malformed
        external account) named in one line, not a traceback."""
        from google.auth.exceptions import GoogleAuthError

        try:
            yield
        except GoogleAuthError as exc:
            reason = " ".join(str(exc).split())[:300]
            raise ReproError(f"{self.what} {self.url}: Google's credentials failed ({type(exc).__name__}: "
                             f"{reason}); check GOOGLE_APPLICATION_CREDENTIALS or gcloud's application default "
                             "credentials") from None

    def put(self, path, key):
        from google.api_core import exceptions

        blob = self.bucket.blob(self._name(key))
        with self._credentials_named():
            try:
                blob.upload_from_filename(str(path), retry=self.retry, checksum="crc32c")
            except exceptions.GoogleAPIError as exc:
                raise ReproError(f"{self.what} {self.url}: upload of {key!r} failed: {exc}") from None
        return {"key": key, "sha256": sha256(path), "bytes": os.path.getsize(path), "crc32c": blob.crc32c}

    def get(self, key, destination, expected_sha256=None, expected_bytes=None, check_size=None):
        """As LocalStore.get; the download is checked against the object's CRC32C. An object whose size
        is not the `expected_bytes` its upload recorded, or that `check_size(label, size)` refuses, is
        refused before it is downloaded, and the download is of the generation whose size was read."""
        from google.api_core import exceptions
        from google.resumable_media.common import DataCorruption

        with atomic_path(destination) as tmp, self._credentials_named():
            try:
                blob = self.bucket.get_blob(self._name(key), retry=self.retry)
                if blob is None:
                    raise exceptions.NotFound(key)
                if expected_bytes is not None and blob.size != expected_bytes:
                    raise ReproError(f"{self.what} {self.url}: {key!r} changed since upload (uploaded {expected_bytes} "
                                     f"bytes, stored {blob.size})")
                if check_size is not None:
                    check_size(f"{self.url}/{key}", blob.size)
                blob.download_to_filename(str(tmp), retry=self.retry, checksum="crc32c",
                                          if_generation_match=blob.generation)
            except exceptions.NotFound:
                raise ReproError(f"{self.what} {self.url}: no object {key!r}") from None
            except DataCorruption as exc:
                raise ReproError(f"{self.what} {self.url}: checksum mismatch for {key!r} ({exc})") from None
            except exceptions.GoogleAPIError as exc:
                raise ReproError(f"{self.what} {self.url}: download of {key!r} failed: {exc}") from None
            digest = sha256(tmp)
            _check_expected(self.url, key, digest, expected_sha256)
        return {"key": key, "sha256": digest}

    def list(self, prefix=""):
        start = len(self.prefix) + 1 if self.prefix else 0
        with self._credentials_named():
            blobs = self.client.list_blobs(self.bucket, prefix=self._name(prefix), retry=self.retry)
            return sorted(blob.name[start:] for blob in blobs)


def check_key(key):
    """An object key: a relative path of plain names, since a key like `../x` would name a file outside the store."""
    parts = key.split("/")
    if not key or "\x00" in key or "\\" in key or any(part in ("", ".", "..") for part in parts):
        raise ReproError(f"trace store key {key!r}: expected a relative path of plain names (no '..', '.', "
                         "empty parts, backslash or NUL)")
    return key


def _check_expected(store, key, actual, expected):
    """Refuse an object whose content is not what was uploaded (before it lands under its name)."""
    if expected is not None and actual != expected:
        raise ReproError(f"trace store {store}: {key!r} changed since upload (uploaded sha256 {expected}, "
                         f"stored {actual})")


CREDENTIALS_LIMIT = 1 << 20  # a key file or a subject token is a few KiB
_CREDENTIAL_FILE_KEYS = ("file", "trust_chain_path", "certificate_config_location")  # in credential_source


def check_credentials_file(environ=os.environ):
    """ReproError naming the credentials file Google's client libraries would read
    (GOOGLE_APPLICATION_CREDENTIALS, else gcloud's application default credentials) where it, or a
    file its credential_source names (an external account's subject token, a certificate), is not a
    regular file of at most CREDENTIALS_LIMIT bytes, or it is not JSON. The libraries read these whole:
    they wait forever on a FIFO, fill memory from /dev/zero or a sparse file, and a deeply nested file
    ends in a RecursionError. A missing file is left to them (GCSStore names it with their reason)."""
    path = environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        label = f"GOOGLE_APPLICATION_CREDENTIALS {path}"
    else:  # where google.auth looks next (google/auth/_cloud_sdk.py), read only when it is a file
        config = (environ["CLOUDSDK_CONFIG"] if "CLOUDSDK_CONFIG" in environ
                  else os.path.join(os.path.expanduser("~"), ".config", "gcloud"))
        path = os.path.join(config, "application_default_credentials.json")
        if not os.path.isfile(path):
            return
        label = f"{path} (gcloud's application default credentials)"
    check_regular(path, label, "a service account or user credentials JSON file")
    if not os.path.exists(path):
        return
    info = read_json(path, "a service account or user credentials JSON file", label, CREDENTIALS_LIMIT)
    pending = [info]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in _CREDENTIAL_FILE_KEYS and isinstance(value, str) and os.path.exists(value):
                    try:
                        read_bounded(value, f"{label}: {key} {value}", "a credential file of a few KiB",
                                     CREDENTIALS_LIMIT)
                    except OSError as exc:
                        raise ReproError(f"{label}: {key} {value}: cannot read ({exc.strerror})") from None
                else:
                    pending.append(value)
    _check_loadable(info, label)


_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


# the parts of a credentials file, by its type, that google-auth reads as an object or a string without
# checking (anything else ended in its AttributeError): (its key, or a key and one below it; type; what it is;
# required)
_CREDENTIAL_PARTS = {
    "impersonated_service_account": ((("source_credentials",), dict, "the credentials that impersonate", True),
                                     (("service_account_impersonation_url",), str, "the URL that makes its tokens",
                                      True)),
    "external_account": ((("credential_source",), dict, "where the subject token comes from", False),
                         (("credential_source", "format"), dict, "how the subject token is read", False)),
}


def _check_loadable(info, label):
    """ReproError naming the credentials file where Google's libraries would fail on its shape with an
    exception of their own (a list, a string or null where they expect an object: AttributeError,
    TypeError), not the DefaultCredentialsError that names the file and that callers report."""
    if not isinstance(info, dict):
        raise ReproError(f"{label}: expected a JSON object (a service account or user credentials JSON file), "
                         f"got {_JSON_TYPES.get(type(info), type(info).__name__)}")
    kind = info.get("type")
    for keys, expected, what, required in _CREDENTIAL_PARTS.get(kind if isinstance(kind, str) else None, ()):
        parent = info.get(keys[0]) if len(keys) > 1 else info  # a part of the file, or of its top-level object
        if not isinstance(parent, dict) or (keys[-1] not in parent and not required):
            continue
        value = parent.get(keys[-1])
        if not isinstance(value, expected):
            got = "nothing" if keys[-1] not in parent else _JSON_TYPES.get(type(value), type(value).__name__)
            raise ReproError(f"{label}: {kind}: {'.'.join(keys)}: expected "
                             f"{'a JSON object' if expected is dict else 'a string'} ({what}), got {got}")
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.load_credentials_from_dict(info)
    except DefaultCredentialsError:
        pass  # named with the file when the library loads it
    except Exception as exc:  # noqa: BLE001 - any other failure of the library is this file's shape
        raise ReproError(f"{label}: not a credentials file Google's libraries can load "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _gcs_client():
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "emulated"),
                              credentials=AnonymousCredentials())
    check_credentials_file()
    return storage.Client()


CONTENT_KEY_DIGITS = 16  # of the sha256 in a trace's key: 64 bits tell a store's traces apart


def open_store(location):
    """The trace store at `location`: gs://bucket/prefix or a local directory."""
    location = str(location)
    return GCSStore(location) if location.startswith("gs://") else LocalStore(location)


def upload_traces(store, trace_paths, prefix, receipt):
    """Put each trace under `prefix/<sha256 prefix>/<file name>`; write a receipt listing keys and
    checksums. Keyed by content: two clones (or runs) sharing a store never replace each other's
    objects, and the same trace uploaded again is the same object."""
    entries = [store.put(path, f"{prefix}/{sha256(path)[:CONTENT_KEY_DIGITS]}/{Path(path).name}")
               for path in trace_paths]
    write_json(receipt, {"store": str(store.root), "objects": entries})
    return entries


def read_receipt(receipt):
    """The upload receipt's store and objects; ReproError naming the file where it is not one."""
    data = read_json(receipt, "a run's upload receipt, upload.json")
    if (not isinstance(data, dict) or not isinstance(data.get("store"), str) or not isinstance(data.get("objects"), list)
            or not all(isinstance(e, dict) and isinstance(e.get("key"), str) and isinstance(e.get("sha256"), str)
                       for e in data["objects"])):
        raise ReproError(f"{receipt}: not an upload receipt (expected 'store' and 'objects' with each object's key "
                         "and sha256, as a run writes upload.json)")
    if not data["objects"]:  # a run uploads its trace: a receipt of none fetched nothing, and said nothing
        raise ReproError(f"{receipt}: lists no objects; expected the traces a run uploaded")
    if not data["store"] or "\0" in data["store"]:
        raise ReproError(f"{receipt}: store: expected the directory or gs://bucket/prefix the run uploaded to, "
                         f"got {data['store'][:80]!r}")
    for entry in data["objects"]:
        try:
            check_key(entry["key"])
        except ReproError as exc:
            raise ReproError(f"{receipt}: {exc}") from None
        size = entry.get("bytes")
        if size is not None and (type(size) is not int or size < 0):
            raise ReproError(f"{receipt}: object {entry['key']!r}: bytes: expected the object's size (a whole number "
                             f"of bytes), got {size!r:.40}")
    return data["store"], data["objects"]


def is_receipt(path):
    """Whether `path` holds an upload receipt (what upload_traces writes)."""
    try:
        read_receipt(path)
    except ReproError:
        return False
    return True


def download_traces(store, receipt, destination_dir):
    """Fetch every object a receipt lists into destination_dir, verifying checksums. `store` None:
    the store the receipt records, where the run uploaded them."""
    recorded, objects = read_receipt(receipt)
    where = ("the store the run uploaded to; run it again to upload anew: snakemake --forcerun run" if store is None
             else f"the store --store names; the run uploaded to {recorded}")
    store = open_store(recorded) if store is None else store
    targets = {}
    for entry in objects:  # a trace fetched over the receipt would destroy the list it came from
        target = Path(destination_dir) / Path(entry["key"]).name
        refuse_overwriting([("-o/--output-dir", target)], [receipt])
        if target in targets:  # the second would replace the first, both reported verified
            raise ReproError(f"{receipt}: objects {targets[target]!r} and {entry['key']!r} both go to {target}; "
                             "expected keys with distinct file names")
        targets[target] = entry["key"]
        if target.is_file() and not target.is_symlink() and sha256(target) != entry["sha256"]:
            raise ReproError(f"-o/--output-dir: {target} holds a file that is not {entry['key']!r} (its sha256 differs); "
                             "expected a new path, or the same trace fetched again")
    blocker = not_a_directory(destination_dir)  # named apart: the fetch's errors are the store's
    if blocker is not None:
        raise ReproError(f"-o/--output-dir {destination_dir}: cannot write: {blocker} is not a directory")
    made = _new_directories(destination_dir)
    new = [target for target in targets if not target.exists()]
    fetched = []
    try:
        for entry in objects:
            try:
                fetched.append(store.get(entry["key"], Path(destination_dir) / Path(entry["key"]).name,
                                         entry["sha256"], entry.get("bytes")))
            except OutputError:  # the destination's fault (a full disk): the store is not to blame
                raise
            except ReproError as exc:
                raise ReproError(f"{receipt}: {exc} ({where})") from None
    except BaseException:  # a download cut short is no download: what it fetched and made goes
        for path in new:
            with contextlib.suppress(OSError):
                path.unlink()
        for directory in made:
            with contextlib.suppress(OSError):  # left where something else was put in it meanwhile
                directory.rmdir()
        raise
    return fetched


def _new_directories(path):
    """The directories of `path` (itself included) that do not exist yet, deepest first."""
    missing = []
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing
