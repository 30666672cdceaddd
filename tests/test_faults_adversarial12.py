"""Fault injection, an adversarial pass over bounds: a detailed trace summary streams its events
rather than holding them, in either summary format.
"""

import json

import pytest

from repro.cli import main
from repro.traces import summarize
from support import run_forked

pytestmark = pytest.mark.fault


def _many_events(path, count):
    """A trace of `count` complete events, written as a client writes them."""
    with open(path, "w") as fh:
        fh.write('{"traceEvents":[')
        fh.write(",".join(f'{{"name":"n{i % 50}","cat":"c","ph":"X","ts":{i},"dur":1,"pid":1,"tid":1}}'
                          for i in range(count)))
        fh.write("]}")
    return path


@pytest.mark.parametrize("form", ["own", "original"])
def test_a_detailed_summary_of_a_large_trace_fits_a_memory_bound(tmp_path, form):
    """`trace summarize --detailed` held every event as a Python dict, about 28 times the trace's size:
    a 90 MB trace took 2.5 GB. A trace of 30 MB now fits in 350 MiB above the program's start."""
    _many_events(tmp_path / "big.json", 500_000)
    words = ["--format", "original"] if form == "original" else []
    code, out, err = run_forked(["trace", "summarize", "--detailed", *words, "big.json", "-o", "s.json"], tmp_path,
                                timeout=120, growth=350 << 20)
    assert (code, err) == (0, ""), err
    doc = json.loads((tmp_path / "s.json").read_text())
    if form == "own":
        events = doc["traces"][0]["detailed_events"]
        assert len(events) == 500_000 and events[-1] == {"name": "n49", "cat": "c", "start": 499_999, "duration": 1,
                                                          "pid": 1, "tid": 1}
    else:
        assert doc[0]["init_time"] == "1970-01-01T00:00:00.000000Z"


def test_the_streamed_detailed_summary_is_the_summary_in_memory(tmp_path, capsys):
    """Events whose numbers orjson cannot write (an integer beyond 64 bits),
    a trace without counted events, and text that looks like the stream's placeholder."""
    events = [{"name": "a", "ph": "X", "ts": 2**70, "dur": 3, "pid": 1, "tid": 1},
              {"name": "b", "cat": "c", "ph": "B", "ts": 5, "pid": 1, "tid": 2},
              {"name": "b", "cat": "c", "ph": "E", "ts": 9, "pid": 1, "tid": 2}]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events, "otherData": {
        "model_name": '"detailed_events": "\\u0000spilled-0-0"'}}))
    (tmp_path / "ignored.json").write_text(json.dumps({"traceEvents": [
        {"name": "x", "cat": "ignore", "ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}))
    inputs = [str(tmp_path / "t.json"), str(tmp_path / "ignored.json")]
    assert main(["trace", "summarize", "--detailed", *inputs, "-o", str(tmp_path / "s.json")]) == 0
    written = json.loads((tmp_path / "s.json").read_text())
    assert written == json.loads(json.dumps(summarize(inputs, detailed=True)))
    assert [len(t["detailed_events"]) for t in written["traces"]] == [2, 0]
    assert [p.name for p in tmp_path.iterdir()] == sorted(["t.json", "ignored.json", "s.json"], key=[
        p.name for p in tmp_path.iterdir()].index)  # no temporary left beside it
