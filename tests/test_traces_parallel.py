"""trace combine with its inputs read by forked workers (repro.pool): the same bytes and the same
errors as read in one process, and no worker left behind."""

import importlib
import os
import pickle
import queue
import threading

import orjson
import pytest
from test_traces import dump

from repro.cli import main
from repro.errors import ReproError, TraceError
from repro.pool import Pool, TaskFailed
from repro.traces import TraceReader, combine, read_trace

combine_module = importlib.import_module("repro.traces.combine")  # repro.traces.combine is the function
CHUNKS = {"whole_file_limit": 0, "chunk_bytes": 300}


def children():
    """The pids of this process's living children."""
    found = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as fh:
                found |= {int(pid) for pid in fh.read().split()}
        except FileNotFoundError:
            pass  # a thread that has ended since the listing: it had no children of the test's
    return found


@pytest.fixture
def no_children_left():
    before = children()
    yield
    assert children() <= before


def requests(count, pid=1, start=0.0):
    """Requests as the benchmark writes them: an ignored warm-up pair, then a pair per phase."""
    events, ts = [], start
    for n in range(count):
        tid = n % 3
        events += [{"name": "warmup", "cat": "ignore", "ph": "B", "ts": ts, "pid": pid, "tid": tid},
                   {"name": "warmup", "cat": "ignore", "ph": "E", "ts": ts + 5, "pid": pid, "tid": tid}]
        ts += 7
        for phase in ("load", "predict"):
            events += [{"name": phase, "cat": "p", "ph": "B", "ts": ts, "pid": pid, "tid": tid, "args": {"n": n}},
                       {"name": phase, "cat": "p", "ph": "E", "ts": ts + 3.5, "pid": pid, "tid": tid}]
            ts += 4
    return events


def inputs(tmp_path):
    """Inputs that take the parallel reading every way: whole files, large ones in parts (process
    names, pids and ignored spans in later parts), and one read with orjson (whitespace)."""
    late = [{"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "late"}}]
    return [
        dump(tmp_path / "a.json", {"traceEvents": requests(3), "otherData": {"model_name": "m"}}),
        dump(tmp_path / "b.json", requests(40) + requests(40, pid=2, start=1000) + late),
        dump(tmp_path / "c.json", [{"ph": "X", "name": "x", "ts": n, "dur": 1, "pid": "p", "tid": 1} for n in range(200)]),
        tmp_path / "d.json",
    ]


@pytest.fixture
def paths(tmp_path):
    found = inputs(tmp_path)
    found[-1].write_text(orjson.dumps({"traceEvents": requests(20)}).decode().replace(",", ", "))
    return found


_CLOSED, _FAILED, _GONE = object(), object(), object()
WAIT_S = 60  # far longer than any task here takes: a message that does not come is a deadlock


class _ThreadConn:
    """A worker thread's end of its pipe: messages pickled, as through a pipe; EOFError once closed."""

    def __init__(self, inbox, outbox):
        self.inbox, self.outbox = inbox, outbox

    def send(self, message):
        self.outbox.put(pickle.dumps(message))

    def recv(self):
        message = self.inbox.get()
        if message is _CLOSED:
            self.inbox.put(_CLOSED)
            raise EOFError
        return pickle.loads(message)


class ThreadPool:
    """repro.pool.Pool with its workers as threads of this process: each worker its share of the
    tasks in order, the same messages, a failed task reported in place of its next message, a worker
    that has ended failing every later recv. A message waited for in vain fails the test (where
    the forked workers would wait for ever)."""

    def __init__(self, run, tasks, workers):
        self._boxes = [(queue.SimpleQueue(), queue.SimpleQueue()) for _ in range(workers)]  # to the worker, from it
        self._threads = [threading.Thread(target=self._serve, args=(run, tasks[k::workers], *self._boxes[k]), daemon=True)
                         for k in range(workers)]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _serve(run, tasks, inbox, outbox):
        conn = _ThreadConn(inbox, outbox)
        try:
            for task in tasks:
                try:
                    run(task, conn)
                except EOFError:
                    raise
                except Exception:
                    outbox.put(_FAILED)
        except EOFError:
            pass
        finally:
            outbox.put(_GONE)

    def worker(self, i):
        return i % len(self._boxes)

    def recv(self, i):
        box = self._boxes[self.worker(i)][1]
        try:
            message = box.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError(f"task {i}: no message came (a deadlock)") from None
        if message is _GONE:
            box.put(_GONE)
        if message is _FAILED or message is _GONE:
            raise TaskFailed
        return pickle.loads(message)

    def send(self, i, message):
        self._boxes[self.worker(i)][0].put(pickle.dumps(message))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for inbox, _ in self._boxes:
            inbox.put(_CLOSED)
        for thread in self._threads:
            thread.join()


POOLS = {"forks": Pool, "threads": ThreadPool}


@pytest.fixture(params=list(POOLS))
def pool(request, monkeypatch):
    """The workers as forked processes (repro.pool.Pool), or as threads of this process (ThreadPool)."""
    monkeypatch.setattr(combine_module, "Pool", POOLS[request.param])
    return request.param


def read_here_spy(monkeypatch):
    """The inputs combine reads in this process (none where the workers read all)."""
    here = []
    monkeypatch.setattr(combine_module, "_read_here", lambda *a, f=combine_module._read_here: here.append(a[1]) or f(*a))
    return here


@pytest.mark.parametrize("options", [None, CHUNKS, {"whole_file_limit": 0, "chunk_bytes": 1}], ids=["whole", "chunks", "tiny"])
@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("adjust", [True, False])
def test_workers_write_the_bytes_one_process_writes(tmp_path, paths, no_children_left, options, workers, adjust):
    one = combine(paths, tmp_path / "one.json", adjust=adjust, reader_options=options, workers=1)
    more = combine(paths, tmp_path / "more.json", adjust=adjust, reader_options=options, workers=workers)
    assert more == one
    assert (tmp_path / "more.json").read_bytes() == (tmp_path / "one.json").read_bytes()


@pytest.mark.parametrize("options", [None, CHUNKS], ids=["whole", "chunks"])
@pytest.mark.parametrize("adjust", [True, False])
def test_workers_read_every_input_they_can_and_write_the_bytes_one_process_writes(tmp_path, paths, monkeypatch, pool,
                                                                                  no_children_left, options, adjust):
    one = combine(paths, tmp_path / "one.json", adjust=adjust, reader_options=options, workers=1)
    here = read_here_spy(monkeypatch)
    more = combine(paths, tmp_path / "more.json", adjust=adjust, reader_options=options, workers=3)
    assert here == paths[3:]  # only the input with whitespace between tokens, which the workers do not copy
    assert more == one
    assert (tmp_path / "more.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def test_a_large_file_is_read_in_parts_by_the_workers(tmp_path, monkeypatch, no_children_left):
    path = dump(tmp_path / "t.json", requests(60))
    parts = TraceReader(path, **CHUNKS).parts(3)
    assert len(parts) == 3
    here = []
    monkeypatch.setattr(combine_module, "_read_here", lambda *a, f=combine_module._read_here: here.append(a) or f(*a))
    combine([path], tmp_path / "more.json", reader_options=CHUNKS, workers=3)
    assert not here  # no part failed: nothing read again in this process
    combine([path], tmp_path / "one.json", reader_options=CHUNKS, workers=1)
    assert (tmp_path / "more.json").read_bytes() == (tmp_path / "one.json").read_bytes()


@pytest.mark.parametrize("chunk_bytes", [1, 50, 300, 4096])
def test_parts_are_read_in_the_chunks_of_the_whole_file(tmp_path, chunk_bytes):
    path = dump(tmp_path / "t.json", {"traceEvents": requests(30), "otherData": {"x": [1, {"y": "},{"}]}})
    reader = TraceReader(path, whole_file_limit=0, chunk_bytes=chunk_bytes)
    whole = [texts.listed for _, _, texts in reader.compact_chunks(with_json=True)]
    for count in (2, 3, 7):
        parts = reader.parts(count)
        assert 1 <= len(parts) <= count
        pieces = [texts.listed for part in parts for _, _, texts in reader.compact_chunks(with_json=True, part=part)]
        assert pieces == whole


def test_a_part_that_begins_inside_a_span_has_the_file_read_in_one_piece(tmp_path, monkeypatch, no_children_left):
    """A span open across the cuts: the parts fail, the file is read in this process, as ever."""
    events = [{"ph": "B", "name": "all", "cat": "c", "ts": 0, "pid": 1, "tid": 9}, *requests(40),
              {"ph": "E", "ts": 10**6, "pid": 1, "tid": 9}]
    path = dump(tmp_path / "t.json", events)
    here = []
    monkeypatch.setattr(combine_module, "_read_here", lambda *a, f=combine_module._read_here: here.append(a) or f(*a))
    combine([path, path], tmp_path / "more.json", reader_options=CHUNKS, workers=2)
    assert len(here) == 2
    combine([path, path], tmp_path / "one.json", reader_options=CHUNKS, workers=1)
    assert (tmp_path / "more.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def spanned(path, begin, end, count=60):
    """requests(count) with a span on a thread of its own from `begin` to `end` (fractions of the
    events): a part that it crosses the end of fails, and the file is read in this process."""
    events = requests(count)
    b, e = int(len(events) * begin), int(len(events) * end)
    events.insert(e, {"ph": "E", "name": "span", "ts": events[e]["ts"], "pid": 1, "tid": 9})
    events.insert(b, {"ph": "B", "name": "span", "ts": events[b]["ts"], "pid": 1, "tid": 9})
    return dump(path, events)


def span_parts(path, count):
    """The parts (of `count`) that hold the span's begin and its end."""
    data, parts = path.read_bytes(), TraceReader(path, **CHUNKS).parts(count)
    assert len(parts) == count
    return [sum(start <= data.find(b'{"ph":"%s","name":"span"' % ph) for _, start, _ in parts) - 1 for ph in (b"B", b"E")]


@pytest.mark.parametrize("case", ["a middle part, a last part", "whole-run spans"])
def test_workers_whose_parts_failed_read_the_next_inputs_as_ever(tmp_path, monkeypatch, pool, no_children_left, case):
    """x fails in a middle part after its last one answered; y (and each s) in its last one, before
    the parts ahead of it are waited for: every one of these is told in turn that its input is read
    here, and the same workers read the next input as ever (z in parts, each worker's third task;
    `small`, one task, on the worker with two parts left to hear)."""
    if case == "whole-run spans":
        given = [spanned(tmp_path / f"s{n}.json", 0, 0.999) for n in (1, 2)]
        assert [span_parts(s, 2) for s in given] == [[0, 1], [0, 1]]
        given, workers = [*given, dump(tmp_path / "small.json", requests(3))], 2
    else:
        x, y = spanned(tmp_path / "x.json", 0.1, 0.55), spanned(tmp_path / "y.json", 0.45, 0.9)
        assert span_parts(x, 3) == [0, 1] and span_parts(y, 3) == [1, 2]
        given, workers = [y, x, dump(tmp_path / "z.json", requests(60))], 3
    here = read_here_spy(monkeypatch)
    more = combine(given, tmp_path / "more.json", reader_options=CHUNKS, workers=workers)
    assert here == given[:2]
    assert more == combine(given, tmp_path / "one.json", reader_options=CHUNKS, workers=1)
    assert (tmp_path / "more.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def test_the_plans_of_the_parts_make_the_plan_of_the_whole_file(tmp_path, monkeypatch, pool, no_children_left):
    """Process names in every part (the last naming each process), the least timestamp in the last
    part, and a float equal to the first part's least integer in a later part (the first stays the
    origin: integer timestamps stay integers)."""
    named = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
             for pid, name in ((1, "first"), (2, "second"), (1, "last"))]
    falling = [{"ph": "X", "name": "x", "ts": 1000 - n, "dur": 1, "pid": 1 + n % 2, "tid": 1} for n in range(150)]
    rising = [{"ph": "X", "name": "x", "ts": 5 + n, "dur": 1, "pid": 1, "tid": 1} for n in range(150)]
    rising[120]["ts"] = 5.0
    given = [dump(tmp_path / "falling.json", [named[0], *falling[:75], named[1], *falling[75:], named[2]]),
             dump(tmp_path / "rising.json", rising)]
    assert [len(TraceReader(path, **CHUNKS).parts(3)) for path in given] == [3, 3]
    here = read_here_spy(monkeypatch)
    more = combine(given, tmp_path / "more.json", reader_options=CHUNKS, workers=3)
    assert here == []
    assert more == combine(given, tmp_path / "one.json", reader_options=CHUNKS, workers=1)
    assert (tmp_path / "more.json").read_bytes() == (tmp_path / "one.json").read_bytes()
    events = read_trace(tmp_path / "more.json")[1]
    assert [e["args"]["name"] for e in events if e["ph"] == "M"] == ["falling / last", "falling / second", "rising"]
    assert min(e["ts"] for e in events if e["ph"] == "X" and e["pid"] < 3) == 0
    assert [type(e["ts"]) for e in events if e["ph"] == "X" and e["pid"] == 3].count(float) == 1


def test_lenient_combining_reads_in_this_process_even_where_workers_are_asked_for(tmp_path, paths, monkeypatch):
    monkeypatch.setattr(combine_module, "Pool", None)  # never started
    combine(paths, tmp_path / "one.json", strict=False, workers=2)


def test_inputs_of_parallel_bytes_together_and_more_are_read_by_workers(tmp_path, paths, monkeypatch, no_children_left):
    started = []
    monkeypatch.setattr(combine_module, "Pool", lambda *args, f=Pool: started.append(args[2]) or f(*args))
    monkeypatch.setattr(combine_module, "usable_cpus", lambda: 2)
    size = sum(path.stat().st_size for path in paths)
    monkeypatch.setattr(combine_module, "PARALLEL_BYTES", size + 1)
    combine(paths, tmp_path / "one.json")
    assert started == []
    monkeypatch.setattr(combine_module, "PARALLEL_BYTES", size)
    combine(paths, tmp_path / "more.json")
    assert started == [2]


def test_a_missing_input_is_an_error_of_its_own_where_combine_chooses_the_workers(tmp_path, paths):
    missing = tmp_path / "missing.json"
    with pytest.raises(TraceError, match="cannot read") as error:
        combine([paths[0], missing], tmp_path / "out.json")
    assert str(error.value).startswith(str(missing))


BAD = {
    "invalid JSON": b'{"traceEvents":[{"ph":"B","ts":1,"pid":1,"tid":1},{"ph":',
    "stray end in a later part": orjson.dumps(requests(30) + [{"ph": "E", "ts": 10**6, "pid": 1, "tid": 1}]),
    "begin never ended": orjson.dumps(requests(30) + [{"ph": "B", "ts": 10**6, "pid": 1, "tid": 7}]),
    "bad phase": orjson.dumps(requests(30) + [{"ph": "?", "ts": 1, "pid": 1, "tid": 1}]),
    "timestamps too far apart": orjson.dumps([{"ph": "i", "ts": -1.7e308, "pid": 1, "tid": 1, "s": "t"},
                                             *requests(30), {"ph": "i", "ts": 1.7e308, "pid": 1, "tid": 1, "s": "t"}]),
    "a top-level key twice": orjson.dumps({"traceEvents": requests(30), "otherData": {}})[:-1] + b',"otherData":{}}',
    "missing": None,
}


@pytest.mark.parametrize("options", [None, CHUNKS], ids=["whole", "chunks"])
@pytest.mark.parametrize("bad", list(BAD))
def test_an_error_in_a_worker_is_the_error_of_one_process(tmp_path, paths, no_children_left, pool, bad, options):
    path = tmp_path / "bad.json"
    if BAD[bad] is not None:
        path.write_bytes(BAD[bad])
    given = [paths[0], path, paths[1]]
    with pytest.raises(TraceError) as one:
        combine(given, tmp_path / "one.json", reader_options=options, workers=1)
    with pytest.raises(TraceError) as more:
        combine(given, tmp_path / "more.json", reader_options=options, workers=2)
    assert str(more.value) == str(one.value)
    assert str(path) in str(more.value)
    assert not (tmp_path / "more.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("more", ".more"))]


def _interrupted(*args):
    raise KeyboardInterrupt  # Ctrl-C while the workers are reading


def test_an_interrupt_stops_every_worker_and_writes_nothing(tmp_path, paths, monkeypatch, no_children_left):
    monkeypatch.setattr(combine_module._SentSpool, "write", _interrupted)
    with pytest.raises(KeyboardInterrupt):
        combine(paths, tmp_path / "more.json", workers=2)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("more", ".more"))]


def test_an_interrupted_combine_command_says_so_and_leaves_nothing(tmp_path, paths, monkeypatch, capsys,
                                                                   no_children_left):
    monkeypatch.setattr(combine_module._SentSpool, "write", _interrupted)
    monkeypatch.setattr(combine_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(combine_module, "PARALLEL_BYTES", 0)
    assert main(["trace", "combine", "-o", str(tmp_path / "more.json"), *map(str, paths)]) == 130
    assert capsys.readouterr().err == "repro: interrupted\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("more", ".more"))]


def test_one_cpu_reads_in_this_process(tmp_path, paths, monkeypatch):
    monkeypatch.setattr(combine_module, "usable_cpus", lambda: 1)
    monkeypatch.setattr(combine_module, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(combine_module, "Pool", None)  # never started
    combine(paths, tmp_path / "one.json")


def _echo(task, conn):
    if task == "fail":
        raise ValueError(task)
    conn.send(task)
    conn.send(conn.recv() * 2)


def test_pool_runs_each_workers_share_in_order_and_reports_failures(no_children_left):
    tasks = [1, "fail", 3, 4, 5]
    with Pool(_echo, tasks, 2) as pool:
        assert [pool.worker(i) for i in range(5)] == [0, 1, 0, 1, 0]
        assert pool.recv(0) == 1
        with pytest.raises(TaskFailed):
            pool.recv(1)
        pool.send(0, 10)
        assert pool.recv(0) == 20
        for i in (2, 3, 4):
            assert pool.recv(i) == tasks[i]
            pool.send(i, i)
            assert pool.recv(i) == 2 * i


def test_pool_stops_its_workers_on_error(no_children_left):
    with pytest.raises(RuntimeError), Pool(_echo, [1, 2], 2) as pool:
        assert pool.recv(0) == 1
        raise RuntimeError  # the workers wait for a reply: stopped by their pid


def test_a_worker_that_cannot_write_the_output_fails_as_one_process_does(tmp_path, paths, monkeypatch, no_children_left,
                                                                         pool):
    def full(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(combine_module.TraceWriter, "write_serialized", full)
        with pytest.raises(ReproError) as one:
            combine(paths[:3], tmp_path / "out.json", workers=1)
    monkeypatch.setattr(combine_module, "write_at", full)  # in the workers, forked with it
    with pytest.raises(ReproError) as more:
        combine(paths[:3], tmp_path / "out.json", workers=2)
    assert str(more.value) == str(one.value) == f"{tmp_path / 'out.json'}: cannot write (No space left on device)"
    assert not list(tmp_path.glob("*out.json*"))
