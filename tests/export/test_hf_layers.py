"""What the Hugging Face graphs share (export.hf.layers): heads, and the masks of a step."""

from __future__ import annotations

import torch

from export.hf.layers import join_heads, split_heads, step_masks


def test_heads_split_and_join_back():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 4:6])  # head 2 holds features 4 and 5
    assert torch.equal(join_heads(heads), x)


def test_a_step_sees_the_rows_past_and_its_new_tokens_up_to_each():
    self_mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])  # row 1: a padded past
    memory_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    allowed, cross = step_masks(self_mask, memory_mask, new=2)
    assert allowed.shape == (2, 1, 2, 5) and cross.shape == (2, 1, 1, 3)
    assert allowed[0, 0].tolist() == [[True, True, True, True, False], [True] * 5]
    assert allowed[1, 0].tolist() == [[False, True, True, True, False], [False] + [True] * 4]
    assert cross[1, 0, 0].tolist() == [True, True, False]
