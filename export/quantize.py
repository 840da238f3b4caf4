"""int8 variants by onnxruntime dynamic quantisation (weights int8, activations quantised per
call), for CPU serving."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from export.graph_files import copy_graph, data_file, outside, save_graph, weights_set_aside

QUANTIZED_OPS = ("MatMul", "Gemm")
# inputs per scale of the one-row int8 step: the translator's inputs are 256 wide (one scale
# per column) but the feed-forward's second (1,024: four); of 64, 128 and 256, 256 ran fastest
ONE_ROW_BLOCK = 256
# SmoothQuant's alpha: the share of a norm output channel's range moved into the weights
SMOOTHING = 0.5
# A norm's output channel j is gamma_j z + beta_j, z normalised: |z| up to about this many
# standard deviations in practice (a constant common to all channels only rescales s)
NORMAL_RANGE = 4.0
# (gamma, beta) inputs of the norms: ONNX LayerNormalization, com.microsoft
# SkipLayerNormalization (its output 0 is the normalised sum, output 3 the sum itself)
NORM_PARAMETERS = {"LayerNormalization": (1, 2), "SkipLayerNormalization": (2, 3)}


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


def _fed_matmuls(norm: onnx.NodeProto, users: dict, initializers: dict) -> list[onnx.NodeProto]:
    """The MatMuls that read the norm's output with a weight of their own, directly or
    through a Gather that picks positions (the decoder's last one); [] if anything else
    reads it."""
    matmuls, pending = [], [(node, norm.output[0]) for node in users.get(norm.output[0], [])]
    while pending:
        node, tensor = pending.pop()
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if node.op_type == "Gather" and node.input[0] == tensor and axis != -1:
            pending += [(user, node.output[0]) for user in users.get(node.output[0], [])]
        elif (
            node.op_type == "MatMul"
            and node.input[0] == tensor
            and node.input[1] in initializers
            and len(users[node.input[1]]) == 1
        ):
            matmuls.append(node)
        else:
            return []
    return matmuls


def smooth_norms(model: onnx.ModelProto, alpha: float = SMOOTHING) -> int:
    """Evens out the activations the int8 MatMuls quantise with one scale per call, leaving
    the fp32 function as it was (SmoothQuant, with the ranges read off the weights instead of
    calibration data). A layer norm's output channel j spans about NORMAL_RANGE |gamma_j| +
    |beta_j|; gamma_j and beta_j are divided by s_j = range_j^alpha / max|W_j|^(1 - alpha)
    and row j of every weight the norm feeds is multiplied by it, moving an outlier channel's
    range into the weights, quantised per weight or per output channel. A norm is left alone
    when anything but such MatMuls reads its output or its gamma and beta are shared.
    Returns how many norms were smoothed; call after `untie_shared_weights`."""
    initializers = {i.name: i for i in model.graph.initializer}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    smoothed = 0
    for node in model.graph.node:
        if node.op_type not in NORM_PARAMETERS:
            continue
        gamma_at, beta_at = NORM_PARAMETERS[node.op_type]
        gamma_name, beta_name = (
            node.input[i] if len(node.input) > i else "" for i in (gamma_at, beta_at)
        )
        own = all(
            not n or (n in initializers and len(users[n]) == 1) for n in (gamma_name, beta_name)
        )
        matmuls = _fed_matmuls(node, users, initializers)
        if not (gamma_name and own and matmuls):
            continue
        gamma = numpy_helper.to_array(initializers[gamma_name]).astype(np.float64)
        beta = numpy_helper.to_array(initializers[beta_name]) if beta_name else np.zeros_like(gamma)
        weights = [numpy_helper.to_array(initializers[m.input[1]]) for m in matmuls]
        if any(w.ndim != 2 or w.shape[0] != gamma.size for w in weights):
            continue  # the Gather took channels, not positions
        spread = NORMAL_RANGE * np.abs(gamma) + np.abs(beta)
        largest = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        s = np.maximum(spread, 1e-6) ** alpha / np.maximum(largest, 1e-6) ** (1 - alpha)
        updates = [(gamma_name, gamma / s)] + ([(beta_name, beta / s)] if beta_name else [])
        updates += [(m.input[1], w * s[:, None]) for m, w in zip(matmuls, weights, strict=True)]
        for name, value in updates:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(initializers[name].data_type)
            initializers[name].CopyFrom(numpy_helper.from_array(value.astype(dtype), name))
        smoothed += 1
    return smoothed


def _last_widths(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """(rank, size of the last axis) of every tensor whose last axis has a known size."""
    with weights_set_aside(model):  # a graph past 2 GiB is not serialised whole
        inferred = onnx.shape_inference.infer_shapes(model)
    widths = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info):
        dims = value.type.tensor_type.shape.dim
        if dims and dims[-1].HasField("dim_value"):
            widths[value.name] = (len(dims), dims[-1].dim_value)
    return widths


def _joined_parts(node, producers, readers, widths, initializers) -> list[str]:
    """The inputs that a MatMul over a weight reads joined on their last axis by a Concat
    read by it alone; [] where it reads anything else."""
    joined = producers.get(node.input[0]) if node.op_type == "MatMul" else None
    if joined is None or joined.op_type != "Concat" or node.input[1] not in initializers:
        return []
    parts = list(joined.input)
    ranks = {widths[x][0] for x in parts if x in widths}
    axis = next(a.i for a in joined.attribute if a.name == "axis")
    known = all(x in widths for x in parts) and len(ranks) == 1
    if not known or readers[node.input[0]] != 1 or axis not in (-1, ranks.pop() - 1):
        return []
    return parts


def split_joined_inputs(model: onnx.ModelProto) -> int:
    """Rewrites MatMul(Concat(x_1, ..., x_k), W) as the sum of MatMul(x_i, W_i), W_i the rows
    of W that x_i meets, where the Concat joins the last axis and nothing else reads it.

    The fp32 function is unchanged (but for the order of the sum); int8 then quantises each
    part with its own scale per call. The captioner's LSTM reads [word; context; h] as one:
    there the context's outlier channels (over 20 in a batch) set the one scale of h, which
    lies in [-1, 1]. Returns how many MatMuls were split."""
    widths = _last_widths(model)
    initializers = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    make, nodes, joins = onnx.helper.make_node, [], set()
    for node in model.graph.node:
        parts = _joined_parts(node, producers, readers, widths, initializers)
        if not parts:
            nodes.append(node)
            continue
        joins.add(node.input[0])
        weight = numpy_helper.to_array(initializers[node.input[1]])
        ends = np.cumsum([widths[x][1] for x in parts])
        total = ""
        for k, (x, rows) in enumerate(zip(parts, np.split(weight, ends[:-1]), strict=True)):
            name, product = f"{node.input[1]}.part{k}", f"{node.output[0]}.part{k}"
            model.graph.initializer.append(numpy_helper.from_array(rows.copy(), name))
            nodes.append(make("MatMul", [x, name], [product], name=f"{node.name}.part{k}"))
            if total:
                out = node.output[0] if k == len(parts) - 1 else f"{node.output[0]}.sum{k}"
                nodes.append(make("Add", [total, product], [out], name=f"{node.name}.sum{k}"))
                product = out
            total = product
    kept = [n for n in nodes if not (n.op_type == "Concat" and n.output[0] in joins)]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return len(joins)


def _prepared(source: Path) -> onnx.ModelProto:
    """`source` ready for a quantiser: shared weights untied, Gemm weights transposed, the
    layer norms smoothed (`smooth_norms`), MatMuls over joined inputs split
    (`split_joined_inputs`)."""
    model = onnx.load(str(source))
    untie_shared_weights(model)
    pretranspose_gemm_weights(model)
    smooth_norms(model)
    del model.graph.value_info[:]  # stale after the rewrites; the quantiser infers them again
    split_joined_inputs(model)
    return model


def quantize_int8(
    source: Path,
    target: Path,
    per_channel: bool = True,
    nodes: Callable[[onnx.ModelProto], list[str] | None] | None = None,
) -> Path:
    """MatMul and Gemm weights to int8 (per output channel by default), the graph prepared
    first (`_prepared`). `nodes`, given the prepared graph, names the nodes to quantise (None:
    every MatMul and Gemm); where it names none, `target` is a copy of `source`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    model = _prepared(source)
    chosen = nodes(model) if nodes is not None else None
    if chosen is not None and not chosen:
        return copy_graph(source, target)
    large = outside(model)  # the weights beside the graph: the quantised graph's too
    with tempfile.TemporaryDirectory() as scratch:
        untied = save_graph(model, Path(scratch) / source.name, check=False)
        data_file(target).unlink(missing_ok=True)
        quantize_dynamic(
            str(untied),
            str(target),
            use_external_data_format=large,
            per_channel=per_channel,
            weight_type=QuantType.QInt8,
            # 7-bit weights: onnxruntime's u8s8 kernel sums pairs of products in 16 bits on
            # AVX2 CPUs without VNNI, where 8-bit weights overflow; 7-bit ones give the same
            # integers on every CPU, so a certificate and golden set hold wherever it runs
            reduce_range=True,
            op_types_to_quantize=list(QUANTIZED_OPS),
            nodes_to_quantize=chosen,
            # com.microsoft ops (the built graphs' attention) have no ONNX shape inference
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    return target


def quantize_int8_one_row(source: Path, target: Path) -> Path:
    """The one-row form of an int8 step: every MatMul weight int8 in com.microsoft
    `MatMulNBits` (8 bits, symmetric, one scale per output column and block of
    ONE_ROW_BLOCK inputs), activations quantised to int8 inside the op (accuracy level 4, the
    integer kernel), the layer norms smoothed as `quantize_int8` does. onnxruntime runs it as
    a matrix-vector product: faster than `DynamicQuantizeMatMul` at one row, slower from two
    (docs/benchmarks.md), so a server runs it for single-row steps only."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    logging.getLogger(MatMulNBitsQuantizer.__module__).setLevel(logging.WARNING)  # per node
    target.parent.mkdir(parents=True, exist_ok=True)
    config = DefaultWeightOnlyQuantConfig(
        block_size=ONE_ROW_BLOCK, is_symmetric=True, accuracy_level=4, bits=8
    )
    quantizer = MatMulNBitsQuantizer(_prepared(source), algo_config=config)
    quantizer.process()
    return save_graph(quantizer.model.model, target, check=False)
