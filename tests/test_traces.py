import json
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repro.cli import main
from repro.errors import ReproError, TraceError
from repro.traces import TraceReader, combine, read_trace, summarize, summarize_trace, validate, write_trace
from repro.traces.events import PHASES
from repro.traces.original import original_summary
from repro.traces.summarize import describe

CHUNKED = {"whole_file_limit": 0, "chunk_bytes": 64}  # force the memory-mapped chunk scanner


def one_of_each_phase():
    """One event of every phase the format defines, with the fields each phase uses."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "B", "name": "outer", "cat": "c", "ts": 10, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 90, "pid": 1, "tid": 1},
        {"ph": "X", "name": "whole", "ts": 20, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "i", "name": "inst", "ts": 30, "s": "t", "pid": 1, "tid": 1},
        {"ph": "I", "name": "legacy", "ts": 31, "pid": 1, "tid": 1},
        {"ph": "C", "name": "ctr", "ts": 32, "pid": 1, "args": {"workers": 3}},
        {"ph": "b", "name": "async", "cat": "a", "id": "0x1", "ts": 33, "pid": 1, "tid": 1},
        {"ph": "n", "name": "async", "cat": "a", "id": "0x1", "ts": 34, "pid": 1, "tid": 1},
        {"ph": "e", "name": "async", "cat": "a", "id": "0x1", "ts": 35, "pid": 1, "tid": 1},
        {"ph": "S", "name": "old", "id": 2, "ts": 36, "pid": 1, "tid": 1},
        {"ph": "T", "name": "old", "id": 2, "ts": 37, "pid": 1, "tid": 1},
        {"ph": "p", "name": "old", "id": 2, "ts": 37, "pid": 1, "tid": 1},
        {"ph": "F", "name": "old", "id": 2, "ts": 38, "pid": 1, "tid": 1},
        {"ph": "s", "name": "flow", "cat": "f", "id": 3, "ts": 40, "pid": 1, "tid": 1},
        {"ph": "t", "name": "flow", "cat": "f", "id": 3, "ts": 41, "pid": 1, "tid": 1},
        {"ph": "f", "name": "flow", "cat": "f", "id": 3, "ts": 42, "bp": "e", "pid": 1, "tid": 1},
        {"ph": "P", "name": "sample", "ts": 43, "pid": 1, "tid": 1, "sf": 7},
        {"ph": "N", "name": "obj", "id": "0x9", "ts": 44, "pid": 1},
        {"ph": "O", "name": "obj", "id": "0x9", "ts": 45, "pid": 1, "args": {"snapshot": {"x": 1}}},
        {"ph": "D", "name": "obj", "id": "0x9", "ts": 46, "pid": 1},
        {"ph": "V", "name": "periodic_interval", "ts": 47, "pid": 1, "id": "d1", "args": {}},
        {"ph": "v", "name": "periodic_interval", "ts": 47, "pid": 1, "id": "d1", "args": {}},
        {"ph": "R", "name": "mark", "ts": 48, "pid": 1, "tid": 1},
        {"ph": "c", "name": "clock_sync", "ts": 49, "pid": 1, "args": {"sync_id": "x"}},
        {"ph": "(", "name": "ctx", "id": "0x2", "ts": 50, "pid": 1, "tid": 1},
        {"ph": ")", "name": "ctx", "id": "0x2", "ts": 51, "pid": 1, "tid": 1},
    ]
    assert {e["ph"] for e in events} == PHASES
    return events


def dump(path, doc):
    path.write_bytes(orjson.dumps(doc))
    return path


@pytest.fixture
def trims_trace(tmp_path):
    """A TrIMS-style trace: an ignored warm-up span, then prediction phases."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 42, "tid": 0, "args": {"name": "client"}},
        {"ph": "B", "name": "warmup", "cat": "ignore", "ts": 1000, "pid": 42, "tid": 1},
        {"ph": "E", "ts": 1400, "pid": 42, "tid": 1},
        {"ph": "B", "name": "load_model", "cat": "load", "ts": 1500, "pid": 42, "tid": 1},
        {"ph": "E", "name": "load_model", "ts": 1700, "pid": 42, "tid": 1},
        {"ph": "X", "name": "sleep", "cat": "ignore", "ts": 1700, "dur": 100, "pid": 42, "tid": 1},
        {"ph": "B", "name": "forward_predict", "cat": "prediction", "ts": 1800, "pid": 42, "tid": 1},
        {"ph": "E", "name": "forward_predict", "ts": 1850, "pid": 42, "tid": 1},
    ]
    other = {"run_id": "r1", "model_name": "alexnet", "hostname": "h1", "upr_enabled": True, "iteration": 0}
    return dump(tmp_path / "trims.json", {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other})


# -- reading ----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_reads_every_phase_in_both_forms(tmp_path, options):
    events = one_of_each_phase()
    obj = dump(tmp_path / "o.json", {"otherData": {"a": 1}, "traceEvents": events, "stackFrames": {"7": {"name": "f"}}})
    arr = dump(tmp_path / "a.json", events)
    for path in (obj, arr):
        reader = TraceReader(path, **options)
        assert list(reader.events()) == events
    assert TraceReader(obj, **options).metadata == {"otherData": {"a": 1}, "stackFrames": {"7": {"name": "f"}}}
    assert TraceReader(arr, **options).metadata == {}


def test_chunk_scanner_handles_strings_that_look_like_structure(tmp_path):
    tricky = ['a "quoted" {brace', "back\\slash\\", "]]}}[[{{", '\\"', "traceEvents", "é ☃"]
    events = [{"ph": "i", "ts": i, "name": s, "args": {"s": s, "nested": [{"x": [s]}]}} for i, s in enumerate(tricky * 20)]
    doc = {"otherData": {"traceEvents": "not this one"}, "meta": {"traceEvents": [1]}, "traceEvents": events, "after": "x"}
    path = dump(tmp_path / "t.json", doc)
    for chunk_bytes in (1, 50, 300, 10**6):
        reader = TraceReader(path, whole_file_limit=0, chunk_bytes=chunk_bytes)
        assert list(reader.events()) == events
        assert reader.metadata == {"otherData": {"traceEvents": "not this one"}, "meta": {"traceEvents": [1]}, "after": "x"}


def test_pretty_printed_and_empty_traces(tmp_path):
    events = one_of_each_phase()
    pretty = tmp_path / "p.json"
    pretty.write_text(json.dumps({"traceEvents": events}, indent=4))
    assert list(TraceReader(pretty, **CHUNKED).events()) == events
    empty = dump(tmp_path / "e.json", {"traceEvents": []})
    assert list(TraceReader(empty, **CHUNKED).events()) == []
    assert validate(empty)["events"] == 0


# -- bad input --------------------------------------------------------------------------

BAD_FILES = {
    "truncated": (b'{"traceEvents":[{"ph":"i","ts":1},{"ph":"i","ts"', "truncated"),
    "invalid": (b'{"traceEvents":[{"ph":"i","ts":1},,]}', "invalid JSON"),
    "not_a_trace": (b'{"events":[]}', "not a Chrome trace"),
    "scalar": (b"42", "not a Chrome trace"),
    "no_ph": (b'[{"ph":"i","ts":1},{"ts":2}]', "event 1: event has no 'ph'"),
    "bad_ts": (b'[{"ph":"i","ts":1},{"ph":"B","ts":"2"}]', "event 1: 'ts' must be a number"),
    "unknown_phase": (b'[{"ph":"Q","ts":1}]', "event 0: unknown phase"),
    "not_object": (b'[{"ph":"i","ts":1}, 3]', "event 1: expected an event object"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_bad_files_raise_trace_error_naming_the_file(tmp_path, name, options):
    data, message = BAD_FILES[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(data)
    with pytest.raises(TraceError) as info:
        validate(path, reader_options=options)
    assert str(path) in str(info.value) and message in str(info.value)


def test_unmatched_begin_end_pairs(tmp_path):
    end_only = dump(tmp_path / "e.json", [{"ph": "B", "ts": 1, "tid": 1}, {"ph": "E", "ts": 2, "tid": 2}])
    with pytest.raises(TraceError, match=r"event 1: 'E' event without a matching 'B'"):
        validate(end_only)
    begin_only = dump(tmp_path / "b.json", [{"ph": "B", "ts": 1}, {"ph": "B", "ts": 2}, {"ph": "E", "ts": 3}])
    with pytest.raises(TraceError, match=r"event 0: 'B' event without a matching 'E'"):
        validate(begin_only)
    with pytest.raises(TraceError, match="without a matching"):
        summarize_trace(begin_only)
    assert summarize_trace(begin_only, strict=False)["end_to_end_time"] == 1


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_a_pair_that_ends_before_it_begins_is_refused_or_skipped(tmp_path, options):
    """'E' at ts 5 closing a 'B' at ts 10 passed validation, and summarize reported a span of -5 us
    (and an end-to-end time of -5). Strict readers refuse it naming the 'E'; lenient summarize skips
    the pair, counting both events, and keeps the others."""
    events = [{"name": "a", "ph": "B", "ts": 10, "pid": 1, "tid": 1}, {"name": "a", "ph": "E", "ts": 5, "pid": 1, "tid": 1},
              {"name": "b", "ph": "B", "ts": 10, "pid": 1, "tid": 1}, {"name": "b", "ph": "E", "ts": 15, "pid": 1, "tid": 1}]
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    said = r"t\.json: event 1: 'E' event at ts 5 is earlier than the 'B' it closes \(ts 10\)"
    for check in (validate, summarize_trace):
        with pytest.raises(TraceError, match=said):
            check(path, reader_options=options)
    summary = summarize_trace(path, strict=False, reader_options=options)
    assert summary["events"] == {"b": {"count": 1, "total": 5.0, "mean": 5.0}}
    assert (summary["skipped_events"], summary["end_to_end_time"]) == (2, 5)
    backwards_only = dump(tmp_path / "only.json", {"traceEvents": events[:2]})
    summary = summarize_trace(backwards_only, strict=False, reader_options=options)
    assert (summary["events"], summary["skipped_events"], summary["end_to_end_time"]) == ({}, 2, 0)
    # a span of no time is no backwards one; each backwards pair is counted, whichever chunk it ends in
    instant = [{"name": "c", "ph": "B", "ts": 20, "pid": 1, "tid": 1}, {"name": "c", "ph": "E", "ts": 20, "pid": 1, "tid": 1}]
    twice = dump(tmp_path / "twice.json", {"traceEvents": events[:2] + instant + events[:2]})
    summary = summarize_trace(twice, strict=False, reader_options=options)
    assert (summary["events"], summary["skipped_events"]) == ({"c": {"count": 1, "total": 0.0, "mean": 0.0}}, 4)
    # the events after a chunk that held only backwards pairs keep their numbers
    apart = [{"name": "d", "ph": "B", "ts": -1e308, "pid": 1, "tid": 1}, {"name": "d", "ph": "E", "ts": 1e308, "pid": 1, "tid": 1}]
    later = dump(tmp_path / "later.json", {"traceEvents": [*events[:2], *events[:2], *apart]})
    with pytest.raises(TraceError, match=r"later\.json: event 5: duration is not a finite number"):
        summarize_trace(later, strict=False, reader_options=options)



@pytest.mark.parametrize("options", [{}, CHUNKED, {"whole_file_limit": 0, "chunk_bytes": 64}],
                         ids=["whole", "chunked", "begin-in-an-earlier-chunk"])
def test_lenient_combine_leaves_out_a_pair_that_ends_before_it_begins(tmp_path, options):
    """Lenient combine copied a pair that ends before it begins into its output, which validate then
    refused; now it skips both events, as lenient summarize does, and counts them."""
    events = [{"name": "a", "ph": "B", "ts": 10, "pid": 1, "tid": 1}, {"name": "b", "ph": "X", "ts": 11, "dur": 1,
                                                                        "pid": 1, "tid": 2},
              {"name": "a", "ph": "E", "ts": 5, "pid": 1, "tid": 1},
              {"name": "c", "ph": "B", "ts": 10, "pid": 1, "tid": 1}, {"name": "c", "ph": "E", "ts": 15, "pid": 1, "tid": 1}]
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    for adjust in (True, False):
        report = combine([path], tmp_path / "c.json", adjust=adjust, strict=False, reader_options=options)
        assert report["skipped"] == 2
        validate(tmp_path / "c.json")
        assert [(e.get("name"), e["ph"]) for e in read_trace(tmp_path / "c.json")[1] if e["ph"] != "M"] == [
            ("b", "X"), ("c", "B"), ("c", "E")]
    assert summarize_trace(path, strict=False, reader_options=options)["skipped_events"] == 2


def test_a_trace_given_twice_is_refused(tmp_path):
    """`trace combine t.json t.json` and `trace summarize d d/t.json` counted the trace twice, exit 0; so
    did a hard link beside the trace, which a resolved path does not tell from another file."""
    (tmp_path / "d").mkdir()
    path = dump(tmp_path / "d" / "t.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]})
    other = dump(tmp_path / "other.json", [])
    hard = tmp_path.parent / f"{tmp_path.name}-hard.json"
    os.link(path, hard)
    for inputs, twice in (([path, tmp_path / "d" / "." / "t.json"], tmp_path / "d" / "." / "t.json"),
                          (([tmp_path / "d", path]), path), ([other, tmp_path], other), ([path, hard], hard)):
        with pytest.raises(TraceError, match=rf"^{re.escape(str(twice))}: given twice \(named, or found in a directory named too\); "
                                             "expected each trace once$"):
            summarize(inputs)
    assert summarize([tmp_path / "d", tmp_path / "other.json"])["traces"][0]["events"]["a"]["count"] == 1
    hard.unlink()
    code = main(["trace", "combine", str(path), str(path), "-o", str(tmp_path / "c.json")])
    assert code == 1 and not (tmp_path / "c.json").exists()


def test_unreadable_and_missing_inputs(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        validate(tmp_path / "missing.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="holds no trace files"):
        summarize([tmp_path / "empty"])
    if os.geteuid() != 0:  # root reads anything
        locked = dump(tmp_path / "locked.json", [])
        locked.chmod(0)
        with pytest.raises(TraceError, match="cannot read"):
            validate(locked)


def test_lenient_reading_skips_and_counts_bad_events(tmp_path):
    path = dump(tmp_path / "t.json", [{"ph": "i", "ts": 1}, {"ts": 2}, {"ph": "i", "ts": "x"}, {"ph": "i", "ts": 3}])
    reader = TraceReader(path, strict=False)
    assert [e["ts"] for e in reader.events()] == [1, 3]
    assert reader.skipped == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(alphabet='{}[]",:\\ ph ts 0123 traceEvents', max_size=200).map(str.encode))
def test_fuzzed_input_raises_only_trace_error(tmp_path, data):
    path = tmp_path / "fuzz.json"
    path.write_bytes(data)
    for options in ({}, CHUNKED):
        try:
            validate(path, reader_options=options)
            summarize_trace(path, reader_options=options)
        except TraceError:
            pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(
        st.fixed_dictionaries({"ph": st.sampled_from("iCPR"), "ts": st.integers(0, 10**12)}, optional={"args": json_values}),
        max_size=30,
    ),
    chunk=st.integers(1, 400),
)
def test_chunked_reader_agrees_with_whole_file_reader(tmp_path, events, chunk):
    path = dump(tmp_path / "t.json", {"traceEvents": events, "otherData": {"k": "v"}})
    reader = TraceReader(path, whole_file_limit=0, chunk_bytes=chunk)
    assert list(reader.events()) == events
    assert reader.metadata == {"otherData": {"k": "v"}}


# -- combine ----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [None, CHUNKED], ids=["whole", "chunked"])
def test_combine_adjusts_zeroes_and_remaps_pids(tmp_path, trims_trace, options):
    other = dump(tmp_path / "other.json", [{"ph": "X", "name": "a", "ts": 500, "dur": 10, "pid": 42, "tid": 1}])
    out = tmp_path / "combined.json"
    report = combine([trims_trace, other], out, reader_options=options)
    meta, events = read_trace(out)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {1: "alexnet h1 shared iteration 0", 2: "other"}
    first = [(e["ph"], e.get("name"), e["ts"]) for e in events if e["pid"] == 1 and e["ph"] != "M"]
    # warm-up (400 us) and the sleep (100 us) are gone and the gaps they left are closed
    assert first == [("B", "load_model", 0), ("E", "load_model", 200), ("B", "forward_predict", 200), ("E", "forward_predict", 250)]
    assert [e["ts"] for e in events if e["pid"] == 2 and e["ph"] != "M"] == [0]
    assert report == {"inputs": 2, "events": 7, "skipped": 0, "dropped": 3}
    assert meta["displayTimeUnit"] == "ns"
    assert [i["otherData"] for i in meta["otherData"]["inputs"]][0]["run_id"] == "r1"
    assert validate(out)["events"] == 7


def test_combine_without_adjust_keeps_times_and_ignored_events(tmp_path, trims_trace):
    out = tmp_path / "c.json"
    combine([trims_trace, trims_trace], out, adjust=False)
    _, events = read_trace(out)
    assert sorted({e["pid"] for e in events}) == [1, 2]
    assert [e["ts"] for e in events if e["pid"] == 2 and e["ph"] == "B"] == [1000, 1500, 1800]


def test_combine_keeps_processes_of_multi_process_inputs_apart(tmp_path):
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "worker"}},
        {"ph": "X", "name": "a", "ts": 5, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 6, "dur": 1, "pid": 2, "tid": 1},
    ]
    a, b = dump(tmp_path / "a.json", events), dump(tmp_path / "b.json", events)
    out = tmp_path / "c.json"
    assert combine([a, b], out)["dropped"] == 0  # process names are replaced, not dropped
    _, combined = read_trace(out)
    names = {e["pid"]: e["args"]["name"] for e in combined if e.get("name") == "process_name"}
    assert names == {1: "a / python", 2: "a / worker", 3: "b / python", 4: "b / worker"}
    assert {e["tid"] for e in combined if e.get("name") == "process_name"} == {0}
    assert [(e["pid"], e["tid"]) for e in combined if e["ph"] == "X"] == [(1, 1), (2, 1), (3, 1), (4, 1)]


def test_combine_skip_first_and_no_partial_output(tmp_path, trims_trace):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'[{"ph":"i","ts":1},')
    out = tmp_path / "c.json"
    combine([bad, trims_trace], out, skip_first=True)
    assert read_trace(out)[0]["otherData"]["inputs"][0]["file"] == str(trims_trace)
    out.unlink()
    with pytest.raises(TraceError):
        combine([trims_trace, bad], out)
    assert list(tmp_path.glob("c.json*")) == [] and list(tmp_path.glob(".c.json*")) == []


def ignored_spans_trace(tmp_path):
    """Events before, strictly inside, between and after ignored spans, listed out of order: [100, 300]
    is the union of four overlapping spans, [400, 450] and the empty [470, 470] stand alone."""
    ignored = {"cat": "ignore", "pid": 1, "tid": 2}
    events = [
        {"ph": "i", "name": "start", "ts": 50, "pid": 1, "tid": 1, "s": "t"},
        {"ph": "X", "name": "gc", "ts": 160, "dur": 20, **ignored},  # inside [100, 200]
        {"ph": "X", "name": "gc", "ts": 100, "dur": 100, **ignored},
        {"ph": "X", "name": "inside", "ts": 120, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "B", "name": "warmup", "cat": "ignore", "ts": 150, "pid": 1, "tid": 3},
        {"ph": "B", "name": "request", "cat": "work", "ts": 155, "pid": 1, "tid": 4},  # another thread's span
        {"ph": "E", "ts": 300, "pid": 1, "tid": 3},
        {"ph": "X", "name": "gc", "ts": 250, "dur": 10, **ignored},  # inside [150, 300], beyond [100, 200]
        {"ph": "E", "cat": "ignore", "ts": 310, "pid": 1, "tid": 4},  # its begin is kept, so it is kept
        {"ph": "i", "name": "between", "ts": 350, "pid": 1, "tid": 1, "s": "t"},
        {"ph": "X", "name": "sleep", "ts": 400, "dur": 50, **ignored},
        {"ph": "i", "name": "in_sleep", "ts": 420, "pid": 1, "tid": 1, "s": "t"},
        {"ph": "X", "name": "mark", "ts": 470, **ignored},  # no duration: nothing to cut
        {"ph": "i", "name": "end", "ts": 500, "pid": 1, "tid": 1, "s": "t"},
    ]
    return dump(tmp_path / "spans.json", events)


@pytest.mark.parametrize("options", [None, CHUNKED], ids=["whole", "chunked"])
@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "spaced"])
def test_combine_cuts_ignored_spans_out_of_timestamps_inside_and_after_them(tmp_path, options, spaced):
    """A timestamp inside an ignored span moves to where the span began, one after it moves back by
    the span's length (the empty span of an 'X' without a duration moves nothing), whether the
    input's events are copied as their texts (compact) or read as dicts (spaced)."""
    path, out = ignored_spans_trace(tmp_path), tmp_path / "c.json"
    if spaced:  # whitespace between tokens: not copied, read and written anew
        path.write_bytes(orjson.dumps(orjson.loads(path.read_bytes()), option=orjson.OPT_INDENT_2))
    report = combine([path], out, reader_options=options)
    stamps = [(e["ph"], e.get("name"), e["ts"]) for e in read_trace(out)[1] if e["ph"] != "M"]
    assert stamps == [("i", "start", 0), ("X", "inside", 50), ("B", "request", 50), ("E", None, 60),
                      ("i", "between", 100), ("i", "in_sleep", 150), ("i", "end", 200)]
    assert report == {"inputs": 1, "events": 8, "skipped": 0, "dropped": 7}


@pytest.mark.parametrize("options", [None, CHUNKED, {"whole_file_limit": 0}], ids=["whole", "chunked", "one chunk"])
def test_combine_leaves_metadata_timestamps_alone(tmp_path, options):
    events = [{"ph": "M", "name": "thread_name", "ts": 1000, "pid": 1, "tid": 1, "args": {"name": "main"}},
              {"ph": "i", "name": "a", "ts": 100, "pid": 1, "tid": 1, "s": "t"},
              {"ph": "i", "name": "b", "ts": 150, "pid": 1, "tid": 1, "s": "t"}]
    combine([dump(tmp_path / "t.json", events)], tmp_path / "c.json", reader_options=options)
    assert [(e["name"], e["ts"]) for e in read_trace(tmp_path / "c.json")[1] if "ts" in e] == \
        [("thread_name", 1000), ("a", 0), ("b", 50)]


def test_lenient_combine_counts_every_skipped_event_of_every_input(tmp_path):
    bad = dump(tmp_path / "bad.json", [{"ph": "i", "ts": 1}, {"ts": 2}, {"ph": "i", "ts": "x"}])
    unmatched = dump(tmp_path / "unmatched.json", [{"ph": "E", "ts": 1, "pid": 1, "tid": 1}, {"ph": "i", "ts": 2, "pid": 1}])
    report = combine([bad, unmatched], tmp_path / "c.json", strict=False)
    assert report == {"inputs": 2, "events": 4, "skipped": 3, "dropped": 0}
    with pytest.raises(TraceError, match=r"unmatched\.json: event 0: 'E' event without a matching 'B'"):
        combine([unmatched], tmp_path / "d.json")
    # strays in several chunks of one input
    events = [{"ph": "E", "ts": 0, "pid": 1, "tid": 1}] + [{"ph": "i", "ts": t, "pid": 1} for t in range(1, 20)]
    strays = dump(tmp_path / "strays.json", events + [{"ph": "E", "ts": 20, "pid": 1, "tid": 2}])
    assert combine([strays], tmp_path / "e.json", strict=False, reader_options=CHUNKED)["skipped"] == 2


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_combine_errors_give_the_events_index_in_its_file(tmp_path, options):
    events = [{"ph": "i", "name": "fine", "ts": i, "pid": 1, "tid": 1} for i in range(6)] + [{"ph": "i", "ts": "late"}]
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError, match=r"t\.json: event 6: 'ts' must be a number"):
        combine([dump(tmp_path / "first.json", events[:3]), path], tmp_path / "c.json", reader_options=options)


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_combine_names_the_input_whose_args_nest_too_deep_to_write(tmp_path, capsys, options):
    deep = '{"a":' * 300 + "{}" + "}" * 300  # orjson reads up to 1024 levels but writes at most 254
    path = tmp_path / "deep.json"
    path.write_text('[{"ph":"i","name":"ok","ts":1,"pid":1,"tid":1},{"ph":"i","ts":2,"pid":1,"args":%s}]' % deep)
    out = tmp_path / "c.json"
    with pytest.raises(TraceError, match=r"deep\.json: cannot write an event .*254 levels a combined trace may hold\)$"):
        combine([path], out, reader_options=options)
    assert not out.exists()
    if not options:
        assert main(["trace", "combine", "-o", str(out), str(path)]) == 1
        assert "deep.json: cannot write an event" in capsys.readouterr().err


def test_process_names_come_from_run_fields_names_or_the_file(tmp_path):
    from repro.traces.combine import run_label

    assert run_label("t.json", {"model_name": "m"}, {}) == "m original"
    assert run_label("t.json", {"model_name": "m", "hostname": "h", "upr_enabled": True, "iteration": 0}, {}) == \
        "m h shared iteration 0"
    assert run_label("t.json", {"run_id": "r", "name": ""}, {"name": "n"}) == "n"
    assert run_label("t.json", {"run_id": "r", "name": 5}, {}) == "r"
    assert run_label("t.json", {"run_id": "r"}, {"trace_name": "x"}) == "r"
    assert run_label("t.json", {}, {"trace_name": "x"}) == "x"
    assert run_label("dir/t.json", {"name": ""}, {}) == "t"
    first = dump(tmp_path / "a.json", [{"ph": "i", "ts": 1}])
    second = dump(tmp_path / "b.json", {"traceEvents": [{"ph": "i", "ts": 1}], "displayTimeUnit": "ns", "k": "v",
                                        "otherData": {"x": 1}})
    combine([first, second], tmp_path / "c.json")
    meta = read_trace(tmp_path / "c.json")[0]
    assert meta["displayTimeUnit"] == "ns"
    assert [(i["label"], i["pids"], i["metadata"]) for i in meta["otherData"]["inputs"]] == [("a", [1], {}),
                                                                                            ("b", [2], {"k": "v"})]
    combine([first], tmp_path / "d.json")
    assert read_trace(tmp_path / "d.json")[0]["displayTimeUnit"] == "ms"


# -- summarize --------------------------------------------------------------------------


def test_summary_of_one_trace(trims_trace):
    summary = summarize_trace(trims_trace, detailed=True)
    assert summary["model_name"] == "alexnet" and summary["upr_enabled"] is True and summary["run_id"] == "r1"
    assert summary["end_to_end_time"] == 350  # 1500 -> 1850, ignored spans excluded
    assert summary["events"]["load_model"] == {"count": 1, "total": 200, "mean": 200}
    assert "warmup" not in summary["events"] and "sleep" not in summary["events"]
    assert [d["name"] for d in summary["detailed_events"]] == ["load_model", "forward_predict"]
    assert summary["end_to_end_process_time"] == 850  # 1000 -> 1850, ignored spans included
    assert summary["init_time"] == 0


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_init_time_counts_runtime_initialisation_in_any_category(tmp_path, options):
    events = [
        {"ph": "X", "name": "runtime_init", "cat": "ignore", "ts": 0, "dur": 70, "pid": 1, "tid": 1},
        {"ph": "X", "name": "wait_runtime_init", "cat": "prediction", "ts": 100, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "forward_predict", "cat": "prediction", "ts": 105, "dur": 20, "pid": 1, "tid": 1},
    ]
    summary = summarize_trace(dump(tmp_path / "t.json", events), reader_options=options)
    assert summary["init_time"] == 75
    assert (summary["end_to_end_time"], summary["end_to_end_process_time"]) == (25, 125)


def test_describe_matches_hand_computed_values():
    d = describe([1, 2, 3, 4, 10])
    assert d["count"] == 5 and d["mean"] == 4 and d["median"] == 3 and d["min"] == 1 and d["max"] == 10
    assert d["std"] == pytest.approx(3.5355339, rel=1e-6)  # sqrt(50/4)
    assert d["p90"] == pytest.approx(7.6)  # linear: 4 + 0.6 * (10 - 4)
    assert d["p99"] == pytest.approx(9.76)
    half = 2.7764451 * 3.5355339 / 5**0.5  # t(0.975, 4) * s / sqrt(n)
    assert d["ci95"] == pytest.approx([4 - half, 4 + half], rel=1e-6)
    assert describe([7])["ci95"] is None and describe([7])["std"] == 0


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_summary_counts_totals_and_means_each_name_and_spans_nested_events(tmp_path, options):
    events = [
        {"ph": "X", "name": "setup", "cat": "ignore", "ts": -50, "dur": 20, "pid": 1, "tid": 1},
        {"ph": "B", "name": "request", "cat": "work", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "read", "ts": 10, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "read", "ts": 30, "dur": 30, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 100, "pid": 1, "tid": 1},
        {"ph": "X", "name": "flush", "ts": 90, "dur": 60, "pid": 1, "tid": 2},  # overlaps the end of the request
        {"ph": "X", "ts": 95, "dur": 1, "pid": 1, "tid": 3},
        {"ph": "B", "name": "x", "ts": 200, "pid": 1, "tid": 5},  # three threads' spans, interleaved
        {"ph": "B", "name": "p", "ts": 205, "pid": 2, "tid": 5},  # the same tid in another process
        {"ph": "B", "name": "y", "ts": 210, "pid": 1, "tid": 6},
        {"ph": "E", "ts": 220, "pid": 1, "tid": 5},
        {"ph": "E", "ts": 250, "pid": 2, "tid": 5},
        {"ph": "E", "ts": 300, "pid": 1, "tid": 6},
        {"ph": "X", "name": "mark", "cat": "work", "ts": 260, "pid": 1, "tid": 8},  # no duration
    ]
    summary = summarize_trace(dump(tmp_path / "t.json", {"traceEvents": events, "otherData": {
        "model_name": "m", "note": "n", "sizes": [1, 2]}}), detailed=True, reader_options=options)
    assert summary["events"]["read"] == {"count": 2, "total": 40, "mean": 20.0}
    assert summary["events"]["request"] == {"count": 1, "total": 100, "mean": 100.0}
    assert summary["events"][""] == {"count": 1, "total": 1, "mean": 1.0}
    assert "setup" not in summary["events"]
    assert [summary["events"][name]["total"] for name in ("x", "p", "y", "mark")] == [20, 45, 90, 0]
    assert all(type(entry["count"]) is int for entry in summary["events"].values())  # JSON shows 2, not 2.0
    assert {"name": "request", "cat": "work", "start": 0, "duration": 100, "pid": 1, "tid": 1} in summary["detailed_events"]
    assert summary["end_to_end_time"] == 300  # first begin 0 (the outer request) to last end 300
    assert summary["end_to_end_process_time"] == 350  # from the ignored setup at -50
    assert summary["file"] == str(tmp_path / "t.json")
    assert summary["model_name"] == "m" and summary["note"] == "n" and "sizes" not in summary
    assert summary["run_id"] is None and "skipped_events" not in summary
    assert summary["detailed_events"][0] == {"name": "read", "cat": None, "start": 10, "duration": 10, "pid": 1, "tid": 1}
    stray = events + [{"ph": "E", "ts": 400, "pid": 1, "tid": 7}]
    with pytest.raises(TraceError, match=r"t2\.json: event 14: 'E' event without a matching 'B'"):
        summarize_trace(dump(tmp_path / "t2.json", stray), reader_options=options)


def test_summary_document_defaults(tmp_path):
    path = dump(tmp_path / "t.json", [{"ph": "E", "ts": 1, "pid": 1, "tid": 1}, {"ph": "i", "ts": 2, "pid": 1}])
    with pytest.raises(TraceError, match="without a matching 'B'"):
        summarize([path])  # strict unless asked otherwise
    doc = summarize([path], strict=False)
    assert (doc["time_unit"], doc["group_by"]) == ("us", ["model_name", "upr_enabled"])
    trace = doc["traces"][0]
    assert (trace["end_to_end_time"], trace["end_to_end_process_time"], trace["skipped_events"]) == (0.0, 0.0, 1)
    assert "detailed_events" not in trace and "detailed_events" not in summarize_trace(path, strict=False)
    assert summarize([path], strict=False, detailed=True)["traces"][0]["detailed_events"] == []


def test_describe_identical_and_two_values():
    same = describe([3.0, 3.0, 3.0])
    assert (same["std"], same["ci95"], same["p99"]) == (0.0, [3.0, 3.0], 3.0)
    assert describe([3.0, 3.0])["ci95"] == [3.0, 3.0]
    close = describe([1.0, 2.0])  # a spread under 1 still gives the t-interval
    assert close["ci95"] == pytest.approx([1.5 - 12.7062047 / 2, 1.5 + 12.7062047 / 2], rel=1e-6)
    two = describe([1.0, 3.0])
    assert (two["count"], two["mean"], two["median"], two["min"], two["max"]) == (2, 2.0, 2.0, 1.0, 3.0)
    assert two["std"] == pytest.approx(2**0.5)
    assert two["p90"] == pytest.approx(2.8) and two["p99"] == pytest.approx(2.98)
    half = 12.7062047 * 2**0.5 / 2**0.5  # t(0.975, 1) x s / sqrt(n)
    assert two["ci95"] == pytest.approx([2 - half, 2 + half], rel=1e-6)
    with pytest.raises(ValueError) as info:
        describe([])
    assert str(info.value) == "no values to describe"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow under test
def test_group_statistics_that_overflow_name_the_group():
    from repro.traces.summarize import aggregate

    huge = [{"model_name": "a", "end_to_end_time": 1.7e308, "events": {}} for _ in range(2)]
    with pytest.raises(ReproError) as info:
        aggregate(huge, ["model_name"])
    assert str(info.value) == ("group {'model_name': 'a'}: statistics of end_to_end_time are not finite numbers "
                               "(durations too large)")
    events = [{"model_name": "a", "end_to_end_time": 1, "events": {"x": {"total": 1.7e308}}} for _ in range(2)]
    with pytest.raises(ReproError, match="statistics of x are not finite"):
        aggregate(events, ["model_name"])


def test_group_by_a_field_no_trace_records_names_the_fields_there_are(tmp_path):
    """Fields to group by: the run fields and every other plain value a trace's summary holds (not
    what it measures, not its events)."""
    from repro.traces.summarize import RUN_FIELDS, aggregate

    path = dump(tmp_path / "t.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 2, "pid": 1, "tid": 1}],
                                      "otherData": {"batch": 4, "model_name": "m"}})
    traces = [summarize_trace(path, detailed=True)]
    assert aggregate(traces, ["batch"])[0]["group"] == {"batch": 4}
    with pytest.raises(ReproError) as info:
        aggregate(traces, ["batch", "nope"])
    assert str(info.value) == (f"group-by field(s) ['nope']: no trace records them; fields to group by: "
                               f"{sorted({*RUN_FIELDS, 'batch', 'file'})}")


def test_a_run_field_that_is_a_list_is_refused_naming_it(tmp_path):
    path = dump(tmp_path / "t.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 2, "pid": 1, "tid": 1}],
                                      "otherData": {"model_name": ["a"]}})
    with pytest.raises(ReproError) as info:
        summarize_trace(path)
    assert str(info.value) == f"{path}: otherData.model_name: expected a string, number or true/false, got list"


@pytest.mark.parametrize("end", [2**63 + 5, 2**64 + 5], ids=["past-int64", "past-64-bits"])
def test_a_duration_from_an_int64_start_to_an_end_past_int64_is_taken_as_floats(tmp_path, end):
    """The begin's timestamp is an int64, the end's is not (an unsigned 64-bit integer, or larger):
    both are taken as floats, as where both are beyond 64 bits; the end-to-end times are the span's
    duration."""
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"name": "a", "ph": "B", "ts": 0, "pid": 1, "tid": 1}, '
                    f'{{"name": "a", "ph": "E", "ts": {end}, "pid": 1, "tid": 1}}]}}')
    summary = summarize_trace(path)
    assert summary["events"] == {"a": {"count": 1, "total": float(end), "mean": float(end)}}
    for key in ("end_to_end_time", "end_to_end_process_time"):
        assert type(summary[key]) is float and summary[key] == float(end), (key, summary[key])


def test_a_trace_is_summarized_from_its_compact_chunks_and_read_again_with_the_same_options(tmp_path, monkeypatch):
    """A trace the compact reading vouches for is never read as dicts; one it cannot (a timestamp
    beyond 64 bits) is read again with the reader options given."""
    summarize_module = sys.modules["repro.traces.summarize"]  # the package's `summarize` is the function
    made = []

    class Reader(TraceReader):
        def __init__(self, path, **options):
            made.append(options)
            super().__init__(path, **options)

    monkeypatch.setattr(summarize_module, "TraceReader", Reader)
    plain = dump(tmp_path / "plain.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 2, "pid": 1, "tid": 1}]})
    with monkeypatch.context() as m:
        m.setattr(TraceReader, "column_chunks", lambda self: pytest.fail("read as dicts"))
        assert summarize_trace(plain, reader_options=CHUNKED)["events"] == {"a": {"count": 1, "total": 2, "mean": 2.0}}
    assert made == [{"strict": True, **CHUNKED}]
    made.clear()
    beyond = tmp_path / "beyond.json"
    beyond.write_text(f'{{"traceEvents": [{{"name": "a", "ph": "X", "ts": {2**64}, "dur": 2, "pid": 1, "tid": 1}}]}}')
    assert summarize_trace(beyond, reader_options=CHUNKED)["events"]["a"]["count"] == 1
    assert made == [{"strict": True, **CHUNKED}, {"strict": True, **CHUNKED}]


def test_a_trace_whose_name_is_not_utf8_is_refused_naming_why(tmp_path):
    from repro.traces.summarize import find_traces

    name = os.fsdecode(b"run-\xff.json")
    dump(tmp_path / name, {"traceEvents": []})
    with pytest.raises(ReproError) as info:
        find_traces([tmp_path])
    assert str(info.value) == (f"{tmp_path / name}: the file name is not UTF-8 text, and a trace's name goes into the "
                               "output; rename the file")


def test_is_combined_reads_the_start_of_a_file_as_a_combined_trace_begins(tmp_path):
    from repro.traces.combine import is_combined

    row = b'{"traceEvents":[{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"t"}}'
    cases = {row + b"]}": True, b'{"traceEvents":[],"displayTimeUnit":"ms","otherData":{"inputs":[]}}': True,
             # a Chrome trace or JSON array of someone else's: not what combine writes
             b"  \n[{}]": False, b'{"traceEvents": []}': False, b'{"traceEvents":[{"ph":"X","name":"a"}]}': False,
             b'{"otherData": {}}': False, b"": False, b"[1, 2, 3]": False}
    for i, (content, expected) in enumerate(cases.items()):
        path = tmp_path / f"{i}.json"
        path.write_bytes(content)
        assert is_combined(path) is expected, content[:40]


def test_is_combined_reads_only_the_start_of_a_large_trace(tmp_path, monkeypatch):
    """A combined trace may be gigabytes: whether a default output is one reads its first bytes only."""
    import importlib
    import io

    combine = importlib.import_module("repro.traces.combine")  # the package's name `combine` is its function
    path = tmp_path / "combined.json"
    path.write_bytes(b'{"traceEvents":[],"displayTimeUnit":"ms"}' + b" " * (1 << 20))
    asked = []

    class Recorded(io.BytesIO):
        def read(self, size=-1):
            asked.append(size)
            return super().read(size)

    monkeypatch.setattr(combine, "open", lambda name, mode: Recorded(Path(name).read_bytes()), raising=False)
    assert combine.is_combined(path)
    assert asked and all(size is not None and 0 <= size <= 128 for size in asked), asked


def test_is_summary_knows_both_summary_formats_and_nothing_else(tmp_path):
    from repro.traces.original import RECORD_KEYS
    from repro.traces.original import is_summary

    record = json.dumps({key: None for key in RECORD_KEYS})
    cases = {'{"traces": [], "groups": []}': True, '{"traces": [{"file": "t.json"}], "groups": {}}': True,
             f"[{record}]": True, "[]": True,
             '{"traces": {}}': False, '{"groups": []}': False, '{"traces": ["a"], "groups": []}': False,
             '[{"file": "t.json"}]': False, f"[{record}, 3]": False, "[": False, "": False, '"traces"': False}
    for i, (content, expected) in enumerate(cases.items()):
        path = tmp_path / f"{i}.json"
        path.write_text(content)
        assert is_summary(path) is expected, content
    assert is_summary(tmp_path / "missing.json") is False


def test_trace_search_skips_hidden_files_and_names_missing_inputs(tmp_path):
    from repro.traces.summarize import find_traces

    (tmp_path / "runs").mkdir()
    for name in ("b.json", "a.json", ".partial.json", "compared-a.json", "notes.txt"):
        (tmp_path / "runs" / name).write_text("[]")
    assert find_traces([tmp_path / "runs"]) == [tmp_path / "runs" / "a.json", tmp_path / "runs" / "b.json"]
    with pytest.raises(TraceError) as info:
        find_traces([tmp_path / "nope.json"])
    assert str(info.value) == f"{tmp_path / 'nope.json'}: no such file or directory"
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError) as info:
        find_traces([tmp_path / "empty"])
    assert str(info.value) == f"{tmp_path / 'empty'}: directory holds no trace files (*.json)"


def test_summarize_directories_groups_and_skips_own_outputs(tmp_path):
    runs = tmp_path / "runs" / "deep"
    runs.mkdir(parents=True)
    for i, (model, shared, dur) in enumerate([("a", True, 10), ("a", True, 30), ("a", False, 100), ("b", True, 5)]):
        other = {"model_name": model, "upr_enabled": shared}
        events = [{"ph": "X", "name": "forward", "ts": 0, "dur": dur, "pid": 1, "tid": 1}]
        dump(runs / f"t{i}.json", {"traceEvents": events, "otherData": other})
    dump(runs / "combined.json", {"traceEvents": []})
    dump(runs / "summary.json", {"traces": []})
    doc = summarize([tmp_path / "runs"])
    assert len(doc["traces"]) == 4
    groups = {(g["group"]["model_name"], g["group"]["upr_enabled"]): g["metrics"] for g in doc["groups"]}
    assert groups[("a", True)]["end_to_end_time"]["mean"] == 20
    assert groups[("a", True)]["forward"]["count"] == 2
    assert groups[("a", False)]["end_to_end_time"]["count"] == 1


# -- writer and CLI ---------------------------------------------------------------------


def test_writer_round_trip_and_atomicity(tmp_path):
    events = one_of_each_phase()
    out = write_trace(tmp_path / "w.json", events, {"otherData": {"x": 1}, "displayTimeUnit": "ms"})
    assert read_trace(out) == ({"otherData": {"x": 1}, "displayTimeUnit": "ms"}, events)
    with pytest.raises(RuntimeError):
        from repro.traces import TraceWriter

        with TraceWriter(tmp_path / "half.json") as writer:
            writer.write_events(events)
            raise RuntimeError("killed")
    assert list(tmp_path.glob("*half*")) == []


@pytest.mark.parametrize("where", ["opening", "ending"])
def test_a_writer_interrupted_while_it_opens_or_ends_leaves_no_temporary(tmp_path, monkeypatch, where):
    """A SIGHUP that lands while the trace's end is written (`repro trace combine` under `timeout -s
    HUP`) left the temporary file behind: nothing named it for removal after the file was closed."""
    from repro.traces import writer as writer_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "opening":
        monkeypatch.setattr(writer_module, "open", interrupted, raising=False)
    with pytest.raises(KeyboardInterrupt):
        with writer_module.TraceWriter(tmp_path / "t.json", {"otherData": {"x": 1}}) as trace:
            trace.write_events(one_of_each_phase())
            monkeypatch.setattr(writer_module.orjson, "dumps", interrupted)  # the metadata, at the end
    assert list(tmp_path.iterdir()) == []


def test_cli_exit_codes(tmp_path, trims_trace, capsys):
    out = tmp_path / "out.json"
    assert main(["trace", "combine", str(trims_trace), "-o", str(out)]) == 0
    assert main(["trace", "validate", str(out)]) == 0
    assert main(["trace", "summarize", str(trims_trace), "-o", str(tmp_path / "s.json"), "--group-by", "model_name"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["trace", "combine", str(bad), "-o", str(tmp_path / "x.json")]) == 1
    assert "bad.json" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(SystemExit):
        main(["trace", "validate", str(bad)])
    with pytest.raises(SystemExit) as info:
        main(["trace", "combine", "--no-such-flag"])
    assert info.value.code == 2


def test_a_command_group_parsed_alone_imports_only_its_own_modules_and_reads_as_the_whole_parser(tmp_path, capsys):
    import subprocess

    from repro.cli import COMMAND_GROUPS, build_parser

    code = ("import sys\nfrom repro.cli import main\ntry:\n    main(['trace', 'combine', '--help'])\n"
            "except SystemExit:\n    print([m for m in ('repro.pecan.cli', 'repro.trims.cli') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
    whole = build_parser()
    for group in COMMAND_GROUPS:
        alone = build_parser(group)
        assert alone.format_usage() == whole.format_usage()
        with pytest.raises(SystemExit):
            alone.parse_args([group, "--help"])
        shown = capsys.readouterr().out
        with pytest.raises(SystemExit):
            whole.parse_args([group, "--help"])
        assert capsys.readouterr().out == shown


def test_third_party_profiler_traces_validate_and_round_trip(tmp_path):
    """Traces written by viztracer (a real Python profiler) pass validate, combine and round-trip."""
    viztracer = pytest.importorskip("viztracer")
    paths = []
    for i in range(2):
        tracer = viztracer.VizTracer(output_file=str(tmp_path / f"viz{i}.json"), verbose=0)
        tracer.start()
        sorted(str(x) for x in range(200 * (i + 1)))
        json.dumps({"k": list(range(50))})
        tracer.stop()
        tracer.save()
        paths.append(tmp_path / f"viz{i}.json")
    for path in paths:
        assert validate(path)["events"] > 0
        _, events = read_trace(path)
        copy = write_trace(tmp_path / f"copy-{path.name}", events, read_trace(path)[0])
        assert read_trace(copy)[1] == events
    out = tmp_path / "combined.json"
    combine(paths, out)
    report = validate(out)
    assert report["events"] >= sum(validate(p)["events"] for p in paths)
    assert summarize_trace(out)["end_to_end_time"] > 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spans=st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 2), st.integers(1, 50)), min_size=1, max_size=25),
    chunk=st.integers(1, 300),
)
def test_combine_gives_the_same_result_whatever_the_chunking(tmp_path, spans, chunk):
    """Ignored spans whose B and E fall in different chunks, with or without a category on E."""
    events, ts = [], 0
    for ignored, e_has_cat, tid, length in spans:
        cat = "ignore" if ignored else "work"
        events.append({"ph": "B", "name": "s", "cat": cat, "ts": ts, "pid": 1, "tid": tid})
        ts += length
        end = {"ph": "E", "ts": ts, "pid": 1, "tid": tid}
        if e_has_cat:
            end["cat"] = cat
        events.append(end)
        ts += 1
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    combine([path], tmp_path / "whole.json")
    combine([path], tmp_path / "chunked.json", reader_options={"whole_file_limit": 0, "chunk_bytes": chunk})
    assert read_trace(tmp_path / "whole.json")[1] == read_trace(tmp_path / "chunked.json")[1]
    kept = [e for e in read_trace(tmp_path / "whole.json")[1] if e["ph"] != "M"]
    assert len(kept) == 2 * sum(1 for ignored, *_ in spans if not ignored)


# -- one begin/end matcher, wrong field types, no non-finite output ------------------------


UNMATCHED = {
    "stray end": ([{"ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1}, {"ph": "E", "ts": 2, "pid": 1, "tid": 1},
                   {"ph": "E", "ts": 3, "pid": 1, "tid": 1}], r"event 2: 'E' event without a matching 'B'", 1),
    "end on another thread": ([{"ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1},
                               {"ph": "E", "ts": 2, "pid": 1, "tid": 2}], r"event 1: 'E' event without a matching 'B'", 2),
    "dangling begin": ([{"ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1}, {"ph": "B", "name": "b", "ts": 2, "pid": 1, "tid": 1},
                        {"ph": "E", "ts": 3, "pid": 1, "tid": 1}], r"event 0: 'B' event without a matching 'E'", 1),
}


@pytest.mark.parametrize("name", sorted(UNMATCHED))
@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_validate_combine_and_summarize_agree_on_unmatched_pairs(tmp_path, name, options):
    events, message, unmatched = UNMATCHED[name]
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    for tool in (lambda: validate(path, reader_options=options),
                 lambda: combine([path], tmp_path / "out.json", reader_options=options),
                 lambda: summarize_trace(path, reader_options=options)):
        with pytest.raises(TraceError, match=message):
            tool()
    assert not (tmp_path / "out.json").exists()
    # lenient: the unmatched event is skipped and counted, and what is written is well-formed
    report = combine([path], tmp_path / "out.json", strict=False, reader_options=options)
    assert report["skipped"] == unmatched
    validate(tmp_path / "out.json")
    assert summarize_trace(path, strict=False, reader_options=options)["skipped_events"] == unmatched


@pytest.mark.parametrize("adjust", [True, False])
def test_lenient_combine_leaves_out_begins_never_closed_whatever_the_chunking(tmp_path, adjust):
    events = []
    for i in range(40):  # every fifth span is never closed, some are ignored
        cat = "ignore" if i % 7 == 0 else "work"
        events.append({"ph": "B", "name": f"s{i}", "cat": cat, "ts": 10 * i, "pid": 1, "tid": i % 3})
        if i % 5:
            events.append({"ph": "E", "ts": 10 * i + 5, "pid": 1, "tid": i % 3})
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    outputs = []
    for name, options in (("whole", {}), ("chunked", {"whole_file_limit": 0, "chunk_bytes": 128}),
                          ("large chunks", {"whole_file_limit": 0, "chunk_bytes": 1024})):
        report = combine([path], tmp_path / f"{name}.json", adjust=adjust, strict=False, reader_options=options)
        assert validate(tmp_path / f"{name}.json")["events"] > 0
        outputs.append((report["skipped"], read_trace(tmp_path / f"{name}.json")[1]))
    assert outputs[0] == outputs[1] == outputs[2]
    skipped, written = outputs[0]
    assert skipped == 8 and sum(e["ph"] == "B" for e in written) == sum(e["ph"] == "E" for e in written)


WRONG_TYPES = {
    "ph list": ({"ph": ["B"], "ts": 1, "pid": 1, "tid": 1}, "unknown phase ph=['B']"),
    "pid list": ({"ph": "B", "ts": 1, "pid": [1], "tid": 1}, "'pid' must be a number or a string, found [1]"),
    "tid object": ({"ph": "B", "ts": 1, "pid": 1, "tid": {"a": 1}}, "'tid' must be a number or a string"),
    "pid bool": ({"ph": "B", "ts": 1, "pid": True, "tid": 1}, "'pid' must be a number or a string, found True"),
    "name list": ({"ph": "B", "ts": 1, "pid": 1, "tid": 1, "name": ["a"]}, "'name' must be a string, found ['a']"),
    "name number": ({"ph": "B", "ts": 1, "pid": 1, "tid": 1, "name": 5}, "'name' must be a string, found 5"),
    "cat list": ({"ph": "B", "ts": 1, "pid": 1, "tid": 1, "cat": ["ignore"]}, "'cat' must be a string"),
}


@pytest.mark.parametrize("name", sorted(WRONG_TYPES))
@pytest.mark.parametrize("chunked", [False, True])
def test_fields_of_the_wrong_type_give_a_one_line_error(tmp_path, capsys, name, chunked, monkeypatch):
    bad, message = WRONG_TYPES[name]
    good = {"ph": "B", "name": "x", "ts": 0, "pid": 1, "tid": 1}
    events = [good, {"ph": "E", "ts": 1, "pid": 1, "tid": 1}, bad, {"ph": "E", "ts": 2, "pid": 1, "tid": 1}]
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    if chunked:  # the command line's readers use the chunk scanner too
        monkeypatch.setattr("repro.traces.reader.TraceReader.__init__.__defaults__", (True, 0, 64, True))
    out = tmp_path / "out.json"
    for tool in ("combine", "summarize"):
        assert main(["trace", tool, str(path), "-o", str(out)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"repro: error: {path}: event 2: {message}") and err.count("\n") == 1
        assert not out.exists()
    with pytest.raises(SystemExit):
        main(["trace", "validate", str(path)])
    err = capsys.readouterr().err
    assert err.startswith(f"INVALID {path}: event 2: {message}") and err.count("\n") == 1
    # lenient: the bad event is skipped (its end then closes nothing and is skipped too)
    assert combine([path], out, strict=False)["skipped"] == 2


OVERFLOWS = {
    "complete event": [{"ph": "X", "name": "x", "ts": 1e308, "dur": 1e308, "pid": 1, "tid": 1}],
    "far apart pair": [{"ph": "B", "name": "x", "ts": -1e308, "pid": 1, "tid": 1},
                       {"ph": "E", "ts": 1e308, "pid": 1, "tid": 1}],
    "far apart events": [{"ph": "i", "name": "x", "ts": -1e308, "pid": 1, "tid": 1},
                         {"ph": "i", "name": "y", "ts": 1e308, "pid": 1, "tid": 1}],
    "far apart around an ignored span": [
        {"ph": "i", "name": "x", "ts": -1e308, "pid": 1, "tid": 1},
        {"ph": "B", "name": "warmup", "cat": "ignore", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 1, "pid": 1, "tid": 1},
        {"ph": "i", "name": "y", "ts": 1e308, "pid": 1, "tid": 1}],
    "ignored spans longer than a float holds": [
        {"ph": "B", "name": "warmup", "cat": "ignore", "ts": -1e308, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 1e308, "pid": 1, "tid": 1},
        {"ph": "B", "name": "warmup", "cat": "ignore", "ts": 1.5e308, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 1.7e308, "pid": 1, "tid": 1},
        {"ph": "i", "name": "y", "ts": 1.79e308, "pid": 1, "tid": 1}],
}


def _no_constants(name):
    raise AssertionError(f"output holds {name}")


@pytest.mark.parametrize("name", sorted(OVERFLOWS))
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.filterwarnings("error::RuntimeWarning")  # an error message, not numpy's warning besides it
def test_no_output_holds_infinity_or_nan(tmp_path, capsys, monkeypatch, name, chunked):
    """Timestamps whose sums or differences overflow give a clear error or finite values."""
    path = dump(tmp_path / "t.json", {"traceEvents": OVERFLOWS[name]})
    if chunked:
        monkeypatch.setattr("repro.traces.reader.TraceReader.__init__.__defaults__", (True, 0, 64, True))
    for tool in ("combine", "summarize"):
        out = tmp_path / f"{tool}.json"
        if main(["trace", tool, str(path), "-o", str(out)]) == 1:
            err = capsys.readouterr().err
            assert err.startswith(f"repro: error: {path}") and "not a finite number" in err and err.count("\n") == 1
            assert not out.exists()
            continue
        doc = json.loads(out.read_text(), parse_constant=_no_constants)
        if tool == "combine":  # orjson would write a non-finite number as null
            assert all(type(e["ts"]) in (int, float) for e in doc["traceEvents"] if e["ph"] != "M")
    if name == "complete event":
        with pytest.raises(TraceError, match=r"event 0: 'ts' \+ 'dur' is not a finite number"):
            validate(path, reader_options=CHUNKED if chunked else {})


def test_trims_compare_table_reads_request_traces_through_the_trace_tools(tmp_path):
    from repro.trims.experiments import compare_table

    def request(name, load_us, extra_e=False):
        events = [{"ph": "B", "name": "runtime_init", "cat": "ignore", "ts": 0, "pid": 1, "tid": 1},
                  {"ph": "E", "ts": 999, "pid": 1, "tid": 1}]
        ts = 1000
        for phase, length in (("read_params", load_us), ("load_model", load_us), ("forward_predict", 50)):
            events += [{"ph": "B", "name": phase, "cat": "prediction", "ts": ts, "pid": 1, "tid": 1},
                       {"ph": "E", "ts": ts + length, "pid": 1, "tid": 1}]
            ts += length
        if extra_e:
            events.append({"ph": "E", "ts": ts + 1, "pid": 1, "tid": 1})
        return str(write_trace(tmp_path / f"{name}.json", events))

    results = {"original": [{"trace": request(f"o{i}", 400), "latency_us": 1000, "ok": True} for i in range(3)],
               "shared": [{"trace": request(f"s{i}", 10), "latency_us": 100, "ok": True} for i in range(3)]}
    row, = compare_table([{"model": "m", "modes": {m: {"results": r} for m, r in results.items()}}])
    assert row["original_load_ms"] == 0.8 and row["shared_load_ms"] == 0.02 and row["load_speedup"] == 40
    broken = [{"trace": request("bad", 400, extra_e=True), "latency_us": 1000, "ok": True}]
    with pytest.raises(TraceError, match="bad.json: event 8: 'E' event without a matching 'B'"):
        compare_table([{"model": "m", "modes": {"original": {"results": broken}, "shared": {"results": broken}}}])


def _matched_by_stack(events):
    """Reference: pairs, stray ends and dangling begins, matched event by event with a stack."""
    open_b, pairs, strays = {}, [], []
    for i, event in enumerate(events):
        if event["ph"] == "B":
            open_b.setdefault((event["pid"], event["tid"]), []).append(i)
        elif event["ph"] == "E":
            stack = open_b.get((event["pid"], event["tid"]))
            if stack:
                pairs.append((stack.pop(), i))
            else:
                strays.append(i)
    return sorted(pairs), strays, sorted(i for stack in open_b.values() for i in stack)


@settings(max_examples=300, deadline=None)
@given(phases=st.lists(st.tuples(st.sampled_from("BBBEEEXiM"), st.integers(0, 1), st.integers(0, 2)), max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=5))
def test_span_matcher_agrees_with_a_stack_whatever_the_chunks(phases, cuts):
    from repro.traces.matching import SpanMatcher

    events = [{"ph": ph, "pid": pid, "tid": tid, "i": i} for i, (ph, pid, tid) in enumerate(phases)]
    matcher = SpanMatcher("t.json", strict=False)
    pairs, strays = [], []
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    for start, end in zip(bounds, bounds[1:]):
        chunk = events[start:end]
        matched = matcher.feed(chunk, [e["ph"] for e in chunk], start)
        pairs += [(begin["i"], start + int(at)) for begin, at in zip(matched.begins, matched.ends)]
        strays += [start + int(at) for at in matched.strays]
    dangling = [index for index, _ in matcher.finish()]
    assert (sorted(pairs), strays, dangling) == _matched_by_stack(events)


# -- compact reading: the msgspec structs and copied-through JSON texts -------------------


def every_reading_refuses(path, tmp_path, monkeypatch, options, error):
    """summarize, combine and validate, on the compact reading and the general one, each refuse `path`
    with a TraceError matching `error`; combine leaves no output."""
    for general in (False, True):
        with monkeypatch.context() as m:
            if general:
                _general_only(m)
            for tool in (lambda: summarize_trace(path, reader_options=options),
                         lambda: combine([path], tmp_path / "c.json", reader_options=options, workers=1),
                         lambda: validate(path, reader_options=options)):
                with pytest.raises(TraceError, match=error):
                    tool()
    assert not (tmp_path / "c.json").exists()


def _general_only(monkeypatch):
    """Make every reading take the general (orjson) path."""
    from repro.traces.reader import NotCompact

    def refuse(self, with_json=False, part=None):
        raise NotCompact

    monkeypatch.setattr(TraceReader, "compact_chunks", refuse)


def rich_trace():
    """Most of what combine and summarize treat apart: metadata with and without ts, process
    names, several pids (one a string), nested pairs, complete events, ignored spans and events,
    int and float timestamps, and args holding lists of objects."""
    return [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "server"}},
        {"ph": "M", "name": "thread_name", "ts": 0, "pid": 7, "tid": 1, "args": {"name": "main"}},
        {"ph": "B", "name": "warmup", "cat": "ignore", "ts": 100, "pid": 7, "tid": 1},
        {"ph": "E", "ts": 150.5, "pid": 7, "tid": 1},
        {"ph": "B", "name": "outer", "cat": "c", "ts": 160, "pid": 7, "tid": 1, "args": {"l": [{"a": 1}, {"b": [2]}]}},
        {"ph": "X", "name": "sleep", "cat": "ignore", "ts": 170, "dur": 5, "pid": "worker", "tid": 2},
        {"ph": "B", "name": "inner", "cat": "c", "ts": 180.25, "pid": 7, "tid": 1},
        {"ph": "X", "name": "runtime_init", "ts": 181, "dur": 2.5, "pid": "worker", "tid": 2},
        {"ph": "E", "ts": 190, "pid": 7, "tid": 1},
        {"ph": "M", "name": "thread_name", "ts": 191, "pid": 7, "tid": 3, "args": {"name": "side"}},
        {"ph": "M", "name": "thread_sort_index", "tid": 3, "args": {"sort_index": 1}, "pid": 7},
        {"ph": "i", "name": "mark", "ts": 195, "pid": 8, "tid": 1, "s": "t"},
        {"ph": "i", "name": "two words", "s": "t", "tid": 1, "pid": 7, "ts": 196},
        {"ph": "E", "name": "outer", "ts": 1e3, "pid": 7, "tid": 1},
        {"ph": "C", "name": "ctr", "ts": 1001, "args": {"v": 1.5, "unset": None}, "pid": 8},
    ]


@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 200}], ids=["whole", "chunked"])
@pytest.mark.parametrize("adjust", [True, False])
def test_compact_reading_writes_and_summarises_what_the_general_one_does(tmp_path, monkeypatch, options, adjust):
    events = rich_trace()
    paths = [dump(tmp_path / "a.json", {"traceEvents": events, "otherData": {"model_name": "m"}}),
             dump(tmp_path / "b.json", events[2:]),
             dump(tmp_path / "c.json", [dict(e, pid=1) for e in events if e["ph"] != "M"])]
    import repro.traces.reader as reader_module
    from repro.traces.combine import _CompactSpool

    copied, decoded = [], []  # the compact reading is taken for every input
    monkeypatch.setattr(_CompactSpool, "write", lambda self, *a, f=_CompactSpool.write: copied.append(1) or f(self, *a))
    monkeypatch.setattr(reader_module, "_compact_columns", lambda ev, f=reader_module._compact_columns: decoded.append(1) or f(ev))
    compact = combine(paths, tmp_path / "compact.json", adjust=adjust, reader_options=options)
    assert len(copied) == len(paths)
    summaries = [summarize_trace(p, detailed=True, reader_options=options) for p in paths]
    assert len(decoded) >= len(paths) * (2 if options else 1)
    with monkeypatch.context() as m:
        _general_only(m)
        general = combine(paths, tmp_path / "general.json", adjust=adjust, reader_options=options)
        assert [summarize_trace(p, detailed=True, reader_options=options) for p in paths] == summaries
    assert compact == general
    assert (tmp_path / "compact.json").read_bytes() == (tmp_path / "general.json").read_bytes()


NOT_COMPACT = {  # inputs the compact reading leaves to the general one
    "pretty": lambda events: json.dumps({"traceEvents": events}, indent=1).encode(),
    "spaced": lambda events: json.dumps(events).encode(),
    "escapes": lambda events: orjson.dumps([dict(e, name='a "quoted" \\ name') for e in events]),
    "unicode escapes": lambda events: json.dumps([dict(e, name="caf\u00e9") for e in events], separators=(",", ":")).encode(),
    "nested ts": lambda events: orjson.dumps([dict(e, args={"ts": 1, "pid": 2}) for e in events]),
    "no pid": lambda events: orjson.dumps([{k: v for k, v in e.items() if k != "pid"} for e in events]),
    "null ts": lambda events: orjson.dumps([dict(events[0], ts=None), *events[1:]]),
    "float pid": lambda events: orjson.dumps([dict(e, pid=7.0) for e in events]),
    "space after a comma": lambda events: orjson.dumps(events).replace(b',"tid"', b', "tid"'),
    "huge int ts": lambda events: orjson.dumps(events).replace(b'"ts":1001,', b'"ts":18446744073709551616160,'),
    # as many ts keys as events, one of them null (in a kept metadata event) or nested (the one
    # event without a ts is left out: a process name)
    "null ts, a ts key in every event": lambda events: orjson.dumps(
        [dict(e, ts=None if n == 1 else e.get("ts", 0)) for n, e in enumerate(events)]),
    "nested ts, as many ts keys as events": lambda events: orjson.dumps(
        [e if n == 0 else dict(e, ts=e.get("ts", 0), args={"ts": 3}) if e.get("name") == "mark"
         else dict(e, ts=e.get("ts", 0)) for n, e in enumerate(events)]),
}


@pytest.mark.parametrize("name", sorted(NOT_COMPACT))
@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 200}], ids=["whole", "chunked"])
def test_inputs_the_compact_reading_cannot_vouch_for_read_as_before(tmp_path, monkeypatch, name, options):
    path = tmp_path / "t.json"
    path.write_bytes(NOT_COMPACT[name](rich_trace()))
    compact = combine([path], tmp_path / "compact.json", reader_options=options)
    summary = summarize_trace(path, reader_options=options)
    with monkeypatch.context() as m:
        _general_only(m)
        assert combine([path], tmp_path / "general.json", reader_options=options) == compact
        assert summarize_trace(path, reader_options=options) == summary
    assert (tmp_path / "compact.json").read_bytes() == (tmp_path / "general.json").read_bytes()


def _same_as_general(tmp_path, monkeypatch, path, options, compact=True):
    """Combine and summarise `path` as ever, and as the general reading does: the same bytes, the
    same summaries; `compact`: whether combine copied the input through."""
    from repro.traces.combine import _CompactSpool

    copied = []
    monkeypatch.setattr(_CompactSpool, "write", lambda self, *a, f=_CompactSpool.write: copied.append(1) or f(self, *a))
    report = combine([path], tmp_path / "compact.json", reader_options=options)
    summary = summarize_trace(path, detailed=True, reader_options=options)
    assert bool(copied) == compact
    with monkeypatch.context() as m:
        _general_only(m)
        assert combine([path], tmp_path / "general.json", reader_options=options) == report
        assert summarize_trace(path, detailed=True, reader_options=options) == summary
    assert (tmp_path / "compact.json").read_bytes() == (tmp_path / "general.json").read_bytes()


def _combined_as_general(tmp_path, monkeypatch, path, options, adjust=True):
    """Combine `path` as ever and as the general reading does: the same bytes."""
    combine([path], tmp_path / "c.json", adjust=adjust, reader_options=options)
    with monkeypatch.context() as m:
        _general_only(m)
        combine([path], tmp_path / "g.json", adjust=adjust, reader_options=options)
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "g.json").read_bytes()


def _scan_spy(monkeypatch):
    """The number of times a reader scans a file's structure."""
    scans = []
    monkeypatch.setattr(TraceReader, "_scan", lambda self, *a, f=TraceReader._scan, **k: scans.append(1) or f(self, *a, **k))
    return scans


@pytest.mark.parametrize("form", ["object", "array"])
def test_large_compact_files_are_cut_where_the_scan_cuts_them_without_scanning(tmp_path, monkeypatch, form):
    events = rich_trace() * 10  # args holding lists of objects: "},{" inside events; pages of the map released
    other = {"model_name": "m", "gpus": [0, 1]}  # a bracket after the list's own
    path = dump(tmp_path / "t.json", {"traceEvents": events, "otherData": other} if form == "object" else events)
    assert path.stat().st_size > 2 * mmap.PAGESIZE
    for chunk in [*range(1, 400, 7), 5000]:
        scanned = list(TraceReader(path, whole_file_limit=0, chunk_bytes=chunk)._scan(parse_events=True, decode=bytes))
        scans = []
        with monkeypatch.context() as m:
            m.setattr(TraceReader, "_scan", lambda *a, **k: scans.append(1) or iter(()))
            reader = TraceReader(path, whole_file_limit=0, chunk_bytes=chunk)
            cut = [listed for listed, _ in reader._split()]
            metadata = reader.metadata
        assert cut == scanned and not scans
        assert metadata == ({"otherData": other} if form == "object" else {})
        assert [len(events) for _, events in TraceReader(path, whole_file_limit=0, chunk_bytes=chunk)._split()] == [
            len(orjson.loads(listed)) for listed in scanned]
    _same_as_general(tmp_path, monkeypatch, path, {"whole_file_limit": 0, "chunk_bytes": 150})


def test_compact_timestamps_written_otherwise_than_orjson_writes_them_are_written_anew(tmp_path, monkeypatch):
    events = [*rich_trace(), {"ph": "i", "name": "last", "pid": 7, "tid": 1, "ts": 1000}]
    text = orjson.dumps(events).replace(b'"ts":160,', b'"ts":1.6e2,').replace(b'"ts":0,', b'"ts":-0,')
    text = text.replace(b'"ts":150.5,', b'"ts":150.50,').replace(b'"ts":1000}]', b'"ts":1E3}]')
    assert text.count(b"1E3}]") == 1 and b"-0," in text and b"1.6e2" in text and b"150.50" in text
    path = tmp_path / "t.json"
    path.write_bytes(text)
    for options in ({}, {"whole_file_limit": 0, "chunk_bytes": 100}):
        for adjust in (True, False):
            _combined_as_general(tmp_path, monkeypatch, path, options, adjust)
        _same_as_general(tmp_path, monkeypatch, path, options)


SCANNED = {  # large files the compact reading cannot cut without a scan, but reads all the same
    "other keys first": lambda events: orjson.dumps({"otherData": {"model_name": "m"}, "traceEvents": events}),
    "brackets after the list": lambda events: orjson.dumps({"traceEvents": events})[:-1]
    + b',"otherData":{"deep":' + b"[" * 9 + b"1" + b"]" * 9 + b"}}",
    "spaced": lambda events: json.dumps(events).encode(),
}


@pytest.mark.parametrize("name", sorted(SCANNED))
def test_large_files_not_cut_compactly_are_scanned(tmp_path, monkeypatch, name):
    import repro.traces.reader as reader_module

    monkeypatch.setattr(reader_module, "_LONGEST_EVENT", 400)  # "spaced": no cut near the start
    path = tmp_path / "t.json"
    path.write_bytes(SCANNED[name](rich_trace() * 3))
    scans = _scan_spy(monkeypatch)
    options = {"whole_file_limit": 0, "chunk_bytes": 150}
    chunks = list(TraceReader(path, **options).compact_chunks())
    assert scans and sum(map(len, (events for events, _ in chunks))) == len(list(TraceReader(path, **options).events()))
    _same_as_general(tmp_path, monkeypatch, path, options, compact=name != "spaced")
    _same_as_general(tmp_path, monkeypatch, path, {}, compact=name != "spaced")  # whole


NOT_CUT = {  # large files the compact reading leaves to the general one
    "spaced after the start": lambda events: orjson.dumps(events[:4])[:-1] + b", " + json.dumps(events[4:])[1:].encode(),
    "many lists of objects": lambda events: orjson.dumps(  # more cuts inside one event than are tried
        [dict(events[0], args={"name": "server", "l": [{"a": n} for n in range(30)]}), *events[1:]]),
    "a list after the list": lambda events: orjson.dumps({"traceEvents": events})[:-1] + b',"gpus":[0,1],"n":1}',
    "a bad type": lambda events: orjson.dumps([*events[:9], dict(events[9], name=["x"]), *events[10:]]),
}


@pytest.mark.parametrize("name", sorted(NOT_CUT))
def test_large_files_the_compact_cuts_cannot_vouch_for_read_as_before(tmp_path, monkeypatch, name):
    import repro.traces.reader as reader_module
    from repro.traces.reader import NotCompact

    monkeypatch.setattr(reader_module, "_LONGEST_EVENT", 400)
    path = tmp_path / "t.json"
    path.write_bytes(NOT_CUT[name](rich_trace()))
    options = {"whole_file_limit": 0, "chunk_bytes": 100}
    scans = _scan_spy(monkeypatch)
    with pytest.raises(NotCompact):
        list(TraceReader(path, **options).compact_chunks())
    assert not scans
    if name == "a bad type":
        for tool in (lambda: summarize_trace(path, reader_options=options),
                     lambda: combine([path], tmp_path / "c.json", reader_options=options)):
            with pytest.raises(TraceError, match=r"t\.json: event 9: 'name' must be a string"):
                tool()
        return
    _same_as_general(tmp_path, monkeypatch, path, options, compact=False)


REPEATED_KEYS = {  # a top-level key twice: orjson took the last value, so the second list stood in for the first
    "list key, as orjson writes": (lambda events: orjson.dumps({"traceEvents": events})[:-1] + b',"traceEvents":'
                                   + orjson.dumps(events[2:4]) + b"}", "traceEvents"),
    "list key, not a list": (lambda events: orjson.dumps({"traceEvents": events})[:-1] + b',"traceEvents":{"x":1}}',
                             "traceEvents"),
    "list key first, escaped": (lambda events: b'{"trace\\u0045vents":[],' + orjson.dumps({"traceEvents": events})[1:],
                                "traceEvents"),
    "other key, as orjson writes": (lambda events: orjson.dumps({"traceEvents": events, "otherData": {}})[:-1]
                                    + b',"otherData":{"model_name":"m"}}', "otherData"),
    "other key, spaced": (lambda events: json.dumps({"otherData": {}, "traceEvents": events}).encode()[:-1]
                          + b', "otherData": {"model_name": "m"}}', "otherData"),
}


@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 150}], ids=["whole", "chunked"])
@pytest.mark.parametrize("name", sorted(REPEATED_KEYS))
def test_a_top_level_key_repeated_is_refused_naming_it(tmp_path, monkeypatch, name, options):
    make, key = REPEATED_KEYS[name]
    path = tmp_path / "t.json"
    path.write_bytes(make(rich_trace()))
    error = rf"t\.json: not a Chrome trace: the key '{key}' appears twice at the top level"
    every_reading_refuses(path, tmp_path, monkeypatch, options, error)


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
@pytest.mark.parametrize("doc", [{"traceEvents": [], "otherData": {"model_name": "m"}}, [],
                                 [{"ph": "M", "name": "thread_name", "pid": 3, "tid": 1, "args": {"name": "t"}}]],
                         ids=["empty list", "empty array", "no timestamps"])
def test_compact_inputs_without_events_or_timestamps_read_as_before(tmp_path, monkeypatch, options, doc):
    _same_as_general(tmp_path, monkeypatch, dump(tmp_path / "t.json", doc), options)


@pytest.mark.parametrize("text", [b'{"otherData":{},"traceEvents":{}}', b'"traceEvents"'])
def test_whole_files_that_are_no_trace_are_errors_as_before(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_bytes(text)
    for tool in (lambda: summarize_trace(path), lambda: combine([path], tmp_path / "c.json")):
        with pytest.raises(TraceError, match=r"t\.json: not a Chrome trace"):
            tool()


@pytest.mark.parametrize("text, error", [
    (b'{"traceEvents":[{"ph":"i","ts":1,"pid":1,"tid":1},{"ph":"i","ts":2,"pid":1,"tid":1}', "truncated"),
    (b'[{"ph":"i","ts":1,"pid":1,"tid":1},{"ph":"i","ts":2,"pid":1,"tid":1}] x', "data after"),
    (b'[{"ph":"i","ts":1,"pid":1,"tid":1},{"ph":"i","ts":2,"pid":1,"tid":1}', "not closed|unbalanced"),
])
def test_large_files_cut_short_are_errors_as_before(tmp_path, text, error):
    path = tmp_path / "t.json"
    path.write_bytes(text)
    for tool in (lambda: summarize_trace(path, reader_options=CHUNKED),
                 lambda: combine([path], tmp_path / "c.json", reader_options=CHUNKED)):
        with pytest.raises(TraceError, match=rf"t\.json: .*({error})"):
            tool()


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_invalid_utf8_anywhere_is_an_error_as_before(tmp_path, options):
    path = tmp_path / "bad.json"
    path.write_bytes(b'[{"ph":"i","ts":1,"pid":1,"tid":1,"args":{"s":"\xff"}}]')
    for tool in (lambda: summarize_trace(path, reader_options=options),
                 lambda: combine([path], tmp_path / "c.json", reader_options=options)):
        with pytest.raises(TraceError, match=r"bad\.json: invalid JSON"):
            tool()


# -- summaries: edge cases of the per-chunk arithmetic ----------------------------------


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_lenient_summary_skips_bad_events_and_counts_the_rest(tmp_path, options):
    events = [
        {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "a", "ts": "late", "dur": 10, "pid": 1, "tid": 1},
        {"ph": "B", "name": "b", "ts": 20, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 26, "pid": 1, "tid": 1},
    ]
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError, match="event 1"):
        summarize_trace(path, reader_options=options)
    summary = summarize_trace(path, strict=False, reader_options=options)
    assert summary["skipped_events"] == 1
    assert summary["events"] == {"a": {"count": 1, "total": 10, "mean": 10}, "b": {"count": 1, "total": 6, "mean": 6}}
    assert summary["end_to_end_time"] == 26


@pytest.mark.parametrize("pretty", [False, True], ids=["compact", "pretty"])
def test_summary_reads_with_the_reader_options_given(tmp_path, monkeypatch, pretty):
    events = [{"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events, indent=1) if pretty else json.dumps(events, separators=(",", ":")))
    given = []
    monkeypatch.setattr(sys.modules["repro.traces.summarize"], "TraceReader", lambda p, **kw: given.append(kw) or TraceReader(p, **kw))
    summarize_trace(path, reader_options=CHUNKED)
    assert given and all(kw == dict(CHUNKED, strict=True) for kw in given)


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_complete_events_without_dur_last_no_time_and_int_times_stay_ints(tmp_path, options):
    events = [
        {"ph": "X", "name": "a", "ts": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 7, "dur": 3, "pid": 1, "tid": 1},
    ]
    summary = summarize_trace(dump(tmp_path / "t.json", events), reader_options=options)
    assert summary["events"]["a"] == {"count": 1, "total": 0, "mean": 0}
    lenient = summarize_trace(tmp_path / "t.json", strict=False, reader_options=options)  # read as dicts
    assert lenient["events"]["a"] == {"count": 1, "total": 0, "mean": 0}
    assert summary["end_to_end_time"] == 5 and type(summary["end_to_end_time"]) is int
    assert type(summary["end_to_end_process_time"]) is int


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_timestamps_beyond_64_bits_give_float_times(tmp_path, options):
    path = tmp_path / "t.json"
    path.write_bytes(b'[{"ph":"B","name":"a","ts":10,"pid":1,"tid":1},{"ph":"E","ts":%d,"pid":1,"tid":1}]' % 2**70)
    summary = summarize_trace(path, reader_options=options)
    assert summary["end_to_end_time"] == float(2**70 - 10) and type(summary["end_to_end_time"]) is float
    assert summary["events"]["a"]["total"] == float(2**70 - 10)


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_summary_names_the_event_whose_duration_overflows(tmp_path, options):
    events = [
        {"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "B", "name": "b", "ts": -1.5e308, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 1.5e308, "pid": 1, "tid": 1},
    ]
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError) as error:
        summarize_trace(path, reader_options=options)
    assert str(error.value) == f"{path}: event 2: duration is not a finite number (timestamps too far apart)"


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_summary_refuses_an_end_to_end_time_that_overflows(tmp_path, options):
    events = [
        {"ph": "X", "name": "a", "ts": -1.5e308, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "name": "a", "ts": 1.5e308, "dur": 1, "pid": 1, "tid": 1},
    ]
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError) as error:
        summarize_trace(path, reader_options=options)
    assert str(error.value) == f"{path}: end_to_end_time is not a finite number (timestamps too far apart)"


def test_summary_over_chunks_keeps_extremes_and_counts_of_earlier_chunks(tmp_path):
    events = [
        {"ph": "X", "name": "a", "ts": 0, "dur": 1000, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 10, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "c", "ts": 15, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "name": "d", "ts": 16, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "name": "a", "ts": 20, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 22, "dur": 1, "pid": 1, "tid": 1},
    ]
    summary = summarize_trace(dump(tmp_path / "t.json", events), reader_options=CHUNKED)
    assert summary["events"] == {"a": {"count": 2, "total": 1001, "mean": 500.5}, "b": {"count": 2, "total": 6, "mean": 3},
                                 "c": {"count": 1, "total": 2, "mean": 2}, "d": {"count": 1, "total": 2, "mean": 2}}
    assert (summary["end_to_end_time"], summary["end_to_end_process_time"]) == (1000, 1000)


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_combine_zero_origin_and_a_timestamp_just_inside_an_ignored_span(tmp_path, options):
    events = [
        {"ph": "i", "name": "a", "ts": 0, "pid": 1, "tid": 1, "s": "t"},
        {"ph": "X", "name": "gc", "cat": "ignore", "ts": 10, "dur": 10, "pid": 1, "tid": 2},
        {"ph": "i", "name": "b", "ts": 11, "pid": 1, "tid": 1, "s": "t"},
        {"ph": "i", "name": "c", "ts": 25, "pid": 1, "tid": 1, "s": "t"},
    ]
    combine([dump(tmp_path / "t.json", events)], tmp_path / "c.json", reader_options=options)
    assert [(e["name"], e["ts"]) for e in read_trace(tmp_path / "c.json")[1] if e["ph"] != "M"] == \
        [("a", 0), ("b", 10), ("c", 15)]


@pytest.mark.parametrize("options", [{}, CHUNKED, {"whole_file_limit": 0, "chunk_bytes": 1}], ids=["whole", "chunked", "tiny"])
@pytest.mark.parametrize("compact", [True, False], ids=["compact", "general"])
def test_the_first_of_equal_least_timestamps_is_the_origin_whatever_the_chunking(tmp_path, monkeypatch, options, compact):
    """An integer least timestamp keeps integer timestamps integers, also where a float equal to
    it comes later (in a later chunk)."""
    if not compact:
        _general_only(monkeypatch)
    events = [{"ph": "i", "name": "a", "ts": ts, "pid": 1, "tid": 1, "s": "t"} for ts in (7, 5, 9, 5.0, 12)]
    combine([dump(tmp_path / "t.json", events)], tmp_path / "c.json", reader_options=options)
    stamps = [e["ts"] for e in read_trace(tmp_path / "c.json")[1] if e["ph"] != "M"]
    assert stamps == [2, 0, 4, 0, 7]
    assert [type(ts) for ts in stamps] == [int, int, int, float, int]


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.filterwarnings("error:invalid value encountered")  # not a finite number: the TraceError tells
@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
@pytest.mark.parametrize("span", [False, True, "long"], ids=["no span", "span", "spans longer than a float"])
def test_combine_refuses_adjusted_timestamps_that_overflow(tmp_path, options, span):
    events = [{"ph": "i", "name": "a", "ts": -1.5e308, "pid": 1, "tid": 1, "s": "t"},
              {"ph": "i", "name": "b", "ts": 1.5e308, "pid": 1, "tid": 1, "s": "t"}]
    if span == "long":  # the spans' lengths add up to more than a float holds: origin and ts both -inf, less the cut
        events = [{"ph": "X", "name": "gc", "cat": "ignore", "ts": -1.7e308, "dur": 1.6e308, "pid": 1, "tid": 2},
                  {"ph": "X", "name": "gc", "cat": "ignore", "ts": 0, "dur": 1.7e308, "pid": 1, "tid": 2},
                  {"ph": "i", "name": "a", "ts": 1.72e308, "pid": 1, "tid": 1, "s": "t"},
                  {"ph": "i", "name": "b", "ts": 1.75e308, "pid": 1, "tid": 1, "s": "t"}]
    elif span:
        events.append({"ph": "X", "name": "gc", "cat": "ignore", "ts": 0, "dur": 1, "pid": 1, "tid": 2})
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError) as error:
        combine([path], tmp_path / "c.json", reader_options=options)
    assert str(error.value) == (f"{path}: adjusted timestamp is not a finite number (timestamps too far apart; "
                                "try --no-adjust)")


BEYOND_INT64 = {"span": (2**63 + 20, [9.3e18, 9.4e18, 9.5e18]), "ts": (20, [5, 2**63 + 25, 2**63 + 100])}


# a whole input's timestamps beyond int64 are read as floats (rounded, never wrapped around)
def _gc_span_trace(tmp_path, span, stamps):
    """A trace of instant events at `stamps` and an ignored span of 10 from `span`."""
    events = [{"ph": "X", "name": "gc", "cat": "ignore", "ts": span, "dur": 10, "pid": 1, "tid": 2},
              *({"ph": "i", "name": "a", "ts": ts, "pid": 1, "tid": 1, "s": "t"} for ts in stamps)]
    return dump(tmp_path / "t.json", events)


def _instants(path):
    return [e["ts"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "i"]


def _refused_then_kept(tmp_path, path, options, message):
    """combine refuses `path` with `message`, writing nothing; the instants' timestamps with --no-adjust."""
    with pytest.raises(TraceError) as error:
        combine([path], tmp_path / "c.json", reader_options=options)
    assert str(error.value) == f"{path}: {message}"
    assert not (tmp_path / "c.json").exists()
    combine([path], tmp_path / "c.json", adjust=False, reader_options=options)
    return _instants(tmp_path / "c.json")


@pytest.mark.parametrize("where, options", [("span", {}), ("span", CHUNKED), ("ts", CHUNKED)],
                         ids=["span-whole", "span-chunked", "ts-chunked"])
def test_combine_refuses_integers_from_2_63_on_where_spans_are_cut(tmp_path, where, options):
    span, stamps = BEYOND_INT64[where]
    message = "a timestamp or ignored span is an integer of 2**63 or more, beyond what adjusting handles (try --no-adjust)"
    assert _refused_then_kept(tmp_path, _gc_span_trace(tmp_path, span, stamps), options, message) == stamps


def test_combine_keeps_integers_from_2_63_on_exact_without_spans(tmp_path):
    events = [{"ph": "i", "name": n, "ts": 2**63 + ts, "pid": 1, "tid": 1, "s": "t"} for n, ts in (("a", 10), ("b", 25))]
    combine([dump(tmp_path / "t.json", events)], tmp_path / "c.json")
    assert [e["ts"] for e in json.loads((tmp_path / "c.json").read_text())["traceEvents"] if e["ph"] == "i"] == [0, 15]


# (kept timestamps, the ignored span's start), adjusted timestamps or None where refused: int64
# arithmetic would wrap around where timestamps, spans and origin lie 2**63 or more apart (9e18 less
# -9e18 came out as -446744073709551626)
APART = {
    "far apart": (([-9 * 10**18, 9 * 10**18], 0), None),
    "just within": (([-(2**62), 2**62 - 1], 0), [0, 2**63 - 1 - 10]),
    "2**63 apart": (([-(2**62), 2**62], 0), None),
    "a span far below": (([0, 10], -(2**63)), None),
    "a span far above": (([-1, 10], 2**63 - 11), None),
    "a span just within": (([0, 10], 2**63 - 11), [0, 10]),
}


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
@pytest.mark.parametrize("case", sorted(APART))
def test_combine_refuses_integer_timestamps_2_63_apart_where_spans_are_cut(tmp_path, options, case):
    (stamps, span), adjusted = APART[case]
    path = _gc_span_trace(tmp_path, span, stamps)
    if adjusted is None:
        message = "integer timestamps 2**63 or more apart, beyond what adjusting handles (try --no-adjust)"
        assert _refused_then_kept(tmp_path, path, options, message) == stamps
    else:
        combine([path], tmp_path / "c.json", reader_options=options)
        assert _instants(tmp_path / "c.json") == adjusted


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_summarize_takes_durations_of_integers_2_63_apart_as_floats(tmp_path, options):
    """int64 arithmetic would wrap around: a duration of 1.8e19 came out as -4.5e17, and two
    initialisations of 5e18 each summed to a negative time."""
    big = 9 * 10**18
    events = [{"ph": "B", "name": "load_model", "cat": "prediction", "ts": -big, "pid": 1, "tid": 1},
              {"ph": "E", "ts": big, "pid": 1, "tid": 1},
              {"ph": "B", "name": "back", "cat": "prediction", "ts": big, "pid": 1, "tid": 2},
              {"ph": "E", "ts": -big, "pid": 1, "tid": 2},
              *({"ph": "X", "name": "runtime_init", "cat": "ignore", "ts": 0, "dur": 5 * 10**18, "pid": 1, "tid": t}
                for t in (3, 4))]
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError, match=r"event 3: 'E' event at ts -9e\+18 is earlier than the 'B' it closes"):
        summarize_trace(path, reader_options=options)
    summary = summarize_trace(path, strict=False, reader_options=options)  # the pair that ends first skipped
    assert summary["events"]["load_model"]["total"] == 1.8e19
    assert "back" not in summary["events"] and summary["skipped_events"] == 2
    assert summary["init_time"] == 10**19


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
@pytest.mark.parametrize(("begin", "end", "exact"), [(-(2**62), 2**62 - 1, True), (-(2**62), 2**62, False),
                                                     (2**62, -(2**62), True), (2**62, -(2**62) - 1, False)])
def test_summarize_keeps_integer_durations_exact_while_int64_holds_them(tmp_path, options, begin, end, exact):
    """Whether the span runs forwards or backwards (the B and E swapped: refused, or skipped leniently)."""
    events = [{"ph": "B", "name": "load_model", "cat": "prediction", "ts": begin, "pid": 1, "tid": 1},
              {"ph": "E", "ts": end, "pid": 1, "tid": 1}]
    if end < begin:
        path = dump(tmp_path / "back.json", events)
        with pytest.raises(TraceError, match="earlier than the 'B' it closes"):
            summarize_trace(path, reader_options=options)
        summary = summarize_trace(path, strict=False, reader_options=options)
        assert (summary["events"], summary["skipped_events"], summary["end_to_end_time"]) == ({}, 2, 0)
        begin, end, exact = end, begin, begin - end < 2**63  # forwards: -2**63 fits int64, 2**63 not
        events = [{**events[0], "ts": begin}, {**events[1], "ts": end}]
    summary = summarize_trace(dump(tmp_path / "t.json", events), reader_options=options)
    assert summary["events"]["load_model"]["total"] == float(end - begin)
    expected = end - begin if exact else float(end - begin)
    assert summary["end_to_end_time"] == expected and type(summary["end_to_end_time"]) is type(expected)


def test_summarize_keeps_integer_starts_of_mixed_events_exact(tmp_path):
    events = [{"ph": "B", "name": "a", "cat": "prediction", "ts": 2**60 + 1, "pid": 1, "tid": 1},
              {"ph": "E", "ts": 2.0**61, "pid": 1, "tid": 1}]
    summary = summarize_trace(dump(tmp_path / "t.json", events), detailed=True)
    assert [(e["start"], type(e["start"])) for e in summary["detailed_events"]] == [(2**60 + 1, int)]


def test_combine_refuses_an_event_holding_its_timestamp_marker(tmp_path, monkeypatch):
    combine_module = sys.modules["repro.traces.combine"]
    monkeypatch.setattr(combine_module.secrets, "token_hex", lambda n=None: "0" * 16)
    marker = combine_module._Spool(tmp_path, True, True).marker_value
    events = [{"ph": "i", "name": marker, "ts": 1, "pid": 1, "tid": 1, "s": "t"}]
    path = dump(tmp_path / "t.json", events)
    with pytest.raises(TraceError) as error:
        combine([path], tmp_path / "c.json", reader_options=CHUNKED)
    assert str(error.value) == f"{path}: an event contains the combiner's timestamp marker; combine it again"


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_a_process_name_without_an_args_object_names_no_process(tmp_path, options):
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": ["server"]},
              {"ph": "i", "name": "a", "ts": 1, "pid": 1, "tid": 1, "s": "t"},
              {"ph": "i", "name": "b", "ts": 2, "pid": 2, "tid": 1, "s": "t"}]
    report = combine([dump(tmp_path / "t.json", events)], tmp_path / "c.json", reader_options=options)
    names = [e["args"]["name"] for e in read_trace(tmp_path / "c.json")[1] if e["ph"] == "M"]
    assert names == ["t", "t"] and report["events"] == 4


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_a_file_read_in_chunks_waits_serialised_one_read_whole_as_events(tmp_path, options):
    from repro.traces.combine import _read_input

    events = [{"ph": "i", "name": "a", "ts": 1, "pid": 1, "tid": 1, "s": "t"}]
    spool = _read_input(dump(tmp_path / "t.json", events), 1, True, True, options, False)[2]
    assert spool.serialise is bool(options)


# -- byte-level edits of compact text: splice -----------------------------------------------


def test_find_and_key_values_find_keys_at_every_alignment_and_depth_only_as_keys():

    from repro.traces.splice import find, key_values, words

    for pad in range(8):  # every offset modulo the four bytes read at once
        text = (b'[{"a":"' + b"x" * pad + b'","ts":12,"pid":3},{"ts":-4.5e-3,"b":{"ts":"n"},"xts":1,"tsx":2,'
                b'"name":"ts","pid":"p,}"},{"pid":0,"ts":7}]')
        view, quads = words(text)
        assert find(quads, b'"ts"').tolist() == [m.start() for m in re.finditer(b'"ts"', text)]
        assert [text[i : i + 3] for i in key_values(view, quads, b"ts")] == [b"12,", b"-4.", b'"n"', b"7}]"]
        assert [text[i : i + 3] for i in key_values(view, quads, b"pid")] == [b"3},", b'"p,', b'0,"']
    view, quads = words(b'{"ts":')  # a key with its value cut off, and texts shorter than four bytes
    assert key_values(view, quads, b"ts").size == 0
    for text in (b"", b"[", b"[]", b"[1]"):
        assert find(words(text)[1], b'},{"').size == 0


def test_find_sees_a_pattern_that_ends_the_text_at_every_alignment():
    from repro.traces.splice import find, words

    for pad in range(8):  # the last four bytes are the pattern: the last word read from each offset
        assert find(words(b"x" * pad + b'"ts"')[1], b'"ts"').tolist() == [pad]
        assert find(words(b"x" * pad + b'"ts')[1], b'"ts"').size == 0


def test_spaced_tells_whitespace_between_tokens_from_whitespace_in_strings():
    from repro.traces.splice import spaced

    assert not spaced(b'[{"a":1,"b":"x"}]')
    for blank in (b" ", b"\n", b"\t", b"\r"):
        assert spaced(b'[{"a":' + blank + b'1}]'), blank  # alone between two tokens
        assert spaced(b'[{"a":"x' + blank + b'"},' + blank + b'{}]'), blank  # in a string and between
        assert not spaced(b'[{"a":"x' + blank + b'y","b":"' + blank + b'"}]'), blank  # in strings only
    assert spaced(b'[{"a":"x\ty",\n"b":\r 1}]')  # every kind of blank in the text, some between tokens
    assert not spaced(b'[{"a":" \n\t\r"}]')  # every kind, all in a string


def test_value_ends_of_numbers_strings_long_values_and_values_at_the_end():
    import numpy as np

    from repro.traces.splice import key_values, value_ends, words

    long = b"1." + b"0" * 60 + b"1"  # longer than the window looked at first
    text = (b'[{"ts":' + long + b',"pid":"a,b}c"},{"pid":-1e+5,"ts":-0},{"ts":1E3,"pid":"x"},'
            b'{"pid":2,"args":{"k":[{"a":1},{"b":2}]},"ts":2.5},{"ts":"","pid":""}]')
    view, quads = words(text)
    starts = np.concatenate([key_values(view, quads, b"ts"), key_values(view, quads, b"pid")])
    values = [text[a:b] for a, b in zip(starts, value_ends(view, starts))]
    assert values == [long, b"-0", b"1E3", b"2.5", b'""', b'"a,b}c"', b"-1e+5", b'"x"', b"2", b'""']


def test_splice_replaces_each_range_and_copies_the_rest():
    import numpy as np

    from repro.traces.splice import splice

    text = b"0123456789"
    edit = np.array([0, 3, 5, 9]), np.array([1, 5, 5, 10])  # at the start, an empty range, at the end
    assert splice(text, 0, 10, *edit, [b"a", b"", b"<>", b"zz"]) == b"a12<>5678zz"
    assert splice(text, 2, 8, np.array([3, 4]), np.array([4, 7]), [b"X", b"Y"]) == b"2XY7"
    assert splice(text, 2, 8, np.zeros(0, int), np.zeros(0, int), []) == b"234567"


@pytest.mark.parametrize("spans", [[], [(10, 20)], [(10, 20.5), (-(2**40), -(2**39))]], ids=["none", "whole", "float"])
@pytest.mark.parametrize("stamps", [[0, 5, 15, 2**53 + 1, -7], [0.5, 12.25, 1e16, -0.0, 1.5e-7, 30.1], [3, 4.5, 25]],
                         ids=["ints", "floats", "mixed"])
def test_adjusted_timestamps_written_from_an_array_are_orjsons_text_of_the_list(stamps, spans):
    from repro.traces.combine import _Shift

    shift = _Shift("t.json", 2, spans)
    assert shift.shifted_json(stamps) == orjson.dumps(shift.shifted(stamps))
    assert type(shift.shifted(stamps)) is list


def _ts_and_pid(events):
    """The compact text of `events` and where each one's ts and pid values start and end."""
    from repro.traces.splice import key_values, value_ends, words

    view, quads = words(orjson.dumps(events))
    ts_at, pid_at = key_values(view, quads, b"ts"), key_values(view, quads, b"pid")
    return view, ts_at, value_ends(view, ts_at), pid_at, value_ends(view, pid_at)


def test_the_bytes_between_ts_and_pid_only_where_every_event_has_the_same_few():
    from repro.traces.combine import _NEAR, _next_to_each_other

    def between(events):
        return _next_to_each_other(*_ts_and_pid(events))

    assert between([{"ts": 1, "pid": 7}, {"ts": 22.5, "pid": 7, "tid": 1}, {"ts": -3, "pid": 8}]) == b',"pid":'
    assert between([{"ph": "i", "pid": 7, "ts": 1}, {"pid": 17, "ts": 1e3, "s": "t"}]) == b',"ts":'
    assert between([{"ts": 1, "tid": 1, "pid": 7}, {"ts": 2, "tid": 22, "pid": 7}]) is None  # gaps of two lengths
    assert between([{"ts": 1, "tid": 1, "pid": 7}, {"ts": 2, "cat": 2, "pid": 7}]) is None  # one length, not the same
    assert between([{"ts": 1, "pid": 7}, {"pid": 7, "ts": 2}]) is None  # the other way round in one event
    pad = "x" * (_NEAR - len(',"name":"","pid":'))  # the bytes between: ,"name":"xx...","pid":
    assert between([{"ts": 1, "name": pad, "pid": 7}] * 2) == b',"name":"' + pad.encode() + b'","pid":'
    assert between([{"ts": 1, "name": pad + "x", "pid": 7}] * 2) is None  # more than _NEAR bytes


def _copied_events(events, **spell):
    """orjson's text of the events, each key:value of `spell` (bytes) written as given instead."""
    text = orjson.dumps(events)
    for old, new in spell.items():
        assert old.encode() in text
        text = text.replace(old.encode(), new)
    return text


def _ignored_pair(ts, tid=9):
    return [{"ph": "B", "name": "warmup", "cat": "ignore", "ts": ts, "pid": 1, "tid": tid},
            {"ph": "E", "ts": ts + 5, "pid": 1, "tid": tid}]


def _plain(n, ts=100, **extra):
    return [dict({"name": f"e{i}", "ph": "i", "ts": ts + i, "pid": 1, "tid": 1, "s": "t"}, **extra) for i in range(n)]


COPIED = {  # inputs combine copies through, rewriting pid and ts in the bytes; (text, copied)
    "ts and pid words in strings": (orjson.dumps([*_plain(2, name="ts", cat="pid"), dict(_plain(1)[0], args={
        "note": "ts: pid: },{ ", "k": ["ts", "pid"], "tsx": 1, "xpid": 2})]), True),
    "boundaries in strings and args": (orjson.dumps([dict(e, name="a},{", args={"l": [{"x": 1}, {"y": {"z": 2}}]})
                                                     for e in _plain(4)]), True),
    "negative and float timestamps": (orjson.dumps([*_plain(1, ts=-5), *_plain(1, ts=-0.5), *_plain(1, ts=1e-7),
                                                    *_plain(1, ts=123456789012345678), *_plain(1, ts=2.5e15)]), True),
    "exponents and other spellings": (_copied_events(_plain(5, ts=0), **{
        '"ts":0,': b'"ts":-0,', '"ts":1,': b'"ts":1E0,', '"ts":2,': b'"ts":2.0e+0,', '"ts":3,': b'"ts":3.000,',
        '"ts":4,': b'"ts":4' + b"0" * 40 + b"e-40,"}), True),
    "nested ts and pid in dropped events only": (orjson.dumps([
        *_plain(2), dict(_ignored_pair(50)[0], args={"ts": 1, "pid": 2}), _ignored_pair(50)[1], *_plain(2, ts=200)]), True),
    "nested ts in a kept event": (orjson.dumps([*_plain(2), dict(_plain(1)[0], args={"ts": 1})]), False),
    "nested pid in a kept event": (orjson.dumps([*_plain(2), dict(_plain(1)[0], args={"pid": 1})]), False),
    "pid before ts": (orjson.dumps([{"pid": 1, "ts": 100 + i, "ph": "i", "name": "a", "tid": 1} for i in range(4)]), True),
    "the same bytes between ts and pid": (orjson.dumps([{"ts": 10 + i, "tid": 1, "pid": 1, "ph": "i"} for i in range(4)]), True),
    "other bytes between ts and pid": (orjson.dumps([{"ts": 10 + i, "tid": i, "pid": 1, "ph": "i"} for i in range(4)]), True),
    "ts and pid in either order": (orjson.dumps([{"ts": 1, "pid": 1, "ph": "i"}, {"pid": 1, "ts": 2, "ph": "i"}]), True),
    "string pids with commas and braces": (orjson.dumps([*_plain(2), *(dict(e, pid="a,b}c") for e in _plain(2, ts=300))]), True),
    "one string pid": (orjson.dumps([dict(e, pid="p}") for e in _plain(3)]), True),
    "metadata with and without ts": (orjson.dumps([
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}},
        {"ph": "M", "name": "thread_name", "ts": 5, "pid": 1, "tid": 2, "args": {"name": "u"}}, *_plain(3)]), True),
    "dropped first, last and between": (orjson.dumps([*_ignored_pair(1), *_ignored_pair(8), *_plain(2, ts=20),
                                                      *_ignored_pair(30), *_plain(1, ts=40), *_ignored_pair(50)]), True),
    "everything dropped": (orjson.dumps([*_ignored_pair(1), *_ignored_pair(8)]), True),
    "space inside strings": (orjson.dumps(_plain(3, name="two words")), True),
    "space after a colon": (orjson.dumps(_plain(3)).replace(b'"ts":101', b'"ts": 101'), False),
    "newline between events": (orjson.dumps(_plain(3)).replace(b"},{", b"},\n{", 1), False),
    "tab inside args": (orjson.dumps([dict(e, args={"a": 1}) for e in _plain(3)]).replace(b'{"a"', b'{\t"a"', 1), False),
    "an escape in a dropped event": (orjson.dumps([*_plain(2), dict(_ignored_pair(50)[0], name='q"'),
                                                   _ignored_pair(50)[1]]), False),
}


@pytest.mark.parametrize("name", sorted(COPIED))
@pytest.mark.parametrize("options", [{}, {"whole_file_limit": 0, "chunk_bytes": 60}], ids=["whole", "chunked"])
def test_copied_events_are_the_bytes_the_general_reading_writes(tmp_path, monkeypatch, name, options):
    text, copied = COPIED[name]
    path = tmp_path / "t.json"
    path.write_bytes(text)
    for adjust in (True, False):
        _combined_as_general(tmp_path, monkeypatch, path, options, adjust)
    _same_as_general(tmp_path, monkeypatch, path, options, compact=copied)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(st.tuples(st.permutations(["name", "cat", "ts", "pid", "tid", "args"]), st.booleans(),
                              st.one_of(st.integers(-10**6, 10**6), st.floats(-1e9, 1e9)), st.sampled_from([1, 2, "p,}"]),
                              st.sampled_from([None, {}, {"ts": 1}, {"pid": 2}, {"l": [{"a": 1}, {"b": "},{"}]}])),
                    min_size=1, max_size=12),
    chunk=st.integers(20, 400),
)
def test_copied_events_whatever_their_keys_order_values_and_args(tmp_path, monkeypatch, events, chunk):
    """Random key orders, ignored events, timestamps and pids of every type, args holding keys of
    the same names or lists of objects: the combined bytes are the general reading's."""
    trace = []
    for order, ignored, ts, pid, args in events:
        fields = {"name": "a", "cat": "ignore" if ignored else "c", "ts": ts, "pid": pid, "tid": 1, "args": args}
        trace.append({"ph": "i", "s": "t", **{key: fields[key] for key in order if fields[key] is not None}})
    path = dump(tmp_path / "t.json", trace)
    for options in ({}, {"whole_file_limit": 0, "chunk_bytes": chunk}):
        _combined_as_general(tmp_path, monkeypatch, path, options)


@pytest.mark.fault
def test_a_large_file_that_does_not_end_as_a_trace_is_refused_before_it_is_read(tmp_path):
    """A file past the whole-file limit whose end is not the bracket that closes a trace (here a
    gigabyte of zeros after the list's opening, sparse on disk) is refused at once: every reading
    path read it to its end first (a minute for 8 GB)."""
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [')
    os.truncate(path, 1 << 30)
    message = (f"{path}: truncated, or with data after its end: its last character is not the ']' or '}}' that "
               "closes a trace")
    with pytest.raises(TraceError) as refused:
        TraceReader(path).metadata
    assert str(refused.value) == message
    for command, said in ((["validate", str(path)], "INVALID"),
                          (["summarize", str(path), "-o", str(tmp_path / "s.json")], "repro: error:")):
        result = subprocess.run([str(Path(sys.executable).parent / "repro"), "trace", *command], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 1 and result.stderr == f"{said} {message}\n", result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


@pytest.mark.parametrize("events, total", [
    ([{"name": "a", "ph": "X", "ts": 1e300, "dur": 1, "pid": 1, "tid": 1},
      {"name": "a", "ph": "X", "ts": -1e300, "dur": 1, "pid": 1, "tid": 1}], 2),
    ([{"name": "a", "ph": "X", "ts": 1733450000000000, "dur": 0.3, "pid": 1, "tid": 1}], 0.3),
    ([{"name": "a", "ph": "X", "ts": 5, "dur": 3, "pid": 1, "tid": 1}, {"name": "a", "ph": "B", "ts": 10, "pid": 1, "tid": 1},
      {"name": "a", "ph": "E", "ts": 12.5, "pid": 1, "tid": 1}], 5.5),
], ids=["far-apart", "epoch-microseconds", "with-a-pair"])
def test_a_complete_events_duration_is_its_dur(tmp_path, events, total):
    """An X event lasted (ts + dur) - ts: 0 for dur 1 at ts 1e300, 0.25 for dur 0.3 at a timestamp in
    microseconds since the epoch (the float's precision there)."""
    path = dump(tmp_path / "t.json", {"traceEvents": events})
    for detailed in (False, True):
        summary = summarize_trace(path, detailed=detailed)
        assert summary["events"]["a"]["total"] == total
        if detailed:
            assert sum(e["duration"] for e in summary["detailed_events"]) == total


def test_a_combined_trace_given_with_its_inputs_is_refused(tmp_path, capsys):
    """`trace combine run/*.json`, the glob matching the combined-<uuid>.json written there before:
    every request's events were combined (or summarized) twice. A combined trace alone, or with
    traces it does not hold, is read as any trace."""
    first = dump(tmp_path / "a.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]})
    second = dump(tmp_path / "b.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 5, "dur": 2, "pid": 1, "tid": 1}]})
    combined = tmp_path / "combined-1.json"
    assert main(["trace", "combine", str(first), "-o", str(combined)]) == 0
    said = f"{combined}: is a combined trace of {first}, given too; expected each trace once (the combined trace or its inputs)"
    for command in (["trace", "combine", "-o", str(tmp_path / "c.json")], ["trace", "summarize", "-o", str(tmp_path / "s.json")]):
        capsys.readouterr()
        assert main([*command, str(first), str(combined)]) == 1
        assert capsys.readouterr().err == f"repro: error: {said}\n"
        assert main([*command, str(second), str(combined)]) == 0
    with pytest.raises(TraceError, match=re.escape(said)):
        original_summary([combined, first])
    # a combined trace written again by another tool (not compact: read the general way) is told too
    pretty = tmp_path / "combined-pretty.json"
    pretty.write_text(json.dumps(json.loads(combined.read_text()), indent=1))
    with pytest.raises(TraceError, match=re.escape(said.replace(str(combined), str(pretty)))):
        summarize([first, pretty])
    # a combined trace of a combined trace holds the first one's inputs too
    twice = tmp_path / "combined-2.json"
    assert main(["trace", "combine", str(combined), str(second), "-o", str(twice)]) == 0
    capsys.readouterr()
    assert main(["trace", "combine", str(twice), str(first), "-o", str(tmp_path / "c3.json")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {twice}: is a combined trace of {first}, given too; expected "
                                       "each trace once (the combined trace or its inputs)\n")


def test_trace_validate_writes_one_line_per_file_whatever_its_name(tmp_path, capsys):
    """A file named 'good\\nINVALID other.json: forged' printed a forged INVALID line, exit 0."""
    good = dump(tmp_path / "good\nINVALID other.json: forged", {"traceEvents": []})
    bad = tmp_path / "a\nrepro: error: fake.json"
    bad.write_text("{bad")
    with pytest.raises(SystemExit) as exited:
        main(["trace", "validate", str(good), str(bad)])
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"ok {str(tmp_path)}/good\\nINVALID other.json: forged: 0 events (object form) {{}}"]
    assert len(err.splitlines()) == 1 and err.startswith(f"INVALID {tmp_path}/a\\nrepro: error: fake.json: ")


def test_each_directory_names_a_remedy_it_takes(tmp_path, capsys):
    """`trace summarize a b --each-directory`, a/summary.json the user's: the refusal advised `-o`,
    which that mode refuses with several directories."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        dump(tmp_path / name / "t.json", {"traceEvents": []})
    (tmp_path / "a" / "summary.json").write_text('{"mine": 1}')
    assert main(["trace", "summarize", str(tmp_path / "a"), str(tmp_path / "b"), "--each-directory"]) == 1
    assert capsys.readouterr().err == (f"repro: error: -o/--output {tmp_path / 'a' / 'summary.json'}: holds a file that "
                                       "is not a trace summary; move it, or summarize that directory alone with -o\n")
    assert (tmp_path / "a" / "summary.json").read_text() == '{"mine": 1}'


def test_complete_events_keep_their_durations_type(tmp_path):
    """Durations stay as the trace writes them: whole microseconds stay whole beside a pair's (an
    integer array is not made float), and a fractional dur beside whole timestamps is not truncated."""
    pair = [{"name": "b", "ph": "B", "ts": 10, "pid": 1, "tid": 1}, {"name": "b", "ph": "E", "ts": 12, "pid": 1, "tid": 1}]
    whole = dump(tmp_path / "whole.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 5, "dur": 3, "pid": 1, "tid": 1},
                                                           *pair]})
    durations = {e["name"]: e["duration"] for e in summarize_trace(whole, detailed=True)["detailed_events"]}
    assert durations == {"a": 3, "b": 2} and all(type(d) is int for d in durations.values())
    half = dump(tmp_path / "half.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 5, "dur": 0.5, "pid": 1, "tid": 1},
                                                         *pair]})
    assert summarize_trace(half)["events"]["a"]["total"] == 0.5


@pytest.mark.parametrize("command", ["combine", "summarize"])
def test_the_metadata_copied_from_many_traces_is_bounded_and_named(tmp_path, monkeypatch, command):
    """Combine and summarize copy each trace's metadata into their output: in total bounded as one
    trace's metadata is (here the bound made small), the trace that passes it named."""
    import repro.traces.reader

    monkeypatch.setattr(repro.traces.reader, "LARGEST_PART", 300)
    paths = [dump(tmp_path / f"t{i}.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
                                             "otherData": {"note": str(i) * 120}}) for i in range(3)]
    what = "the combined trace's metadata" if command == "combine" else "the summary's copy of the traces' otherData"
    run = (lambda inputs: combine(inputs, tmp_path / "c.json", workers=1)) if command == "combine" else summarize
    run(paths[:1])
    with pytest.raises(TraceError) as caught:
        run(paths)
    assert str(caught.value) == (f"{paths[1]}: its metadata, with that of the traces before it, makes {what} larger "
                                 "than 0 MiB; expected traces whose metadata (displayTimeUnit, otherData) is kilobytes")


def test_a_commands_success_line_is_one_line_whatever_its_output_is_named(tmp_path, capsys):
    """`trace combine t.json -o $'c\\nd.json'` printed its success line in two."""
    path = dump(tmp_path / "t.json", {"traceEvents": []})
    for command in (["trace", "combine"], ["trace", "summarize"]):
        assert main([*command, str(path), "-o", str(tmp_path / "c\nd.json")]) == 0
        assert capsys.readouterr().out.count("\n") == 1


@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_every_reading_refuses_a_span_that_ends_before_it_begins(tmp_path, monkeypatch, options):
    """combine took an 'E' earlier than its 'B' (which summarize and validate refuse) and wrote a
    combined trace that validate calls invalid, with exit 0; also where the pair spans chunks."""
    events = [{"name": "a", "ph": "B", "ts": 1, "pid": 1, "tid": 1},
              *({"name": "x", "ph": "X", "ts": 2 + i, "dur": 1, "pid": 1, "tid": 2} for i in range(5)),
              {"name": "a", "ph": "E", "ts": 0.5, "pid": 1, "tid": 1}]
    path = tmp_path / "backwards.json"
    path.write_text(json.dumps({"traceEvents": events}))
    every_reading_refuses(path, tmp_path, monkeypatch, options,
                          r"event 6: 'E' event at ts 0.5 is earlier than the 'B' it closes \(ts 1\)")


@pytest.mark.parametrize("number", ["1e999", "9" * 310, "9" * 400])
@pytest.mark.parametrize("options", [{}, CHUNKED], ids=["whole", "chunked"])
def test_every_reading_refuses_a_number_beyond_a_double(tmp_path, monkeypatch, options, number):
    """A number a double cannot hold, in an event's args: validate called the trace invalid JSON,
    summarize and combine took it (combine writing a trace validate refused), and in an event of 400
    characters combine ended in orjson's JSONDecodeError traceback."""
    events = [{"name": "a", "ph": "X", "ts": 1, "dur": 5, "pid": 1, "tid": 1, "args": {"x": 0}},
              {"name": "b", "ph": "X", "ts": 2, "dur": 5, "pid": 1, "tid": 1, "args": {"x": 1}}]
    path = tmp_path / "far.json"
    path.write_text(json.dumps({"traceEvents": events}).replace('"x": 1}', f'"x": {number}}}'))
    every_reading_refuses(path, tmp_path, monkeypatch, options, r"invalid JSON \(number is infinity")


def test_a_number_that_looks_far_in_a_string_is_read():
    """The compact reading leaves anything like a far number to the general one, which reads a string as one."""
    from repro.traces.reader import _FAR_NUMBER

    assert _FAR_NUMBER.search(b'"1e100"') and _FAR_NUMBER.search(b"1E+0999") and not _FAR_NUMBER.search(b"1e99 12e-300")


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


def test_spilled_events_give_back_what_was_appended_in_order(tmp_path):
    from repro.traces.summarize import EventSpill

    spill = EventSpill(tmp_path / "out" / "s.json")  # beside the output, in its nearest directory that exists
    events, others = spill.events(), None
    records = [{"name": "a", "start": 2**70, "duration": 1}, {"name": "b", "start": 1.5, "duration": 0}]
    for record in records:
        events.append(record)
    others = spill.events()  # the next trace's, in the same file
    others.append({"name": "c"})
    assert (events.count, others.count) == (2, 1)
    lines = list(events.lines())
    assert lines == [b'{"name":"a","start":1180591620717411303424,"duration":1}', b'{"name":"b","start":1.5,"duration":0}']
    assert list(others.lines()) == [b'{"name":"c"}']
    assert list(events.lines()) == lines  # read again from its start
    assert list(tmp_path.iterdir()) == []  # an unnamed temporary
    assert os.readlink(f"/proc/self/fd/{spill.file.fileno()}").startswith(f"{tmp_path}/")  # not /tmp
    spill.close()


def test_spilled_events_that_cannot_be_written_name_the_output(tmp_path, monkeypatch):
    import tempfile

    from repro.traces.summarize import EventSpill

    def full(**kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    with pytest.raises(ReproError, match=rf"^{re.escape(str(tmp_path / 's.json'))}: cannot write the detailed events "
                                         r"beside it \(No space left on device\)$"):
        EventSpill(tmp_path / "s.json")


def test_spilled_events_whose_writes_fail_name_the_output_and_close_quietly(tmp_path):
    """A full disk found as the events are written, as they are flushed to be read, or as the next
    trace's seek writes the buffer: the error names the output; closing the file, whose buffer cannot
    be written either, adds no second error."""
    from repro.traces.summarize import EventSpill

    class FullDisk:
        def __init__(self, file):
            self.file = file

        def seek(self, *args):
            return self.file.seek(*args)

        def write(self, *data):
            raise OSError(28, "No space left on device")

        flush = close = write

    spill = EventSpill(tmp_path / "s.json")
    real, spill.file = spill.file, FullDisk(spill.file)
    events = spill.events()
    said = (rf"^{re.escape(str(tmp_path / 's.json'))}: cannot write the detailed events beside it "
            r"\(No space left on device\)$")
    with pytest.raises(ReproError, match=said):
        events.append({"name": "a"})
    with pytest.raises(ReproError, match=said):
        next(events.lines())

    class FullOnSeek(FullDisk):
        seek = FullDisk.write

    spill.file = FullOnSeek(real)  # the next trace's events: the seek to the end writes the buffer
    with pytest.raises(ReproError, match=said):
        spill.events()
    spill.close()
    real.close()


def test_a_detailed_summary_written_by_streaming_is_laid_out_as_json_text_is(tmp_path, capsys):
    """One event per line, indented under its trace; no event: an empty list. A run field named as the
    stream's placeholder is written as it is."""
    from repro.traces.summarize import EventSpill, SpilledEvents

    one = dump(tmp_path / "one.json", {"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
                                       "otherData": {"detailed_events": "\u0000spilled-None-0"}})
    none = dump(tmp_path / "none.json", {"traceEvents": []})
    doc = summarize([one, none], detailed=True, keep=EventSpill(tmp_path / "s.json").events)
    assert all(isinstance(entry["detailed_events"], SpilledEvents) for entry in doc["traces"])
    assert main(["trace", "summarize", "--detailed", str(one), str(none), "-o", str(tmp_path / "s.json")]) == 0
    text = (tmp_path / "s.json").read_text()
    assert ('      "detailed_events": [\n        {"name":"a","cat":null,"start":1,"duration":2,"pid":1,"tid":1}\n'
            '      ]') in text
    assert '      "detailed_events": []' in text
    assert main(["trace", "summarize", str(one), "-o", str(tmp_path / "plain.json")]) == 0
    assert json.loads((tmp_path / "plain.json").read_text())["traces"][0]["detailed_events"] == "\u0000spilled-None-0"
