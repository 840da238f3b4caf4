"""The fixed-capacity decoder step with CUDA graphs, against the growing cache, greedy.

    python -m bench.static_step --out DIR [--device cuda|cpu] [--checkpoint DIR]
        [--capacity 128] [--batches 1,16,64,256,1024] [--length 64] [--variants fp32,fp16]
        [--traced]
    python -m bench.static_step --out DIR --memcpy-of VERSION_DIR [--device cuda|cpu]

The second form writes DIR/memcpy.json: the Memcpy nodes onnxruntime puts into every graph
the version ships (steps, encoders, helper graphs) on the device, nothing timed.

The shipped translator's graphs are built op by op (export.builder) into a scratch
repository: the encoder, the growing step and the search graphs as `attnserve export
--graphs built` writes them, and beside them the fixed-capacity step
(`build_decoder(capacity=...)`) and the in-place step. For every variant and batch the first
`batch` test sentences are encoded once and decoded greedily for exactly `length` tokens (the
best token always fed back, `</s>` included) in every way, every step followed by the search
graph on the logits where they are (k = 1) and the ids brought to the host:
- growing: `CachedInference` over `OnnxEngine` (IO binding), the served path (with
  --traced also over the traced graphs, `attnserve export --graphs traced`, as "traced");
- fixed: `bench.static_buffers` (rows padded to their bucket, memory to the longest source
  rounded up to 16, the cache `capacity` positions), buffers bound once, no capture;
- fixed + CUDA graph: the same with onnxruntime's CUDA graphs (cuda only), one graph per
  bucket and direction;
- in place: `bench.static_buffers.SlotCacheDecoder` over the in-place step
  (`build_decoder(in_place=True)`: GroupQueryAttention writing into the cache buffer it
  reads, each row its own positions; every row in its slot of the bucket), on the CPU and
  in fp16 on CUDA (GQA's CUDA kernel takes no fp32).
One untimed round, then 3 timed rounds, the three ways in turn; median ms per step (the
encoder excluded) and tokens/s (batch x length over the steps). The fixed ways' tokens are
compared with the growing way's: rows identical of all. For the fixed ways, "step alone" is
the median of 200 runs of the step by itself (no search, nothing to the host).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from models.shipped import SHIPPED_TRANSLATOR

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = SHIPPED_TRANSLATOR
SOURCES = ROOT / "data" / "translator" / "test.es"


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT)
    parser.add_argument("--capacity", type=int, default=128)
    parser.add_argument("--batches", default="1,16,64,256,1024")
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--variants", default="fp32,fp16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--traced", action="store_true", help="the traced graphs' growing step too")
    parser.add_argument(
        "--memcpy-of", type=Path, help="a model version: count its graphs' Memcpy nodes, no more"
    )
    return parser.parse_args(argv)


def build(checkpoint: Path, directory: Path, variants: list[str], capacity: int, traced: bool):
    """The built repository version, the fixed-capacity step of every variant, and the
    traced version (or None)."""
    import onnx
    import torch

    from export.builder import build_decoder
    from export.layout import translator_layout
    from export.repository import write_version
    from models.checkpoint import load_checkpoint

    model, tokenizer = load_checkpoint(checkpoint)
    version = write_version(
        model, tokenizer.model_file, directory, "translator", "1", tuple(variants), method="built"
    )
    fixed = {}
    for variant in variants:
        dtype = np.float16 if variant == "fp16" else np.float32
        fixed[variant] = {}
        for way, in_place in (("fixed", False), ("in place", True)):
            path = directory / variant / f"decoder-{way.replace(' ', '-')}-{capacity}.onnx"
            with torch.no_grad():
                layout = translator_layout(model.float())
                graph = build_decoder(layout, dtype, capacity, in_place=in_place)
            onnx.save_model(graph, str(path))
            fixed[variant][way] = path
    other = None
    if traced:
        other = write_version(
            model.float(),
            tokenizer.model_file,
            directory.parents[1] / "traced" / "translator" / "1",
            "translator",
            "1",
            tuple(variants),
            method="traced",
        )
    return version, fixed, other


class Case:
    """One variant's engines on one device."""

    def __init__(
        self, version, paths: dict[str, Path], variant: str, device: str, capacity: int, traced=None
    ):
        from bench.static_buffers import cuda_graph_session
        from service.runtime.graphs import transformer_interface
        from service.runtime.onnx_engine import OnnxEngine

        self.engine = OnnxEngine(version, variant, device, 1, io_binding=True)
        self.growing = {"growing": self.engine}
        if traced is not None:
            self.growing["traced"] = OnnxEngine(traced, variant, device, 1, io_binding=True)
        self.layers = int(version.config["decoder_layers"])
        self.carried = transformer_interface(self.layers).states
        self.capacity, self.device = capacity, device
        self.sessions = {"fixed": cuda_graph_session(paths["fixed"], device, capture=False)}
        if device == "cuda":
            self.sessions["fixed + CUDA graph"] = cuda_graph_session(paths["fixed"], device)
        if device == "cpu" or variant == "fp16":  # GQA's CUDA kernel: fp16 and bf16 only
            self.sessions["in place"] = cuda_graph_session(paths["in place"], device, capture=False)
        self.graph_ids = 0

    def decoder(self, way: str, rows: int, memory: int):
        from bench.static_buffers import FixedCacheDecoder, SlotCacheDecoder, StaticStep, bucket

        slots = bucket(rows, 1 << 20)
        made = (self.sessions[way], slots, {"memory": memory}, self.carried, self.device)
        if way == "in place":
            return SlotCacheDecoder(StaticStep(*made, in_place=True), self.capacity)
        graph_ids = None
        if way.endswith("CUDA graph"):
            graph_ids = (self.graph_ids, self.graph_ids + 1)
            self.graph_ids += 2
        step = StaticStep(*made, graph_ids)
        return FixedCacheDecoder(step, self.capacity)

    def greedy(self, way: str, ids: list[list[int]], length: int, decoder=None):
        """(tokens (B, length), seconds of the steps)."""
        from service.runtime.batching import source_batch
        from service.runtime.inference import CachedInference
        from service.runtime.search import SearchRequest

        engine = self.growing.get(way, self.engine)
        request = SearchRequest(k=1, attention=False)
        encoder = engine.encode(*source_batch(ids, 512))
        rows = len(ids)
        tokens = np.full(rows, engine.special_tokens.bos, dtype=np.int64)
        out = np.zeros((rows, length), dtype=np.int64)
        if way in self.growing:
            inference = CachedInference(engine, encoder, rows)
        elif way == "in place":  # every row into its slot
            memory = {n: t.numpy() for n, t in encoder.memory.items()}
            mask = np.asarray(encoder.memory_mask)
            for row in range(rows):
                decoder.start(row, {n: m[row] for n, m in memory.items()}, mask[row])
        else:
            memory = {n: t.numpy() for n, t in encoder.memory.items()}
            decoder.start(memory, encoder.memory_mask)
        start = time.perf_counter()
        for t in range(length):
            if way in self.growing:
                candidates, _ = inference.search_step(tokens[:, None], request)
            else:
                if way == "in place" and len(tokens) < decoder.step.rows:
                    tokens = np.pad(tokens, (0, decoder.step.rows - len(tokens)))
                outputs = decoder.forward(tokens)
                candidates = engine.search(outputs["logits"], request)
            tokens = candidates.ids[:rows, 0]
            out[:, t] = tokens
        return out, time.perf_counter() - start


def memcpy_nodes(path: Path, device: str) -> int:
    """Memcpy nodes onnxruntime puts into the graph on `device` (copies between host and
    device inside a step; CUDA graphs need none)."""
    import onnx
    import onnxruntime as ort

    from service.runtime.onnx_runtime import PROVIDERS

    with tempfile.TemporaryDirectory() as scratch:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(scratch) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=PROVIDERS[device])
        graph = onnx.load(options.optimized_model_filepath, load_external_data=False).graph
    return sum(n.op_type.startswith("Memcpy") for n in graph.node)


def version_memcpy(directory: Path, device: str) -> dict[str, dict[str, int]]:
    """Memcpy nodes of every graph a model version ships on `device`: {variant or "ops":
    {graph name: count}} (the helper graphs of every element type under "ops")."""
    from service.runtime.repository import verify

    version = verify(directory)
    counts = {
        variant: {name: memcpy_nodes(directory / path, device) for name, path in graphs.items()}
        for variant, graphs in version.manifest["graphs"].items()
    }
    counts["ops"] = {
        f"{op}_{dtype}": memcpy_nodes(directory / path, device)
        for op, paths in version.manifest["ops"].items()
        for dtype, path in paths.items()
    }
    return counts


def step_ms(step, calls: int = 200) -> float:
    """The median of `calls` runs of the step alone (the buffers as the last decode left
    them; onnxruntime returns once the device is done), in ms."""
    for _ in range(5):
        step.run()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        step.run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def memory_size(ids: list[list[int]]) -> int:
    longest = max(len(x) for x in ids) + 1  # </s>
    return -(-longest // 16) * 16


def main(argv=None) -> int:
    args = _arguments(argv)
    if args.memcpy_of:  # only the Memcpy nodes of a version's graphs
        counts = version_memcpy(args.memcpy_of, args.device)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "memcpy.json").write_text(json.dumps(counts, indent=2) + "\n")
        print(json.dumps(counts))
        return 0
    from service.runtime.tokenizer import Tokenizer

    batches = [int(b) for b in args.batches.split(",")]
    variants = args.variants.split(",")
    report = {"device": args.device, "capacity": args.capacity, "length": args.length, "rows": []}
    if args.device == "cuda":
        import onnxruntime

        report["onnxruntime"] = onnxruntime.__version__
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "translator" / "1"
        version, fixed, traced = build(
            args.checkpoint, directory, variants, args.capacity, args.traced
        )
        lines = [x for x in SOURCES.read_text(encoding="utf-8").splitlines() if x.strip()]
        tokenizer = Tokenizer(directory / "tokenizer.model")
        all_ids = tokenizer.encode_batch(lines[: max(batches)])
        for variant in variants:
            report.setdefault("memcpy_nodes", {})[variant] = {
                "growing": memcpy_nodes(version.graph(variant, "decoder"), args.device),
                **{way: memcpy_nodes(path, args.device) for way, path in fixed[variant].items()},
                "encoder": memcpy_nodes(version.graph(variant, "encoder"), args.device),
            }
            case = Case(version, fixed[variant], variant, args.device, args.capacity, traced)
            ways = [*case.growing, *case.sessions]
            for batch in batches:
                ids = (all_ids * (batch // len(all_ids) + 1))[:batch]
                size = memory_size(ids)
                decoders = {w: case.decoder(w, batch, size) for w in case.sessions}
                times: dict[str, list[float]] = {w: [] for w in ways}
                tokens: dict[str, np.ndarray] = {}
                for round_ in range(args.rounds + 1):
                    for way in ways:
                        out, seconds = case.greedy(way, ids, args.length, decoders.get(way))
                        tokens[way] = out
                        if round_:
                            times[way].append(seconds)
                step_only = {w: step_ms(d.step) for w, d in decoders.items()}
                for way in ways:
                    seconds = statistics.median(times[way])
                    row = {
                        "variant": variant,
                        "batch": batch,
                        "way": way,
                        "bucket": decoders[way].step.rows if way in decoders else batch,
                        "memory": size if way in decoders else None,
                        "ms_per_step": seconds / args.length * 1e3,
                        "tokens_per_s": batch * args.length / seconds,
                        "identical_rows": int((tokens[way] == tokens["growing"]).all(1).sum()),
                        "step_only_ms": step_only.get(way),
                    }
                    report["rows"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "static-step.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / "static-step.md").write_text(text)
    print(text)
    return 0


def markdown(report: dict) -> str:
    lines = [
        f"device {report['device']}, capacity {report['capacity']}, {report['length']} tokens "
        f"per row, greedy; median of the timed rounds",
        "",
        "| variant | batch | way | bucket | ms/step | tokens/s | vs growing | rows identical "
        "| step alone ms |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    lines[1:1] = ["", f"Memcpy nodes on the device: {json.dumps(report.get('memcpy_nodes', {}))}"]
    growing = {(r["variant"], r["batch"]): r for r in report["rows"] if r["way"] == "growing"}
    for r in report["rows"]:
        base = growing[(r["variant"], r["batch"])]
        ratio = base["ms_per_step"] / r["ms_per_step"]
        lines.append(
            f"| {r['variant']} | {r['batch']} | {r['way']} | {r['bucket']} | "
            f"{r['ms_per_step']:.3f} | {r['tokens_per_s']:,.0f} | {ratio:.2f}x | "
            f"{r['identical_rows']}/{r['batch']} | "
            + ("" if r.get("step_only_ms") is None else f"{r['step_only_ms']:.3f}")
            + " |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
