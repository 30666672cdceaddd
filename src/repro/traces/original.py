"""Trace summaries in the original TRIMS tools' shape (`trace summarize` of rai-project/trims-tools,
pkg/trace/trace.go): a JSON array with one record per trace, times as integer nanoseconds, start
times as RFC 3339, and with `detailed` the phases under the original's keys.
"""

import math
from datetime import UTC, datetime

from repro.errors import ReproError, TraceError
from repro.fsutil import file_identity
from repro.traces.summarize import find_traces, summarize_trace

# record key -> (category, event names): the original's event name, and this project's client's
PHASES = {
    "create_prediction": ("prediction", ("create", "create_predictor", "create_prediction")),
    "load_model": ("load", ("load_model",)),
    "grpc_open": ("grpc", ("open",)),
    "ndarray_convert": ("serialization", ("convering_to_nd_array",)),  # sic, the original's name
    "predict": ("prediction", ("predict",)),
    "load_params": ("prediction", ("load_params",)),
    "read_params": ("io", ("read_params",)),
    "set_predict_input": ("prediction", ("set_input", "set_predict_input")),
    "forward_predict": ("prediction", ("forward", "forward_predict")),
    "get_output_shape": ("prediction", ("get_output_shape",)),
    "get_output": ("prediction", ("get_output",)),
    "free_predictor": ("prediction", ("free", "free_predictor")),
}
_PHASE_OF = {(category, name): key for key, (category, names) in PHASES.items() for name in names}
FIELDS = ("run_id", "server", "upr_enabled", "eager_mode", "eager_mode_async", "hostname", "model_name",
          "experiment_description")
RECORD_KEYS = {*FIELDS, "end_to_end_process_time", "end_to_end_time", "init_time"}  # in every record


def _rfc3339(microseconds, path):
    try:
        moment = datetime.fromtimestamp(microseconds / 1e6, UTC)
    except (OverflowError, ValueError, OSError):  # past the years a date holds (1 to 9999)
        raise TraceError(path, f"timestamp {microseconds} us is no date between the years 1 and 9999") from None
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _ns(microseconds, path, key):
    """Integer nanoseconds, as the original writes them; a time that overflows is an error, never Infinity."""
    nanoseconds = microseconds * 1000
    if not math.isfinite(nanoseconds):
        raise TraceError(path, f"{key} of {microseconds} us is not a finite number of nanoseconds")
    return round(nanoseconds)


class _Phases:
    """What a record takes from a trace's events, kept as they come (the events are not held): the
    first start, and each phase's last event (in order of completion, the last match wins, as in the
    original)."""

    def __init__(self, path):
        self.path, self.start, self.phases = path, None, {}

    def append(self, event):
        self.start = event["start"] if self.start is None else min(self.start, event["start"])
        key = _PHASE_OF.get((event["cat"], event["name"]))
        if key is not None:
            self.phases[key] = {"name": event["name"], "category": event["cat"],
                                "start_time_t": _rfc3339(event["start"], self.path),
                                "duration": _ns(event["duration"], self.path, f"{event['name']}'s duration")}


def original_record(path, detailed=True, strict=True, given=frozenset()):
    """One trace's record in the original's shape (`given`: as summarize_trace's)."""
    phases = _Phases(path)
    summary = summarize_trace(path, detailed=True, strict=strict, given=given, keep=lambda: phases)
    record = {key: summary.get(key) for key in FIELDS}
    for key in ("end_to_end_process_time", "end_to_end_time"):
        record[key] = _ns(summary[key], path, key)
    start = summary.get("start_at") or (_rfc3339(phases.start, path) if phases.start is not None else None)
    record["init_time"] = start
    if detailed:
        record["events"] = phases.phases
    return record


def original_summary(inputs, detailed=True, strict=True):
    """The original's summary document of the traces under `inputs`: a list of records."""
    paths = find_traces(inputs)
    given = {file_identity(path) for path in paths}
    return [original_record(path, detailed, strict, given) for path in paths]


def is_summary(path):
    """Whether `path` holds a summary that summarize wrote: its own format (an object with the traces'
    entries and the groups) or the original's (a list of records, each with the original's fields). A
    JSON list or object of the user's named summary.json is neither: a default output never replaces it."""
    from repro.fsutil import read_json

    try:
        data = read_json(path, "a trace summary")
    except ReproError:
        return False
    if isinstance(data, dict):
        return isinstance(data.get("traces"), list) and "groups" in data and all(
            isinstance(entry, dict) and "file" in entry for entry in data["traces"])
    return isinstance(data, list) and all(isinstance(record, dict) and RECORD_KEYS <= set(record) for record in data)
