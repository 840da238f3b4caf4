"""The figure of "Show, Attend and Tell": the image, then one panel per generated word with
that step's attention over the image grid laid on it.

Takes plain arrays (no torch), so it serves the local PyTorch engine and gRPC responses
alike (`service.client.attention_maps` of a hypothesis' `attention` gives the grids).
matplotlib (the `client` extra) and Pillow are imported only when a figure is drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.tokens import display_token

COLUMNS = 5
PANEL_INCHES = 2.0


def upsample(weights: np.ndarray, grid_height: int, grid_width: int, size: tuple[int, int]):
    """(grid_height * grid_width,) weights -> (H, W) map over the image, smoothed bilinearly
    and scaled so its largest value is 1."""
    from PIL import Image

    grid = np.asarray(weights, dtype=np.float32).reshape(grid_height, grid_width)
    image = Image.fromarray(grid / max(float(grid.max()), 1e-12)).resize(size, Image.BILINEAR)
    return np.asarray(image)


def draw_attention(
    image: np.ndarray,
    tokens: list[str],
    attention: np.ndarray,
    grid: tuple[int, int] | None = None,
    path: str | Path | None = None,
    title: str | None = None,
    dpi: int = 100,
):
    """image (H, W, 3) uint8; tokens, one per step (`</s>` included when generated);
    attention (steps, grid_height * grid_width) with `grid` = (grid_height, grid_width), or
    (steps, grid_height, grid_width) with `grid` left None. Each grid is laid over the whole
    image (squeezed, no crop). Writes a PNG to `path` when given and returns the matplotlib
    Figure: axes[0] the image, axes[1 + i] token i's panel."""
    attention = np.asarray(attention)
    if grid is None:
        if attention.ndim != 3:
            raise ValueError(f"no grid given for attention of shape {attention.shape}")
        grid = attention.shape[1:]
    if attention.ndim == 3 and tuple(attention.shape[1:]) != tuple(grid):
        raise ValueError(f"attention of shape {attention.shape} for a {grid[0]} x {grid[1]} grid")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(attention) != len(tokens):
        raise ValueError(f"{len(tokens)} tokens but {len(attention)} attention rows")
    panels = 1 + len(tokens)
    rows = -(-panels // COLUMNS)
    figure, axes = plt.subplots(
        rows, COLUMNS, figsize=(COLUMNS * PANEL_INCHES, rows * PANEL_INCHES), squeeze=False
    )
    size = (image.shape[1], image.shape[0])
    for index, ax in enumerate(axes.flat):
        ax.axis("off")
        if index >= panels:
            continue
        ax.imshow(image)
        if index == 0:
            ax.set_title("image", fontsize=9)
            continue
        ax.imshow(upsample(attention[index - 1], *grid, size), cmap="gray", alpha=0.6, vmin=0)
        ax.set_title(display_token(tokens[index - 1]), fontsize=10)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return figure
