"""Figure layout that the data cannot show wrong: legends inside their axes."""

import time

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from repro.plots import fit_columns  # noqa: E402


def _fitted(labels, columns=3):
    """The legend of `labels` fitted from `columns` on a small axes: its extent, the axes' extent
    and the number of rows its entries take."""
    fig, ax = plt.subplots(figsize=(4, 3))
    handles = [Patch(label=label) for label in labels]
    legend = fit_columns(ax, lambda ncol: ax.legend(handles=handles, ncol=ncol, loc="upper center"), columns)
    fig.canvas.draw()  # places the legend's entries
    renderer = fig.canvas.get_renderer()
    rows = len({round(text.get_window_extent(renderer).y0) for text in legend.get_texts()})
    fitted = (legend.get_window_extent(renderer).width, ax.get_window_extent(renderer).width, rows, ax.get_legend() is legend)
    plt.close(fig)
    return fitted


def test_a_legend_wider_than_its_axes_takes_fewer_columns_until_it_fits():
    width, axes_width, rows, drawn = _fitted([f"a rather long legend label {i}" for i in range(3)])
    assert width <= axes_width and rows > 1 and drawn


def test_a_legend_that_fits_keeps_its_columns():
    width, axes_width, rows, drawn = _fitted(["a", "b", "c"])
    assert width <= axes_width and rows == 1 and drawn


def test_the_cost_caption_says_what_was_measured_here_under_each_preset():
    from repro.rulesettings import caption

    calibrations = {"resnet": {"machine": {"cpu_model": "Some CPU", "logical_cpus": 2}}}
    assert caption("local", "local", calibrations) == (
        "local model (backend=local, calibration=local; pipelines measured on Some CPU, 2 CPUs)")
    assert caption("local", "artifact", calibrations) == (
        "local model (backend=local, calibration=artifact; costs fitted to the artifact's runs, "
        "RetinaNet's AutoOrder saving measured on Some CPU, 2 CPUs)")
    # the markers are named in the legend where they are drawn: a caption of "triangles" was wrong on a
    # figure with no reference, and on the comparisons, whose markers are the paper's values


def _tick_labels(ax):
    return [t.get_text() for t in ax.yaxis.get_majorticklabels() + ax.yaxis.get_minorticklabels() if t.get_text()]


def test_a_log_axis_is_labelled_with_plain_numbers(monkeypatch):
    """With text.parse_math off (titles and captions drawn as given), matplotlib's log tick labels,
    mathtext such as `$\\mathdefault{10^{3}}$`, were drawn as that raw text on both TrIMS figures."""
    from repro import plots

    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args, **kwargs: (fig.canvas.draw(), drawn.append(fig)))
    style = {"width_in": 5, "height_in": 3.6, "dpi": 50, "font_size": 9}
    for low, high in ((1, 5000), (30, 80), (5, 9)):
        plots.plot_model_load([{"model": "m", "original_latency_ms": high, "shared_latency_ms": low,
                                "original_latency_ci_ms": [high, high], "shared_latency_ci_ms": [low, low],
                                "speedup": high / low}], ["f.png"], "caption", style)
    labels = [_tick_labels(fig.axes[0]) for fig in drawn]
    for fig in drawn:
        plt.close(fig)
    assert all(not any("$" in label for label in figure) for figure in labels), labels
    assert {"1", "10", "100", "1000"} <= set(labels[0])
    assert "20" in labels[1] and "100" in labels[1]  # less than a decade: minor ticks labelled too


def test_the_model_load_figure_shows_each_whisker_whole(monkeypatch):
    """A cold load's 95% interval of few requests, [100, 1150] ms around a latency of 200 ms: the
    axis, four times the tallest bar, stopped at 800 ms and cut the whisker off; the speedup is
    written above the whisker, inside the axes."""
    from repro import plots

    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args, **kwargs: drawn.append(fig))
    rows = [{"model": "a", "original_latency_ms": 200, "shared_latency_ms": 20, "original_latency_ci_ms": [100, 1150],
             "shared_latency_ci_ms": [15, 25], "speedup": 10.0},
            {"model": "b", "original_latency_ms": 150, "shared_latency_ms": 10, "original_latency_ci_ms": [140, 160],
             "shared_latency_ci_ms": [9, 11], "speedup": 15.0}]
    plots.plot_model_load(rows, ["f.png"], "caption", {"width_in": 5, "height_in": 3.6, "dpi": 50, "font_size": 9})
    bottom, top = drawn[0].axes[0].get_ylim()
    labels = {text.get_text(): text.get_position()[1] for text in drawn[0].axes[0].texts}
    plt.close(drawn[0])
    assert bottom <= 9 and top >= 1150
    assert 1150 < labels["10.0x"] < top and 160 < labels["15.0x"] < top


def test_a_figure_drawn_again_is_the_same_bytes(tmp_path):
    """The PDF held the moment it was drawn (CreationDate): a figure redrawn from the same table
    differed from the first by its checksum."""
    from repro import plots

    style = {"width_in": 5, "height_in": 3.6, "dpi": 50, "font_size": 9}
    row = {"model": "m", "original_latency_ms": 80, "shared_latency_ms": 30, "original_latency_ci_ms": [79, 81],
           "shared_latency_ci_ms": [29, 31], "speedup": 80 / 30}
    drawn = []
    for name in ("a", "b"):
        outputs = [tmp_path / f"{name}.pdf", tmp_path / f"{name}.png"]
        plots.plot_model_load([row], outputs, "caption", style)
        drawn.append([path.read_bytes() for path in outputs])
        time.sleep(1.1)  # a date to the second would differ
    assert drawn[0] == drawn[1]


def test_a_figure_of_single_runs_says_so(monkeypatch, tmp_path):
    """`pecan plot -t 4.43 0.59 0.55 -c 0 1.01 0.36`: numbers typed on the command line were captioned
    "mean of N=1 repeats, whiskers: 95% t-interval of the mean"."""
    from repro import plots
    from repro.cli import main

    captions = []
    monkeypatch.setattr(plots, "_save", lambda fig, outputs, caption, style, **kwargs: (captions.append(caption),
                                                                                         plt.close(fig)))
    assert main(["pecan", "plot", "-t", "4.43", "0.59", "0.55", "-c", "0", "1.01", "0.36", "-o",
                 str(tmp_path / "f")]) in (0, None)
    assert captions == ["cost numbers given on the command line; bars: one run each (no interval)"]


def _six_mode_table(path):
    import csv

    from repro.pecan.costtable import TABLE_COLUMNS

    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, TABLE_COLUMNS, restval="1")
        writer.writeheader()
        for i, mode in enumerate(("collocated", "cachew", "pecan", "autoplacement", "autoorder", "fastflow")):
            costs = {f"{q}_{s}": v * f for q, v in (("tpu_cost", 0.5 + i / 10), ("worker_cost", 0.3),
                                                     ("total_cost", 0.8 + i / 10))
                     for s, f in (("mean", 1), ("ci_low", 0.9), ("ci_high", 1.1))}
            writer.writerow({"mode": mode, "workload": "W", "preset": "local", "repeats": 3, **costs})
    return path


def _texts_drawn(fig, dpi):
    """The figure's extent, its x tick labels' (left to right) and its other texts', as drawn at `dpi`."""
    fig.set_dpi(dpi)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    ticks = [label.get_window_extent(renderer) for label in ax.get_xticklabels() if label.get_text()]
    others = [text.get_window_extent(renderer) for text in (*fig.texts, ax.title, ax.yaxis.label)]
    return fig.bbox, ticks, others


@pytest.mark.parametrize("font_size, dpi, title, caption", [
    (9, 50, "W", "a caption of one line"),
    (9, 150, "W", "local model (backend=local, calibration=local; pipelines measured on Intel(R) Xeon(R) Processor, "
                  "2 CPUs); bars: mean of N=20 repeats, whiskers: 95% t-interval of the mean (total at the top, TPU "
                  "part at its edge)"),
    (14, 50, "W on a TPU v2-8 with every input-pipeline mode of the Pecan paper side by side", "measured here; " * 40)])
def test_every_text_of_a_figure_is_inside_it_and_tick_labels_stay_apart(monkeypatch, tmp_path, font_size, dpi, title,
                                                                           caption):
    """Six modes side by side ran their tick labels together; a caption was wrapped by a character
    count that ignored the font size, and ran off the figure's edge, as did a long title."""
    from repro import plots

    closed = []
    monkeypatch.setattr(plots.plt, "close", closed.append)
    style = {"width_in": 5.0, "height_in": 3.6, "dpi": dpi, "font_size": font_size, "show_reference": False}
    plots.plot_costs(_six_mode_table(tmp_path / "t.csv"), [tmp_path / "f.png"], title, caption, style)
    figure, ticks, others = _texts_drawn(closed[0], dpi)  # as the PNG is drawn (a caption ran off at 150 dpi)
    for box in ticks + others:
        assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0 and box.y1 <= figure.y1, box
    (ax,) = closed[0].axes
    slanted = {label.get_rotation() for label in ax.get_xticklabels()} == {30}
    assert slanted or all(left.x1 < right.x0 for left, right in zip(ticks, ticks[1:]))
    assert ax.get_window_extent().height >= plots.AXES_SHARE * 3.6 * dpi - 1  # the bars keep their room
    plt.close(closed[0])
