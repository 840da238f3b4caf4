"""A Transformer translator's graphs written op by op from its weights (its layout,
export.layout: our own translator's, or a Hugging Face model's), beside the traced export.

The traced export (export.onnx_export) turns PyTorch's code into some 140 small nodes per
step. This writes the same two graphs of the decode-step contract directly with `onnx.helper`,
the way onnxruntime-genai's model builder does:
- the embedding pre-scaled by sqrt(d_model) and the sinusoids as a position table (one Gather
  each); the output projection a MatMul on the stored transposed embedding, for the last new
  position only;
- per attention one MatMul for the fused query, key and value projections, and
  com.microsoft `MultiHeadAttention` (CPU and CUDA kernels): causal with the past and the
  key padding mask in the decoder, over the encoder's precomputed 4-D keys and values for
  cross-attention;
- every residual add written as Adds and the layer norm after it (onnxruntime fuses them
  into com.microsoft `SkipLayerNormalization` where that kernel is the faster: on CUDA),
  the norms before each sublayer (pre-norm) or after its residual add (post-norm: Marian);
- the one cross-attention layer whose weights are returned written out in plain ops (the
  fused kernel gives no post-softmax weights), its mask exactly the traced graph's; and a
  lean step beside it without that output, every cross-attention fused (onnxruntime runs
  every node whatever is fetched, so only another graph spares that work), the search
  (log-softmax and top k) folded in so that a step and its search are one run;
- both steps also with their cache written in place: self-attention com.microsoft
  `GroupQueryAttention` over a buffer bound as its past and its present, which it writes at
  each row's position and reads up to it (no step copies the past);
- the encoder projects every decoder layer's cross keys and values with one MatMul.
Inputs, outputs and axis names come from the same `service.runtime.graphs` declaration, so the
runtime cannot tell the two apart; the parity suite proves each against PyTorch.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from export.graph_files import outside, save_graph
from export.layout import Attention, Layer, Stack, TransformerLayout
from export.ops import search_nodes
from models.captioner import Captioner
from service.runtime.graphs import (
    IN_PLACE,
    LEAN_STEP,
    STATIC,
    GraphSpec,
    captioner_interface,
    decoder_spec,
    encoder_spec,
)

# what graphs built here are, by revision (in a version's manifest: a checkout rebuilds older
# ones; dev.sh reads this line): 2, residual Adds and LayerNormalization apart, the lean
# step's top k in two levels
REVISION = 2
MS = "com.microsoft"
OPSET = 18
IR_VERSION = 10  # what the traced export writes; newer onnx packages default above what
# older onnxruntime releases load
FLOAT_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}


class Graph:
    """Nodes and initializers of one graph, every intermediate named uniquely; its float
    tensors (weights, constants, declared inputs and outputs) all of one type, float32 or
    float16, so that a float16 graph has no Cast on its path."""

    def __init__(self, name: str, dtype=np.float32):
        self.name = name
        self.dtype = np.dtype(dtype)
        if self.dtype not in FLOAT_TYPES:
            raise ValueError(f"float type {self.dtype}: float32 or float16")
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def weight(self, stem: str, value) -> str:
        """An initializer: float tensors in the graph's float type, integer ones as they are."""
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().float().numpy()
        array = np.asarray(value)
        if array.dtype.kind == "f":
            array = array.astype(self.dtype)
        name = self._fresh(stem)
        self.initializers.append(numpy_helper.from_array(array.copy(order="C"), name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, **attributes):
        """Adds a node; returns its output name, or the list of them when several."""
        domain = attributes.pop("domain", "")
        names = (
            [self._fresh(op_type) for _ in range(outputs)] if isinstance(outputs, int) else outputs
        )
        self.nodes.append(
            helper.make_node(
                op_type, inputs, names, name=self._fresh(f"/{op_type}"), domain=domain, **attributes
            )
        )
        return names[0] if len(names) == 1 else names

    def lowest(self) -> str:
        """The float type's lowest value (what a masked score becomes)."""
        return self.weight("lowest", np.array(np.finfo(self.dtype).min, self.dtype))

    def model(self, spec: GraphSpec, fixed: dict[str, int]) -> onnx.ModelProto:
        types = {
            "int64": TensorProto.INT64,
            "float": FLOAT_TYPES[self.dtype],
            "float32": TensorProto.FLOAT,
        }

        def value(tensor):
            shape = [fixed.get(axis, axis) for axis in tensor.axes]
            return helper.make_tensor_value_info(tensor.name, types[tensor.dtype], shape)

        graph = helper.make_graph(
            self.nodes,
            self.name,
            [value(t) for t in spec.inputs],
            [value(t) for t in spec.outputs],
            self.initializers,
        )
        imports = [helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)]
        model = helper.make_model(graph, opset_imports=imports, producer_name="attnserve")
        model.ir_version = IR_VERSION
        if not outside(model):  # past 2 GiB, checked by path once saved (graph_files)
            onnx.checker.check_model(model)
        return model


def _linear_weight(linear: torch.nn.Linear) -> torch.Tensor:
    return linear.weight.T  # (in, out): x @ W


def _bias(linear: torch.nn.Linear) -> torch.Tensor:
    return linear.bias if linear.bias is not None else torch.zeros(linear.out_features)


def _fused(*linears: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """One (in, sum of outs) weight and its bias for projections of the same input."""
    return (
        torch.cat([_linear_weight(x) for x in linears], dim=1),
        torch.cat([_bias(x) for x in linears]),
    )


class _Writer:
    """Writes a Transformer's sublayers (of its `layout`, export.layout) into a Graph."""

    def __init__(self, graph: Graph, layout: TransformerLayout | None = None):
        self.g, self.layout = graph, layout

    # read when an attention is written: only a Transformer's layout has them
    @property
    def heads(self) -> int:
        return self.layout.heads

    @property
    def head_dim(self) -> int:
        return self.layout.head_dim

    @property
    def d_model(self) -> int:
        return self.layout.d_model

    def embed(self, stack: Stack, ids: str, positions: str) -> str:
        """The scaled token embedding plus the position's row (none for a token of
        `stack.unpositioned`), the embedding norm after it where the stack has one."""
        g = self.g
        placed = g.op("Gather", [g.weight("positions", stack.positions), positions])
        if stack.unpositioned is not None:
            unpositioned = g.weight("unpositioned", np.array(stack.unpositioned, np.int64))
            real = g.op("Not", [g.op("Equal", [ids, unpositioned])])
            real = g.op("Unsqueeze", [real, g.weight("axes", np.array([-1], np.int64))])
            placed = g.op("Mul", [placed, g.op("Cast", [real], to=FLOAT_TYPES[g.dtype])])
        tokens = g.op("Gather", [g.weight("embedding", stack.embedding), ids])
        embedded = g.op("Add", [tokens, placed])
        if stack.embedding_norm is None:
            return embedded
        return self.norm(embedded, stack.embedding_norm)

    def norm(self, x: str, norm: torch.nn.LayerNorm) -> str:
        g = self.g
        gamma, beta = g.weight("gamma", norm.weight), g.weight("beta", norm.bias)
        return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=float(norm.eps))

    def skip_norm(self, x: str, residual: str, norm: torch.nn.LayerNorm, bias) -> tuple[str, str]:
        """(LN(x + bias + residual), x + bias + residual): two Adds and a LayerNormalization.
        onnxruntime fuses them into com.microsoft SkipLayerNormalization on CUDA; on the CPU
        that kernel is 2.3 to 4.7 times slower than the three at 16 rows and more, so CPU
        sessions keep them apart (service.runtime.onnx_runtime.session_options)."""
        g = self.g
        total = g.op("Add", [g.op("Add", [x, g.weight("bias", bias)]), residual])
        return (self.norm(total, norm) if norm is not None else total), total

    def start(self, stack: Stack, embedded: str) -> tuple[str, str]:
        """(a first sublayer's input, the residual stream) of a stack's embedded tokens."""
        pre = self.layout.pre_norm
        return (self.norm(embedded, stack.layers[0].self_norm) if pre else embedded), embedded

    def close(self, out: str, bias, residual: str, norm, following) -> tuple[str, str]:
        """(the next sublayer's input, the residual stream) after a sublayer's `out` (before
        its output bias): pre-norm, the residual add and the `following` norm (the next
        sublayer's, or the stack's final one; none: the sum itself); post-norm, the add and
        the sublayer's own `norm`, whose output is the stream from then on."""
        if self.layout.pre_norm:
            return self.skip_norm(out, residual, following, bias)
        h, _ = self.skip_norm(out, residual, norm, bias)
        return h, h

    def finish(self, stack: Stack, h: str) -> str:
        """The stack's output: a post-norm stack's final norm, where it has one, applied."""
        if self.layout.pre_norm or stack.final_norm is None:
            return h
        return self.norm(h, stack.final_norm)

    def matmul(self, x: str, weight, bias=None) -> str:
        g = self.g
        y = g.op("MatMul", [x, g.weight("weight", weight)])
        return y if bias is None else g.op("Add", [y, g.weight("bias", bias)])

    def self_attention(
        self, h: str, attention: Attention, mask32: str, past=None, present=None, causal=0
    ) -> str:
        """MultiHeadAttention over the fused projections of `h`, before the output projection."""
        g = self.g
        weight, bias = _fused(attention.query, attention.key, attention.value)
        q, k, v = g.op(
            "Split", [g.op("MatMul", [h, g.weight("qkv", weight)])], 3, axis=2, num_outputs=3
        )
        inputs = [q, k, v, g.weight("qkv_bias", bias), mask32]
        outputs: int | list[str] = 1
        if past is not None:
            inputs += ["", past[0], past[1]]
            outputs = [g._fresh("attention"), *present]
        result = g.op(
            "MultiHeadAttention",
            inputs,
            outputs,
            domain=MS,
            num_heads=self.heads,
            unidirectional=causal,
        )
        return result if isinstance(result, str) else result[0]

    def in_place_self_attention(
        self, h: str, attention: Attention, seqlens: str, total: str, past, present
    ) -> str:
        """GroupQueryAttention (as many key/value heads as query heads) over the fused
        projections of `h`, the cache buffer `past` read and written as `present`."""
        g = self.g
        qkv = self.matmul(h, *_fused(attention.query, attention.key, attention.value))
        q, k, v = g.op("Split", [qkv], 3, axis=2, num_outputs=3)
        inputs = [q, k, v, past[0], past[1], seqlens, total]
        outputs = [g._fresh("attention"), *present]
        heads = self.heads
        return g.op(
            "GroupQueryAttention", inputs, outputs, domain=MS, num_heads=heads, kv_num_heads=heads
        )[0]

    def heads_view(self, x: str) -> str:
        """(B, L, D) -> (B, H, L, Dh)."""
        g = self.g
        shape = g.weight("shape", np.array([0, 0, self.heads, self.head_dim], np.int64))
        return g.op("Transpose", [g.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def plain_cross_attention(
        self, q: str, key: str, value: str, memory_mask: str
    ) -> tuple[str, str]:
        """The traced graph's attention in plain ops: (context (B, N, D), weights (B, H, N, S))."""
        g = self.g
        scores = g.op("MatMul", [self.heads_view(q), g.op("Transpose", [key], perm=[0, 1, 3, 2])])
        scores = g.op("Div", [scores, g.weight("scale", np.array(math.sqrt(self.head_dim)))])
        axes = g.weight("axes", np.array([1, 2], np.int64))
        allowed = g.op("Cast", [g.op("Unsqueeze", [memory_mask, axes])], to=TensorProto.BOOL)
        weights = g.op("Softmax", [g.op("Where", [allowed, scores, g.lowest()])], axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [weights, value])], perm=[0, 2, 1, 3])
        shape = g.weight("shape", np.array([0, 0, self.d_model], np.int64))
        return g.op("Reshape", [context, shape]), weights

    def feed_forward(self, h: str, layer: Layer) -> str:
        """Before the second bias (it goes into the next residual add)."""
        inner = self.matmul(h, _linear_weight(layer.ff_in), _bias(layer.ff_in))
        return self.matmul(self.activation(inner), _linear_weight(layer.ff_out))

    def activation(self, x: str) -> str:
        g, kind = self.g, self.layout.activation
        if kind == "relu":
            return g.op("Relu", [x])
        if kind == "gelu":  # the exact one (erf), com.microsoft's kernel on CPU and CUDA
            return g.op("Gelu", [x], domain=MS)
        return g.op("Mul", [x, g.op("Sigmoid", [x])])  # swish


def _sublayer_norms(stack: Stack) -> list[list[tuple]]:
    """For each layer, each sublayer's (own norm, the norm after it: the next sublayer's, or
    the stack's final one)."""
    flat = [norm for layer in stack.layers for norm in layer.norms] + [stack.final_norm]
    pairs, at = [], 0
    for layer in stack.layers:
        count = len(layer.norms)
        pairs.append([(flat[at + k], flat[at + k + 1]) for k in range(count)])
        at += count
    return pairs


def build_decoder(
    layout: TransformerLayout,
    dtype=np.float32,
    capacity: int | None = None,
    in_place: bool = False,
    attention: bool = True,
) -> onnx.ModelProto:
    """The decoder step of `service.runtime.graphs.decoder_spec`, in `dtype` (float32 or float16),
    of a Transformer's `layout` (export.layout).
    With `capacity`, the fixed-capacity step of `decoder_spec(fixed_cache=True)`: one new
    token, a cache of `capacity` positions in and out (the attention's present less its
    oldest position), so that every step of a batch has the same shapes (CUDA graphs).
    With `in_place`, the step of `decoder_spec(in_place=True)`: self-attention is
    com.microsoft `GroupQueryAttention` over a buffer of positions per row (`capacity` of
    them, or as many as the buffer it is given has), which it writes at each row's position
    and reads up to it (`seqlens_k` = the positions). GQA also takes a total length as a
    host value: the buffer's size (its shape where the capacity varies, a constant where it
    is fixed: the static step, STATIC, every shape fixed but the rows, so a CUDA graph can
    replay it). That is how onnxruntime's own tests of a shared buffer drive it, and the
    size is known without reading anything back from the device: the longest position + 1,
    computed from the positions, put a Memcpy into the step on CUDA. GQA decodes every row
    by its own `seqlens_k` either way (a first prompt only where the buffer holds one
    position, so every row is at 0).
    Without `attention`, the lean step (`service.runtime.graphs.lean`): no cross-attention output,
    every layer's cross-attention one `MultiHeadAttention`, and the search graph's nodes
    (export.ops) on its logits."""
    stack = layout.decoder
    spec = decoder_spec(
        len(stack.layers), fixed_cache=capacity is not None, in_place=in_place, attention=attention
    )
    g = Graph("decoder", dtype)
    w = _Writer(g, layout)
    if in_place:  # GQA's lengths: each row's past (its position), and the buffer's size
        axis = g.weight("axis", np.array([1], np.int64))
        seqlens = g.op("Cast", [g.op("Squeeze", ["positions", axis])], to=TensorProto.INT32)
        if capacity is None:  # from the buffer's shape, which lives on the host
            size = g.op("Shape", ["past_key_values.0.key"], start=2, end=3)
            total = g.op("Cast", [size], to=TensorProto.INT32)
        else:  # a constant
            total = g.weight("total", np.array(capacity, np.int32))
    else:
        self_mask = g.op("Cast", ["self_mask"], to=TensorProto.INT32)
    memory_mask = g.op("Cast", ["memory_mask"], to=TensorProto.INT32)
    h, residual = w.start(stack, w.embed(stack, "input_ids", "positions"))
    chosen = layout.alignment_layer if attention else None
    if capacity is not None and not in_place:
        one, two = (
            g.weight("one", np.array([1], np.int64)),
            g.weight("two", np.array([2], np.int64)),
        )
        after_capacity = g.weight("end", np.array([capacity + 1], np.int64))
    for i, (layer, norms) in enumerate(zip(stack.layers, _sublayer_norms(stack), strict=True)):
        past = (f"past_key_values.{i}.key", f"past_key_values.{i}.value")
        present = [f"present.{i}.key", f"present.{i}.value"]
        if in_place:
            attended = w.in_place_self_attention(h, layer.self_attn, seqlens, total, past, present)
        elif capacity is not None:  # attend over capacity + 1, keep the newest capacity
            whole = [g._fresh(f"whole.{i}.key"), g._fresh(f"whole.{i}.value")]
            attended = w.self_attention(h, layer.self_attn, self_mask, past, whole, causal=1)
            for full, kept in zip(whole, present, strict=True):
                g.op("Slice", [full, one, after_capacity, two], [kept])
        else:
            attended = w.self_attention(h, layer.self_attn, self_mask, past, present, causal=1)
        out = w.matmul(attended, _linear_weight(layer.self_attn.out))
        h, residual = w.close(out, _bias(layer.self_attn.out), residual, *norms[0])
        cross = layer.cross_attn
        q = w.matmul(h, _linear_weight(cross.query), _bias(cross.query))
        key, value = f"encoder.{i}.key", f"encoder.{i}.value"
        if i == chosen:
            context, weights = w.plain_cross_attention(q, key, value, "memory_mask")
            mean = g.op(
                "ReduceMean", [weights, g.weight("axes", np.array([1], np.int64))], keepdims=0
            )
            g.op(
                "Gather",
                [mean, g.weight("last", np.array(-1, np.int64))],
                ["cross_attention"],
                axis=1,
            )
        else:
            context = g.op(
                "MultiHeadAttention",
                [q, key, value, "", memory_mask],
                domain=MS,
                num_heads=layout.heads,
            )
        out = w.matmul(context, _linear_weight(cross.out))
        h, residual = w.close(out, _bias(cross.out), residual, *norms[1])
        out = w.feed_forward(h, layer)
        h, residual = w.close(out, _bias(layer.ff_out), residual, *norms[2])
    h = w.finish(stack, h)
    last = g.op("Gather", [h, g.weight("last", np.array(-1, np.int64))], axis=1)  # (B, D)
    logits = ["logits"] if layout.output_bias is None else 1
    logits = g.op("MatMul", [last, g.weight("output", layout.output.T)], logits)
    if layout.output_bias is not None:
        g.op("Add", [logits, g.weight("output_bias", layout.output_bias)], ["logits"])
    fixed = {"heads": layout.heads, "head_dim": layout.head_dim, "vocab": layout.vocab}
    if not attention:  # the lean step: its search folded in (service.runtime.graphs.lean)
        # the top k in two levels where the CPU runs the step (float32, no fixed capacity):
        # the static and float16 steps are CUDA's, whose one TopK is the measured one
        two_levels = capacity is None and g.dtype == np.float32
        vocab = layout.vocab if two_levels else None
        g.nodes += search_nodes(FLOAT_TYPES[g.dtype], "logits", "search/", vocab)
        fixed["one"] = 1
    if in_place:
        fixed |= {"new": 1} | ({} if capacity is None else {"capacity": capacity})
    elif capacity is not None:
        fixed |= {"new": 1, "past": capacity, "total": capacity + 1}
    return g.model(spec, fixed)


def build_encoder(layout: TransformerLayout, dtype=np.float32) -> onnx.ModelProto:
    """The encoder of `service.runtime.graphs.encoder_spec`, in `dtype`, of a Transformer's
    `layout`: memory mask and every decoder layer's cross keys and values, projected by one
    MatMul."""
    stack, cross_layers = layout.encoder, layout.decoder.layers
    spec = encoder_spec(len(cross_layers))
    g = Graph("encoder", dtype)
    w = _Writer(g, layout)
    mask = g.op("Cast", ["src_mask"], to=TensorProto.INT32)
    length = g.op("Gather", [g.op("Shape", ["src_ids"]), g.weight("one", np.array(1, np.int64))])
    zero, step = g.weight("zero", np.array(0, np.int64)), g.weight("step", np.array(1, np.int64))
    positions = g.op("Range", [zero, length, step])
    h, residual = w.start(stack, w.embed(stack, "src_ids", positions))
    for layer, norms in zip(stack.layers, _sublayer_norms(stack), strict=True):
        attended = w.self_attention(h, layer.self_attn, mask)
        out = w.matmul(attended, _linear_weight(layer.self_attn.out))
        h, residual = w.close(out, _bias(layer.self_attn.out), residual, *norms[0])
        out = w.feed_forward(h, layer)
        h, residual = w.close(out, _bias(layer.ff_out), residual, *norms[1])
    h = w.finish(stack, h)
    projections = [p for x in cross_layers for p in (x.cross_attn.key, x.cross_attn.value)]
    weight, bias = _fused(*projections)
    fused = w.matmul(h, weight, bias)  # (B, S, 2 * layers * D)
    parts = g.op("Split", [fused], len(projections), axis=2, num_outputs=len(projections))
    parts = [parts] if isinstance(parts, str) else parts
    for index, part in enumerate(parts):
        layer, kind = divmod(index, 2)
        name = f"encoder.{layer}.{('key', 'value')[kind]}"
        shape = g.weight("shape", np.array([0, 0, layout.heads, layout.head_dim], np.int64))
        g.op("Transpose", [g.op("Reshape", [part, shape])], [name], perm=[0, 2, 1, 3])
    g.op("Identity", ["src_mask"], ["memory_mask"])
    return g.model(spec, {"heads": layout.heads, "head_dim": layout.head_dim})


def build_caption_step(model: Captioner, dtype=np.float32) -> onnx.ModelProto:
    """The captioner's decoder step of `service.runtime.graphs.captioner_interface`, in
    `dtype`: one MatMul for both projections of the previous state (attention and gate), the
    attention's weighted sum as a MatMul, the LSTM cell's two input MatMuls as one over
    [word; context; h] with the two biases summed, and the deep output's two projections as
    one."""
    c = model.config
    spec = captioner_interface().decoder
    g = Graph("decoder", dtype)
    w = _Writer(g)
    h, cell = "past.h", "past.c"
    one = g.weight("axis", np.array([1], np.int64))
    previous = g.op("Squeeze", ["input_ids", one])  # (B,)
    embedded = g.op("Gather", [g.weight("embedding", model.embedding.weight), previous])
    state = _fused(model.state_attention, model.gate)
    attention_in, gate = _split(g, w.matmul(h, *state), [c.attention_dim, 1], axis=1)
    hidden = g.op(
        "Tanh", [g.op("Add", ["grid_projection", g.op("Unsqueeze", [attention_in, one])])]
    )
    scores = w.matmul(hidden, _linear_weight(model.attention_score), model.attention_score.bias)
    scores = g.op("Squeeze", [scores, g.weight("axis", np.array([2], np.int64))])  # (B, L)
    allowed = g.op("Cast", ["memory_mask"], to=TensorProto.BOOL)
    masked = g.op("Where", [allowed, scores, g.lowest()])
    weights = g.op("Softmax", [masked], ["cross_attention"], axis=-1)
    context = g.op("MatMul", [g.op("Unsqueeze", [weights, one]), "grid"])  # (B, 1, D)
    context = g.op("Squeeze", [context, one])
    context = g.op("Mul", [g.op("Sigmoid", [gate]), context])
    lstm = model.lstm
    weight = torch.cat([lstm.weight_ih.T, lstm.weight_hh.T], dim=0)  # (E + D + Hd, 4 Hd)
    inputs = g.op("Concat", [embedded, context, h], axis=1)
    gates = w.matmul(inputs, weight, lstm.bias_ih + lstm.bias_hh)
    i, f, candidate, o = _split(g, gates, [c.hidden_dim] * 4, axis=1)  # PyTorch's order
    sigmoid = lambda x: g.op("Sigmoid", [x])  # noqa: E731
    kept = g.op("Mul", [sigmoid(f), cell])
    added = g.op("Mul", [sigmoid(i), g.op("Tanh", [candidate])])
    g.op("Add", [kept, added], ["present.c"])
    g.op("Mul", [sigmoid(o), g.op("Tanh", ["present.c"])], ["present.h"])
    deep = torch.cat([model.output_state.weight.T, model.output_context.weight.T], dim=0)
    both = g.op("Concat", ["present.h", context], axis=1)
    biases = model.output_state.bias + model.output_context.bias
    deep = g.op("Add", [embedded, w.matmul(both, deep, biases)])
    logits = g.op("MatMul", [deep, g.weight("output", _linear_weight(model.output))])
    g.op("Add", [logits, g.weight("bias", model.output.bias)], ["logits"])
    fixed = {"hidden": c.hidden_dim, "features": c.feature_dim, "attention": c.attention_dim}
    return g.model(spec, {**fixed, "vocab": c.vocab_size, "one": 1})


def _split(g: Graph, x: str, sizes: list[int], axis: int) -> list[str]:
    return g.op("Split", [x, g.weight("sizes", np.array(sizes, np.int64))], len(sizes), axis=axis)


def build_translator(layout: TransformerLayout, out_dir: Path, dtype=np.float32) -> dict[str, Path]:
    """Writes every graph of a Transformer's `layout` (export.layout) into `out_dir` in
    `dtype` (float32 or float16), built op by op; returns their paths by graph name:
    encoder.onnx and decoder.onnx, its lean step (lean_decoder.onnx, the step without the
    cross-attention output, which the server runs when no row keeps its alignment), and both
    steps with their cache written in place (in_place_*.onnx, what the engine runs by default
    where the device has the kernels) and in place with a fixed capacity (static_*.onnx, the
    steps CUDA graphs replay). A graph whose weights are past export.graph_files'
    WEIGHTS_INSIDE keeps them in a file beside it."""
    names = ("encoder", "decoder", LEAN_STEP)
    names += tuple(p + n for p in (IN_PLACE, STATIC) for n in ("decoder", LEAN_STEP))
    paths = {name: out_dir / f"{name}.onnx" for name in names}

    def save(graph: onnx.ModelProto, name: str) -> None:  # checked by Graph.model up to 2 GiB
        save_graph(graph, paths[name], check=outside(graph))

    save(build_encoder(layout, dtype), "encoder")
    save(build_decoder(layout, dtype), "decoder")
    save(build_decoder(layout, dtype, attention=False), LEAN_STEP)
    # the same two steps with their cache written in place, and with it fixed at the
    # longest output the model can write (the static steps, for CUDA graphs)
    for prefix, capacity in ((IN_PLACE, None), (STATIC, layout.capacity)):
        for lean in (False, True):
            step = build_decoder(layout, dtype, capacity, in_place=True, attention=not lean)
            save(step, prefix + (LEAN_STEP if lean else "decoder"))
    return paths
