"""Fault injection, an adversarial pass over process records: a server process the tf.data service
starts is stopped by a stop signal that comes before its record is saved."""

import importlib.util

import psutil
import pytest

from repro.cli import main
from repro.pecan.tfdata import service as tfdata_service
from repro.pecan.tfdata.service import Service
from repro.tracestore import LocalStore, upload_traces
from support import REPO, run_forked

pytestmark = pytest.mark.fault


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the dispatcher needs the 'tfdata' extra")
@pytest.mark.parametrize("moment", ["describe", "_save"])
def test_a_stop_signal_before_the_dispatchers_record_is_saved_stops_the_dispatcher(tmp_path, monkeypatch, moment):
    """A SIGHUP to `repro pecan tfdata start` just after its dispatcher was forked, while the record
    was read (describe) or once it served but before the state was saved, ended the command and left
    the dispatcher running, recorded nowhere."""
    started, before = [], set(psutil.Process().children())  # others: the session's fixtures' servers

    def interrupted(*args, **kwargs):
        started.extend(set(psutil.Process().children()) - before)
        raise KeyboardInterrupt  # as repro.commands raises a stop signal

    if moment == "_save":
        monkeypatch.setattr(Service, "_save", interrupted)
    else:
        monkeypatch.setattr(tfdata_service, "describe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Service.start(tmp_path / "sd")
    assert started, "no process was started"
    _, alive = psutil.wait_procs(started, timeout=10)
    for process in alive:  # this test's own, found still running: stopped before it fails
        process.kill()
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert not (tmp_path / "sd" / "state.json").exists()


def test_a_detailed_summary_that_cannot_write_its_events_names_its_output(tmp_path):
    """A full disk or a file size limit while `trace summarize --detailed` wrote its events to the
    temporary file beside the output gave `repro: error: File too large`, naming nothing."""
    with open(tmp_path / "big.json", "w") as fh:
        fh.write('{"traceEvents":[' + ",".join(f'{{"name":"e{i}","ph":"X","ts":{i},"dur":1,"pid":1,"tid":1}}'
                                               for i in range(20_000)) + "]}")
    code, _, err = run_forked(["trace", "summarize", "big.json", "--detailed", "-o", "sd.json"], tmp_path, timeout=60,
                              file_size=200 * 1024)
    assert code == 1
    assert err.strip() == "repro: error: sd.json: cannot write the detailed events beside it (File too large)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.json"]


@pytest.mark.parametrize("number", ["1e999", "-5", "+5.0", "nan", "1,5"])
def test_a_throughput_that_a_training_log_never_writes_is_refused_naming_its_line(tmp_path, monkeypatch, capsys, number):
    """`1e999 examples/second` was read as 999 and `-5 examples/second` as 5, and the cost table
    printed from them with exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.log").write_text("I0101 TimeHistory: 1.00 seconds, 12.50 examples/second between steps 0 and 1\n"
                                      f"I0101 TimeHistory: 1.00 seconds, {number} examples/second between steps 1 and 2\n")
    assert main(["pecan", "costs", "--path=run.log", "--config", str(REPO / "config" / "config.yaml"), "--model=resnet",
                 "--accelerator=v2"]) == 1
    assert capsys.readouterr().err == (f"repro: error: run.log:2: throughput {number} examples/second; expected digits "
                                       "with an optional fraction (12.34), as a training log writes them\n")


def test_a_download_that_cannot_write_its_trace_blames_the_destination_not_the_store(tmp_path):
    """A file size limit (or a full disk) where `trace download` wrote its traces was reported with
    the store's remedy: "run it again to upload anew: snakemake --forcerun run"."""
    (tmp_path / "t.json").write_text('{"traceEvents":[' + ",".join(['{"name":"e","ph":"i","ts":1,"pid":1,"tid":1}'] * 20_000)
                                     + "]}")
    upload_traces(LocalStore(tmp_path / "store"), [tmp_path / "t.json"], "traces/e/m", tmp_path / "upload.json")
    code, _, err = run_forked(["trace", "download", "upload.json", "-o", "down"], tmp_path, timeout=60,
                              file_size=200 * 1024)
    assert code == 1
    assert err.strip() == "repro: error: down/t.json: cannot write (File too large)", err
    assert list((tmp_path / "down").iterdir()) == []
