"""Subword pieces as figures label them: the alignment heatmap (`attnserve/alignment.py`) and
the attention figure (`service/attention_figure.py`) show the same token the same way."""

from __future__ import annotations

WORD_START = "▁"  # SentencePiece's mark of a piece that begins a word
LONE_WORD_START = "␣"  # shown for a piece that is nothing but the mark


def display_token(token: str) -> str:
    """A subword as labelled: the word-start mark dropped ("▁casa" -> "casa"), a piece that is
    only the mark shown as "␣", any other text unchanged."""
    shown = token.replace(WORD_START, " ").strip()
    return shown if shown else (LONE_WORD_START if token else token)
