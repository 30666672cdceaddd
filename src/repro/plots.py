"""Figures in the style of the Pecan paper: cost per epoch per mode, remote-worker cost stacked and hatched."""

import csv
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from repro.errors import ReproError  # noqa: E402
from repro.fsutil import atomic_path  # noqa: E402

# The artifact's plotting-scripts/fig8.py colours; the hello-world run is a Pecan run.
COLORS = {"collocated": "#1f77b4", "cachew": "#ff7f0e", "pecan": "#8c564b", "short": "#8c564b"}
WORKER_COLORS = {"cachew": "#ffaf18", "pecan": "#bca68b", "short": "#bca68b"}
LABELS = {"collocated": "Collocated", "cachew": "Cachew", "pecan": "Pecan", "short": "Pecan (all workers)"}
Y_LABEL = "Total training cost per epoch ($)"


def read_table(path):
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise ReproError(f"{path}: cannot read cost table: {exc.strerror}") from None
    if not rows:
        raise ReproError(f"{path}: cost table has no rows")
    return rows


def _reference_total(value):
    return sum(value) if isinstance(value, list) else value


def plot_costs(table, outputs, title, caption, style, reference=None):
    """Draw one bar per mode (TPU cost, with remote-worker cost stacked on top) into each of `outputs`."""
    rows = read_table(table)
    plt.rcParams.update({"font.size": style["font_size"], "hatch.linewidth": 0.8})
    fig, ax = plt.subplots(figsize=(style["width_in"], style["height_in"]))
    top = max(float(r["tpu_cost"]) + float(r["worker_cost"]) for r in rows)
    if reference and style["show_reference"]:
        top = max([top] + [_reference_total(v) for v in reference.values()])
    small = 0.06 * top  # segments thinner than this get their label beside the bar
    for x, row in enumerate(rows):
        mode, tpu, worker = row["mode"], float(row["tpu_cost"]), float(row["worker_cost"])
        ax.bar(x, tpu, 0.6, color=COLORS.get(mode, "#7f7f7f"), edgecolor="black", linewidth=0.6)
        ax.text(x, tpu / 2, f"{tpu:.2f}", ha="center", va="center", color="white", fontweight="bold")
        if worker > 0:
            ax.bar(x, worker, 0.6, bottom=tpu, color=WORKER_COLORS.get(mode, "#c7c7c7"), hatch="//",
                   edgecolor="black", linewidth=0.6)
            if worker >= small:
                ax.text(x, tpu + worker / 2, f"{worker:.2f}", ha="center", va="center",
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
            else:
                ax.text(x, tpu + worker + 0.01 * top, f"+{worker:.2f}", ha="center", va="bottom")
        if reference and style["show_reference"] and mode in reference:
            seen = any(line.get_label() == "artifact's reference" for line in ax.get_lines())
            ax.plot(x + 0.36, _reference_total(reference[mode]), marker="<", color="black", markersize=6,
                    linestyle="none", label=None if seen else "artifact's reference")
    ax.set_xticks(range(len(rows)), [LABELS.get(r["mode"], r["mode"]) for r in rows])
    ax.set_ylabel(Y_LABEL)
    ax.set_title(title)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", frameon=False)
    wrapped = textwrap.fill(caption, width=int(style["width_in"] * 19))
    fig.text(0.01, 0.01, wrapped, fontsize=max(5, style["font_size"] - 3), ha="left", va="bottom", style="italic")
    fig.tight_layout(rect=(0, 0.03 + 0.035 * wrapped.count("\n") + 0.04, 1, 1))
    for output in outputs:
        with atomic_path(output) as tmp:
            fig.savefig(tmp, format=str(output).rsplit(".", 1)[-1], dpi=style["dpi"])
    plt.close(fig)
