"""take_written: rows of a host buffer written in place, moved within it."""

from __future__ import annotations

import numpy as np
import pytest

from service.runtime.tensors import take_written


@pytest.mark.parametrize(
    "index",
    [
        [0, 1, 2, 3, 4, 5],  # nothing moves
        [0, 0, 1, 2, 4, 4],  # beams: a row extended twice, its neighbour dropped
        [5, 4, 3, 2, 1, 0],  # every row moves, each the source of another
        [1, 2, 3, 4, 5, 0],  # a cycle
        [2, 4, 5],  # rows leave
        [3],
        [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3],  # more rows than the buffer has
    ],
)
@pytest.mark.parametrize("axis", [1, 2])
def test_rows_move_as_a_gather_of_their_written_positions(index, axis):
    rng = np.random.default_rng(len(index) + axis)
    buffer = rng.random((6, 3, 9, 2)).astype(np.float32)
    original, length = buffer.copy(), 5
    got = take_written(buffer, np.array(index), axis, length)
    part = (slice(None),) * axis + (slice(0, length),)
    assert got.shape == (len(index), *buffer.shape[1:])
    np.testing.assert_array_equal(got[part], original[np.array(index)][part])
    if len(index) <= len(buffer):  # moved within the buffer, which the step writes anyway
        assert np.shares_memory(got, buffer)
