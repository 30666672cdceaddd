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
    assert caption("local", "local", calibrations).startswith(
        "local model (backend=local, calibration=local; pipelines measured on Some CPU, 2 CPUs); ")
    assert caption("local", "artifact", calibrations).startswith(
        "local model (backend=local, calibration=artifact; costs fitted to the artifact's runs, "
        "RetinaNet's AutoOrder saving measured on Some CPU, 2 CPUs); ")
