"""Turning token id lists into padded numpy batches."""

from __future__ import annotations

import numpy as np

from service.tokenizer import EOS_ID, PAD_ID


def pad_batch(sequences: list[list[int]], pad: int = PAD_ID) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids (B, L) int64 and mask (B, L) int64, 1 where real."""
    length = max((len(s) for s in sequences), default=0)
    ids = np.full((len(sequences), length), pad, dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.int64)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)] = sequence
        mask[i, : len(sequence)] = 1
    return ids, mask


def source_batch(token_ids: list[list[int]], max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Source ids with `</s>` appended, cut to `max_length` tokens, padded."""
    return pad_batch([ids[: max_length - 1] + [EOS_ID] for ids in token_ids])
