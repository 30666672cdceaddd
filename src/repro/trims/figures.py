"""The TrIMS figures: the registry of their names, and the check that a TrIMS summary holds what one draws."""

from dataclasses import dataclass

from repro.errors import ReproError
from repro.fsutil import read_json
from repro.trims.workload import DISTRIBUTIONS

MAX_SUMMARY_NUMBER = 1e9  # ms (11 days), requests, clients: past it a figure's axis overflows; a summary never holds one
# a figure draws each row, a label each (about 18 ms a row): a summary holds a row per model, or per
# distribution and concurrency level (the config allows 1024 levels); a label is a name, a model's a
# directory name of at most 255 bytes. A million rows or a label of megabytes drew for hours.
MAX_ROWS = len(DISTRIBUTIONS) * 1024
MAX_NAME = 255
_NUMBER = f"a number from 0 to {MAX_SUMMARY_NUMBER:g}"
_INTERVAL = f"a [low, high] pair of numbers from 0 to {MAX_SUMMARY_NUMBER:g}, low at most high"
_NAME = f"a name of 1 to {MAX_NAME} characters"


@dataclass(frozen=True)
class Figure:
    """A TrIMS figure: the table of the summary it draws (`trims summary`'s key; repro.plots.plot_trims
    draws each table its own way) and, per row, the fields it reads with what each must be."""

    table: str
    key: tuple  # the fields that name a row: one row each
    fields: dict


# The registry: `plots.trims` in the config, `repro trims plot`'s figure and the trims_plot rule's
# wildcard take their names from here.
FIGURES = {
    "trims_model_load": Figure("compare", ("model",), {"model": _NAME, "speedup": _NUMBER, **{
        f"{mode}_{field}": kind for mode in ("original", "shared") for field, kind in
        (("latency_ms", _NUMBER), ("latency_ci_ms", _INTERVAL), ("requests", _NUMBER))}}),
    "trims_distributions": Figure("distributions", ("distribution", "concurrency"), {
        "distribution": _NAME, "concurrency": _NUMBER, "requests": _NUMBER, "hit_rate": _NUMBER,
        "hit_rate_ci": _INTERVAL, **{f"p{q}{field}": kind for q in (50, 90, 99) for field, kind in
                                     (("_ms", _NUMBER), ("_ci_ms", _INTERVAL))}}),
}


def _is(value, kind):
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_SUMMARY_NUMBER

    if kind == _NUMBER:
        return number(value)
    if kind == _INTERVAL:
        return isinstance(value, list) and len(value) == 2 and all(number(v) for v in value) and value[0] <= value[1]
    return isinstance(value, str) and 1 <= len(value) <= MAX_NAME


def read_summary(path, figure):
    """The summary `trims summary` wrote, checked for what `figure` draws; ReproError naming the file
    and the first entry that is not what it should be."""
    what = "the TrIMS summary JSON that trims summary writes"
    summary = read_json(path, what)
    key, fields = FIGURES[figure].table, FIGURES[figure].fields
    if not isinstance(summary, dict):
        raise ReproError(f"{path}: expected a JSON object ({what}), got {type(summary).__name__}")
    rows = summary.get(key)
    if not isinstance(rows, list) or not rows:
        raise ReproError(f"{path}: {key}: expected a non-empty list of table rows ({what}), got {str(rows)[:60]}")
    if len(rows) > MAX_ROWS:
        raise ReproError(f"{path}: {key}: {len(rows)} rows; expected at most {MAX_ROWS} ({what})")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ReproError(f"{path}: {key}[{i}]: expected an object (a table row), got {type(row).__name__}")
        for field, kind in fields.items():
            if not _is(row.get(field), kind):
                raise ReproError(f"{path}: {key}[{i}].{field}: expected {kind}, got {str(row.get(field))[:60]}")
    named = {}
    for i, row in enumerate(rows):  # one model's bars drawn twice over, as trims summary refuses them
        name = tuple(row[field] for field in FIGURES[figure].key)
        if name in named:
            raise ReproError(f"{path}: {key}[{i}]: a second row of {' '.join(map(str, name))[:120]} (first: "
                             f"{key}[{named[name]}]); expected one row each")
        named[name] = i
    return summary
