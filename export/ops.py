"""Small helper graphs the runtime needs beside a model's own (written into every version).

They move cache rows on the device where the cache lives, so on a GPU it never leaves it:
- `gather_<dtype>`: rows `indices` of a tensor (axis 0); beam search and continuous batching
  reorder, repeat and drop rows with it;
- `join_<dtype>`: the rows of `a`, then those of `b`, the shorter right-padded with zeros on
  axis 2 (cache or memory length): requests joining a running batch;
- `narrow_<dtype>`: positions `start` to `end` of axis 2: dropping cache columns that every
  row masks, once the requests that needed them have left.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from export.onnx_export import OPSET

DTYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64,
}


def _model(name: str, nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime this project supports
    return model


def gather_graph(dtype: int) -> onnx.ModelProto:
    """output = data[indices] along axis 0; any rank, any sizes."""
    data = helper.make_tensor_value_info("data", dtype, None)
    indices = helper.make_tensor_value_info("indices", TensorProto.INT64, ["rows"])
    output = helper.make_tensor_value_info("output", dtype, None)
    node = helper.make_node("Gather", ["data", "indices"], ["output"], axis=0)
    return _model("gather", [node], [data, indices], [output])


def join_graph(dtype: int) -> onnx.ModelProto:
    """output = concat(pad(a), pad(b)) on axis 0, both right-padded with 0 on axis 2 to the
    longer; rank 4."""
    a = helper.make_tensor_value_info("a", dtype, ["rows_a", "d1", "length_a", "d3"])
    b = helper.make_tensor_value_info("b", dtype, ["rows_b", "d1", "length_b", "d3"])
    output = helper.make_tensor_value_info("output", dtype, ["rows", "d1", "length", "d3"])
    constants = [
        helper.make_tensor("axis2", TensorProto.INT64, [1], [2]),
        helper.make_tensor("zeros6", TensorProto.INT64, [6], [0] * 6),
        helper.make_tensor("zero1", TensorProto.INT64, [1], [0]),
    ]
    nodes = []
    for name in ("a", "b"):
        nodes += [
            helper.make_node("Shape", [name], [f"{name}_shape"]),
            helper.make_node("Gather", [f"{name}_shape", "axis2"], [f"{name}_length"]),
        ]
    nodes.append(helper.make_node("Max", ["a_length", "b_length"], ["length"]))
    for name in ("a", "b"):
        nodes += [
            helper.make_node("Sub", ["length", f"{name}_length"], [f"{name}_missing"]),
            helper.make_node(
                "Concat", ["zeros6", f"{name}_missing", "zero1"], [f"{name}_pads"], axis=0
            ),
            helper.make_node("Pad", [name, f"{name}_pads"], [f"{name}_padded"]),
        ]
    nodes.append(helper.make_node("Concat", ["a_padded", "b_padded"], ["output"], axis=0))
    return _model("join", nodes, [a, b], [output], constants)


def narrow_graph(dtype: int) -> onnx.ModelProto:
    """output = data[:, :, start:end]; rank 4."""
    data = helper.make_tensor_value_info("data", dtype, ["d0", "d1", "length", "d3"])
    start = helper.make_tensor_value_info("start", TensorProto.INT64, [1])
    end = helper.make_tensor_value_info("end", TensorProto.INT64, [1])
    output = helper.make_tensor_value_info("output", dtype, ["d0", "d1", "narrowed", "d3"])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    node = helper.make_node("Slice", ["data", "start", "end", "axes"], ["output"])
    return _model("narrow", [node], [data, start, end], [output], [axes])


OPS = {"gather": gather_graph, "join": join_graph, "narrow": narrow_graph}


def write_ops(directory: Path) -> dict[str, dict[str, str]]:
    """Writes the helper graphs; returns {op: {dtype: relative path}} for the manifest."""
    paths: dict[str, dict[str, str]] = {}
    for op, build in OPS.items():
        for name, dtype in DTYPES.items():
            path = directory / "ops" / f"{op}_{name}.onnx"
            path.parent.mkdir(parents=True, exist_ok=True)
            onnx.save_model(build(dtype), str(path))
            paths.setdefault(op, {})[name] = str(path.relative_to(directory))
    return paths
