"""Figures in the style of the Pecan paper: cost per epoch per mode, remote-worker cost stacked and hatched."""

import contextlib
import math
import textwrap
import warnings

import matplotlib

from repro.errors import ReproError
from repro.fsutil import atomic_path, first_repeated, open_regular, read_at_most, read_csv
from repro.pecan.comparisons import STYLE
from repro.pecan.costs import MAX_DOLLARS
from repro.pecan.costtable import check_total, repeat_counts, spread_of

matplotlib.use("Agg")  # before pyplot is imported: no display is needed or wanted
# every text drawn as given: a title, label or caption from a flag or a file (a model name, a CPU
# model) that holds `$...$` is no mathtext formula, whose parser failed on some with a traceback
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.patches import Patch

# The artifact's plotting-scripts/fig8.py colours; the hello-world run is a Pecan run.
# the artifact's fig8.py colours and names: its own three modes, and the paper's Fig 6 and 7 modes
COLORS = {"collocated": "#1f77b4", "cachew": "#ff7f0e", "pecan": "#8c564b", "short": "#8c564b",
          **{mode: tpu for mode, (tpu, _, _) in STYLE.items() if mode not in ("collocated", "cachew")}}
WORKER_COLORS = {"cachew": "#ffaf18", "pecan": "#bca68b", "short": "#bca68b",
                 **{mode: worker for mode, (_, worker, _) in STYLE.items() if mode not in ("collocated", "cachew")}}
LABELS = {"collocated": "Collocated", "cachew": "Cachew", "pecan": "Pecan", "short": "Pecan (all workers)",
          **{mode: label for mode, (_, _, label) in STYLE.items() if mode not in ("collocated", "cachew")}}
Y_LABEL = "Total training cost per epoch ($)"
# Written into every figure's metadata (PDF Creator, PNG Software), uncompressed in both: a command
# replaces a default output only where it holds a figure this package drew, never a user's file
FIGURE_MARK = "repro figure"
FIGURE_LIMIT = 64 << 20  # the figures drawn are well under a megabyte


def read_table(path):
    try:
        rows = read_csv(path, str(path), "a cost table")
    except ReproError as exc:
        raise ReproError(str(exc).replace(": cannot read (", ": cannot read cost table (", 1)) from None
    if not rows:
        raise ReproError(f"{path}: cost table has no rows")
    if "mode" not in rows[0]:  # read under a settings check, its KeyError named a key of --settings
        raise ReproError(f"{path}: no 'mode' column; expected a cost table, as `repro pecan cost-table` writes it")
    return rows


def figure_rows(table, modes=None):
    """The cost table's rows of `modes` (all when None), in the table's order; a mode it lacks is an error."""
    rows = read_table(table)
    twice = first_repeated(r["mode"] for r in rows)
    if twice is not None:  # which of the two to draw is anyone's guess
        raise ReproError(f"{table}: two rows for mode {twice!r}; expected one row per mode")
    if modes is None:
        return rows
    missing = [m for m in modes if m not in {r["mode"] for r in rows}]
    if missing:
        raise ReproError(f"{table}: no row for mode(s) {missing}; the figure draws {list(modes)}")
    return [r for r in rows if r["mode"] in modes]


def _reference_total(value):
    return sum(value) if isinstance(value, list) else value


# the artifact's columns of a row (its first repeat's run, beside the spread drawn): what a run gives
RUN_NUMBERS = {"tpu_cost": ("dollars", MAX_DOLLARS), "worker_cost": ("dollars", MAX_DOLLARS),
               "epoch_time": ("seconds", 1e12), "batches_sec": ("batches per second", 1e12),
               "remote_workers": ("workers", 1e12), "local_workers": ("workers", 1e12)}


def _check_run_columns(row, path):
    """ReproError where a column the figure does not draw holds what no run gives: the table is
    damaged, and the figure would be drawn from it as if it were not."""
    for column, (unit, most) in RUN_NUMBERS.items():
        text = row.get(column)
        if text is None:  # a table of `pecan plot`'s bars alone has none of them
            continue
        try:
            value = float(text)
        except (TypeError, ValueError):
            value = math.nan
        whole = unit == "workers"
        if not (math.isfinite(value) and 0 <= value <= most) or (whole and not value.is_integer()):
            expected = f"a whole number of {unit}" if whole else f"a non-negative number of {unit}"
            raise ReproError(f"{path}: mode {row.get('mode')!r}: {column} is {str(text)[:40]!r}; expected {expected}, at "
                             f"most {most:g}")


def _whisker(ax, x, value, low, high):
    ax.errorbar(x, value, yerr=_errors([value], [(low, high)]), fmt="none", ecolor="black", elinewidth=0.9,
                capsize=3, zorder=3)


def plot_costs(table, outputs, title, caption, style, reference=None, modes=None):
    """One bar per mode (those of `modes` only, when given): the mean over repeats of the TPU cost, the
    remote-worker cost stacked on top; whiskers show each segment's 95% interval (the TPU cost's at its
    top, the total's at the bar's top)."""
    rows = figure_rows(table, modes)
    plt.rcParams.update({"font.size": style["font_size"], "hatch.linewidth": 0.8})
    fig, ax = plt.subplots(figsize=(style["width_in"], style["height_in"]))
    spreads = [{c: spread_of(r, c, table) for c in ("tpu_cost", "worker_cost", "total_cost")} for r in rows]
    for row, spread in zip(rows, spreads):
        check_total(row, spread, table)
        _check_run_columns(row, table)
    top = max(s["total_cost"][2] for s in spreads)
    if reference and style["show_reference"]:
        top = max([top] + [_reference_total(v) for v in reference.values()])
    small = 0.06 * top  # segments thinner than this get their label beside the bar
    for x, (row, spread) in enumerate(zip(rows, spreads)):
        mode, tpu, worker = row["mode"], spread["tpu_cost"][0], spread["worker_cost"][0]
        ax.bar(x, tpu, 0.6, color=COLORS.get(mode, "#7f7f7f"), edgecolor="black", linewidth=0.6)
        ax.text(x - 0.05, tpu / 2, f"{tpu:.2f}", ha="center", va="center", color="white", fontweight="bold")
        if worker > 0:
            ax.bar(x, worker, 0.6, bottom=tpu, color=WORKER_COLORS.get(mode, "#c7c7c7"), hatch="//",
                   edgecolor="black", linewidth=0.6)
            _whisker(ax, x - 0.15, *spread["tpu_cost"])
            if worker >= small:
                ax.text(x, tpu + worker / 2, f"{worker:.2f}", ha="center", va="center",
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
            else:
                ax.text(x, spread["total_cost"][2] + 0.01 * top, f"+{worker:.2f}", ha="center", va="bottom")
        _whisker(ax, x, *spread["total_cost"])
        if reference and style["show_reference"] and mode in reference:
            seen = any(line.get_label() == "artifact's reference" for line in ax.get_lines())
            ax.plot(x + 0.36, _reference_total(reference[mode]), marker="<", color="black", markersize=6,
                    linestyle="none", label=None if seen else "artifact's reference")
    ax.set_xticks(range(len(rows)), [LABELS.get(r["mode"], r["mode"]) for r in rows])
    ax.set_ylabel(Y_LABEL)
    ax.set_title(title)
    ax.set_ylim(0, top * 1.35 or 1)  # a band above the tallest bar for the legend: it covers no data (bars of 0: $1)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    # the artifact's fig8.py legend swatches: solid = TPU cost, hatched = remote-worker cost
    swatches = [Patch(facecolor="white", edgecolor="black", linewidth=0.6, label="TPU cost"),
                Patch(facecolor="white", edgecolor="black", linewidth=0.6, hatch="//", label="Remote worker cost")]
    markers, labels = ax.get_legend_handles_labels()
    fit_columns(ax, lambda columns: ax.legend(handles=swatches + markers, labels=[s.get_label() for s in swatches] + labels,
                                              loc="upper center", ncol=columns, frameon=False,
                                              fontsize=max(6, style["font_size"] - 1)),
                len(swatches) + len(markers))
    caption = f"{caption}; " + _bars(repeat_counts(rows, table), "95% t-interval of the mean (total at the top, "
                                                                     "TPU part at its edge)")
    _save(fig, outputs, caption, style)


def _bars(repeats, whiskers):
    """What a figure's bars are: the mean over the repeats and its interval (`whiskers`), or, where
    every bar is one run (numbers given on the command line), that: there is no interval."""
    if repeats == [1]:
        return "bars: one run each (no interval)"
    return f"bars: mean of N={'/'.join(map(str, repeats))} repeats, whiskers: {whiskers}"


def fit_columns(ax, make_legend, columns):
    """The legend `make_legend(ncol)` draws on `ax`, in `columns` or as many fewer as it takes to be
    no wider than the axes, over whose frame it would run (long labels, a large font). Measured
    before the final layout, which only widens the axes."""
    renderer = ax.figure.canvas.get_renderer()
    legend = make_legend(columns)
    while columns > 1 and legend.get_window_extent(renderer).width > ax.get_window_extent(renderer).width:
        columns -= 1
        legend = make_legend(columns)
    return legend


def _save(fig, outputs, caption, style, laid_out=None):
    """Draw `caption` under the plots and write the figure to every output. Every text is fitted
    to the figure as drawn: the caption and titles wrapped to its width, tick labels that would
    run together wrapped or slanted, and the figure made taller where the caption would take more
    than CAPTION_SHARE of it. `laid_out`: called with the renderer once the figure is laid out
    (what depends on the sizes drawn)."""
    fig.set_dpi(style["dpi"])  # measured as drawn: small text's hinted widths do not scale with the dpi
    renderer = fig.canvas.get_renderer()
    text = fig.text(0.01, 0.01, caption, fontsize=max(5, style["font_size"] - 3), ha="left", va="bottom",
                    style="italic")
    _wrap_to_width(text, 0.97 * fig.get_figwidth() * fig.dpi, renderer)
    for ax in fig.axes:
        _wrap_to_width(ax.title, ax.get_window_extent(renderer).width, renderer)
        _wrap_to_width(ax.yaxis.label, ax.get_window_extent(renderer).height, renderer)
        _fit_tick_labels(ax, renderer)
    if fig._suptitle is not None:
        _wrap_to_width(fig._suptitle, 0.98 * fig.get_figwidth() * fig.dpi, renderer)
    asked = fig.get_figheight()
    caption_in = text.get_window_extent(renderer).height / fig.dpi + 0.1
    # the plots keep at least 1 - CAPTION_SHARE of the height asked for
    fig.set_figheight(max(asked, caption_in + (1 - CAPTION_SHARE) * asked))
    for _ in range(8):  # and each axes AXES_SHARE of it, below their titles and above their tick labels
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            fig.tight_layout(rect=(0, caption_in / fig.get_figheight(), 1, 1))
        short = AXES_SHARE * asked * fig.dpi - min(ax.get_window_extent(renderer).height for ax in fig.axes)
        if not short > 0 and not any("Tight layout not applied" in str(w.message) for w in said):
            break
        fig.set_figheight(fig.get_figheight() + max(short / fig.dpi, 0.25 * asked))
    if laid_out:
        laid_out(renderer)
    # every file rendered before any is renamed into place: a stop or a failure while the PNG renders
    # (most of the time) leaves neither, not a new PDF beside no PNG or last run's
    with contextlib.ExitStack() as stack:
        for output in outputs:
            tmp = stack.enter_context(atomic_path(output))
            kind = str(output).rsplit(".", 1)[-1].lower()
            fig.savefig(tmp, format=kind, dpi=style["dpi"],
                        # no CreationDate: the same figure drawn again is the same bytes (checksums compare)
                        metadata={"pdf": {"Creator": FIGURE_MARK, "CreationDate": None},
                                  "png": {"Software": FIGURE_MARK}}.get(kind))
    plt.close(fig)


CAPTION_SHARE = 0.25  # of a figure's height, at most, before the figure is made taller for its caption
AXES_SHARE = 0.45  # of a figure's height, at least, that each axes keeps (a long title, slanted labels)


def _wrap_to_width(text, width, renderer):
    """Wrap the Text `text` at spaces into lines no longer than `width` (pixels; along the text, which
    may be upright), where it is longer: matplotlib clips a line at the figure's edge."""
    def length():
        box = text.get_window_extent(renderer)
        return box.height if text.get_rotation() == 90 else box.width

    content, drawn = text.get_text(), length()
    if not content or drawn <= width:
        return
    per_line = max(8, int(len(content) * width / drawn))
    while True:
        text.set_text(textwrap.fill(content, per_line))
        if per_line <= 8 or length() <= width:
            return
        per_line = max(8, int(per_line * 0.9))


def _fit_tick_labels(ax, renderer):
    """The x tick labels of `ax` broken at spaces onto lines where side by side they would run
    together, and slanted where even so they would."""
    labels = [label for label in ax.get_xticklabels() if label.get_text() and label.get_rotation() == 0]
    if len(labels) < 2 or not _run_together(labels, renderer):
        return
    ticks = ax.get_xticks()
    ax.set_xticks(ticks, [label.get_text().replace(" ", "\n") for label in ax.get_xticklabels()])
    if _run_together(ax.get_xticklabels(), renderer):
        ax.set_xticks(ticks, [label.get_text().replace("\n", " ") for label in ax.get_xticklabels()], rotation=30,
                      ha="right")


def _run_together(labels, renderer, gap=2):
    """Whether any two neighbouring labels (left to right) come closer than `gap` pixels."""
    boxes = sorted((label.get_window_extent(renderer) for label in labels), key=lambda box: box.x0)
    return any(left.x1 + gap > right.x0 for left, right in zip(boxes, boxes[1:]))


def is_figure(path):
    """Whether `path` is a figure this package drew (its metadata holds FIGURE_MARK)."""
    with open_regular(path, str(path), "a figure") as fh:
        return FIGURE_MARK.encode() in read_at_most(fh, FIGURE_LIMIT)


class _PlainLogFormatter(ticker.LogFormatter):
    """A log axis's tick labels as plain numbers (1000, 0.1): matplotlib's default writes them as
    mathtext (`$\\mathdefault{10^{3}}$`), shown as that raw text with text.parse_math off."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def _log_scale(axis):
    """`axis` (an Axes) on a log y scale, its decades labelled, and its minor ticks where it spans less."""
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(_PlainLogFormatter())
    axis.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def _errors(values, intervals):
    """Matplotlib's yerr (distances below and above) from values and their [low, high] intervals."""
    # a percentile bootstrap interval need not hold its estimate: no bar below it or above it then
    return [[max(0, v - low) for v, (low, _) in zip(values, intervals)],
            [max(0, high - v) for v, (_, high) in zip(values, intervals)]]


def plot_model_load(rows, outputs, caption, style):
    """Per-model latency, original vs shared, log scale, with the speedup over each pair."""
    if not rows:
        raise ReproError("no TrIMS compare results to plot")
    plt.rcParams.update({"font.size": style["font_size"]})
    fig, ax = plt.subplots(figsize=(style["width_in"], style["height_in"]))
    xs = range(len(rows))
    for mode, offset, label, color in (("original", -0.2, "original (cold load)", "#1f77b4"),
                                       ("shared", 0.2, "shared (model store)", "#8c564b")):
        values = [r[f"{mode}_latency_ms"] for r in rows]
        ax.bar([x + offset for x in xs], values, 0.4, label=label, color=color, edgecolor="black", linewidth=0.5,
               yerr=_errors(values, [r[f"{mode}_latency_ci_ms"] for r in rows]), capsize=2,
               error_kw={"elinewidth": 0.8})
    labels = []  # each speedup above its pair's bars and whiskers (a 95% interval of few requests reaches far)
    for x, r in zip(xs, rows):
        labels.append(1.15 * max(r["original_latency_ms"], r["shared_latency_ms"], r["original_latency_ci_ms"][1],
                                 r["shared_latency_ci_ms"][1]))
        ax.text(x, labels[-1], f"{r['speedup']:.1f}x", ha="center", va="bottom", fontweight="bold")
    _log_scale(ax)
    bottom = ax.get_ylim()[0]  # the labels in the lower 72% of the log axis: the band above holds the legend
    ax.set_ylim(top=bottom * (max(labels) / bottom) ** (1 / 0.72))
    ax.set_xticks(list(xs), [r["model"] for r in rows], rotation=20, ha="right")
    ax.set_ylabel("End-to-end latency per request (ms)")
    ax.set_title("TrIMS: model loading, original vs shared")
    ax.legend(frameon=False, loc="upper left")
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.set_axisbelow(True)
    _save(fig, outputs, caption, style)


def plot_distributions(rows, outputs, caption, style):
    """Latency percentiles and store hit rate against concurrency, one line per distribution."""
    if not rows:
        raise ReproError("no TrIMS distribution results to plot")
    plt.rcParams.update({"font.size": style["font_size"]})
    fig, (lat, hit) = plt.subplots(1, 2, figsize=(style["width_in"] * 1.6, style["height_in"]))
    names = sorted({r["distribution"] for r in rows})
    colors = plt.get_cmap("tab10")
    for i, name in enumerate(names):
        mine = sorted((r for r in rows if r["distribution"] == name), key=lambda r: r["concurrency"])
        conc = [r["concurrency"] for r in mine]
        for key, dash in (("p50", "-"), ("p90", "--"), ("p99", ":")):
            values = [r[f"{key}_ms"] for r in mine]
            lat.errorbar(conc, values, yerr=_errors(values, [r[f"{key}_ci_ms"] for r in mine]), fmt=dash, marker="o",
                         color=colors(i), capsize=2, label=f"{name} {key}")
        values = [r["hit_rate"] for r in mine]
        hit.errorbar(conc, values, yerr=_errors(values, [r["hit_rate_ci"] for r in mine]), fmt="-", marker="s",
                     color=colors(i), capsize=2, label=name)
    lat.set_xlabel("Concurrent requests")
    lat.set_ylabel("Latency (ms)")
    _log_scale(lat)
    lat.legend(frameon=False, fontsize=max(5, style["font_size"] - 3), ncol=len(names))
    hit.set_xlabel("Concurrent requests")
    hit.set_ylabel("Model store hit rate")
    hit.set_ylim(0, 1.05)
    hit.legend(frameon=False)
    for axis in (lat, hit):
        axis.grid(alpha=0.3)
        axis.set_xticks(sorted({r["concurrency"] for r in rows}))
    fig.suptitle("TrIMS: request distributions and concurrency (shared mode)")
    _save(fig, outputs, caption, style)


def plot_trims(figure, summary, outputs, style):
    """A TrIMS figure (one of repro.trims.figures.FIGURES) from the TrIMS summary, captioned with
    this machine and the number of requests behind each bar or point."""
    from repro.machine import machine_description
    from repro.trims.figures import FIGURES

    machine = machine_description()
    caption = (f"local backend: onnxruntime on {machine['cpu_model']}, {machine['logical_cpus']} CPUs; "
               "weights shared through POSIX shared memory by the model store; whiskers: 95% percentile-bootstrap "
               "intervals over the requests")
    table = FIGURES[figure].table
    if table == "compare":
        rows = summary["compare"]
        counts = sorted({r[f"{mode}_requests"] for r in rows for mode in ("original", "shared")})
        caption += f" (N={'/'.join(map(str, counts))} per bar; shared excludes the request that loads the store)"
        plot_model_load(rows, outputs, caption, style)
    else:
        rows = summary["distributions"]
        caption += f" (N={'/'.join(map(str, sorted({r['requests'] for r in rows})))} per point)"
        plot_distributions(rows, outputs, caption, style)


def plot_validation(rows, outputs, title, caption, style,
                    models=(("model", "model (Pillow-fed)"), ("model_tf", "model (engine-fed)"))):
    """Per mode and deployment: the engine's measured examples/s next to each model column's
    prediction (`models`: (column prefix, legend label); a prefix the rows lack is left out)."""
    models = [(name, label) for name, label in models if rows and f"{name}_examples_per_s" in rows[0]]
    plt.rcParams.update({"font.size": style["font_size"]})
    # taller than the other figures: the caption says per model column what agrees and why not
    taller = 1.8
    fig, ax = plt.subplots(figsize=(style["width_in"], style["height_in"] * taller))
    width = 0.8 / (1 + len(models))
    hatches = ("//", "..", "xx")
    small = max(5, style["font_size"] - 3)
    for x, row in enumerate(rows):
        color = COLORS.get(row["mode"], "#7f7f7f")
        left = x - 0.4 + width / 2
        ax.bar(left, row["engine_examples_per_s"], width, color=color, edgecolor="black", linewidth=0.6,
               label="engine (measured)" if x == 0 else None)
        for k, (name, label) in enumerate(models, start=1):
            value = row[f"{name}_examples_per_s"]
            ax.bar(left + k * width, value, width, color="white", edgecolor=color, hatch=hatches[(k - 1) % 3],
                   linewidth=0.8, label=label if x == 0 else None)
            ax.text(left + k * width, value, f"{row[f'{name}_vs_engine']:+.0%}", ha="center", va="bottom",
                    fontsize=small, rotation=90)
    labels = [f"{LABELS.get(r['mode'], r['mode'])} {r['remote_workers']}r+{r['local_workers']}l"
              + (f" {r['phase'].removeprefix('PROFILE_')}" if r.get("phase") else "") for r in rows]
    ax.set_xticks(range(len(rows)), labels, fontsize=max(5, style["font_size"] - 2), rotation=35, ha="right")
    ax.set_ylabel("examples/s (miniature scale)")
    ax.set_title(title)
    top = max(max([r["engine_examples_per_s"]] + [r[f"{name}_examples_per_s"] for name, _ in models]) for r in rows)
    ax.set_ylim(0, top * 1.5)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", ncol=1 + len(models), frameon=False, fontsize=max(5, style["font_size"] - 3))
    by_mode = {r["mode"]: [r["engine_converged"]] + [r[f"{name}_converged"] for name, _ in models] for r in rows}
    converged = "; ".join(f"{LABELS.get(mode, mode)} {' / '.join(values)}" for mode, values in by_mode.items())
    order = " / ".join(["engine"] + [label for _, label in models])
    _save(fig, outputs, f"{caption}. Converged remote+local workers ({order}): {converged}", style)


def plot_comparison(rows, option, outputs, caption, style, paper=None):
    """The artifact's fig8.py `autoplacement` / `autoorder` figure from a comparison table's rows
    (repro.pecan.comparisons): workloads on x, one bar per mode at fig8.py's offsets and colours, the
    TPU cost solid, the remote-worker cost stacked and hatched, whiskers for the 95% interval of each
    segment, the paper's values (`paper`: {mode: {workload: [tpu, worker]}}) as markers. Returns the
    bars drawn, (workload, mode, x) each."""
    from repro.pecan.comparisons import OPTIONS

    settings = OPTIONS[option]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    by = {(r["workload"], r["mode"]): r for r in rows}
    plt.rcParams.update({"font.size": style["font_size"], "hatch.linewidth": 0.8})
    fig, ax = plt.subplots(figsize=(max(style["width_in"], 8.0), style["height_in"] * 1.1))
    width = settings["width"]
    top = max(r["total_cost_ci_high"] for r in rows)
    if paper and style["show_reference"]:
        top = max([top] + [sum(v) for mode in settings["modes"] for v in paper.get(mode, {}).values()])
    marked, drawn, values = False, [], []  # values: each bar's label, and the TPU cost it is drawn inside
    for mode, offset in zip(settings["modes"], settings["offsets"]):
        tpu_colour, worker_colour, _ = STYLE[mode]
        for x, workload in enumerate(workloads):
            row = by[workload, mode]
            left = x + offset * width
            tpu, worker = row["tpu_cost_mean"], row["worker_cost_mean"]
            ax.bar(left, tpu, width, color=tpu_colour, edgecolor="black", linewidth=0.5)
            drawn.append((workload, mode, round(left, 4)))
            values.append((ax.text(left, tpu / 2, f"{tpu:.2f}", ha="center", va="center", rotation=90, color="white",
                                    fontsize=max(5, style["font_size"] - 2)), tpu))
            if worker > 0 and worker_colour:
                ax.bar(left, worker, width, bottom=tpu, color=worker_colour, hatch="//", edgecolor="black", linewidth=0.5)
            _whisker(ax, left, row["total_cost_mean"], row["total_cost_ci_low"], row["total_cost_ci_high"])
            value = (paper or {}).get(mode, {}).get(workload)
            if value is not None and style["show_reference"]:
                ax.plot(left + width * 0.75, sum(value), marker="<", color="black", markersize=5, linestyle="none",
                        label=None if marked else "the paper's values")
                marked = True
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_xlabel("Model")
    ax.set_ylabel(Y_LABEL)
    ax.set_ylim(0, top * 1.3 or 1)
    ax.set_xlim(-0.5 - 0.1, len(workloads) - 0.5 + 0.1)
    ax.grid(axis="y", linewidth=0.5)
    ax.set_axisbelow(True)
    handles = [Patch(facecolor=STYLE[m][0], edgecolor="black", linewidth=0.5, label=STYLE[m][2]) for m in settings["modes"]]
    handles += [Patch(facecolor="white", edgecolor="black", linewidth=0.5, label="TPU cost"),
                Patch(facecolor="white", edgecolor="black", linewidth=0.5, hatch="//", label="Remote worker cost")]
    markers, labels = ax.get_legend_handles_labels()
    fit_columns(ax, lambda columns: ax.legend(handles=handles + markers, labels=[h.get_label() for h in handles] + labels,
                                              loc=settings["legend"], ncol=columns, frameon=False,
                                              fontsize=max(6, style["font_size"] - 1)), 3)
    repeats = sorted({int(r["repeats"]) for r in rows})  # checked as the table was read (repeat_counts)
    caption = f"{settings['figure']} ({option}): {caption}; " + _bars(repeats, "95% t-interval of the mean total")
    _save(fig, outputs, caption, {**style, "width_in": max(style["width_in"], 8.0)},
          laid_out=lambda renderer: _inside_bars_only(ax, values, renderer))
    return drawn  # (workload, mode, x) of every bar


def _inside_bars_only(ax, labels, renderer):
    """Hide each (text, bar height) label that is taller than its bar: white on the white above it,
    0.55 read as "5"."""
    for text, height in labels:
        bar = ax.transData.transform((0, height))[1] - ax.transData.transform((0, 0))[1]
        text.set_visible(text.get_window_extent(renderer).height <= bar)
