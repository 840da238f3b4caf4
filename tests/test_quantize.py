"""Smoothing the layer norms before int8: the fp32 function unchanged, the activations evened."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from export.quantize import NORMAL_RANGE, smooth_norms

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
