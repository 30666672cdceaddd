"""Fault cases found by the sixth round of adversarial passes over the whole surface."""

import json

import pytest

from repro.tracestore import LocalStore, upload_traces

from support import hide_modules, run_repro

pytestmark = pytest.mark.fault

GCS_EXTRA = "needs the 'gcs' extra (pip install -e '.[gcs]')"


def _uploaded(tmp_path, names=("t.json",)):
    """An upload receipt (upload.json) of small traces put in a local store."""
    for name in names:
        (tmp_path / name).write_text(json.dumps({"traceEvents": [{"name": name, "ph": "i", "ts": 1, "pid": 1, "tid": 1}]}))
    upload_traces(LocalStore(tmp_path / "store"), [tmp_path / name for name in names], "traces/e/m", tmp_path / "upload.json")
    return tmp_path / "upload.json"


@pytest.mark.parametrize("words", [
    ["trace", "download", "--store", "gs://bkt/x", "upload.json", "-o", "out"],
    ["trace", "download", "gcs.json", "-o", "out"],
    ["trims", "fetch", "--asset-store", "gs://bkt/x", "--base-path", "bp", "squeezenet_1.1"],
    ["trims", "models", "--publish", "gs://bkt/x", "--base-path", "m", "squeezenet_1.1"],
], ids=["download-store", "download-receipt", "trims-fetch", "trims-publish"])
def test_a_cloud_store_without_the_gcs_extra_names_the_extra(tmp_path, monkeypatch, capsys, words):
    """A gs:// location given by a flag or a receipt copied from a cloud machine, on an install without
    the extra, ended in a ModuleNotFoundError traceback; `repro config check` named the extra."""
    monkeypatch.chdir(tmp_path)
    receipt = json.loads(_uploaded(tmp_path).read_text())
    (tmp_path / "gcs.json").write_text(json.dumps({**receipt, "store": "gs://bkt/x"}))
    hide_modules(monkeypatch, "google.auth", "google.cloud")  # not google.protobuf: onnx needs it
    code, out, err = run_repro(words, capsys)
    assert (code, out) == (1, ""), err
    assert err.strip().endswith(f"gs://bkt/x: {GCS_EXTRA}"), err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "bp").exists() and not (tmp_path / "m").exists()


def test_a_download_that_fails_midway_leaves_nothing_it_fetched(tmp_path, monkeypatch, capsys):
    """The second trace's checksum does not match: the first, fetched and verified, and the directory
    made for them stayed, as a download that looked whole but for a missing trace."""
    monkeypatch.chdir(tmp_path)
    receipt = _uploaded(tmp_path, ("a.json", "b.json"))
    record = json.loads(receipt.read_text())
    record["objects"][1]["sha256"] = "0" * 64
    receipt.write_text(json.dumps(record))
    code, _, err = run_repro(["trace", "download", "upload.json", "-o", "out/traces"], capsys)
    assert code == 1 and "sha256" in err, err
    assert not (tmp_path / "out").exists()
    (tmp_path / "kept").mkdir()  # a directory the user had, with a trace of their own: left as it was
    (tmp_path / "kept" / "mine.json").write_text("{}")
    code, _, err = run_repro(["trace", "download", "upload.json", "-o", "kept"], capsys)
    assert code == 1, err
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["mine.json"]


def test_distribution_parameters_without_a_distribution_are_refused(tmp_path, monkeypatch, capsys):
    """They were ignored: the run made the fixed per-model plan, as if the user had not asked for one."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["trims", "client", "run", "--simulate", "--distribution-params", "1", "--iterations", "2",
                                "--profile-output", "r"], capsys)
    assert (code, out) == (1, ""), err
    assert err.strip() == ("repro: error: --distribution-params: given without --distribution; expected --distribution "
                           "NAME (pareto, uniform, exponential, weibull, poisson) for the parameters to apply to")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("calibration, named", [
    ({"autoorder_saving": 0.1}, "pipeline: expected the pipeline's name"),
    ({"pipeline": "resnet", "autoorder_saving": 0.1, "autoorder": {}}, "declared: expected an object (the declared order's costs)"),
    ({"pipeline": "resnet", "autoorder_saving": 0.1, "declared": {"cpu_s_per_element": 0.001}, "autoorder": {}},
     "declared.bytes_out_per_element: missing"),
], ids=["pipeline", "declared", "bytes-out"])
def test_a_calibration_missing_a_key_names_it(tmp_path, calibration, named):
    """It read "not a calibration" alone, whichever of a dozen keys was missing."""
    from repro.errors import ReproError
    from repro.pecan.calibration_files import load_calibrations

    path = tmp_path / "resnet.json"
    path.write_text(json.dumps(calibration))
    with pytest.raises(ReproError) as caught:
        load_calibrations([path])
    assert str(caught.value) == (f"--calibration {path}: not a calibration: {named} (expected the output of "
                                 "`repro pecan calibrate`)")


def test_workers_too_wide_for_the_cpus_are_named_as_the_reason():
    """`--worker-threads 1000` on 2 CPUs was refused for too few CPUs, naming neither the flag's key
    nor the way out that it offers."""
    from repro.errors import ReproError
    from repro.pecan.tfdata.spec import check_cpus

    with pytest.raises(ReproError, match=r"^2 CPU\(s\) available .*whole workers of 1000 threads "
                                         r"\(pecan.tfdata.worker_threads\), reaches it; expected at least 1000 CPUs, fewer "
                                         r"threads per worker, or set pecan.tfdata.time_scale$"):
        check_cpus(1, 1000, 2)
    assert check_cpus(1, 1, 2) == 2


@pytest.mark.parametrize("command", ["status", "stop"])
def test_a_state_directory_that_is_a_file_is_named_so_by_status_and_stop_alike(tmp_path, monkeypatch, capsys, command):
    """`tfdata stop` said "not a directory"; `tfdata status` said that no service was recorded in
    FILE/state.json, a path that cannot exist."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sd").write_text("")
    code, out, err = run_repro(["pecan", "tfdata", command, "--state-dir", "sd"], capsys)
    assert (code, out) == (1, "")
    assert err == "repro: error: --state-dir sd: not a directory; expected the directory `tfdata start` was given\n"
