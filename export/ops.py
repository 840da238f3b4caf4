"""Small helper graphs the runtime needs beside a model's own (written into every version).

`gather_<dtype>.onnx` selects rows of a tensor on the device where it lives: beam search and
continuous batching reorder the cache with it, so on a GPU the cache never leaves the device.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from export.onnx_export import OPSET

GATHER_DTYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64,
}


def gather_graph(dtype: int) -> onnx.ModelProto:
    """output = data[indices] along axis 0; any rank, any sizes."""
    data = helper.make_tensor_value_info("data", dtype, None)
    indices = helper.make_tensor_value_info("indices", TensorProto.INT64, ["rows"])
    output = helper.make_tensor_value_info("output", dtype, None)
    node = helper.make_node("Gather", ["data", "indices"], ["output"], axis=0)
    graph = helper.make_graph([node], "gather", [data, indices], [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime this project supports
    return model


def write_ops(directory: Path) -> dict[str, dict[str, str]]:
    """Writes the helper graphs; returns {"gather": {dtype: relative path}} for the manifest."""
    paths = {}
    for name, dtype in GATHER_DTYPES.items():
        path = directory / "ops" / f"gather_{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(gather_graph(dtype), str(path))
        paths[name] = str(path.relative_to(directory))
    return {"gather": paths}
