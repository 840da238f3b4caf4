"""TensorOps: take, join, narrow and pad give the same rows whether the tensors are numpy
arrays (moved by numpy) or OrtValues (moved by the helper graphs, where they live)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from export.ops import DTYPES, gather_graph, join_graph, narrow_graph
from service.runtime.session_runner import SessionRunner
from service.runtime.tensor_ops import HELPER_OPS, TensorOps, join_pads

BUILDERS = {"gather": gather_graph, "join": join_graph, "narrow": narrow_graph}


@pytest.fixture(scope="module")
def ops() -> tuple[TensorOps, TensorOps]:
    """(on the host: no graphs, on a device: the helper graphs through IO binding)."""
    graphs = {
        op: {
            name: ort.InferenceSession(
                BUILDERS[op](DTYPES[name]).SerializeToString(),
                providers=["CPUExecutionProvider"],
            )
            for name in ("float32", "int64")
        }
        for op in HELPER_OPS
    }
    return TensorOps(SessionRunner("cpu", False), {}), TensorOps(SessionRunner("cpu", True), graphs)


def device(array: np.ndarray) -> ort.OrtValue:
    return ort.OrtValue.ortvalue_from_numpy(array, "cpu", 0)


def cache(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 50).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_take_gives_rows_in_any_order_with_repeats(ops, dtype):
    host, on_device = ops
    tensor = cache((4, 2, 3, 5), dtype)
    index = [3, 0, 3]
    expected = tensor[index]
    np.testing.assert_array_equal(host.take(tensor, index), expected)
    taken = on_device.take(device(tensor), np.array(index))
    assert isinstance(taken, ort.OrtValue)
    np.testing.assert_array_equal(taken.numpy(), expected)


def test_join_pads_the_shorter_after_the_rows_axis_on_both_paths(ops):
    host, on_device = ops
    a, b = cache((2, 4, 5, 8)), cache((3, 4, 7, 8), seed=1)
    expected = np.zeros((5, 4, 7, 8), np.float32)
    expected[:2, :, :5], expected[2:] = a, b
    np.testing.assert_array_equal(host.join(a, b), expected)
    joined = on_device.join(device(a), device(b))
    np.testing.assert_array_equal(joined.numpy(), expected)
    empty = np.zeros((1, 4, 0, 8), np.float32)  # a new row with no cache yet
    np.testing.assert_array_equal(on_device.join(device(a), device(empty)).numpy()[:2], a)


def test_narrow_keeps_positions_of_one_axis(ops):
    host, on_device = ops
    tensor = cache((2, 3, 9))
    narrowed = host.narrow(tensor, 2, 2, 6)
    assert narrowed.flags.c_contiguous
    np.testing.assert_array_equal(narrowed, tensor[:, :, 2:6])
    np.testing.assert_array_equal(on_device.narrow(device(tensor), 1, 1, 3).numpy(), tensor[:, 1:3])


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_pad_right_pads_with_zeros_where_the_tensor_lives(ops, dtype):
    host, on_device = ops
    tensor = cache((2, 3, 4), dtype)
    expected = np.zeros((2, 5, 6), dtype)
    expected[:, :3, :4] = tensor
    np.testing.assert_array_equal(host.pad(tensor, (2, 5, 6)), expected)
    padded = on_device.pad(device(tensor), [2, 5, 6])
    assert isinstance(padded, ort.OrtValue)
    np.testing.assert_array_equal(padded.numpy(), expected)
    assert host.pad(tensor, (2, 3, 4)) is tensor  # the shape already: the tensor itself
    value = device(tensor)
    assert on_device.pad(value, [2, 3, 4]) is value


def test_a_helper_graph_is_chosen_by_the_tensors_dtype(ops):
    _, on_device = ops
    assert on_device.graph("gather", device(cache((1, 2)))) is on_device.graphs["gather"]["float32"]
    ids = device(np.zeros((1, 2), np.int64))
    assert on_device.graph("narrow", ids) is on_device.graphs["narrow"]["int64"]


def test_join_pads_pad_after_every_axis_but_the_rows_to_the_longer():
    a_pads, b_pads = join_pads((2, 3, 5), (4, 6, 1))
    assert a_pads.tolist() == [0, 0, 0, 0, 3, 0]
    assert b_pads.tolist() == [0, 0, 0, 0, 0, 4]
    with pytest.raises(ValueError, match="one rank"):
        join_pads((2, 3), (2,))
