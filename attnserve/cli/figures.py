"""The figures `translate --alignment` and `caption --attention` write: one PNG per input
(OUT.png, or OUT-1.png, OUT-2.png, ... for several)."""

from __future__ import annotations

from pathlib import Path

from attnserve.cli.render import image_pixels
from attnserve.cli.results import Alignment, Caption, Translation
from attnserve.cli.subcommand import Failure
from service.runtime.errors import InvalidArgument

FIGURE_SIDE = 512  # pixels: the image of an attention figure is shrunk to fit this square


def figure_path(path: Path, index: int, count: int) -> Path:
    return path if count == 1 else path.with_name(f"{path.stem}-{index + 1}{path.suffix}")


def short_title(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def write_alignment(path: Path, index: int, count: int, translation: Translation) -> None:
    """The heatmap of the best hypothesis' cross-attention over the source tokens."""
    from attnserve.alignment import draw_alignment

    alignment = text_alignment(translation)
    if alignment is None:
        raise Failure(f"no alignment for text {index + 1}")
    try:
        draw_alignment(
            alignment, figure_path(path, index, count), title=short_title(translation.source)
        )
    except (ValueError, OSError) as error:
        raise Failure(f"alignment of text {index + 1}: {error}") from None


def text_alignment(translation: Translation) -> Alignment | None:
    """The best hypothesis' alignment; for a text of several sentences, which the server
    decodes apart and aligns in `sentences`, theirs joined into one grid over the whole text,
    each sentence's block on the diagonal (it attends to its own source alone). None where
    there is none."""
    best = translation.hypotheses[0] if translation.hypotheses else None
    if best is None or best.alignment is not None:
        return best and best.alignment
    parts = [sentence.alignment for sentence in translation.sentences]
    if not parts or None in parts:
        return None
    columns, start, rows = sum(len(part.source_tokens) for part in parts), 0, []
    for part in parts:
        end = start + len(part.source_tokens)
        rows += [(0.0,) * start + tuple(row) + (0.0,) * (columns - end) for row in part.weights]
        start = end
    return Alignment(
        tuple(token for part in parts for token in part.source_tokens),
        tuple(token for part in parts for token in part.target_tokens),
        tuple(rows),
    )


def figure_image(data: bytes):
    """The image as the server sees it (`render.image_pixels`), as (H, W, 3) uint8, shrunk to
    fit FIGURE_SIDE."""
    import numpy as np
    from PIL import Image

    image = Image.fromarray(image_pixels(data, "image"))
    image.thumbnail((FIGURE_SIDE, FIGURE_SIDE), Image.BILINEAR)
    return np.asarray(image)


def write_attention(path: Path, index: int, count: int, data: bytes, caption: Caption) -> None:
    """The image (`data`, the file's bytes), then one panel per token of the best caption with
    its attention laid over the image."""
    from service import client
    from service.attention_figure import draw_attention

    best = caption.hypotheses[0] if caption.hypotheses else None
    if best is None or best.attention is None:
        raise Failure(f"no attention for image {index + 1}")
    try:
        draw_attention(
            figure_image(data),
            [token.token for token in best.attention.tokens],
            client.attention_maps(best.attention),
            path=figure_path(path, index, count),
            title=short_title(best.text),
        )
    except (ValueError, OSError, InvalidArgument) as error:
        raise Failure(f"attention of image {index + 1}: {error}") from None
