"""--engine torch: decoding here with the PyTorch checkpoint, its hypotheses read into
`results` as the server builds its response from them (the same tokens, `</s>` and weights).
Imported only when the torch engine runs; torch itself comes in with `models`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import numpy as np

from attnserve.cli.results import (
    Alignment,
    Attention,
    Caption,
    Captioned,
    Captions,
    Sentence,
    TokenAttention,
    TokenCounts,
    Translated,
    Translation,
    Translations,
    counted,
)
from attnserve.cli.subcommand import Failure
from service.paths import file_name
from service.runtime.errors import InvalidArgument
from service.runtime.tokenizer import EOS_ID


@contextlib.contextmanager
def _refusals():
    """Decoding options the runtime refuses, and a checkpoint that cannot be read, as one line
    on stderr and exit status 1 (`Failure`), the way a server's refusal is printed."""
    from models.checkpoint import UnreadableCheckpoint  # torch: only around torch's calls

    try:
        yield
    except InvalidArgument as error:
        raise Failure(f"INVALID_ARGUMENT: {error}") from None
    except (OSError, UnreadableCheckpoint) as error:
        raise Failure(f"--checkpoint: {error}") from None


def translate(args: argparse.Namespace, texts: list[str]) -> Translations:
    """Every text's n-best translations by `args.checkpoint`, each text decoded whole."""
    from models import commands  # torch

    with _refusals():
        tokenizer, nbest = commands.translate(args, texts)
    items = tuple(
        _translation(tokenizer, text, hypotheses)
        for text, hypotheses in zip(texts, nbest, strict=True)
    )
    return Translations(file_name(args.checkpoint), "", items, counted(items))


def _translation(tokenizer, text: str, hypotheses: list) -> Translation:
    source_ids = tokenizer.encode(text)
    source = tokenizer.pieces([*source_ids, EOS_ID])
    translated = tuple(
        Translated(**_hypothesis(tokenizer, h), alignment=_alignment(tokenizer, h, source))
        for h in hypotheses
    )
    best = translated[0].text if translated else ""
    whole = Sentence(0, len(text), 0, len(best), None)  # decoded as one sentence
    counts = TokenCounts(len(source_ids) + 1, sum(len(h.tokens) for h in hypotheses))
    return Translation(text, translated, (whole,), (), counts)


def _hypothesis(tokenizer, h) -> dict:
    """The fields of `results.Hypothesis` from a runtime Hypothesis (token ids)."""
    return {
        "text": tokenizer.decode(h.tokens),
        "score": float(h.score),
        "log_prob": float(h.log_prob),
        "tokens": tuple(tokenizer.pieces(h.tokens)),
        "token_log_probs": tuple(float(p) for p in h.token_log_probs),
        "finished": bool(h.finished),
    }


def _target(tokenizer, h) -> list[str]:
    """The hypothesis' pieces, with `</s>` when it was generated: one per attention row."""
    return tokenizer.pieces(h.tokens + ([EOS_ID] if h.finished else []))


def _alignment(tokenizer, h, source: list[str]) -> Alignment | None:
    if h.alignment is None:
        return None
    target = _target(tokenizer, h)
    rows = np.asarray(h.alignment, dtype=np.float64)[: len(target), : len(source)]
    return Alignment(tuple(source), tuple(target), tuple(map(tuple, rows.tolist())))


def open_images(paths: list[Path], images: list[bytes]) -> list | None:
    """The files' bytes as RGB PIL images decoded as the server decodes them
    (`render.image_pixels`), or None after one line on stderr per file refused."""
    from PIL import Image

    from attnserve.cli.render import image_pixels

    opened, failed = [], False
    for path, data in zip(paths, images, strict=True):
        try:
            opened.append(Image.fromarray(image_pixels(data, str(path))))
        except InvalidArgument as error:
            print(f"error: {error}", file=sys.stderr)
            failed = True
    return None if failed else opened


def caption(args: argparse.Namespace, paths: list[Path], images: list) -> Captions:
    """Every image's n-best captions by `args.checkpoint` (`images`: PIL images of `paths`)."""
    from models import caption_commands  # torch

    with _refusals():
        tokenizer, grid, nbest = caption_commands.caption(args, images)
    items = tuple(
        _caption(tokenizer, grid, path, image.size, hypotheses)
        for path, image, hypotheses in zip(paths, images, nbest, strict=True)
    )
    return Captions(file_name(args.checkpoint), "", items, counted(items))


def _caption(tokenizer, grid: int, path: Path, size: tuple[int, int], hypotheses) -> Caption:
    captioned = tuple(
        Captioned(**_hypothesis(tokenizer, h), attention=_attention(tokenizer, h, grid, size))
        for h in hypotheses
    )
    counts = TokenCounts(grid * grid, sum(len(h.tokens) for h in hypotheses))
    return Caption(file_name(path), size[0], size[1], captioned, counts)


def _attention(tokenizer, h, grid: int, size: tuple[int, int]) -> Attention | None:
    """The attention rows of a hypothesis as grids of `grid` x `grid` cells over an image of
    `size` (width, height)."""
    if h.alignment is None:
        return None
    target = _target(tokenizer, h)
    rows = np.asarray(h.alignment, dtype=np.float64)[: len(target), : grid * grid]
    tokens = tuple(
        TokenAttention(piece, tuple(row)) for piece, row in zip(target, rows.tolist(), strict=True)
    )
    return Attention(grid, grid, size[1], size[0], tokens)
