"""Turning token id lists into padded numpy batches."""

from __future__ import annotations

import numpy as np

from service.runtime.tokenizer import EOS_ID, PAD_ID


def pad_batch(sequences: list[list[int]], pad: int = PAD_ID) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids (B, L) int64 and mask (B, L) int64, 1 where real."""
    length = max((len(s) for s in sequences), default=0)
    ids = np.full((len(sequences), length), pad, dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.int64)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)] = sequence
        mask[i, : len(sequence)] = 1
    return ids, mask


def source_batch(
    token_ids: list[list[int]], max_length: int, eos: int = EOS_ID
) -> tuple[np.ndarray, np.ndarray]:
    """Source ids with the model's `</s>` (`eos`) appended, cut to `max_length` tokens,
    padded (the mask says where: the pad id itself is never read)."""
    return pad_batch([ids[: max_length - 1] + [eos] for ids in token_ids])


def concat_padded(arrays: list[np.ndarray]) -> np.ndarray:
    """Arrays of one rank and dtype concatenated on axis 0, every other axis right-padded with
    zeros to the longest (padding ids, masks and masked keys/values are all 0)."""
    if len(arrays) == 1:
        return arrays[0]
    shape = np.max([a.shape for a in arrays], axis=0)
    out = np.zeros((sum(len(a) for a in arrays), *shape[1:]), dtype=arrays[0].dtype)
    row = 0
    for a in arrays:
        out[(slice(row, row + len(a)), *map(slice, a.shape[1:]))] = a
        row += len(a)
    return out
