"""The load benchmark's JSON report, assembled from a run: the settings, the workload, the
in-process reference, the levels, the ratios and goals; the same for the captioner."""

from __future__ import annotations

import numpy as np

from bench.lib.levels import Bench
from bench.lib.load_goals import caption_ratios, goals, ratios
from bench.lib.summaries import spread
from bench.lib.workload import NEAR


def _workload(args, pool: list, references: list[dict]) -> dict:
    targets = [r.max_length for r in pool]
    outputs = [len(r["pieces"]) for r in references]
    return {
        "pool": len(pool),
        "targets": list(args.targets),
        "target_mean": float(np.mean(targets)),
        "source_tokens_mean": float(np.mean([r.source_tokens for r in pool])),
        "at_target_in_process": float(np.mean(np.equal(outputs, targets))),
        "near_target_in_process": float(
            np.mean(np.greater_equal(outputs, NEAR * np.array(targets)))
        ),
        "output_tokens_in_process_mean": float(np.mean(outputs)),
    }


def _settings(args, version, servers: dict) -> dict:
    return {
        "quick": args.quick,
        "model": args.model,
        "seed": args.seed,
        "repository": str(version.directory),
        "sources": str(args.sources),
        "workers": servers["continuous"].get("workers"),
        "max_batch_rows": args.max_batch_rows,
        "slo_ms": args.slo_ms,
        "rounds": args.rounds,
        "closed": [{"clients": c, "requests_per_round": n} for c, n in args.closed],
        "request_level": [{"clients": c, "requests_per_round": n} for c, n in args.request_level],
        "open_fractions": args.open_fractions,
        "open_requests": args.open_requests,
        "interleaved_requests": args.interleaved,
        "warmup_requests": args.warmup,
        "level_seconds": args.level_seconds,
        "drain_seconds": args.drain_seconds,
        "decoding": "greedy, max_length = target",
        "client": "one asyncio loop, one grpc.aio channel per server, TranslateStream",
        "percentiles": "numpy linear interpolation",
        "servers": servers,
    }


def _in_process(bench: Bench, references: list[dict], scheduler_loop: dict) -> dict:
    outputs = [len(r["pieces"]) for r in references]
    return {
        "engine": "OnnxEngine fp32, one thread, CPU; translate_ids, one request at a time",
        "decode_ms": spread([r["seconds"] for r in references]),
        "output_tokens_per_s": sum(outputs) / sum(r["seconds"] for r in references),
        "interleaved": bench.paired["translator"],
        "scheduler_loop": scheduler_loop
        | {
            "engine": "the worker's Scheduler over OnnxEngine fp32, one thread, CPU, in as many "
            "processes as the server has workers, the closed loop's clients and requests shared "
            "among them; tokenizing and detokenizing included"
        },
    }


def _captioner_settings(args, traffic) -> dict:
    return {
        "repository": str(traffic.local.directory),
        "data": str(args.captioner_data),
        "closed": [{"clients": c, "requests_per_round": n} for c, n in args.caption_closed],
        "interleaved_requests": args.caption_interleaved,
        "mixed_fraction": args.mixed_fraction,
        "caption_rate_share": args.caption_rate_share,
        "mixed_rounds": args.mixed_rounds,
        "mixed_requests": {"translations": args.open_requests, "captions": args.mixed_captions},
        "decoding": "greedy, max_length = the model's own",
        "client": "CaptionStream in the levels; Caption and CaptionStream in turn",
    }


def _captioner_part(args, bench: Bench, measured: dict) -> dict:
    """The captioner's part of the report."""
    traffic = bench.traffic["captioner"]
    outputs = [len(r["pieces"]) for r in traffic.references]
    workload = {
        "pool": len(traffic.pool),
        "split": "test",
        "max_length": traffic.local.limit,
        "png_bytes_mean": float(np.mean([len(p.png) for p in traffic.pool])),
        "finished_in_process": float(np.mean([r["finished"] for r in traffic.references])),
        "output_tokens_in_process_mean": float(np.mean(outputs)),
    }
    part = {"settings": _captioner_settings(args, traffic), "workload": workload}
    part["in_process"] = {
        "engine": "OnnxEngine fp32, one thread, CPU; the PNG decoded and squeezed to the "
        "model's side, caption_images, one image at a time",
        "decode_ms": spread([r["seconds"] for r in traffic.references]),
        "interleaved": bench.paired["captioner"],
    }
    part |= {"levels": measured["caption_levels"], "mixed": measured["mixed"]}
    rows = caption_ratios(part, args)
    part["ratios"] = {text: ratio for text, ratio, *_ in rows}
    part["goals"] = goals(rows)
    return part


def report(args, limits: dict, bench: Bench, measured: dict, servers: dict) -> dict:
    """The whole report of a run: `limits` the machine's, `measured` the levels (and the
    in-process scheduler loop), `servers` the servers' descriptions."""
    translation = bench.translation
    pool, references = translation.pool, translation.references
    levels, scheduler_loop = measured["levels"], measured["scheduler_loop"]
    rows = ratios(levels, bench.paired["translator"], references, args, scheduler_loop)
    settings = _settings(args, translation.local.version, servers)
    workload = _workload(args, pool, references)
    result = {"machine": limits, "settings": settings, "workload": workload}
    result["in_process"] = _in_process(bench, references, scheduler_loop)
    result |= {"levels": levels}
    result["ratios"] = {text: ratio for text, ratio, *_ in rows}
    result["goals"] = goals(rows)
    if "captioner" in bench.traffic:
        result["captioner"] = _captioner_part(args, bench, measured)
    return result
