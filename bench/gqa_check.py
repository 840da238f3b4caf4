"""com.microsoft GroupQueryAttention as the in-place and static steps drive it, alone,
against numpy: one new token per row, every row at its own position in a buffer bound as
both past and present (written in place), as many key/value heads as query heads.

    python -m bench.gqa_check [--device cuda|cpu] [--dtype float16|float32]
        [--heads 4] [--head-dim 64] [--batches 1,3,16,64,256] [--json]

For every batch and every layout of positions (all rows at one position; every row its own)
it runs the op with the two totals a caller may pass: the buffer's size ("capacity", what
the steps pass) and the longest row's length ("longest", what they passed before), and
reports, per case, the largest error of the attention output and of the buffer (the new
token written at each row's position, every other position left as it was). Each case also
runs with the buffer's past and present bound to different memory ("copied"), which
onnxruntime's kernels take by another path. A case fails when an error passes the dtype's
bound. On CUDA, onnxruntime picks the kernel by environment: `ORT_DISABLE_FLASH_DECODE=1`
leaves flash attention's decoding path (a shared buffer, one new token), and
`ORT_DISABLE_FLASH_ATTENTION=1` flash attention altogether (memory-efficient attention then).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from itertools import product

import numpy as np

from bench.cache_attention import in_place_attention

BOUNDS = {"float16": 2e-2, "float32": 1e-4}  # max abs error of outputs of order 1
TOTALS = ("capacity", "longest")


@dataclass
class Case:
    batch: int
    layout: str  # "same" or "own"
    total: str  # "capacity" or "longest"
    buffer: str  # "shared" or "copied"
    output_error: float
    buffer_error: float
    passed: bool


def reference(q, k, v, past_k, past_v, positions):
    """(output (B, 1, H*Dh), present key, present value) in float64: each row's new key and
    value written at its position, its query attending over positions 0..position."""
    batch, heads, _, head_dim = past_k.shape
    keys, values = past_k.astype(np.float64), past_v.astype(np.float64)
    new_k = k.astype(np.float64).reshape(batch, heads, head_dim)
    new_v = v.astype(np.float64).reshape(batch, heads, head_dim)
    query = q.astype(np.float64).reshape(batch, heads, head_dim)
    out = np.empty((batch, heads, head_dim))
    for row, position in enumerate(positions):
        keys[row, :, position] = new_k[row]
        values[row, :, position] = new_v[row]
        seen_k, seen_v = keys[row, :, : position + 1], values[row, :, : position + 1]
        scores = np.einsum("hd,hpd->hp", query[row], seen_k) / np.sqrt(head_dim)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        out[row] = np.einsum("hp,hpd->hd", weights, seen_v)
    return out.reshape(batch, 1, heads * head_dim), keys, values


def run_case(session, device, dtype, heads, head_dim, batch, layout, total, buffer, rng):
    import onnxruntime as ort

    capacity = 40
    if layout == "same":
        positions = np.full(batch, 17, dtype=np.int32)
    else:  # every row its own position, 0 and capacity - 1 among them
        positions = ((np.arange(batch) * 7 + 3) % capacity).astype(np.int32)
        positions[0], positions[-1] = capacity - 1, 0
    width = heads * head_dim
    q, k, v = (rng.standard_normal((batch, 1, width)).astype(dtype) for _ in range(3))
    past_k, past_v = (
        rng.standard_normal((batch, heads, capacity, head_dim)).astype(dtype) for _ in range(2)
    )
    expected, expected_k, expected_v = reference(q, k, v, past_k, past_v, positions)
    longest = int(positions.max()) + 1
    size = capacity if total == "capacity" else longest
    binding = session.io_binding()
    for name, array in (("q", q), ("k", k), ("v", v), ("seqlens_k", positions)):
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, device, 0))
    binding.bind_cpu_input("total", np.array(size, dtype=np.int32))
    buffers = {}
    for name, array in (("key", past_k), ("value", past_v)):
        past = ort.OrtValue.ortvalue_from_numpy(np.array(array, copy=True), device, 0)
        binding.bind_ortvalue_input(f"past_{name}", past)
        if buffer == "shared":
            binding.bind_ortvalue_output(f"present_{name}", past)
            buffers[name] = past
        else:
            present = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(array), device, 0)
            binding.bind_ortvalue_output(f"present_{name}", present)
            buffers[name] = present
    output = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(q), device, 0)
    binding.bind_ortvalue_output("out", output)
    session.run_with_iobinding(binding)
    output_error = float(np.abs(output.numpy().astype(np.float64) - expected).max())
    # the positions a row has written (0..position) must hold the reference; the rest of a
    # shared buffer must be as it was
    buffer_error = 0.0
    for name, want in (("key", expected_k), ("value", expected_v)):
        got = buffers[name].numpy().astype(np.float64)
        for row, position in enumerate(positions):
            last = capacity if buffer == "shared" else position + 1
            error = np.abs(got[row, :, :last] - want[row, :, :last]).max()
            buffer_error = max(buffer_error, float(error))
    bound = BOUNDS[dtype]
    return Case(
        batch,
        layout,
        total,
        buffer,
        output_error,
        buffer_error,
        output_error <= bound and buffer_error <= bound,
    )


def check(
    device: str = "cpu",
    dtype: str = "float32",
    heads: int = 4,
    head_dim: int = 64,
    batches=(1, 3, 16, 64),
    totals=TOTALS,
    buffers=("shared", "copied"),
    seed: int = 0,
) -> list[Case]:
    import onnxruntime as ort

    provider = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
    graph = in_place_attention(heads, head_dim, "capacity", dtype)
    session = ort.InferenceSession(graph, providers=[provider])
    rng = np.random.default_rng(seed)
    return [
        run_case(session, device, dtype, heads, head_dim, batch, layout, total, buffer, rng)
        for batch, layout, total, buffer in product(batches, ("same", "own"), totals, buffers)
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default=None, choices=("float16", "float32"))
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--batches", default="1,3,16,64,256")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    dtype = args.dtype or ("float16" if args.device == "cuda" else "float32")
    batches = tuple(int(b) for b in args.batches.split(","))
    cases = check(args.device, dtype, args.heads, args.head_dim, batches)
    if args.json:
        print(json.dumps([asdict(c) for c in cases], indent=1))
    else:
        print(
            f"GroupQueryAttention on {args.device}, {dtype}, {args.heads} heads of "
            f"{args.head_dim}, bound {BOUNDS[dtype]}"
        )
        print("| batch | positions | total | buffer | output error | buffer error | |")
        print("|--:|---|---|---|--:|--:|---|")
        for c in cases:
            print(
                f"| {c.batch} | {c.layout} | {c.total} | {c.buffer} | {c.output_error:.2e} "
                f"| {c.buffer_error:.2e} | {'ok' if c.passed else 'WRONG'} |"
            )
    return 0 if all(c.passed for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
