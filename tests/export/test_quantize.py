"""Preparing graphs for int8: the layer norms smoothed and MatMuls over joined inputs split,
the fp32 function unchanged either way; int8 of the nodes a kind names."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from export.quantize import NORMAL_RANGE, quantize_int8, smooth_norms, split_joined_inputs

D, OUT = 8, 5


def _graph(extra_reader: bool = False) -> onnx.ModelProto:
    """x -> LayerNormalization -> Gather(last position) -> MatMul, and a second norm whose
    output feeds a MatMul (and, with `extra_reader`, an Add too)."""
    rng = np.random.default_rng(0)
    gamma = rng.uniform(0.5, 1.5, D).astype(np.float32)
    gamma[3] = 30.0  # an outlier channel, as trained norms have
    weights = [
        numpy_helper.from_array(rng.normal(0, 1, D).astype(np.float32), "gamma"),
        numpy_helper.from_array(gamma, "gamma2"),
        numpy_helper.from_array(rng.normal(0, 0.1, D).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.normal(0, 0.1, D).astype(np.float32), "beta2"),
        numpy_helper.from_array(rng.normal(0, 0.2, (D, OUT)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.2, (D, OUT)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array(-1, dtype=np.int64), "last"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("Gather", ["n", "last"], ["g"], axis=1),
        helper.make_node("MatMul", ["g", "w"], ["y"]),
        helper.make_node("LayerNormalization", ["x", "gamma2", "beta2"], ["n2"], axis=-1),
        helper.make_node("MatMul", ["n2", "w2"], ["y2"]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("y2", TensorProto.FLOAT, None),
    ]
    if extra_reader:
        nodes.append(helper.make_node("Add", ["n2", "n2"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "norms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, D])],
        outputs,
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _spread(model: onnx.ModelProto, gamma: str, beta: str) -> np.ndarray:
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return NORMAL_RANGE * np.abs(values[gamma]) + np.abs(values[beta])


def test_smoothing_keeps_the_fp32_function_and_evens_the_channels():
    original = _graph()
    smoothed = onnx.ModelProto()
    smoothed.CopyFrom(original)
    assert smooth_norms(smoothed) == 2  # through the Gather that picks the last position too
    x = np.random.default_rng(1).normal(0, 3, (2, 3, D)).astype(np.float32)
    for before, after in zip(_run(original, x), _run(smoothed, x), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    before, after = _spread(original, "gamma2", "beta2"), _spread(smoothed, "gamma2", "beta2")
    assert after.max() / after.min() < (before.max() / before.min()) ** 0.6  # alpha 0.5: sqrt


def test_a_norm_read_by_anything_but_a_weighted_matmul_is_left_alone():
    model = _graph(extra_reader=True)
    untouched = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert smooth_norms(model) == 1  # the first norm only: an Add reads the second one
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for name in ("gamma2", "beta2", "w2"):
        np.testing.assert_array_equal(values[name], untouched[name])
    assert not np.array_equal(values["w"], untouched["w"])


def _joined(second_reader: bool = False) -> onnx.ModelProto:
    """[a; b] -> MatMul, with a of small values and b of large ones (and, with
    `second_reader`, the Concat read by an Add too)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(0, 0.2, (3 + D, OUT)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
        helper.make_node("MatMul", ["ab", "w"], ["y"], name="mm"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if second_reader:
        nodes.append(helper.make_node("Add", ["ab", "ab"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    inputs = [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 3]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", D]),
    ]
    graph = helper.make_graph(nodes, "joined", inputs, outputs, [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {
        "a": rng.uniform(-1, 1, (4, 3)).astype(np.float32),
        "b": rng.normal(0, 20, (4, D)).astype(np.float32),
    }


def _outputs(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, _feeds())


def test_a_matmul_over_joined_inputs_is_split_and_keeps_its_function():
    model = _joined()
    expected = _outputs(model)
    assert split_joined_inputs(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMul") == 2 and "Concat" not in ops  # one product per part
    np.testing.assert_allclose(_outputs(model)[0], expected[0], rtol=1e-5, atol=1e-4)


def test_split_parts_are_quantised_each_with_its_own_scale(tmp_path):
    """int8 over the split MatMul keeps the small part's precision: closer to fp32 than one
    scale for both parts."""
    source = tmp_path / "joined.onnx"
    onnx.save_model(_joined(), str(source))
    expected = _outputs(_joined())[0]
    split = quantize_int8(source, tmp_path / "split.onnx")
    whole = tmp_path / "whole.onnx"
    quantize_dynamic(
        str(source), str(whole), per_channel=True, weight_type=QuantType.QInt8, reduce_range=True
    )
    error = {
        name: np.abs(_outputs(onnx.load(str(path)))[0] - expected).max()
        for name, path in (("split", split), ("whole", whole))
    }
    assert error["split"] < error["whole"], error


def test_a_joined_input_read_elsewhere_is_left_alone():
    model = _joined(second_reader=True)
    assert split_joined_inputs(model) == 0
    assert [n.op_type for n in model.graph.node] == ["Concat", "MatMul", "Add"]


def test_int8_quantises_only_the_nodes_named(tmp_path):
    source = tmp_path / "joined.onnx"
    onnx.save_model(_joined(), str(source))
    copied = quantize_int8(source, tmp_path / "none.onnx", nodes=lambda model: [])
    assert copied.read_bytes() == source.read_bytes()  # nothing named: the fp32 graph
    one = quantize_int8(source, tmp_path / "one.onnx", nodes=lambda m: ["mm.part1"])
    nodes = {n.name: n.op_type for n in onnx.load(str(one)).graph.node}
    assert nodes["mm.part0"] == "MatMul"  # not named: float
    assert "mm.part1" not in nodes and nodes["mm.part1_quant"] == "MatMulInteger"
