"""int8 variants by onnxruntime dynamic quantisation (weights int8, activations quantised per
call), for CPU serving."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

QUANTIZED_OPS = ("MatMul", "Gemm")


def untie_shared_weights(model: onnx.ModelProto) -> int:
    """Gives each MatMul/Gemm its own copy of a weight it shares with another node.

    A tied embedding feeds both a Gather (lookup) and the output Gemm; the quantiser rewrites
    the Gemm's weight in place, which would break the Gather. Returns how many were copied.
    """
    initializers = {i.name: i for i in model.graph.initializer}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            if name in initializers:
                users.setdefault(name, []).append(node)
    copied = 0
    for name, nodes in users.items():
        if len(nodes) < 2:
            continue
        for node in nodes:
            if node.op_type not in QUANTIZED_OPS:
                continue
            copy = onnx.TensorProto()
            copy.CopyFrom(initializers[name])
            copy.name = f"{name}.{node.name}"
            model.graph.initializer.append(copy)
            node.input[:] = [copy.name if i == name else i for i in node.input]
            copied += 1
    return copied


def pretranspose_gemm_weights(model: onnx.ModelProto) -> int:
    """Rewrites Gemm(transB=1) over an initializer as Gemm(transB=0) over its transpose.

    The quantiser's per-channel path takes the weight's channels on its second axis; given a
    transposed weight it produces a graph whose shapes do not agree. Returns how many changed.
    """
    initializers = {i.name: i for i in model.graph.initializer}
    changed = 0
    for node in model.graph.node:
        trans_b = next((a for a in node.attribute if a.name == "transB"), None)
        if node.op_type != "Gemm" or trans_b is None or trans_b.i != 1:
            continue
        weight = initializers.get(node.input[1])
        if weight is None:
            continue
        transposed = numpy_helper.from_array(numpy_helper.to_array(weight).T.copy(), weight.name)
        weight.CopyFrom(transposed)
        trans_b.i = 0
        changed += 1
    return changed


def quantize_int8(source: Path, target: Path, per_channel: bool = True) -> Path:
    """MatMul and Gemm weights to int8 (per output channel by default)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(source))
    untie_shared_weights(model)
    pretranspose_gemm_weights(model)
    del model.graph.value_info[:]  # stale after the rewrites; the quantiser infers them again
    with tempfile.TemporaryDirectory() as scratch:
        untied = Path(scratch) / source.name
        onnx.save_model(model, str(untied))
        quantize_dynamic(
            str(untied),
            str(target),
            per_channel=per_channel,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(QUANTIZED_OPS),
            # com.microsoft ops (the built graphs' attention) have no ONNX shape inference
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    return target
