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


def test_as_many_rows_give_back_the_buffer_itself_so_its_binding_holds():
    """A beam step keeps its rows: the buffer itself comes back, not a view of it, so an IO
    binding that holds it as an input and an output is not made again (binding the six
    buffers anew every step made onnxruntime's run of a batch-1 beam-4 int8 step 1.5 times
    as long)."""
    buffer = np.arange(4 * 2 * 6 * 3, dtype=np.float32).reshape(4, 2, 6, 3)
    assert take_written(buffer, np.array([0, 0, 2, 1]), 2, 4) is buffer
    assert take_written(buffer, np.arange(4), 2, 4) is buffer
    fewer = take_written(buffer, np.array([3, 1]), 2, 4)
    assert fewer is not buffer and np.shares_memory(fewer, buffer) and len(fewer) == 2
