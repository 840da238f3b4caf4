"""Self-attention over the cache, one op: the growing cache against one written in place.

    python -m bench.cache_attention [--batches 1,16] [--pasts 16,64] [--capacity 128]
        [--heads 4] [--head-dim 64] [--calls 2000] [--json]

The op of the served decoder step, com.microsoft `MultiHeadAttention` with past and present
(present = past and the new position, a new tensor every step: the past is copied), against
`GroupQueryAttention` over a fixed-capacity buffer bound as both its past and its present, so
that the op writes the new key and value at each row's length (`seqlens_k`) and reads only
the real positions. One new token per row, the translator's widths, one compute thread, both
ops on OrtValues bound once (IO binding); the two run in turn, each timed over `--calls`
calls after 50 untimed; microseconds per call. Before timing, GQA's output is compared with
MHA's and the key it wrote with the present's newest position. (onnxruntime's CPU kernel of
GQA wants a head size that is a multiple of 8; the translator's is 64.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

MS = "com.microsoft"


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--pasts", default="16,64")
    parser.add_argument("--capacity", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def _model(node, inputs, outputs):
    graph = helper.make_graph([node], node.op_type, inputs, outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8  # what every onnxruntime this project supports reads (a newer onnx
    # writes its own, which an older onnxruntime refuses)
    return model.SerializeToString()


def _float(name, shape, dtype: str = "float32"):
    elem = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.FLOAT
    return helper.make_tensor_value_info(name, elem, shape)


def growing_attention(heads: int, head_dim: int) -> bytes:
    """MHA: q, k, v (B, 1, D), past (B, H, P, Dh), key mask (B, P + 1) -> present (P + 1)."""
    width = heads * head_dim
    inputs = [_float(n, ["B", 1, width]) for n in ("q", "k", "v")]
    inputs += [_float(n, ["B", heads, "P", head_dim]) for n in ("past_key", "past_value")]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "T"]))
    node = helper.make_node(
        "MultiHeadAttention",
        ["q", "k", "v", "", "mask", "", "past_key", "past_value"],
        ["out", "present_key", "present_value"],
        domain=MS,
        num_heads=heads,
        unidirectional=1,
    )
    return _model(node, inputs, [_float(n, None) for n in node.output])


def in_place_attention(
    heads: int, head_dim: int, capacity: int | str, dtype: str = "float32"
) -> bytes:
    """GQA: q, k, v (B, 1, D), buffers (B, H, capacity, Dh) as past and present (`capacity`
    a size, or a name for any), seqlens_k (B,) the past length of each row, `total` GQA's
    total sequence length (a host scalar: the buffer's size, as the steps pass it, or the
    longest past + 1)."""
    width, buffer = heads * head_dim, ["B", heads, capacity, head_dim]
    inputs = [_float(n, ["B", 1, width], dtype) for n in ("q", "k", "v")]
    inputs += [_float(n, buffer, dtype) for n in ("past_key", "past_value")]
    inputs += [
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
        helper.make_tensor_value_info("total", TensorProto.INT32, []),
    ]
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total"],
        ["out", "present_key", "present_value"],
        domain=MS,
        num_heads=heads,
        kv_num_heads=heads,
    )
    outputs = [_float("out", None, dtype)]
    outputs += [_float(n, buffer, dtype) for n in ("present_key", "present_value")]
    return _model(node, inputs, outputs)


def _session(model: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _microseconds(run, calls: int) -> float:
    for _ in range(50):
        run()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1e6


def case(growing, in_place, batch: int, past: int, args) -> dict:
    heads, head_dim, capacity = args.heads, args.head_dim, args.capacity
    rng = np.random.default_rng(batch * 1000 + past)
    q, k, v = (rng.standard_normal((batch, 1, heads * head_dim), np.float32) for _ in range(3))
    keys, values = (rng.standard_normal((batch, heads, past, head_dim), np.float32) for _ in "kv")
    value = ort.OrtValue.ortvalue_from_numpy
    mha = growing.io_binding()
    feeds = {
        "q": q,
        "k": k,
        "v": v,
        "past_key": keys,
        "past_value": values,
        "mask": np.ones((batch, past + 1), np.int32),
    }
    for name, array in feeds.items():
        mha.bind_ortvalue_input(name, value(array))
    for name in ("out", "present_key", "present_value"):
        mha.bind_output(name)
    growing.run_with_iobinding(mha)
    out, present_key, _ = mha.copy_outputs_to_cpu()
    buffers = [np.zeros((batch, heads, capacity, head_dim), np.float32) for _ in "kv"]
    buffers[0][:, :, :past], buffers[1][:, :, :past] = keys, values
    key_buffer, value_buffer = value(buffers[0]), value(buffers[1])
    gqa = in_place.io_binding()
    lengths = {"seqlens_k": np.full(batch, past, np.int32), "total": np.array(past + 1, np.int32)}
    for name, array in {"q": q, "k": k, "v": v, **lengths}.items():
        gqa.bind_ortvalue_input(name, value(array))
    gqa.bind_ortvalue_input("past_key", key_buffer)
    gqa.bind_ortvalue_input("past_value", value_buffer)
    gqa.bind_ortvalue_output("present_key", key_buffer)  # the same buffer: written in place
    gqa.bind_ortvalue_output("present_value", value_buffer)
    gqa.bind_output("out")
    in_place.run_with_iobinding(gqa)
    gqa_out = gqa.get_outputs()[2].numpy()
    written = key_buffer.numpy()[:, :, past]
    result = {
        "batch": batch,
        "past": past,
        "max_abs_error": float(np.abs(gqa_out - out).max()),
        "written_key_error": float(np.abs(written - present_key[:, :, past]).max()),
    }
    # the same position is rewritten on every timed call: the buffer does not fill up
    result["growing_us"] = _microseconds(lambda: growing.run_with_iobinding(mha), args.calls)
    result["in_place_us"] = _microseconds(lambda: in_place.run_with_iobinding(gqa), args.calls)
    result["growing_over_in_place"] = result["growing_us"] / result["in_place_us"]
    return result


def main(argv=None) -> int:
    args = _arguments(argv)
    growing = _session(growing_attention(args.heads, args.head_dim))
    in_place = _session(in_place_attention(args.heads, args.head_dim, args.capacity))
    rows = [
        case(growing, in_place, batch, past, args)
        for batch in map(int, args.batches.split(","))
        for past in map(int, args.pasts.split(","))
    ]
    report = {"onnxruntime": ort.__version__, "capacity": args.capacity, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("| batch | past | MHA growing us | GQA in place us | ratio | max abs error |")
        print("|--:|--:|--:|--:|--:|--:|")
        for r in rows:
            print(
                f"| {r['batch']} | {r['past']} | {r['growing_us']:.1f} | "
                f"{r['in_place_us']:.1f} | {r['growing_over_in_place']:.2f} | "
                f"{r['max_abs_error']:.1e} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
