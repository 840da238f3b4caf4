"""What every user of onnxruntime in the runtime shares: providers, session options, dtypes,
buffers allocated on a device, named shapes, outputs bound at an address."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from service.runtime.onnx_runtime import (
    ORT_TYPES,
    PROVIDERS,
    allocate,
    bind_output,
    named_shape,
    numpy_type,
    providers,
    session_options,
)


def _doubling() -> ort.InferenceSession:
    """y = x + x over float (batch, 3)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=providers("cpu"))


def test_session_options_run_sequentially_on_the_threads_given():
    options = session_options(3)
    assert options.intra_op_num_threads == 3 and options.inter_op_num_threads == 1
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def _residual_norm() -> bytes:
    """y = LayerNormalization(a + b) over float (batch, 1, 8): what onnxruntime fuses into
    com.microsoft SkipLayerNormalization unless told not to."""
    x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 1, 8]) for n in "ab"]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, 8])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [8], [1.0] * 8)
    shift = helper.make_tensor("shift", TensorProto.FLOAT, [8], [0.0] * 8)
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("LayerNormalization", ["s", "scale", "shift"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "norm", x, [y], [scale, shift])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_cpu_sessions_keep_residual_adds_and_layer_norms_apart(tmp_path, device):
    """The fused SkipLayerNormalization kernel is the slower on the CPU (docs/benchmarks.md):
    a CPU session keeps the Add and the LayerNormalization; a CUDA session fuses them (the
    options alone are compared there: this test runs on the CPU)."""
    options = session_options(1, device)
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(_residual_norm(), options, providers=providers("cpu"))
    import onnx

    ops = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    if device == "cpu":
        assert ops == ["Add", "LayerNormalization"]
    else:
        assert ops == ["SkipLayerNormalization"]


def test_providers_of_a_device_and_of_a_captured_step():
    assert providers("cpu") == ["CPUExecutionProvider"]
    assert providers("cuda") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    captured = providers("cuda", capture=True)
    assert captured == [
        ("CUDAExecutionProvider", {"enable_cuda_graph": "1"}),
        "CPUExecutionProvider",
    ]
    assert captured[1:] == PROVIDERS["cuda"][1:]  # the CPU still takes what CUDA cannot
    with pytest.raises(KeyError):
        providers("tpu")


def test_numpy_types_of_onnxruntime_tensor_types():
    assert numpy_type("tensor(float)") == np.float32
    assert numpy_type("tensor(float16)") == np.float16
    assert numpy_type("tensor(int64)") == np.int64
    assert set(ORT_TYPES) == {"tensor(float)", "tensor(float16)", "tensor(int64)"}
    with pytest.raises(KeyError):
        numpy_type("tensor(double)")


def test_allocate_gives_zeros_or_what_fill_writes():
    zeros = allocate("cpu", (2, 3), np.float16)
    assert zeros.shape() == [2, 3] and zeros.data_type() == "tensor(float16)"
    assert not zeros.numpy().any()

    def fill(array):
        array[1] = 7

    filled = allocate("cpu", (2, 3), np.int64, fill)
    np.testing.assert_array_equal(filled.numpy(), [[0, 0, 0], [7, 7, 7]])


def test_named_shape_takes_named_axes_from_sizes():
    session = _doubling()
    meta = session.get_inputs()[0]
    assert named_shape(meta, {"batch": 5}) == [5, 3]
    with pytest.raises(KeyError):
        named_shape(meta, {})


def test_an_output_bound_to_a_numpy_array_or_an_ortvalue_is_written_there():
    session = _doubling()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    host = np.full((2, 3), -1, dtype=np.float32)
    bind_output(binding, "y", host)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(host, 2 * x)  # written into the array's own memory
    value = allocate("cpu", (2, 3), np.float32)
    bind_output(binding, "y", value)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(value.numpy(), 2 * x)
    assert binding.get_outputs()[0].data_ptr() == value.data_ptr()
