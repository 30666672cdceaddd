"""Fault cases found by the fifth round of adversarial passes over the whole surface."""

import importlib.util
import json
import subprocess
from pathlib import Path

import psutil
import pytest
from test_faults_input import Fault, _write, check_fault

from support import BIN

pytestmark = pytest.mark.fault


def _processes_naming(directory):
    """The running processes whose command line names `directory`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(directory) in " ".join(proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_two_tfdata_starts_at_once_start_the_workers_once(tf, tmp_path):
    """Two `tfdata start --workers 2` at once in one state directory each counted 0 workers and started
    2: four ran, the state recorded two, and `tfdata stop` left the other two running, unrecorded."""
    state = tmp_path / "s"
    starts = [subprocess.Popen([str(BIN / "repro"), "pecan", "tfdata", "start", "--state-dir", str(state), "--workers",
                                "2"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        outcomes = [proc.communicate(timeout=300) for proc in starts]
        assert [proc.returncode for proc in starts] == [0, 0], outcomes
        recorded = json.loads((state / "state.json").read_text())["workers"]
        workers = [proc for proc in _processes_naming(state) if "worker" in proc.info["cmdline"]]
        assert len(recorded) == 2 and sorted(w["pid"] for w in recorded) == sorted(p.pid for p in workers)
    finally:
        stop = subprocess.run([str(BIN / "repro"), "pecan", "tfdata", "stop", "--state-dir", str(state)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        # what no record names is ended here: each names this test's own directory
        left = psutil.wait_procs(_processes_naming(state), timeout=30)[1]
        for proc in left:
            proc.terminate()
        psutil.wait_procs(left, timeout=30)
    assert stop.returncode == 0, stop.stderr
    assert left == []  # nothing of the service was left


def test_make_clean_under_another_runtime_directory_stops_the_model_store(tmp_path, monkeypatch):
    """`make clean` from a shell with another XDG_RUNTIME_DIR (sudo, ssh, cron) than the store's start
    said "no model store of this directory was running", deleted results/ and left the store and its
    watchdog running: it looked for the store's record in its own runtime directory only."""
    from repro.processes import matches
    from repro.trims import service
    from support import path_env
    from test_faults_adversarial14 import store_in_a_clone

    other = tmp_path / "other-runtime"
    other.mkdir(mode=0o700)
    record = store_in_a_clone(tmp_path, monkeypatch)
    try:
        proc = subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env=path_env(XDG_RUNTIME_DIR=str(other)))
        assert proc.returncode == 0, proc.stderr
        assert "model store stopped" in proc.stdout, proc.stdout
        assert psutil.wait_procs([psutil.Process(record[key]["pid"]) for key in ("process", "watchdog")
                                  if matches(record[key])], timeout=30)[1] == []
        assert [p.name for p in other.rglob("*")] in ([], ["repro"])  # no record, socket or lock made there
    finally:
        service.stop(tmp_path)


def _spaced_trace(path, layout):
    """A trace of two events or none with 256 MiB of spaces where `layout` puts them, written a block at a time."""
    event = b'{"name":"a","cat":"c","ph":"X","ts":1,"dur":1,"pid":1,"tid":1}'
    spaces = b" " * (4 << 20)
    parts = {"no-events": [b"[", None, b"]"], "after-the-last-event": [b"[", event, b",", event, None, b"]"],
             "before-the-first-event": [b'{"traceEvents": [', None, event, b",", event, b"]}"],
             "between-two-events": [b"[", event, b",", None, event, b"]"]}[layout]
    with open(path, "wb") as fh:
        for part in parts:
            for _ in range(64 if part is None else 1):
                fh.write(spaces if part is None else part)
    return path


@pytest.mark.large
@pytest.mark.parametrize("layout", ["no-events", "after-the-last-event", "before-the-first-event", "between-two-events"])
def test_spaces_in_a_traces_event_list_are_read_in_bounded_memory(tmp_path, layout):
    """A gigabyte of spaces inside `traceEvents` took twice its size in memory (2.15 GB): the space
    after the chunks' events was copied whole, twice, to be parsed. It is now skipped a megabyte at
    a time; a space between two events beyond the chunk's bound is refused as such."""
    from support import run_forked

    trace = _spaced_trace(tmp_path / "t.json", layout)
    # the file's own mapping (256 MiB of address space) and 150 MiB for the rest: a copy of the spaces
    # does not fit
    code, out, err = run_forked(["trace", "summarize", str(trace), "-o", "s.json"], tmp_path, timeout=120,
                                growth=(256 + 150) << 20)
    if layout == "between-two-events":
        assert (code, out) == (1, "") and err == (f"repro: error: {trace}: holds an event, or a space between events, "
                                                  "larger than 64 MiB; expected trace events (a name, a phase, times "
                                                  "and small arguments)\n")
        return
    assert (code, err) == (0, ""), err
    [summary] = json.loads((tmp_path / "s.json").read_text())["traces"]
    assert summary["events"] == ({} if layout == "no-events" else {"a": {"count": 2, "total": 2.0, "mean": 1.0}})


@pytest.mark.parametrize("damage", ["emptied", "overwritten", "no-checksums"])
def test_a_damaged_image_of_the_engines_data_set_is_named_before_tensorflow_reads_it(tf, tmp_path, damage):
    """An image of the engine's data set emptied (or overwritten) after it was written ended the run in
    TensorFlow's InvalidArgumentError traceback from its JPEG decode: the data set is reused wherever
    its manifest names its files, and the manifest recorded no checksums."""
    from repro.errors import ReproError
    from repro.pecan.tfdata import ops

    manifest = ops.write_data("resnet", 4, tmp_path)
    directory = tmp_path.resolve() / "resnet-4-seed0"
    assert ops.write_data("resnet", 4, tmp_path) == manifest  # reused as it was written
    damaged = Path(manifest["files"][3])
    if damage == "emptied":
        damaged.write_bytes(b"")
    elif damage == "overwritten":
        damaged.write_bytes(Path(manifest["files"][0]).read_bytes())
    else:  # a manifest written before its checksums were
        (directory / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "sha256"}))
    with pytest.raises(ReproError) as raised:
        ops.write_data("resnet", 4, tmp_path)
    if damage == "no-checksums":
        assert str(raised.value).endswith(f"with its checksum; remove {directory} to write the data set anew")
    else:
        assert str(raised.value) == (f"{damaged}: not the image {directory / 'manifest.json'} lists (its checksum "
                                     f"differs: damaged or replaced since); remove {directory} to write the data set "
                                     "anew")


def test_tfdata_start_refuses_more_threads_per_worker_than_cpus(tf, tmp_path, monkeypatch, capsys):
    """`tfdata start --threads 64 --workers 1` on a 2-CPU machine started a worker of 64 threads pinned
    "modulo" the CPUs: the memory was checked, the CPUs were not."""
    import os

    from repro.cli import main

    monkeypatch.chdir(tmp_path)
    cpus = len(os.sched_getaffinity(0))
    try:
        code = main(["pecan", "tfdata", "start", "--state-dir", "s", "--workers", "1", "--threads", str(cpus + 1)])
    finally:  # what a start that was not refused started is stopped
        if (tmp_path / "s").exists():
            main(["pecan", "tfdata", "stop", "--state-dir", "s"])
    assert code == 1
    assert capsys.readouterr().err == (f"repro: error: --threads {cpus + 1}: more than the {cpus} CPU(s) this machine "
                                       "lets a worker run on (os.sched_getaffinity); expected at most that many\n")
    assert not (tmp_path / "s").exists()  # nothing started, nothing made


def test_a_run_on_a_copied_service_state_names_whose_dispatcher_it_is(tf, tmp_path, pecan_config, data):
    """`tfdata run --service-dir D`, D/state.json copied from a directory whose dispatcher runs, said
    "no dispatcher running": it runs, for the other directory, as `tfdata status` says."""
    import shutil

    from repro.errors import ReproError
    from repro.pecan.tfdata.engine import run
    from repro.pecan.tfdata.service import Service
    from test_tfdata_service import engine_spec

    other = Service.start(tmp_path / "other")
    pid = other.state["dispatcher"]["pid"]
    try:
        (tmp_path / "copy").mkdir()
        shutil.copy(tmp_path / "other" / "state.json", tmp_path / "copy" / "state.json")
        with pytest.raises(ReproError) as raised:
            run(engine_spec(pecan_config, "cachew"), tmp_path / "run", data, service_dir=tmp_path / "copy")
    finally:
        other.stop()
    assert str(raised.value) == (f"--service-dir {tmp_path / 'copy'}: [FAILED] dispatcher (pid {pid}) runs, but was "
                                 "not started for this state directory; no run started (repro pecan tfdata start)")
    assert not (tmp_path / "run" / "run.log").exists()


@pytest.mark.parametrize("store, said", [
    ("results/runs", "'results/runs' lies in results/runs, which the workflow's rules write"),
    ("results", "'results' keeps the store's traces in results/traces, where the workflow downloads them"),
])
def test_cluster_start_by_hand_refuses_a_trace_store_the_config_check_refuses(tmp_path, monkeypatch, capsys, store, said):
    """`cluster start --settings` took a trace_store that `config check` refuses: the workflow's own
    directories, where its rules write or its downloads go."""
    from repro.cli import main

    monkeypatch.chdir(tmp_path)
    settings = json.dumps({"backend": "local", "trace_store": store})
    assert main(["cluster", "start", "--settings", settings, "--state", "s.json"]) == 1
    assert capsys.readouterr().err.startswith(f"repro: error: --settings: trace_store: {said}")
    assert not (tmp_path / "s.json").exists()


GOOGLE_ENVIRONMENT = ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
@pytest.mark.parametrize("credentials, error", [
    (None, r"GOOGLE_APPLICATION_CREDENTIALS .*/absent.json: not credentials Google's libraries can load \(.*"
           r"absent.json was not found.*\); expected a service account or user credentials JSON file$"),
    ({"type": "service_account"}, r"GOOGLE_APPLICATION_CREDENTIALS .*/key.json: not credentials Google's libraries "
                                  r"can load \(.*\); expected a service account or user credentials JSON file$"),
    ({"type": "authorized_user", "client_id": "x", "client_secret": "y", "refresh_token": "z"},
     r"no Google Cloud project: GOOGLE_CLOUD_PROJECT is not set and the credentials \(GOOGLE_APPLICATION_CREDENTIALS "
     r".*/key.json\) name none, or could not be read; set GOOGLE_CLOUD_PROJECT to the project the bucket is billed "
     r"to, or check the credentials$"),
], ids=["file-missing", "fields-missing", "no-project"])
def test_credentials_google_cannot_use_are_named_with_the_variable(credentials, error, tmp_path, monkeypatch, capsys):
    """GOOGLE_APPLICATION_CREDENTIALS naming a missing file, or a key file without a service account's
    fields, got "no Google credentials found; set them up with ... GOOGLE_APPLICATION_CREDENTIALS" (set
    already); user credentials without a project got google-cloud's "Project was not passed", naming
    no store."""
    for name in GOOGLE_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not a Google Compute Engine machine: no metadata server asked
    key = tmp_path / ("absent.json" if credentials is None else "key.json")
    if credentials is not None:
        key.write_text(json.dumps(credentials))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    receipt = json.dumps({"store": "gs://bkt", "objects": [{"key": "a.json", "sha256": "0" * 64}]})
    fault = Fault(f"gcs-credentials-{key.name}",
                  lambda ctx: ["trace", "download", _write(ctx.dir / "up.json", receipt), "-o", str(ctx.dir / "out"),
                               "--store", "gs://bkt/p"],
                  r"repro: error: trace store gs://bkt/p: " + error)
    check_fault(fault, tmp_path, monkeypatch, capsys)


def test_costs_refuse_a_log_of_more_workers_than_the_cluster_holds(tmp_path, capsys):
    """The artifact's Pecan log with 5,000 more workers in each heartbeat was priced at 5,005 remote
    workers ($239.99 of workers per epoch) by `pecan costs --experiment`, whose config caps the
    cluster at 20 remote and 10 local workers."""
    from repro.cli import main

    source = Path(__file__).parent / "fixtures" / "pecan-logs" / "resnet_pecan.log"
    assert main(["pecan", "costs", "--experiment", "ResNet50_v2-8", str(source)]) == 0  # 4 remote, 10 local
    capsys.readouterr()
    extra = "".join(f"2026-01-01 00:04:56.763375: I tensorflow/core/kernels/data/experimental/data_service_dataset_op.cc"
                    f":859] Worker Address: w{i}:31001; Task id: {i}; Job id: 2000\n" for i in range(5000))
    damaged = tmp_path / "resnet_pecan.log"
    damaged.write_text("".join(line + (extra if "ClientHeartbeat" in line else "")
                               for line in source.read_text().splitlines(keepends=True)))
    assert main(["pecan", "costs", "--experiment", "ResNet50_v2-8", str(damaged)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"repro: error: {damaged}: 5004 remote workers in its last deployment; the cluster holds at most 20 "
        "(pecan.cluster.max_remote_workers of --config config/config.yaml)")
