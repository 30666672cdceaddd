"""Trace stores: a local directory, and GCS against a real emulator (gcp-storage-emulator) on loopback."""

import http.client
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from repro.errors import ReproError
from repro.fsutil import sha256_file
from repro.tracestore import GCSStore, LocalStore, download_traces, open_store, upload_traces


@pytest.fixture
def gcs(emulator, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "repro-test")
    from repro.tracestore import _gcs_client

    client = _gcs_client()
    bucket = f"b{time.monotonic_ns()}"
    client.create_bucket(bucket)
    return client, bucket


def trace_files(tmp_path, count=2):
    paths = []
    for i in range(count):
        path = tmp_path / f"t{i}.json"
        path.write_text(json.dumps({"traceEvents": [{"ph": "i", "ts": i, "name": "x"}]}))
        paths.append(path)
    return paths


@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_upload_download_list_round_trip(tmp_path, request, kind):
    if kind == "gcs":
        _, bucket = request.getfixturevalue("gcs")
        store = open_store(f"gs://{bucket}/runs")
        assert isinstance(store, GCSStore)
    else:
        store = open_store(tmp_path / "store")
        assert isinstance(store, LocalStore)
    paths = trace_files(tmp_path)
    entries = upload_traces(store, paths, "traces/exp/mode", tmp_path / "receipt.json")
    keys = [f"traces/exp/mode/{sha256_file(path)[:16]}/{path.name}" for path in paths]
    assert [e["key"] for e in entries] == keys
    assert store.list("traces/exp/") == keys
    fetched = download_traces(store, tmp_path / "receipt.json", tmp_path / "down")
    assert len(fetched) == 2
    assert (tmp_path / "down" / "t1.json").read_bytes() == paths[1].read_bytes()
    with pytest.raises(ReproError, match="no object"):
        store.get("traces/none.json", tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists()


@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_a_changed_object_is_detected(tmp_path, request, kind):
    paths = trace_files(tmp_path, 1)
    if kind == "gcs":
        client, bucket = request.getfixturevalue("gcs")
        store = GCSStore(f"gs://{bucket}")
        [entry] = upload_traces(store, paths, "traces/e/m", tmp_path / "receipt.json")
        client.bucket(bucket).blob(entry["key"]).upload_from_string(b'{"traceEvents": []}')
    else:
        store = LocalStore(tmp_path / "store")
        [entry] = upload_traces(store, paths, "traces/e/m", tmp_path / "receipt.json")
        (tmp_path / "store" / entry["key"]).write_text('{"traceEvents": []}')
    with pytest.raises(ReproError, match="changed since upload|checksum mismatch"):
        download_traces(store, tmp_path / "receipt.json", tmp_path / "down")
    assert not (tmp_path / "down" / "t0.json").exists()


def test_an_object_larger_than_its_upload_is_not_downloaded(tmp_path, gcs, monkeypatch):
    """An object in the bucket replaced by a larger one (here 8 MiB): refused from its size before any of
    it is downloaded; it was downloaded whole, then refused by its checksum."""
    from google.cloud.storage import Blob

    client, bucket = gcs
    paths = trace_files(tmp_path, 1)
    store = GCSStore(f"gs://{bucket}")
    [entry] = upload_traces(store, paths, "traces/e/m", tmp_path / "receipt.json")
    client.bucket(bucket).blob(entry["key"]).upload_from_string(b" " * (8 << 20))
    downloads = []
    monkeypatch.setattr(Blob, "download_to_filename", lambda blob, *a, **k: downloads.append(blob.name))
    with pytest.raises(ReproError, match=rf"'{entry['key']}' changed since upload \(uploaded "
                                         rf"{paths[0].stat().st_size} bytes, stored {8 << 20}\)"):
        download_traces(store, tmp_path / "receipt.json", tmp_path / "down")
    assert downloads == [] and not (tmp_path / "down" / "t0.json").exists()


def test_download_reads_from_the_store_the_receipt_names(tmp_path, monkeypatch, capsys):
    """A run's traces are where it uploaded them: after trace_store changes, its receipt still
    names that store, and the download reads from there, not from the store configured now."""
    from repro.cli import main

    monkeypatch.chdir(tmp_path)
    paths = trace_files(tmp_path)
    first = upload_traces(open_store("old"), paths, "traces/e/m", tmp_path / "receipt.json")[0]["key"]
    (tmp_path / "new").mkdir()  # the store configured now: empty
    assert main(["trace", "download", "receipt.json", "-o", "down"]) == 0
    assert (tmp_path / "down" / "t1.json").read_bytes() == paths[1].read_bytes()
    # the receipt's store gone: the error names the receipt and the store it records
    (tmp_path / "old" / first).unlink()
    assert main(["trace", "download", "receipt.json", "-o", "down2"]) == 1
    err = capsys.readouterr().err
    assert "receipt.json" in err and "trace store old" in err and f"no object {first!r}" in err
    assert not (tmp_path / "down2").exists() or not list((tmp_path / "down2").iterdir())
    # a receipt that names no store
    (tmp_path / "bare.json").write_text(json.dumps({"objects": []}))
    assert main(["trace", "download", "bare.json", "-o", "down3"]) == 1
    assert "bare.json: not an upload receipt (expected 'store'" in capsys.readouterr().err


class _FlakyProxy(BaseHTTPRequestHandler):
    """Forwards to the emulator, but answers the first `failures` uploads with 503."""

    failures = 0
    seen_503 = 0
    target = None

    def _forward(self):
        if self.command == "POST" and "/upload/" in self.path and _FlakyProxy.failures > 0:
            _FlakyProxy.failures -= 1
            _FlakyProxy.seen_503 += 1
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))) if self.headers.get("Content-Length") else None
        conn = http.client.HTTPConnection(*self.target)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn.request(self.command, self.path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def log_message(self, *args):
        pass


def test_a_transient_failure_is_retried(tmp_path, gcs, emulator, monkeypatch):
    _, bucket = gcs
    host, port = emulator.removeprefix("http://").split(":")
    _FlakyProxy.target, _FlakyProxy.failures, _FlakyProxy.seen_503 = (host, int(port)), 1, 0
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyProxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{proxy.server_address[1]}")
        store = GCSStore(f"gs://{bucket}")
        entry = store.put(trace_files(tmp_path, 1)[0], "traces/retry.json")
        assert _FlakyProxy.seen_503 == 1 and entry["key"] == "traces/retry.json"
        assert store.list("traces/") == ["traces/retry.json"]
    finally:
        proxy.shutdown()


def test_an_upload_writes_no_file_outside_the_store_through_a_symlinked_checksum(tmp_path):
    """A `<key>.sha256` sidecar in the store that is a symlink: the user's file it named was overwritten
    with the checksum. It is refused naming it, and the file is kept."""
    (trace,) = trace_files(tmp_path, 1)
    users = tmp_path / "users.txt"
    users.write_text("the user's\n")
    store = tmp_path / "store"
    (store / "traces").mkdir(parents=True)
    (store / "traces" / "t0.json.sha256").symlink_to(users)
    with pytest.raises(ReproError, match=r"t0\.json\.sha256: is a symbolic link"):
        LocalStore(store).put(trace, "traces/t0.json")
    assert users.read_text() == "the user's\n"


def test_bad_store_urls_are_refused():
    with pytest.raises(ReproError, match="expected gs://bucket"):
        GCSStore("gs://", client=object())


def test_models_fetched_from_a_gcs_asset_store_are_verified(tmp_path, gcs):
    from repro.tracestore import GCSStore
    from repro.trims.experiments import fetch_model, publish_model
    from repro.trims.models import generate, load_manifest

    client, bucket = gcs
    generate("squeezenet_1.1", tmp_path / "made" / "squeezenet_1.1", seed=2)
    publish_model(tmp_path / "made" / "squeezenet_1.1", GCSStore(f"gs://{bucket}/models"))
    fetch_model(f"gs://{bucket}/models", "squeezenet_1.1", tmp_path / "base")
    assert load_manifest(tmp_path / "base" / "squeezenet_1.1", verify=True)["model"] == "squeezenet_1.1"
    params_bytes = load_manifest(tmp_path / "base" / "squeezenet_1.1")["params_bytes"]
    client.bucket(bucket).blob("models/squeezenet_1.1/model.params").upload_from_string(b"corrupt")
    with pytest.raises(ReproError, match=rf"model.params: 7 bytes; expected the {params_bytes} bytes of weights"):
        fetch_model(f"gs://{bucket}/models", "squeezenet_1.1", tmp_path / "again")
    assert not (tmp_path / "again" / "squeezenet_1.1" / "manifest.json").exists()
    client.bucket(bucket).blob("models/squeezenet_1.1/model.params").upload_from_string(b"x" * params_bytes)
    with pytest.raises(ReproError, match="changed since upload"):
        fetch_model(f"gs://{bucket}/models", "squeezenet_1.1", tmp_path / "again")
    assert not (tmp_path / "again" / "squeezenet_1.1" / "manifest.json").exists()


@pytest.mark.parametrize("name, limit", [("manifest.json", "larger than 16 MiB; not a model manifest"),
                                         ("model.params", "bytes; expected the"),
                                         ("model.onnx", "larger than 64 MiB; expected the model's model.onnx")])
def test_a_model_file_larger_than_the_manifest_allows_is_not_downloaded(tmp_path, gcs, monkeypatch, name, limit):
    """A model in the GCS asset store whose manifest, weights or graph was replaced by 64 MiB: refused
    from its size before it is downloaded; it was downloaded whole (a sparse file of terabytes in a
    bucket: the disk filled) before its checksum was found wrong."""
    from google.cloud.storage import Blob

    from repro.tracestore import GCSStore
    from repro.trims.experiments import fetch_model, publish_model
    from repro.trims.models import generate

    client, bucket = gcs
    generate("squeezenet_1.1", tmp_path / "made" / "squeezenet_1.1", seed=2)
    publish_model(tmp_path / "made" / "squeezenet_1.1", GCSStore(f"gs://{bucket}/models"))
    client.bucket(bucket).blob(f"models/squeezenet_1.1/{name}").upload_from_string(b" " * ((64 << 20) + 1))
    downloaded = []
    real = Blob.download_to_filename
    monkeypatch.setattr(Blob, "download_to_filename",
                        lambda blob, *a, **k: (downloaded.append(blob.name), real(blob, *a, **k))[1])
    with pytest.raises(ReproError, match=rf"models/squeezenet_1.1/{name}: .*{limit}"):
        fetch_model(f"gs://{bucket}/models", "squeezenet_1.1", tmp_path / "base")
    assert f"models/squeezenet_1.1/{name}" not in downloaded
    assert not (tmp_path / "base" / "squeezenet_1.1").exists()


@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_two_clones_sharing_a_store_keep_their_own_traces(tmp_path, request, kind):
    """Two clones whose trace_store is one directory (or bucket) upload the same experiment and
    mode: the second replaced the first's object, whose download then failed its checksum."""
    location = f"gs://{request.getfixturevalue('gcs')[1]}/shared" if kind == "gcs" else tmp_path / "store"
    for clone in ("a", "b"):
        trace = tmp_path / clone / "E-m.json"
        trace.parent.mkdir()
        trace.write_text(json.dumps({"traceEvents": [{"ph": "i", "ts": 0, "name": clone}]}))
        upload_traces(open_store(location), [trace], "traces/E/m", tmp_path / clone / "upload.json")
    for clone in ("a", "b"):
        download_traces(None, tmp_path / clone / "upload.json", tmp_path / clone / "down")
        assert (tmp_path / clone / "down" / "E-m.json").read_bytes() == (tmp_path / clone / "E-m.json").read_bytes()


@pytest.mark.fault
def test_a_receipt_of_no_objects_or_of_another_size_is_refused(tmp_path, monkeypatch, capsys):
    """`repro trace download R` where R lists no objects (exit 0, nothing fetched, nothing said), or
    records a size other than the stored object's while its checksum matches (fetched, exit 0; a
    gs:// store refuses it)."""
    from repro.cli import main

    monkeypatch.chdir(tmp_path)
    [entry] = upload_traces(open_store("store"), trace_files(tmp_path, 1), "traces/e/m", tmp_path / "receipt.json")
    (tmp_path / "empty.json").write_text(json.dumps({"store": "store", "objects": []}))
    (tmp_path / "resized.json").write_text(json.dumps({"store": "store", "objects": [{**entry, "bytes": 10**12}]}))
    assert main(["trace", "download", "empty.json", "-o", "down"]) == 1
    assert capsys.readouterr().err == "repro: error: empty.json: lists no objects; expected the traces a run uploaded\n"
    assert main(["trace", "download", "resized.json", "-o", "down"]) == 1
    assert f"changed since upload (uploaded {10**12} bytes, stored {entry['bytes']})" in capsys.readouterr().err
    assert not (tmp_path / "down" / "t0.json").exists()
    assert main(["trace", "download", "receipt.json", "-o", "down"]) == 0


def test_an_object_missing_from_the_store_named_is_said_to_be_missing_there(tmp_path):
    """`trace download --store OTHER`: the object missing from OTHER was said to be missing from "the
    store the run uploaded to", which is another one."""
    paths = trace_files(tmp_path, 1)
    upload_traces(open_store(tmp_path / "store"), paths, "traces/e/m", tmp_path / "receipt.json")
    (tmp_path / "other").mkdir()
    with pytest.raises(ReproError, match=re.escape(f"(the store --store names; the run uploaded to {tmp_path / 'store'})")):
        download_traces(open_store(tmp_path / "other"), tmp_path / "receipt.json", tmp_path / "down")
    (tmp_path / "store" / "traces").rename(tmp_path / "gone")
    with pytest.raises(ReproError, match=re.escape("(the store the run uploaded to; run it again to upload anew: "
                                                   "snakemake --forcerun run)")):
        download_traces(None, tmp_path / "receipt.json", tmp_path / "down")
