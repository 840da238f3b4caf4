"""The helper graphs that move rows on the device (export.ops) against numpy, run as the
runtime runs them (service.runtime.onnx_engine)."""

from __future__ import annotations

from itertools import product

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from export.ops import TOP_K_BLOCK, join_graph, place_graph, scatter_graph, search_nodes
from service.runtime.batching import concat_padded
from service.runtime.tensor_ops import join_pads

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


@pytest.mark.parametrize(
    ("dtype", "numpy"), [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)]
)
def test_place_gathers_and_pads_every_tensor_as_numpy_does(dtype, numpy):
    """The place op: rows `indices` of each data_i (any rank), right-padded by pads_i, in one
    run (a request's memory tensors written into a static step's slots)."""
    rng = np.random.default_rng(1)
    shapes = [(5, 4, 6, 8), (5, 4, 6, 8), (5, 3)]  # ranks and sizes of their own
    targets = [(4, 9, 8), (4, 6, 8), (7,)]  # each row's padded shape
    session = ort.InferenceSession(
        place_graph(dtype, len(shapes)).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    data = [(rng.standard_normal(s) * 100).astype(numpy) for s in shapes]
    indices = np.array([3, 0, 3], dtype=np.int64)  # any order, repeats
    feeds = {"indices": indices}
    for i, (tensor, target) in enumerate(zip(data, targets, strict=True)):
        ends = [t - h for t, h in zip(target, tensor.shape[1:], strict=True)]
        feeds |= {f"data_{i}": tensor, f"pads_{i}": np.array([0] * tensor.ndim + [0, *ends])}
    outputs = session.run(None, feeds)
    for tensor, target, output in zip(data, targets, outputs, strict=True):
        expected = np.zeros((len(indices), *target), dtype=numpy)
        expected[(slice(None), *(slice(0, n) for n in tensor.shape[1:]))] = tensor[indices]
        assert output.dtype == numpy
        np.testing.assert_array_equal(output, expected)
    graph = place_graph(dtype, 2).graph
    assert [n.op_type for n in graph.node] == ["Gather", "Pad"] * 2


@pytest.mark.parametrize("aliased", [True, False], ids=["in-place", "copied"])
@pytest.mark.parametrize(
    ("dtype", "numpy"), [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)]
)
def test_scatter_writes_padded_rows_into_scattered_slots_and_keeps_the_rest(dtype, numpy, aliased):
    """The scatter op: rows `indices` of each data_i, right-padded by pads_i, written into
    slots `slots` of target_i in one run. Bound to target_i's own memory (as the runtime binds
    it), or to another buffer (as if the kernel copied target_i first): the same result."""
    rng = np.random.default_rng(2)
    shapes = [(5, 4, 6, 8), (5, 4, 6, 8), (5, 3)]
    buffers = [(7, 4, 9, 8), (7, 4, 6, 8), (7, 7)]  # 7 slots of each padded row shape
    session = ort.InferenceSession(
        scatter_graph(dtype, len(shapes)).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    data = [(rng.standard_normal(s) * 100).astype(numpy) for s in shapes]
    targets = [(rng.standard_normal(s) * 100).astype(numpy) for s in buffers]
    expected = [t.copy() for t in targets]
    indices = np.array([3, 0, 4], dtype=np.int64)
    slots = np.array([[6], [1], [3]], dtype=np.int64)  # scattered, out of order
    binding = session.io_binding()
    binding.bind_cpu_input("indices", indices)
    binding.bind_cpu_input("slots", slots)
    kept = []
    for i, (tensor, target) in enumerate(zip(data, targets, strict=True)):
        ends = [t - h for t, h in zip(target.shape[1:], tensor.shape[1:], strict=True)]
        kept.append(np.array([0] * tensor.ndim + [0, *ends], dtype=np.int64))
        value = ort.OrtValue.ortvalue_from_numpy(target)
        binding.bind_cpu_input(f"data_{i}", tensor)
        binding.bind_cpu_input(f"pads_{i}", kept[-1])
        binding.bind_ortvalue_input(f"target_{i}", value)
        out = value if aliased else ort.OrtValue.ortvalue_from_numpy(np.zeros_like(target))
        binding.bind_ortvalue_output(f"output_{i}", out)
        kept += [value, out]
        expected[i][slots[:, 0]] = 0
        expected[i][(slots[:, 0], *(slice(0, n) for n in tensor.shape[1:]))] = tensor[indices]
    session.run_with_iobinding(binding)
    for i, output in enumerate(binding.get_outputs()):
        assert output.numpy().dtype == numpy
        np.testing.assert_array_equal(output.numpy(), expected[i])
        if aliased:  # written where it lies
            np.testing.assert_array_equal(kept[3 * i + 1].numpy(), expected[i])
    graph = scatter_graph(dtype, 2).graph
    assert [n.op_type for n in graph.node] == ["Gather", "Pad", "ScatterND"] * 2


def _search(vocab: int, two_levels: bool) -> ort.InferenceSession:
    nodes = search_nodes(TensorProto.FLOAT, "logits", "search/", vocab if two_levels else None)
    inputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["rows", vocab]),
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, vocab]),
        helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
    ]
    outputs = [
        helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["rows", "k"]),
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["rows", "k"]),
    ]
    graph = helper.make_graph(nodes, "search", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("vocab", [4 * TOP_K_BLOCK, 1000, 333])
def test_the_top_k_in_two_levels_is_one_top_k(vocab):
    """Blocks' best, the best blocks, then their tokens: the same ids and log-probabilities
    as one TopK, ties (rounded logits, banned tokens, fewer allowed tokens than k) in index
    order, k above the number of blocks, a vocabulary that is not a multiple of the block."""
    one, two = _search(vocab, False), _search(vocab, True)
    assert sum(n.op_type == "TopK" for n in search_nodes(TensorProto.FLOAT, "l", "", vocab)) == 3
    rng = np.random.default_rng(vocab)
    blocks = -(-vocab // TOP_K_BLOCK)
    for trial, (rows, k) in enumerate(product([1, 3, 16], [1, 8, blocks + 2])):
        logits = rng.standard_normal((rows, vocab)).astype(np.float32)
        if trial % 3 == 0:
            logits = np.round(logits)  # many equal scores
        bias = np.zeros((1, vocab), np.float32)
        if trial % 2:
            bias[0, rng.integers(0, vocab, vocab // 2)] = -np.inf
        if trial == 4:
            bias[:] = -np.inf
            bias[0, :3] = 0.0  # fewer allowed than k: the rest -inf, in index order
        feeds = {"logits": logits, "bias": bias, "k": np.array([k], np.int64)}
        (want_values, want_ids), (values, ids) = one.run(None, feeds), two.run(None, feeds)
        assert np.array_equal(ids, want_ids) and np.array_equal(values, want_values)
