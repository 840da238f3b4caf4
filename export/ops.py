"""Small helper graphs the runtime needs beside a model's own (written into every version).

They move cache rows on the device where the cache lives, so on a GPU it never leaves it:
- `gather_<dtype>`: rows `indices` of a tensor (axis 0); beam search and continuous batching
  reorder, repeat and drop rows with it;
- `join_<dtype>`: the rows of `a`, then those of `b`, every other axis of the shorter
  right-padded with zeros (a cache's time axis, a memory's length), the pads given by the host:
  requests joining a running batch;
- `narrow_<dtype>`: positions `start` to `end` of one axis: dropping cache columns that every
  row masks, or memory positions no row uses, once the requests that needed them have left.
- `place_<float dtype>`: `gather` and a right-padding of every axis after it, of each of a
  model's memory tensors in one run (as many inputs as the model has memory tensors): the
  static step writes a request's memory into its slots with it, one run a run of slots where
  a gather a tensor took as many runs as the model has memory tensors (each run of a graph
  costs the host a launch and a synchronisation on a GPU);
- `scatter_<float dtype>`: `place` at any slots in one run: the rows, padded as `place` pads
  them, written by ScatterND into `target_i`, a bucket's whole buffer, whose output is bound
  to that same buffer. onnxruntime's ScatterND kernels (CPU and CUDA) copy the data to the
  output only where the two differ, so a run writes the rows alone, however scattered the
  slots a busy batch leaves free.

Every op takes tensors of any rank, so they serve any state the model's interface declares.

Two more run on a step's logits where they are (service.runtime.search), so that only a few
numbers a row cross to the host:
- `search_<float dtype>`: log-softmax of logits + bias (a bias of -inf bans a token), then the
  k best tokens of each row and their log-probabilities, best first;
- `sample_<float dtype>`: the same log-probabilities, then log_softmax(log_probs / temperature)
  per row: the k best tokens by that, with both log-probabilities (sampling's candidates).
Equal values come in index order (ONNX TopK), as `service.runtime.search.host_search` orders them.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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


def place_graph(dtype: int, count: int) -> onnx.ModelProto:
    """output_i = data_i[indices] along axis 0, then right-padded with zeros by pads_i (rank
    begins, then rank ends, as ONNX Pad reads them; from the host, as `join`'s), for i below
    `count`; any ranks, any sizes."""
    inputs = [helper.make_tensor_value_info("indices", TensorProto.INT64, ["rows"])]
    outputs, nodes = [], []
    for i in range(count):
        inputs += [
            helper.make_tensor_value_info(f"data_{i}", dtype, None),
            helper.make_tensor_value_info(f"pads_{i}", TensorProto.INT64, [f"pads_{i}"]),
        ]
        outputs.append(helper.make_tensor_value_info(f"output_{i}", dtype, None))
        nodes += [
            helper.make_node("Gather", [f"data_{i}", "indices"], [f"rows_{i}"], axis=0),
            helper.make_node("Pad", [f"rows_{i}", f"pads_{i}"], [f"output_{i}"]),
        ]
    return _model("place", nodes, inputs, outputs)


def scatter_graph(dtype: int, count: int) -> onnx.ModelProto:
    """output_i = target_i with rows `slots` (rows, 1) replaced by data_i[indices] along axis 0,
    right-padded with zeros by pads_i (as `place_graph`'s), for i below `count`; any ranks,
    any sizes. Bound to the same memory as target_i, output_i writes only those rows."""
    inputs = [
        helper.make_tensor_value_info("indices", TensorProto.INT64, ["rows"]),
        helper.make_tensor_value_info("slots", TensorProto.INT64, ["rows", 1]),
    ]
    outputs, nodes = [], []
    for i in range(count):
        inputs += [
            helper.make_tensor_value_info(f"data_{i}", dtype, None),
            helper.make_tensor_value_info(f"pads_{i}", TensorProto.INT64, [f"pads_{i}"]),
            helper.make_tensor_value_info(f"target_{i}", dtype, None),
        ]
        outputs.append(helper.make_tensor_value_info(f"output_{i}", dtype, None))
        nodes += [
            helper.make_node("Gather", [f"data_{i}", "indices"], [f"rows_{i}"], axis=0),
            helper.make_node("Pad", [f"rows_{i}", f"pads_{i}"], [f"padded_{i}"]),
            helper.make_node("ScatterND", [f"target_{i}", "slots", f"padded_{i}"], [f"output_{i}"]),
        ]
    return _model("scatter", nodes, inputs, outputs)


def join_graph(dtype: int) -> onnx.ModelProto:
    """output = concat(pad(a, a_pads), pad(b, b_pads)) on axis 0; any rank (a cache's time
    axis, a memory's length). The pads (rank begins, then rank ends, as ONNX Pad reads them)
    come from the host, which knows both shapes (service.runtime.tensor_ops.join_pads): computed in
    the graph, that shape arithmetic runs on the CPU under CUDA and puts Memcpy nodes between
    it and the Pads."""
    a = helper.make_tensor_value_info("a", dtype, None)
    b = helper.make_tensor_value_info("b", dtype, None)
    pads = [helper.make_tensor_value_info(f"{n}_pads", TensorProto.INT64, ["pads"]) for n in "ab"]
    output = helper.make_tensor_value_info("output", dtype, None)
    nodes = [helper.make_node("Pad", [n, f"{n}_pads"], [f"{n}_padded"]) for n in "ab"]
    nodes.append(helper.make_node("Concat", ["a_padded", "b_padded"], ["output"], axis=0))
    return _model("join", nodes, [a, b, *pads], [output])


def narrow_graph(dtype: int) -> onnx.ModelProto:
    """output = data[start:end] along `axis`; any rank."""
    data = helper.make_tensor_value_info("data", dtype, None)
    start = helper.make_tensor_value_info("start", TensorProto.INT64, [1])
    end = helper.make_tensor_value_info("end", TensorProto.INT64, [1])
    axis = helper.make_tensor_value_info("axis", TensorProto.INT64, [1])
    output = helper.make_tensor_value_info("output", dtype, None)
    node = helper.make_node("Slice", ["data", "start", "end", "axis"], ["output"])
    return _model("narrow", [node], [data, start, end, axis], [output])


def log_prob_nodes(dtype: int, logits: str, bias: str, out: str, prefix: str = "") -> list:
    """Nodes: `out` (rows, vocab) float32 = log_softmax(`logits` + `bias`), the logits of
    float type `dtype` (float16 cast first); intermediates named after `prefix`."""
    nodes, source = [], logits
    if dtype != TensorProto.FLOAT:
        source = f"{prefix}logits_float"
        nodes.append(helper.make_node("Cast", [logits], [source], to=TensorProto.FLOAT))
    return [
        *nodes,
        helper.make_node("Add", [source, bias], [f"{prefix}biased"]),
        helper.make_node("LogSoftmax", [f"{prefix}biased"], [out], axis=-1),
    ]


def search_nodes(dtype: int, logits: str, prefix: str = "", vocab: int | None = None) -> list:
    """The search graph's nodes over `logits` (bias and k its inputs of those names): outputs
    `ids` and `log_probs` (rows, k), best first (export.builder folds them into the lean
    step). Given the `vocab` size (at least 4 blocks), the top k in two levels
    (`block_top_k_nodes`)."""
    every = f"{prefix}log_probs_all"
    nodes = log_prob_nodes(dtype, logits, "bias", every, prefix)
    if vocab is None or vocab < 4 * TOP_K_BLOCK:
        top = helper.make_node("TopK", [every, "k"], ["log_probs", "ids"], axis=-1, sorted=1)
        return [*nodes, top]
    return [*nodes, *block_top_k_nodes(every, vocab, "log_probs", "ids", f"{prefix}top/")]


# tokens a block of the two-level top k: the best of each block, then the k best blocks
TOP_K_BLOCK = 64


def _constant(name: str, value) -> onnx.NodeProto:
    array = np.asarray(value)
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def block_top_k_nodes(scores: str, vocab: int, values: str, ids: str, prefix: str) -> list:
    """Nodes: the k (input "k") best of `scores` (rows, vocab) float32, best first, as
    `values` and token `ids` (rows, k), equal scores in index order, exactly as one TopK. The
    vocabulary is cut into blocks of TOP_K_BLOCK (the last padded with -inf): each block's
    best, the min(k, blocks) blocks of the highest best (every one of the k best lies in one
    of them: a block holding one has at most k - 1 blocks above it, each holding one of the
    k best), taken in block order, then one TopK over their tokens. onnxruntime's TopK costs
    about 12 us a row of 8,000 on one core; a ReduceMax over the same row about a fifth
    (docs/benchmarks.md, `python -m bench.profile_step`)."""
    block = TOP_K_BLOCK
    blocks = -(-vocab // block)
    p = prefix
    nodes = [
        _constant(f"{p}grid_shape", np.array([0, blocks, block], np.int64)),
        _constant(f"{p}last", np.array([-1], np.int64)),
        _constant(f"{p}blocks", np.array([blocks], np.int64)),
        _constant(f"{p}flat_shape", np.array([0, -1], np.int64)),
        _constant(
            f"{p}token_ids", np.arange(blocks * block, dtype=np.int64).reshape(blocks, block)
        ),
    ]
    padded = scores
    if blocks * block != vocab:
        padded = f"{p}padded"
        nodes += [
            _constant(f"{p}pads", np.array([0, 0, 0, blocks * block - vocab], np.int64)),
            _constant(f"{p}lowest", np.array(-np.inf, np.float32)),
            helper.make_node("Pad", [scores, f"{p}pads", f"{p}lowest"], [padded]),
        ]
    make = helper.make_node
    nodes += [
        make("Reshape", [padded, f"{p}grid_shape"], [f"{p}grid"]),
        make("ReduceMax", [f"{p}grid", f"{p}last"], [f"{p}best"], keepdims=0),
        make("Min", ["k", f"{p}blocks"], [f"{p}kept"]),
        make("TopK", [f"{p}best", f"{p}kept"], [f"{p}best_top", f"{p}chosen"], axis=-1),
        # the chosen blocks in block order, so that equal scores come in index order
        make("Cast", [f"{p}chosen"], [f"{p}chosen_float"], to=TensorProto.FLOAT),
        make(
            "TopK",
            [f"{p}chosen_float", f"{p}kept"],
            [f"{p}ordered_float", f"{p}ordered_at"],
            axis=-1,
            largest=0,
        ),
        make("Cast", [f"{p}ordered_float"], [f"{p}ordered"], to=TensorProto.INT64),
        make("Unsqueeze", [f"{p}ordered", f"{p}last"], [f"{p}ordered_index"]),
        make("GatherND", [f"{p}grid", f"{p}ordered_index"], [f"{p}candidates"], batch_dims=1),
        make("Reshape", [f"{p}candidates", f"{p}flat_shape"], [f"{p}candidates_flat"]),
        make("Gather", [f"{p}token_ids", f"{p}ordered"], [f"{p}candidate_ids"], axis=0),
        make("Reshape", [f"{p}candidate_ids", f"{p}flat_shape"], [f"{p}candidate_ids_flat"]),
        make("TopK", [f"{p}candidates_flat", "k"], [values, f"{p}at"], axis=-1),
        make("GatherElements", [f"{p}candidate_ids_flat", f"{p}at"], [ids], axis=1),
    ]
    return nodes


def _log_probs(dtype: int, nodes: list) -> list:
    """Inputs logits (rows, vocab) and bias (1, vocab) float32 -> nodes computing `log_probs`
    (rows, vocab) float32."""
    logits = helper.make_tensor_value_info("logits", dtype, ["rows", "vocab"])
    bias = helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, "vocab"])
    nodes += log_prob_nodes(dtype, "logits", "bias", "log_probs_all")
    return [logits, bias]


def _outputs(*names: str) -> list:
    types = {"ids": TensorProto.INT64}
    return [
        helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), ["rows", "k"])
        for n in names
    ]


def search_graph(dtype: int) -> onnx.ModelProto:
    """logits, bias, k (1,) -> ids, log_probs (rows, k): the k most likely tokens."""
    logits = helper.make_tensor_value_info("logits", dtype, ["rows", "vocab"])
    inputs = [
        logits,
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, "vocab"]),
        helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
    ]
    nodes = search_nodes(dtype, "logits")
    return _model("search", nodes, inputs, _outputs("ids", "log_probs"))


def sample_graph(dtype: int) -> onnx.ModelProto:
    """logits, bias, k (1,), temperature (rows, 1) -> ids, log_probs, scores (rows, k): the
    k best tokens after temperature (`scores`), with the model's own log-probabilities."""
    nodes: list = []
    inputs = _log_probs(dtype, nodes)
    inputs += [
        helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        helper.make_tensor_value_info("temperature", TensorProto.FLOAT, ["rows", 1]),
    ]
    nodes += [
        helper.make_node("Div", ["log_probs_all", "temperature"], ["tempered"]),
        helper.make_node("LogSoftmax", ["tempered"], ["scores_all"], axis=-1),
        helper.make_node("TopK", ["scores_all", "k"], ["scores", "ids"], axis=-1, sorted=1),
        helper.make_node("GatherElements", ["log_probs_all", "ids"], ["log_probs"], axis=1),
    ]
    return _model("sample", nodes, inputs, _outputs("ids", "log_probs", "scores"))


OPS = {
    "gather": gather_graph,
    "join": join_graph,
    "narrow": narrow_graph,
    "search": search_graph,
    "sample": sample_graph,
}
# they read logits, or a model's float memory
FLOAT_ONLY = ("search", "sample", "place", "scatter")
MEMORY_OPS = {"place": place_graph, "scatter": scatter_graph}  # sized by the memory tensors


def write_ops(directory: Path, memory_tensors: int = 0) -> dict[str, dict[str, str]]:
    """Writes the helper graphs, `place` and `scatter` for a model of `memory_tensors` memory
    tensors (neither for 0); returns {op: {dtype: relative path}} for the manifest."""
    builds = dict(OPS)
    if memory_tensors:
        for op, graph in MEMORY_OPS.items():
            builds[op] = partial(graph, count=memory_tensors)
    paths: dict[str, dict[str, str]] = {}
    for op, build in builds.items():
        for name, dtype in DTYPES.items():
            if op in FLOAT_ONLY and dtype == TensorProto.INT64:
                continue
            path = directory / "ops" / f"{op}_{name}.onnx"
            path.parent.mkdir(parents=True, exist_ok=True)
            onnx.save_model(build(dtype), str(path))
            paths.setdefault(op, {})[name] = str(path.relative_to(directory))
    return paths
