"""The served continuous batch with its cache written in place against the growing cache.

    python -m bench.continuous --json [--variants fp32,int8] [--beams 1,4] [--rows 16]
        [--requests 96] [--waiting 4] [--rounds 3] [--repository VERSION_DIR]
        [--device cpu|cuda] [--io-binding] [--static] [--markdown FILE] [--quick]

The server's scheduler (service.worker.scheduler: one continuous batch of at most `rows` rows)
decodes `requests` test sentences, one request each, submitted so that `waiting` are always
queued: requests join while others decode and leave when they end, as under load. Each
(variant, beam) case runs the same stream through an engine whose steps write their cache in
place (`OnnxEngine(cache="in_place")`, the default on the CPU) and through one whose cache
grows (the past concatenated every step), one compute thread each, rounds alternated so the
ratio is measured side by side. Reported per cache: output tokens per second of wall time
(the encoder included, as served), the batch's rebuilds (a join that found no dead slot to
reuse, or too many dead slots), and how many requests decoded identical tokens (fp32: all;
int8 quantises its activations at run time, so tiny float differences between the two steps
may change a token). `--device cuda` runs both on the GPU (IO binding, the cache on the
device; fp16 and fp32 are the variants to compare there); `--io-binding` runs that device
path on the CPU. `--static` adds the static step (`OnnxEngine(cache="static")`: the in-place
step at a fixed capacity over buffers per bucket of rows, each bucket's step replayed as a
CUDA graph on cuda) as a third engine in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from models.corpus import read_split
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import verify
from service.runtime.tokenizer import Tokenizer
from service.worker.messages import Job, Result
from service.worker.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "data" / "repository" / "translator" / "1"
DATA = ROOT / "data" / "translator"
CACHES = ("in_place", "growing")
MAX_LENGTH = 160


def stream(engine: OnnxEngine, sources, options: DecodingOptions, rows: int, waiting: int):
    """(output tokens per second, tokens of every request, rebuilds) of one stream."""
    scheduler = Scheduler(engine, max_rows=rows)
    done: dict[int, list[int]] = {}
    submitted, start = 0, time.perf_counter()
    while len(done) < len(sources):
        while submitted < len(sources) and len(scheduler.waiting) < waiting:
            ids, mask = source_batch([sources[submitted]], 512)
            scheduler.submit(Job(submitted, {"src_ids": ids, "src_mask": mask}, options))
            submitted += 1
        scheduler.iterate()
        for event in scheduler.events:
            if isinstance(event, Result):
                done[event.job_id] = event.results[0][0].tokens
        scheduler.events.clear()
    seconds = time.perf_counter() - start
    tokens = [done[i] for i in range(len(sources))]
    return sum(map(len, tokens)) / seconds, tokens, scheduler.batch.rebuilds


def case(version, variant: str, beam: int, sources, args) -> dict:
    io_binding = True if args.io_binding else None  # None: the engine's default
    caches = (*CACHES, "static") if args.static else CACHES
    engines = {
        cache: OnnxEngine(version, variant, args.device, io_binding=io_binding, cache=cache)
        for cache in caches
    }
    options = DecodingOptions(beam_size=beam, max_length=MAX_LENGTH)
    rates: dict[str, list[float]] = {cache: [] for cache in caches}
    tokens, rebuilds = {}, {}
    for _ in range(args.warmup):
        for engine in engines.values():
            stream(engine, sources, options, args.rows, args.waiting)
    for _ in range(args.rounds):
        for cache, engine in engines.items():
            rate, tokens[cache], rebuilds[cache] = stream(
                engine, sources, options, args.rows, args.waiting
            )
            rates[cache].append(rate)
    medians = {cache: statistics.median(r) for cache, r in rates.items()}

    def same(a: str, b: str) -> int:
        return sum(x == y for x, y in zip(tokens[a], tokens[b], strict=True))

    report = {
        "variant": variant,
        "beam": beam,
        "tokens_per_s": medians,
        "rounds": rates,
        "in_place_over_growing": medians["in_place"] / medians["growing"],
        "rebuilds": rebuilds,
        "identical": same("in_place", "growing"),
        "requests": len(sources),
    }
    if "static" in engines:  # its buckets captured on CUDA (the engine's default there)
        report["static_over_growing"] = medians["static"] / medians["growing"]
        report["static_identical_to_in_place"] = same("static", "in_place")
        report["static_captured"] = engines["static"].capture
    return report


def markdown(report: dict) -> str:
    s = report["settings"]
    lines = [
        f"On {s['device']}{' (IO binding)' if s['io_binding'] else ''}: continuous batch "
        f"of {s['rows']} rows, {s['requests']} requests ({s['waiting']} always "
        f"queued), at most {MAX_LENGTH} tokens, median of {s['rounds']} alternated rounds:",
        "",
        "| variant | beam | in place tokens/s | growing tokens/s | in place / growing | "
        "rebuilds (in place, growing) | identical requests |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in report["cases"]:
        rate = r["tokens_per_s"]
        lines.append(
            f"| {r['variant']} | {r['beam']} | {rate['in_place']:.0f} | {rate['growing']:.0f} | "
            f"{r['in_place_over_growing']:.3f} | {r['rebuilds']['in_place']}, "
            f"{r['rebuilds']['growing']} | {r['identical']}/{r['requests']} |"
        )
    static = [r for r in report["cases"] if "static_over_growing" in r]
    if static:
        lines += [
            "",
            "| variant | beam | static tokens/s | CUDA graphs | static / growing | bucket moves "
            "| identical to in place |",
            "|---|--:|--:|---|--:|--:|--:|",
        ]
        for r in static:
            lines.append(
                f"| {r['variant']} | {r['beam']} | {r['tokens_per_s']['static']:.0f} | "
                f"{'yes' if r['static_captured'] else 'no'} | {r['static_over_growing']:.3f} | "
                f"{r['rebuilds']['static']} | {r['static_identical_to_in_place']}/{r['requests']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--variants", default="fp32,int8")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--waiting", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--io-binding", action="store_true", help="the device path on any device")
    parser.add_argument("--static", action="store_true", help="the static step as well")
    parser.add_argument("--quick", action="store_true", help="fp32 greedy, 12 requests, 1 round")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.variants, args.beams, args.requests, args.rounds, args.warmup = "fp32", "1", 12, 1, 0
    version = verify(args.repository)
    spanish, _ = read_split(DATA, "test")
    sources = Tokenizer(version.tokenizer_file).encode_batch(spanish[: args.requests])
    keys = ("rows", "requests", "waiting", "rounds", "device", "io_binding", "static")
    settings = {k: getattr(args, k) for k in keys}
    report = {"settings": settings, "cases": []}
    for variant in args.variants.split(","):
        for beam in map(int, args.beams.split(",")):
            report["cases"].append(case(version, variant, beam, sources, args))
            print(f"{variant} beam {beam} done", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(markdown(report))
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
