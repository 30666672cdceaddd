"""The Pecan artifact's training log format: one parser for real cluster logs and the local model's.

Rules (the Pecan artifact's plotting-scripts/extract_costs.py, github.com/eth-easl/pecan-experiments,
experiments/pecan):
- throughput: the mean of the 'N examples/second' samples above 95% of the largest sample;
- workers: read the log backwards; between an 'End Printing' line and the preceding
  'ClientHeartbeat: Normal Tasks' / 'ClientHeartbeat: Current Tasks' line collect the
  'Worker Address: <name>' entries; names containing 'localhost' are local workers; the first
  worker set (from the end) seen 3 times in a row is the converged deployment.
"""

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from repro.errors import ReproError

THROUGHPUT = re.compile(r"(?<!\S)(\S+) examples/second")  # a whole word: one try per word, not per character
DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # as TimeHistory writes it (%.2f): never signed, never an exponent
WORKER = re.compile(r"Worker Address: ([^;\s]+)")
HEARTBEAT = re.compile(r"ClientHeartbeat: (?:Normal|Current) Tasks")
END_PRINTING = "End Printing"
CONVERGED_MATCHES = 3  # extract_costs.py's worker_matches
# The first line of a log this package writes: which run it is (the artifact's logs have none)
RUN_LINE = re.compile(r"\] repro [a-z. ]+: ((?:[a-z_]+=\S* ?)+)$")
PEAK_FRACTION = 0.95
MAX_LINE = 1 << 20  # characters; the artifact's longest lines are a few hundred


@dataclass(frozen=True)
class ParsedLog:
    path: str
    throughput: float  # examples per second
    samples: int  # throughput samples in the log
    remote_workers: int
    local_workers: int
    converged: bool  # a worker set was seen 3 times in a row (else the last complete set is used)
    run: dict = field(default_factory=dict)  # what its RUN_LINE says (experiment, mode, ...), if it has one


def _deployment(marks, path, worker_matches=CONVERGED_MATCHES):
    """(remote, local, converged) from the worker blocks, reading backwards. `marks`: (line index,
    line) of the log's lines that can be part of one (`_is_mark`)."""
    previous, matches, last_complete = None, 0, None
    collecting, current, opened_at = False, set(), None
    for number, line in reversed(marks):
        if END_PRINTING in line:
            if collecting:
                raise ReproError(f"{path}:{opened_at + 1}: deployment block without its 'ClientHeartbeat' line")
            collecting, current, opened_at = True, set(), number
        elif collecting and "Worker Address:" in line:
            match = WORKER.search(line)
            if match:
                current.add(match.group(1))
        elif HEARTBEAT.search(line):
            if not collecting:
                raise ReproError(f"{path}:{number + 1}: deployment block without its 'End Printing' line")
            collecting = False
            workers = frozenset(current)
            last_complete = last_complete if last_complete is not None else workers
            matches = matches + 1 if workers == previous else 1
            previous = workers
            if matches == worker_matches:
                return _count(workers) + (True,)
    if collecting:
        raise ReproError(f"{path}:{opened_at + 1}: truncated deployment block (no 'ClientHeartbeat' line before it)")
    if last_complete is None:
        return 0, 0, True  # no data service: collocated preprocessing
    return _count(last_complete) + (False,)


def _count(workers):
    local = sum(1 for name in workers if "localhost" in name)
    return len(workers) - local, local


def _is_mark(line):
    return END_PRINTING in line or "Worker Address:" in line or HEARTBEAT.search(line) is not None


def _read_log(path):
    """(throughput samples, deployment marks, its RUN_LINE's words) from the log, read line by line: no line may be longer
    than MAX_LINE characters, so a file without line breaks (or a device) cannot fill the memory."""
    from repro.fsutil import open_regular

    samples, marks, run = [], [], {}
    with open_regular(path, path, "a training log", "r", errors="replace") as fh:
        for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE + 1), "")):
            if len(line) > MAX_LINE:
                raise ReproError(f"{path}:{number + 1}: line longer than {MAX_LINE} characters; expected a training log")
            if number == 0 and (m := RUN_LINE.search(line)):  # its $ matches before the line break
                run = dict(word.split("=", 1) for word in m.group(1).split())
            if " examples/second" in line and (m := THROUGHPUT.search(line)):
                if not DECIMAL.fullmatch(m.group(1)):
                    raise ReproError(f"{path}:{number + 1}: throughput {m.group(1)[:40]} examples/second; expected "
                                     "digits with an optional fraction (12.34), as a training log writes them")
                samples.append(float(m.group(1)))
                if not math.isfinite(samples[-1]):  # digits past a float's range
                    raise ReproError(f"{path}:{number + 1}: throughput {m.group(1)[:40]} examples/second is not a "
                                     "finite number; expected a training log's throughput")
            if _is_mark(line):
                marks.append((number, line))
    return samples, marks, run


def parse_log(path, worker_matches=CONVERGED_MATCHES, infer_workers=True):
    """Parse one training log; raise ReproError naming the file and what is missing.

    worker_matches: how many identical worker sets in a row make the converged deployment;
    infer_workers=False counts no workers (extract_costs.py's --noinfer_workers)."""
    try:
        samples, marks, run = _read_log(path)
    except OSError as exc:
        raise ReproError(f"{path}: cannot read log: {exc.strerror}") from None
    if not samples:
        raise ReproError(f"{path}: no throughput lines ('N examples/second') in the log")
    peak = max(samples)
    if peak <= 0:
        raise ReproError(f"{path}: every throughput sample is 0 examples/second: the job made no progress")
    top = [s for s in samples if s > PEAK_FRACTION * peak]
    remote, local, converged = _deployment(marks, path, worker_matches) if infer_workers else (0, 0, True)
    return ParsedLog(str(path), sum(top) / len(top), len(samples), remote, local, converged, run)


# -- writing logs in the same format ------------------------------------------------------

_PY_PREFIX = "I{stamp} 140000000000000 keras_utils.py:145] "
_CC = "tensorflow/core/kernels/data/experimental/data_service_dataset_op.cc"


class LogWriter:
    """Lines in the artifact's format, with timestamps at `start` + simulated seconds."""

    def __init__(self, fh, start=datetime(2026, 1, 1)):
        self.fh, self.start = fh, start

    def _at(self, seconds):
        return self.start + timedelta(seconds=seconds)

    def info(self, seconds, text):
        stamp = self._at(seconds).strftime("%m%d %H:%M:%S.%f")
        self.fh.write(_PY_PREFIX.format(stamp=stamp) + text + "\n")

    def time_history(self, seconds, elapsed, examples_per_second, first_step, last_step):
        self.info(
            seconds,
            f"TimeHistory: {elapsed:.2f} seconds, {examples_per_second:.2f} examples/second "
            f"between steps {first_step} and {last_step}",
        )

    def heartbeat(self, seconds, workers):
        stamp = self._at(seconds).strftime("%Y-%m-%d %H:%M:%S.%f")
        self.fh.write(f"{stamp}: I {_CC}:857] --> ClientHeartbeat: Current Tasks\n")
        for task, name in enumerate(workers):
            self.fh.write(f"{stamp}: I {_CC}:859] Worker Address: {name}; Task id: {4000 + task}; Job id: 2000\n")
        self.fh.write(f"{stamp}: I {_CC}:870] End Printing\n")
