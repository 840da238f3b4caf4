"""GroupQueryAttention as the in-place and static steps drive it (bench.gqa_check): one new
token per row, each row at its own position of a buffer written in place, the total length
the buffer's size. Against numpy on the CPU, and on CUDA where there is one (float16, the
only type its kernel takes)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import gqa_check


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gqa_over_a_shared_buffer_matches_numpy_on_the_cpu(dtype):
    cases = gqa_check.check("cpu", dtype, batches=(1, 3, 16))
    assert len(cases) == 3 * 2 * 2 * 2  # batches, layouts, totals, buffers
    assert [c for c in cases if not c.passed] == []


def test_the_check_catches_a_wrong_position():
    """A query attending one position short of its row's: the reference disagrees."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 1, 16)) for _ in range(3))
    past_k, past_v = (rng.standard_normal((2, 2, 6, 8)) for _ in range(2))
    right, _, _ = gqa_check.reference(q, k, v, past_k, past_v, np.array([3, 5]))
    wrong, _, _ = gqa_check.reference(q, k, v, past_k, past_v, np.array([3, 4]))
    assert np.abs(right[0] - wrong[0]).max() == 0  # row 0 unchanged
    assert np.abs(right[1] - wrong[1]).max() > 1e-2


@pytest.mark.gpu
def test_gqa_over_a_shared_buffer_matches_numpy_on_cuda():
    """Every batch and layout with the total the steps pass (the buffer's size)."""
    cases = gqa_check.check(
        "cuda", "float16", batches=(1, 3, 16, 64, 256), totals=("capacity",), buffers=("shared",)
    )
    failed = [c for c in cases if not c.passed]
    assert failed == [], failed[:4]
