"""Overload: an open loop at twice the server's measured capacity.

    python -m bench.overload [--seconds 20] [--clients 16] [--factor 2] [--workers N]
        [--latency-budget-seconds S | --budget-factor F] [--repository ROOT] [--json FILE]

A server on 127.0.0.1 (bench.lib.server.Server), without admission control: its capacity, with
`--clients` closed loops of unary Translate calls (one sentence each, a fixed pool) for
`--seconds`: throughput and the p99 latency at capacity. Then a second server, with the
latency budget an operator would set from that measurement (`latency_budget_seconds`: the p99
at capacity, times `--budget-factor`), under an open loop for `--seconds` with Poisson
arrivals (seeded) at `--factor` times that throughput, every call with a 30 s deadline.
Reported: what was admitted
and what got RESOURCE_EXHAUSTED, how fast the refusals came, the admitted calls' p99 over the
p99 at capacity (goal: at most 2), and the largest resident memory of the front and of the
workers in each phase (goal: bounded, within 1.5x of the capacity phase). Ends by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from bench.lib.arguments import run_server_bench
from bench.lib.processes import sample
from bench.lib.sentence_loads import closed_loop, translate
from bench.lib.server import Server
from service.wire.v1 import translation_pb2_grpc


async def _memory(pid: int, stop: asyncio.Event, peak: dict) -> None:
    while not stop.is_set():
        now = sample(pid)
        for process in ("front", "workers"):
            peak[process] = max(peak.get(process, 0), now[process]["rss_kb"])
        await asyncio.sleep(0.5)


async def capacity(stub, pid: int, clients: int, seconds: float) -> dict:
    peak, stop = {}, asyncio.Event()
    watcher = asyncio.create_task(_memory(pid, stop, peak))
    outcomes, elapsed = await closed_loop(stub, clients, seconds)
    stop.set()
    await watcher
    ok = [t for code, t in outcomes if code == "OK"]
    return {
        "calls": len(outcomes),
        "codes": dict(collections.Counter(code for code, _ in outcomes)),
        "throughput_rps": round(len(ok) / elapsed, 2),
        "p50_s": round(float(np.percentile(ok, 50)), 4) if ok else None,
        "p99_s": round(float(np.percentile(ok, 99)), 4) if ok else None,
        "peak_rss_kb": peak,
    }


async def open_loop(stub, pid: int, rate: float, seconds: float, seed: int) -> dict:
    rng, tasks, peak, stop = random.Random(seed), [], {}, asyncio.Event()
    watcher = asyncio.create_task(_memory(pid, stop, peak))
    start, at, index = time.monotonic(), 0.0, 0
    while at < seconds:
        delay = start + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(translate(stub, index)))
        index += 1
        at += rng.expovariate(rate)
    outcomes = await asyncio.gather(*tasks)
    stop.set()
    await watcher
    by_code = collections.defaultdict(list)
    for code, seconds_ in outcomes:
        by_code[code].append(seconds_)
    ok, refused = by_code.get("OK", []), by_code.get("RESOURCE_EXHAUSTED", [])
    return {
        "offered_rps": round(rate, 2),
        "calls": len(outcomes),
        "codes": {code: len(times) for code, times in sorted(by_code.items())},
        "admitted_fraction": round(len(ok) / len(outcomes), 3),
        "admitted_p50_s": round(float(np.percentile(ok, 50)), 4) if ok else None,
        "admitted_p99_s": round(float(np.percentile(ok, 99)), 4) if ok else None,
        "refused_p99_s": round(float(np.percentile(refused, 99)), 4) if refused else None,
        "peak_rss_kb": peak,
    }


async def _phase(args, flags: list[str], body):
    """Runs `body(stub, pid)` against a fresh server started with `flags`."""
    directory = Path(tempfile.mkdtemp(prefix="attnserve-overload-"))
    flags = flags + (["--workers", str(args.workers)] if args.workers else [])
    server = Server(args.repository, directory, flags)
    try:
        state = await server.wait()
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = translation_pb2_grpc.TranslationServiceStub(channel)
            result = await body(stub, server.process.pid)
    finally:
        exit_code = server.stop()
    return result, len(state.get("workers", [])), exit_code


async def run(args) -> dict:
    async def measure(stub, pid):
        await capacity(stub, pid, args.clients, min(5.0, args.seconds))  # warm-up
        return await capacity(stub, pid, args.clients, args.seconds)

    measured, workers, _ = await _phase(args, [], measure)
    budget = args.latency_budget_seconds or round(measured["p99_s"] * args.budget_factor, 4)
    rate = measured["throughput_rps"] * args.factor

    async def overload(stub, pid):
        await capacity(stub, pid, args.clients, min(5.0, args.seconds))  # warm-up
        return await open_loop(stub, pid, rate, args.seconds, args.seed)

    flags = ["--latency-budget-seconds", str(budget)]
    overloaded, _, exit_code = await _phase(args, flags, overload)
    p99_ratio = (
        overloaded["admitted_p99_s"] / measured["p99_s"]
        if overloaded["admitted_p99_s"] and measured["p99_s"]
        else None
    )
    memory = {
        process: round(overloaded["peak_rss_kb"][process] / measured["peak_rss_kb"][process], 3)
        for process in ("front", "workers")
        if measured["peak_rss_kb"].get(process)
    }
    return {
        "workers": workers,
        "latency_budget_seconds": budget,
        "capacity": measured,
        "overload": overloaded,
        "admitted_p99_over_capacity_p99": round(p99_ratio, 3) if p99_ratio else None,
        "peak_rss_overload_over_capacity": memory,
        "goals": {
            "admitted p99 within 2x of the p99 at capacity": bool(p99_ratio and p99_ratio <= 2),
            "refusals within 0.1 s (p99)": (overloaded["refused_p99_s"] or 0) <= 0.1,
            "memory within 1.5x of the capacity phase": all(v <= 1.5 for v in memory.values()),
        },
        "server_exit_code": exit_code,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overload")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--latency-budget-seconds",
        type=float,
        default=0.0,
        help="the overloaded server's (default: the p99 at capacity x --budget-factor)",
    )
    parser.add_argument("--budget-factor", type=float, default=1.0)
    return run_server_bench(parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
