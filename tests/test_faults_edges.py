"""Fault injection at the edges of single commands: an input that leaves a command nothing to do, a path of
the wrong kind where a socket is read, a bad flag named whatever else is wrong, and a config whose model
directory holds a file of the workflow's own.

Each ends as test_faults_input's rows do: exit code 1, one line on stderr naming the flag, file or key and
what was expected, no traceback, and nothing written.
"""

import importlib.util
import json
import os
import socket

import pytest
from support import run_forked, run_repro, snapshot

from repro.errors import ReproError


pytestmark = pytest.mark.fault


def _trace(path):
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    return path


def test_combining_one_trace_but_its_first_is_refused(tmp_path, monkeypatch, capsys):
    """`repro trace combine --skip-first t.json -o c.json`: the only input skipped, an empty combined trace
    was written, '0 events from 0 traces', exit 0."""
    monkeypatch.chdir(tmp_path)
    _trace(tmp_path / "t.json")
    code, out, err = run_repro(["trace", "combine", "--skip-first", "t.json", "-o", "c.json"], capsys)
    assert (code, out) == (1, "")
    assert err == "repro: error: --skip-first: expected at least two traces, got 1 (t.json)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_memory_on_a_path_that_is_no_socket_is_refused(tmp_path, monkeypatch, capsys):
    """`repro trims memory --socket notes.txt MODEL`: the file answered nothing, and the report said that
    no store held the model, as if no store ran, exit 0."""
    monkeypatch.chdir(tmp_path)
    assert run_repro(["trims", "models", "squeezenet_1.1", "--base-path", "models"], capsys)[0] == 0
    (tmp_path / "notes.txt").write_text("mine\n")
    code, out, err = run_repro(["trims", "memory", "--base-path", "models", "--socket", "notes.txt", "squeezenet_1.1"],
                               capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: --socket notes.txt: is not a socket; expected a model store's socket, or no file "
                   "when no store runs\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("argv, error", [
    (["repro", "trims", "client", "run", "--profile-output", "../out"], "repro: error: --profile-output"),
    (["trims-tools", "client", "run", "--profile_output=../out"], "trims-tools: error: --profile_output"),
], ids=["repro", "trims-tools"])
def test_a_bad_profile_output_is_named_before_the_store_is_asked(argv, error, tmp_path, monkeypatch, capsys):
    """A shared run with `--profile-output ../out` and no model store running: the error was that no store
    answered, and the bad flag was named only once a store ran."""
    from repro.trims.originals import main as tools_main

    monkeypatch.chdir(tmp_path)
    assert run_repro(["trims", "models", "squeezenet_1.1", "--base-path", "models"], capsys)[0] == 0
    (tmp_path / "tools.yml").write_text(f"micro18:\n  base_path: models\n  profile_output_directory: profiles\n"
                                        f"  server_socket: {tmp_path / 'none.sock'}\n")
    before = snapshot(tmp_path)
    main = tools_main if argv[0] == "trims-tools" else None
    code, out, err = run_repro([*argv[1:], "--config", "tools.yml", "--iterations", "1"], capsys, main=main)
    assert (code, out) == (1, "")
    assert err == (f"{error} '../out': expected a relative name (no '..') for a directory under "
                   f"profiles/{socket.gethostname()}\n")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("base_path", ["results/cluster/local", "results", "."])
def test_a_model_directory_that_holds_the_store_state_is_refused(base_path, tmp_path, capsys):
    """trims.base_path: results/cluster/local (or a directory above it): the check passed it, and the TrIMS
    runs failed at the model store's start, which refuses to write its state among the models it reads."""
    config = tmp_path / "my.yaml"
    config.write_text(f"trims:\n  base_path: {base_path}\n")
    code, out, err = run_repro(["config", "check", config], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: config/config.yaml + {config}: trims.base_path: {base_path!r} holds "
                   "results/cluster/local/trims-store.json, the model store's state file; expected a directory of "
                   "models only, such as results/trims/models\n")


@pytest.mark.parametrize("key, value, said", [
    ("trace_store", "/dev/null", "'/dev/null' is not a directory"),
    ("trims.base_path", "{file}/models", "'{file}/models' lies under '{file}', which is not a directory"),
    ("trims.asset_store", "{file}", "'{file}' is not a directory"),
])
def test_a_directory_key_naming_something_else_is_refused(key, value, said, tmp_path, capsys):
    """trace_store: /dev/null, or trims.base_path under a file: the check passed it, and the step that first
    wrote there failed (the run's upload, the models' generation), after the steps before it had run."""
    users = tmp_path / "notes.txt"
    users.write_text("the user's\n")
    value, said = value.format(file=users), said.format(file=users)
    section, _, name = key.rpartition(".")
    config = tmp_path / "my.yaml"
    config.write_text(f"{section}:\n  {name}: {value}\n" if section else f"{name}: {value}\n")
    code, out, err = run_repro(["config", "check", config], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: config/config.yaml + {config}: {key}: {said}; expected a directory, or a path "
                   "where one can be made\n")
    assert users.read_text() == "the user's\n"


def _external_account(subject_token_file):
    """An external account (workload identity federation) credential whose subject token is a file."""
    return json.dumps({"type": "external_account", "audience": "//iam.googleapis.com/projects/1/locations/global",
                       "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                       "token_url": "https://sts.googleapis.com/v1/token",
                       "credential_source": {"file": str(subject_token_file)}})


def _credentials(kind, directory):
    """(credentials file, what the one line says after its name) for a hostile `kind`."""
    key = directory / "key.json"
    if kind == "deep":
        key.write_text("[" * 100_000 + "]" * 100_000)
        return key, ": nested too deeply (expected a service account or user credentials JSON file)"
    if kind == "sparse":
        with open(key, "wb") as fh:
            fh.truncate(2 << 30)
        return key, ": larger than 1 MiB; expected a service account or user credentials JSON file"
    token = {"token-zero": "/dev/zero", "token-fifo": directory / "token"}[kind]
    if kind == "token-fifo":
        os.mkfifo(token)
    key.write_text(_external_account(token))
    what = {"token-zero": "a character device", "token-fifo": "a FIFO"}[kind]
    return key, f": file {token}: is {what}; expected a regular file (a credential file of a few KiB)"


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
@pytest.mark.parametrize("kind", ["deep", "sparse", "token-zero", "token-fifo"])
def test_credential_files_google_reads_whole_are_bounded_and_named(kind, tmp_path):
    """GOOGLE_APPLICATION_CREDENTIALS, or gcloud's application default credentials, that nests too deeply
    (a RecursionError traceback), is a 2 GiB sparse file (read whole: 4 GiB of memory), or names a subject
    token file that is /dev/zero or a FIFO (memory filled, or a wait forever, at the first request):
    `repro trace download` and `repro doctor` name it in one line, reading at most 1 MiB of it."""
    # Loaded here, before the children's address space is bounded: mapping the libraries is not the read measured.
    importlib.import_module("google.cloud.storage")
    importlib.import_module("google.auth.identity_pool")
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text("default-storage-provider: gcs\n")
    (tmp_path / "upload.json").write_text('{"store": "gs://bucket/x", "objects": [{"key": "a/t.json", "sha256": "0"}]}')
    key, said = _credentials(kind, tmp_path)
    named = f"GOOGLE_APPLICATION_CREDENTIALS {key}{said}"
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(key), "STORAGE_EMULATOR_HOST": ""}
    code, out, err = run_forked(["trace", "download", "upload.json", "-o", "traces"], tmp_path, timeout=60, env=env,
                                growth=256 << 20)
    assert (code, out, err) == (1, "", f"repro: error: {named}\n")
    code, out, err = run_forked(["doctor", "--profile", "profile"], tmp_path, timeout=60, env=env, growth=256 << 20)
    assert (code, out, err) == (1, "", f"repro: error: profile/config.yaml: {named}\n")
    (tmp_path / "gcloud").mkdir()
    adc = key.rename(tmp_path / "gcloud" / "application_default_credentials.json")
    env = {"GOOGLE_APPLICATION_CREDENTIALS": "", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "STORAGE_EMULATOR_HOST": ""}
    code, out, err = run_forked(["trace", "download", "upload.json", "-o", "traces"], tmp_path, timeout=60, env=env,
                                growth=256 << 20)
    assert (code, out, err) == (1, "", f"repro: error: {adc} (gcloud's application default credentials){said}\n")
    assert not (tmp_path / "traces").exists()


def test_more_requests_at_once_than_the_memory_holds_are_refused_before_any_runs(tmp_path, monkeypatch, capsys):
    """`repro trims client run --original --concurrent 1024`: each request in flight loads its own copy of the
    weights (about 110 MB for resnet50_v1), and each --process-per-request its own interpreter and onnxruntime
    (about 170 MB): the requests ran until the threads or the memory gave out, ending in a traceback."""
    from repro.trims.cli import REQUEST_PROCESS_MB, check_client_memory
    from repro.trims.models import generate

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8000000 kB\nMemAvailable: 1048576 kB\n")  # 1024 MB
    check_client_memory(10, [100 << 20, 50 << 20], own_copies=True, processes=False, meminfo=meminfo)
    check_client_memory(1000, [100 << 20], own_copies=False, processes=False, meminfo=meminfo)  # shared weights
    with pytest.raises(ReproError, match=r"^--concurrent 11: 11 requests at once need about 1100 MB \(100 MB each: its "
                                         r"own copy of the weights\); 1024 MB available \(MemAvailable\); expected at "
                                         r"most 10$"):
        check_client_memory(11, [100 << 20, 50 << 20], own_copies=True, processes=False, meminfo=meminfo)
    with pytest.raises(ReproError, match=rf"need about {7 * REQUEST_PROCESS_MB} MB \({REQUEST_PROCESS_MB} MB each: "
                                         r"its own process\)"):
        check_client_memory(7, [100 << 20], own_copies=False, processes=True, meminfo=meminfo)
    monkeypatch.chdir(tmp_path)
    generate("squeezenet_1.1", tmp_path / "models" / "squeezenet_1.1", seed=1)
    code, out, err = run_repro(["trims", "client", "run", "--original", "--process-per-request", "--concurrent", "1024",
                                "--iterations", "1024", "--base-path", "models", "--profile-output", "p"], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("repro: error: --concurrent 1024: 1024 requests at once need about "), err
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("setting, said", [
    ("pecan: {tfdata: {batch_size: 1000000000}}", "pecan.tfdata.batch_size: 1000000000 is greater than the maximum of 256"),
    ("pecan: {tfdata: {images: 1000000000}}", "pecan.tfdata.images: 1000000000 is greater than the maximum of 4096"),
    ("pecan: {tfdata: {decision_steps: 1000000000}}",
     "pecan.tfdata.decision_steps: 1000000000 is greater than the maximum of 10000"),
    ("pecan: {tfdata: {max_windows: 1000000000}}", "pecan.tfdata.max_windows: 1000000000 is greater than the maximum of 2000"),
    ("pecan: {tfdata: {settle_windows: 1000000000}}",
     "pecan.tfdata.settle_windows: 1000000000 is greater than the maximum of 100"),
    ("pecan: {models: {resnet: {steps_per_epoch: 100000}}, modes: {collocated: {steps_per_loop: 1}}}",
     "pecan.experiments.ResNet50_v2-8.modes: mode 'collocated' runs 200000 steps, 200000 log lines "
     "(pecan.modes.collocated.steps_per_loop); expected at most 100000"),
], ids=["batch", "images", "decision-steps", "max-windows", "settle-windows", "log-lines"])
def test_settings_whose_runs_no_machine_holds_are_refused(setting, said, tmp_path, capsys):
    """The tf.data engine's miniature with a batch of 10^9 images (the run hung in TensorFlow, deaf to
    SIGTERM), 10^9 images generated in memory first, 10^9 warm-up batches or windows; a model run of
    10^5-10^6 log lines (1-10 GB of memory): the check passed them all."""
    config = tmp_path / "my.yaml"
    config.write_text(setting + "\n")
    code, out, err = run_repro(["config", "check", config], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"repro: error: config/config.yaml + {config}: {said}"), err


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
def test_credentials_that_fail_at_the_first_request_are_named(tmp_path):
    """An AWS-sourced external account whose region cannot be read (the metadata service answers 404): the
    download ended in google.auth's RefreshError traceback; it is one line naming the store and the credentials."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's name for GET
            self.send_error(404)

        def log_message(self, *args):
            pass

    metadata = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=metadata.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{metadata.server_address[1]}"
    key = tmp_path / "aws.json"
    key.write_text(json.dumps({
        "type": "external_account", "audience": "//iam.googleapis.com/x",
        "subject_token_type": "urn:ietf:params:aws:token-type:aws4_request", "token_url": "https://sts.googleapis.com/v1/token",
        "credential_source": {"environment_id": "aws1", "region_url": f"{url}/region", "url": f"{url}/cred",
                              "regional_cred_verification_url": "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity"}}))
    (tmp_path / "upload.json").write_text('{"store": "gs://bucket/x", "objects": [{"key": "a/t.json", "sha256": "0"}]}')
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(key), "GOOGLE_CLOUD_PROJECT": "p", "STORAGE_EMULATOR_HOST": ""}
    try:
        code, out, err = run_forked(["trace", "download", "upload.json", "-o", "traces"], tmp_path, timeout=60, env=env)
    finally:
        metadata.shutdown()
    assert (code, out) == (1, "")
    assert err.startswith("repro: error: upload.json: trace store gs://bucket/x: Google's credentials failed (RefreshError: "), err
    assert len(err.splitlines()) == 1 and not list(tmp_path.glob("traces/*"))


def _read_small_files(directory):
    """Each bounded reader on a file of a few bytes (an entry point for run_forked, whose parent has
    imported the modules: loading them is not the read measured)."""
    from repro.checkedconfig import _read_kept
    from repro.fsutil import read_json
    from repro.plots import is_figure
    from repro.trims.models import load_manifest_file

    small = directory / "small.json"
    small.write_text("{}")
    read_json(small, "a small file", limit=1 << 30)
    _read_kept(small)
    is_figure(small)
    with pytest.raises(ReproError, match="params_bytes: expected"):  # read, then checked
        load_manifest_file(small)
    return 0


def test_a_bounded_read_takes_memory_for_what_the_file_holds_not_for_its_bound(tmp_path):
    """A read bounded at n bytes took n bytes of memory before it read (read(n) allocates them): each
    JSON input took 256 MiB, a kept config or figure 64 MiB, so a process given 256 MiB more than it
    had ended in a MemoryError on a file of two bytes."""
    for module in ("repro.checkedconfig", "repro.plots", "repro.trims.models"):
        importlib.import_module(module)
    code, out, err = run_forked([], tmp_path, timeout=60, main=lambda argv: _read_small_files(tmp_path),
                                growth=48 << 20)
    assert (code, out, err) == (0, "", "")
