"""Cross-attention heatmaps: which source subwords each output subword looked at.

Drawn like the alignment figures of the attention literature: source tokens along the top,
output tokens down the side, one cell per (output, source) weight. matplotlib (the `client`
extra) is imported only when a figure is drawn.
"""

from __future__ import annotations

from pathlib import Path

from service.tokens import display_token

CELL_INCHES = 0.28
MAX_INCHES = 60.0


def draw_alignment(
    alignment,
    path: str | Path | None = None,
    *,
    cmap: str = "viridis",
    colorbar: bool = True,
    title: str | None = None,
    dpi: int = 100,
):
    """Draws an `attnserve.v1.Alignment` (or anything with source_tokens, target_tokens and
    row-major weights) and writes it as PNG to `path` when given.

    Returns the matplotlib Figure; `figure.axes[0]` is the heatmap, its x tick labels the
    source tokens and its y tick labels the output tokens (as `display_token` shows them).
    Weights are drawn on a fixed 0..1 scale, so figures of different sentences compare.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from service.client import alignment_matrix

    weights = alignment_matrix(alignment)
    rows, columns = weights.shape
    width = min(MAX_INCHES, 2.0 + CELL_INCHES * columns + (1.0 if colorbar else 0.0))
    height = min(MAX_INCHES, 1.5 + CELL_INCHES * rows)
    figure = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(
        weights, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
    )
    fontsize = 9 if max(rows, columns) <= 60 else 6
    labels = {"fontsize": fontsize, "parse_math": False}  # "$" in a token is text, not TeX
    axes.set_xticks(
        range(columns), [display_token(t) for t in alignment.source_tokens], rotation=90, **labels
    )
    axes.set_yticks(range(rows), [display_token(t) for t in alignment.target_tokens], **labels)
    axes.xaxis.tick_top()
    axes.xaxis.set_label_position("top")
    axes.set_xlabel("source")
    axes.set_ylabel("output")
    axes.tick_params(length=0)
    if title:
        axes.set_title(title, fontsize=fontsize + 1, parse_math=False)
    if colorbar:
        figure.colorbar(image, ax=axes, shrink=min(1.0, 4.0 / height + 0.3), pad=0.02)
    if path is not None:
        figure.savefig(path, format="png")
    return figure
