"""The helper graphs that move rows on the device (export.ops) against numpy, run as the
runtime runs them (service.onnx_engine): `put` bound in place, its output on its input."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from export.ops import join_graph, put_graph
from service.batching import concat_padded
from service.onnx_engine import join_pads, put_feeds

SHAPES = [  # (a, b): a cache joined by rows with an empty one, a longer one, memories
    ((2, 4, 5, 8), (1, 4, 0, 8)),
    ((3, 4, 2, 8), (2, 4, 7, 8)),
    ((1, 6), (4, 3)),
    ((2, 3), (2, 3)),
]


def _join(dtype: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(
        join_graph(dtype).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    a_pads, b_pads = join_pads(a.shape, b.shape)
    return session.run(None, {"a": a, "b": b, "a_pads": a_pads, "b_pads": b_pads})[0]


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
@pytest.mark.parametrize(
    ("dtype", "numpy"),
    [
        (TensorProto.FLOAT, np.float32),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.INT64, np.int64),
    ],
)
def test_join_pads_the_shorter_and_concatenates_rows_as_numpy_does(a_shape, b_shape, dtype, numpy):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(a_shape) * 100).astype(numpy)
    b = (rng.standard_normal(b_shape) * 100).astype(numpy)
    joined = _join(dtype, a, b)
    expected = concat_padded([a, b])
    assert joined.dtype == numpy and joined.shape == expected.shape
    np.testing.assert_array_equal(joined, expected)


def test_join_has_no_shape_arithmetic():
    """Only Pad and Concat, the pads graph inputs: nothing for CUDA to run on the CPU (whose
    results would come back through Memcpy nodes)."""
    graph = join_graph(TensorProto.FLOAT).graph
    assert [n.op_type for n in graph.node] == ["Pad", "Pad", "Concat"]
    inputs = {i.name for i in graph.input}
    assert {n.input[1] for n in graph.node if n.op_type == "Pad"} == {"a_pads", "b_pads"} <= inputs


def test_join_pads_pad_only_after_the_rows_axis():
    a_pads, b_pads = join_pads((2, 4, 5, 8), (1, 4, 0, 8))
    assert a_pads.tolist() == [0, 0, 0, 0, 0, 0, 0, 0]
    assert b_pads.tolist() == [0, 0, 0, 0, 0, 0, 5, 0]
    assert a_pads.dtype == b_pads.dtype == np.int64
    with pytest.raises(ValueError, match="one rank"):
        join_pads((2, 3), (2, 3, 4))


def _put_reference(data, rows, index, slots) -> np.ndarray:
    """data with rows `slots` replaced by rows `index` of `rows`, cut or zero-padded."""
    expected = data.copy()
    part = tuple(slice(0, min(r, d)) for r, d in zip(rows.shape[1:], data.shape[1:], strict=True))
    taken = rows[index]  # read before any row is written (rows may be data)
    for row, slot in zip(taken, slots, strict=True):
        expected[slot] = 0
        expected[(slot, *part)] = row[part]
    return expected


def _put(target: ort.OrtValue, rows, index, slots) -> None:
    """The put graph run as OnnxEngine.put runs it: its output bound to `target` itself."""
    dtype = TensorProto.FLOAT16 if target.data_type() == "tensor(float16)" else TensorProto.FLOAT
    session = _PUT_SESSIONS.get(dtype) or _PUT_SESSIONS.setdefault(
        dtype,
        ort.InferenceSession(put_graph(dtype).SerializeToString(),
                             providers=["CPUExecutionProvider"]),  # fmt: skip
    )
    rows_shape = tuple(rows.shape() if isinstance(rows, ort.OrtValue) else rows.shape)
    feeds = put_feeds(tuple(target.shape()), rows_shape, np.array(index), np.array(slots))
    binding = session.io_binding()
    binding.bind_ortvalue_input("data", target)
    if isinstance(rows, ort.OrtValue):
        binding.bind_ortvalue_input("rows", rows)
    else:
        binding.bind_cpu_input("rows", rows)
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_ortvalue_output("output", target)
    session.run_with_iobinding(binding)


_PUT_SESSIONS: dict = {}


PUTS = [  # (data, rows, index, slots): memories shorter and longer, states, a copy of rows
    ((6, 4, 9, 8), (3, 4, 5, 8), [2, 0], [5, 1]),
    ((6, 4, 9, 8), (2, 4, 12, 8), [1, 1, 0], [0, 3, 4]),
    ((5, 7), (1, 7), [0, 0], [4, 2]),
    ((8, 3, 6), None, [0, 7, 2], [3, 5, 6]),  # None: rows of data itself (beams copied)
]


@pytest.mark.parametrize(("data_shape", "rows_shape", "index", "slots"), PUTS)
@pytest.mark.parametrize("numpy", [np.float32, np.float16])
def test_put_writes_rows_into_slots_in_place_and_nothing_else(
    data_shape, rows_shape, index, slots, numpy
):
    rng = np.random.default_rng(1)
    data = (rng.standard_normal(data_shape) * 10).astype(numpy)
    value = ort.OrtValue.ortvalue_from_numpy(data.copy(), "cpu", 0)
    rows = value if rows_shape is None else (rng.standard_normal(rows_shape) * 10).astype(numpy)
    expected = _put_reference(data, data if rows_shape is None else rows, index, slots)
    address = value.data_ptr()
    _put(value, rows, index, slots)
    assert value.data_ptr() == address and value.shape() == list(data_shape)
    np.testing.assert_array_equal(value.numpy(), expected)


def test_put_copies_no_more_than_its_rows():
    """Bound in place, a put into a large tensor costs about what its rows cost: ScatterND
    copies its input to its output only when they are two buffers."""
    import time

    rows = np.ones((2, 8, 64, 64), np.float32)
    big = ort.OrtValue.ortvalue_from_numpy(np.zeros((2048, 8, 64, 64), np.float32), "cpu", 0)
    small = ort.OrtValue.ortvalue_from_numpy(np.zeros((4, 8, 64, 64), np.float32), "cpu", 0)

    def best(target) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            _put(target, rows, [0, 1], [1, 3])
            times.append(time.perf_counter() - start)
        return min(times)

    best(big), best(small)  # warm-up
    # a whole copy of the large one (256 MiB) would take hundreds of times the small one's
    assert best(big) < 20 * best(small) + 0.002
    np.testing.assert_array_equal(big.numpy()[[1, 3]], rows)
    assert not big.numpy()[[0, 2, 4, 2047]].any()


def test_put_on_the_host_writes_what_both_rows_hold():
    from service.inference import put_rows

    data = np.full((4, 2, 6), 7.0, np.float32)
    rows = np.arange(2 * 2 * 4, dtype=np.float32).reshape(2, 2, 4)
    put_rows(data, rows, np.array([1]), np.array([2]))
    np.testing.assert_array_equal(data[2, :, :4], rows[1])
    assert (data[2, :, 4:] == 7).all() and (data[[0, 1, 3]] == 7).all()  # the rest stays


def test_put_graph_has_no_shape_arithmetic():
    graph = put_graph(TensorProto.FLOAT).graph
    assert [n.op_type for n in graph.node] == ["Gather", "Slice", "Pad", "ScatterND"]
    inputs = {i.name for i in graph.input}
    assert {"starts", "ends", "pads", "index", "slots"} <= inputs
