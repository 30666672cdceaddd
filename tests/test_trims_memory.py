"""Model memory measured at run time (RSS and PSS growth on the CPU), with the computed figures kept
beside it, and `trace memoryinfo` on combined and compared traces."""

from repro.cli import main
from repro.traces import combine, write_trace
from repro.trims.memory import measure
from repro.trims.originals import main as tools_main


def test_measured_memory_covers_the_weights(models):
    measured = measure(models / "squeezenet_1.1")
    # the weights are read before the session: what grows is onnxruntime's own copy, plans and buffers
    assert measured["measured_rss_bytes"] == measured["session_rss_bytes"] + measured["first_inference_rss_bytes"]
    assert measured["measured_rss_bytes"] > 1 << 20 and measured["measured_pss_bytes"] > 1 << 20


def test_memory_report_has_measured_and_computed_columns(models, capsys):
    assert main(["trims", "memory", "squeezenet_1.1", "--base-path", str(models), "--socket", "/nonexistent.sock",
                 "-f", "csv"]) == 0
    header, row = [line.split(",") for line in capsys.readouterr().out.splitlines()]
    assert header[:4] == ["model_name", "measured_rss_bytes", "measured_pss_bytes", "param_bytes"]
    assert int(row[1]) > 0 and int(row[3]) > 0


def test_memoryinfo_reads_combined_traces(models, tmp_path, capsys, monkeypatch):
    """The models a combined trace names, in its order. Measuring each (a process of its own, seconds
    each) is tested above: here it is a stand-in that records what it was asked."""
    import sys

    measured = []
    monkeypatch.setattr(sys.modules["repro.trims.memory"], "measure",
                        lambda model_dir: measured.append(model_dir.name) or {"measured_rss_bytes": 1, "measured_pss_bytes": 1})
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {models}\n")
    traces = []
    for i, model in enumerate(["squeezenet_1.1", "resnet18_v1"]):
        traces.append(write_trace(tmp_path / f"t{i}.json", [{"name": "x", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 1}],
                                  {"otherData": {"model_name": model, "upr_enabled": False}}))
    combine(traces, tmp_path / "compared-all.json")
    assert tools_main(["trace", "memoryinfo", str(tmp_path / "compared-all.json"), f"--config={config}"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == measured == ["squeezenet_1.1", "resnet18_v1"]
