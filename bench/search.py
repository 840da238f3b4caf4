"""The search beside the step: the search graph against the numpy search, and the decoder step
with each, on one device.

    python -m bench.search --json [--device cpu|cuda] [--repository VERSION_DIR] [--quick]

Part 1 times the search alone on random logits of the model's vocabulary: the `search` graph
(log-softmax and top-k in onnxruntime, one compute thread on the CPU) against
`service.runtime.search.host_search` (numpy), at k = 1 (greedy) and k = 8 (beam 4), for batch sizes
1 to 256; on CUDA the graph reads logits already on the device, the numpy search logits
copied to the host first (what the served step did before). Part 2 times one whole decoder
step at a past of 32 positions with each search (the step's logits and, on the host path,
the cross-attention fetched as before), so the share of the step that the search saves is
measured on the real model; a third variant, `folded`, is the lean step with the search
folded into its graph (service.runtime.graphs.lean: one run for both), against `graph`, the same
lean step with the search graph run after it. Every case runs its variants in turn, best of
several rounds, so the ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from service.runtime.inference import searched
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import verify
from service.runtime.search import SearchRequest, host_search

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "data" / "repository" / "translator" / "1"


def _best(fn, seconds: float) -> float:
    """Best of 5 rounds of ~seconds/5 each, in ms per call."""
    fn()
    best = float("inf")
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed > seconds / 5:
                break
        best = min(best, elapsed / calls)
    return best * 1e3


def search_alone(engine: OnnxEngine, batches, seconds: float) -> list[dict]:
    vocab = engine.decoder.get_outputs()[0].shape[-1]
    vocab = vocab if isinstance(vocab, int) else 8000
    rng, rows = np.random.default_rng(0), []
    for batch in batches:
        logits = (rng.normal(size=(batch, vocab)) * 4).astype(engine.float_dtype)
        on_device = logits
        if engine.io_binding:
            on_device = ort.OrtValue.ortvalue_from_numpy(logits, engine.device, 0)
        for k in (1, 8):
            request = SearchRequest(k=k)
            graph = _best(lambda r=request, d=on_device: engine.search(d, r), seconds)
            host = _best(lambda r=request, d=on_device: host_search(engine.host(d), r), seconds)
            rows.append(
                {
                    "batch": batch,
                    "k": k,
                    "graph_ms": graph,
                    "numpy_ms": host,
                    "speedup": host / graph,
                }
            )
    return rows


def step_with_search(version, device: str, batches, seconds: float) -> list[dict]:
    """One decoder step (past 32) then its search, with each search."""
    # the growing cache's steps: the past of 32 is one step (an in-place step takes one token)
    engines = {
        "graph": OnnxEngine(version, "fp32", device, device_search=True, cache="growing"),
        "numpy": OnnxEngine(version, "fp32", device, device_search=False, cache="growing"),
        "folded": OnnxEngine(version, "fp32", device, device_search=True, cache="growing"),
    }
    rows = []
    for batch in batches:
        times = {}
        for name, engine in engines.items():
            src = np.full((batch, 24), 10, dtype=np.int64)
            encoder = engine.encode(src, np.ones_like(src))
            state = engine.initial_state(encoder, batch)
            tokens = np.full((batch, 32), 11, dtype=np.int64)
            positions = np.broadcast_to(np.arange(32), (batch, 32)).copy()
            mask = np.ones((batch, 32), dtype=np.int64)
            state = engine.step(tokens, positions, mask, state, encoder).state
            one = np.full((batch, 1), 12, dtype=np.int64)
            where = np.full((batch, 1), 32, dtype=np.int64)
            full = np.ones((batch, 33), dtype=np.int64)
            attention = name == "numpy"  # the served step before the search moved
            folded = SearchRequest(k=8) if name == "folded" else None

            def step(
                e=engine, s=state, enc=encoder, a=attention, f=folded, feeds=(one, where, full)
            ):
                return searched(e, e.step(*feeds, s, enc, a, f), SearchRequest(k=8))

            times[name] = _best(step, seconds)
        rows.append(
            {
                "batch": batch,
                "graph_ms": times["graph"],
                "numpy_ms": times["numpy"],
                "saved": 1 - times["graph"] / times["numpy"],
                "folded_ms": times["folded"],
                "folded_over_graph": times["graph"] / times["folded"],
            }
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    version = verify(args.repository)
    batches = (1, 16) if args.quick else (1, 4, 16, 64, 256)
    seconds = 0.2 if args.quick else 1.0
    engine = OnnxEngine(version, "fp32", args.device, device_search=True)
    result = {
        "device": args.device,
        "onnxruntime": ort.__version__,
        "provider": engine.decoder.get_providers()[0],
        "search": search_alone(engine, batches, seconds),
        "step": step_with_search(version, args.device, batches, seconds),
    }
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        for part in ("search", "step"):
            for row in result[part]:
                print(part, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
