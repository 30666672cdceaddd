"""Figure layout that the data cannot show wrong: legends inside their axes."""

import matplotlib

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
