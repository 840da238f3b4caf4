"""Scaling: one server's throughput with more workers, and with more clients.

    python -m bench.scaling [--workers 1,2] [--clients 16,64] [--seconds 15] [--rounds 2]
        [--device cpu|cuda] [--repository ROOT] [--json FILE]

For every worker count a server on 127.0.0.1 (bench.load.Server, no admission control), and
against it closed loops of unary Translate calls (one sentence each, bench.soak's fixed pool)
at every client count for `--seconds`, after a warm-up at the most clients. The servers take
turns: each round starts every worker count's server again, in an order that rotates from
round to round, so that a host whose speed drifts weighs on both alike; each (workers,
clients) figure pools its rounds. Reported per level: requests/s, p50/p99 latency, and the CPU
seconds per call of the front, the workers and the client (this process). Ratios, each against
its goal:
- the most workers over one, at every client count (goal on a 2-core host: at least 1.6);
- the most clients over the fewest, at every worker count (goal: at least 1, no loss).
The clients share the host with the server: on a small host their CPU is part of the result,
and is reported beside it. Ends by itself.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

import grpc
import numpy as np

from attnserve.v1 import translation_pb2_grpc
from bench.load import Server, run_server_bench
from bench.overload import closed_loop

WORKERS_GOAL = 1.6  # the most workers over one, on a 2-core host
CLIENTS_GOAL = 1.0  # the most clients over the fewest


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _serve(args, workers: int, levels: dict) -> int | None:
    """One server with `workers`: a warm-up, then every client count once; adds each level's
    measurements to `levels[(workers, clients)]`."""
    directory = Path(tempfile.mkdtemp(prefix="attnserve-scaling-"))
    flags = ["--workers", str(workers)] + (["--device", args.device] if args.device else [])
    server = Server(args.repository, directory, flags)
    try:
        state = await server.wait()
        if len(state.get("workers", [])) != workers:
            raise RuntimeError(f"asked for {workers} workers, the server runs {state}")
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = translation_pb2_grpc.TranslationServiceStub(channel)
            await closed_loop(stub, max(args.clients), min(5.0, args.seconds))  # warm-up
            for clients in args.clients:
                cpu_before, own_before = server.cpu_seconds(), _own_cpu()
                outcomes, elapsed = await closed_loop(stub, clients, args.seconds)
                latencies = [seconds for code, seconds in outcomes if code == "OK"]
                cpu_after, own_after = server.cpu_seconds(), _own_cpu()
                level = levels.setdefault((workers, clients), {
                    "latencies": [], "failed": 0, "seconds": 0.0,
                    "cpu_s": {"front": 0.0, "workers": 0.0, "client": 0.0},
                })  # fmt: skip
                level["latencies"] += latencies
                level["failed"] += len(outcomes) - len(latencies)
                level["seconds"] += elapsed
                for process in ("front", "workers"):
                    level["cpu_s"][process] += cpu_after[process] - cpu_before[process]
                level["cpu_s"]["client"] += own_after - own_before
    finally:
        exit_code = server.stop()
    return exit_code


def summary(levels: dict, workers: list[int], clients: list[int]) -> dict:
    """Each level's figures, and the two ratios against their goals."""
    table = {}
    for (w, c), level in sorted(levels.items()):
        calls = len(level["latencies"])
        table[f"{w} workers, {c} clients"] = {
            "workers": w,
            "clients": c,
            "calls": calls,
            "failed": level["failed"],
            "requests_per_s": round(calls / level["seconds"], 2),
            "p50_s": round(float(np.percentile(level["latencies"], 50)), 4) if calls else None,
            "p99_s": round(float(np.percentile(level["latencies"], 99)), 4) if calls else None,
            "cpu_ms_per_call": {
                process: round(1000 * seconds / calls, 3) if calls else None
                for process, seconds in level["cpu_s"].items()
            },
        }

    def rate(w: int, c: int) -> float:
        return table[f"{w} workers, {c} clients"]["requests_per_s"]

    most, fewest, one = max(workers), min(clients), min(workers)
    ratios, goals = {}, {}
    if most != one:
        for c in clients:
            name = f"{most} workers / {one}, {c} clients"
            ratios[name] = round(rate(most, c) / rate(one, c), 3)
            goals[f"{name} >= {WORKERS_GOAL}"] = ratios[name] >= WORKERS_GOAL
    if max(clients) != fewest:
        for w in workers:
            name = f"{max(clients)} clients / {fewest}, {w} workers"
            ratios[name] = round(rate(w, max(clients)) / rate(w, fewest), 3)
            goals[f"{name} >= {CLIENTS_GOAL}"] = ratios[name] >= CLIENTS_GOAL
    return {"levels": table, "ratios": ratios, "goals": goals}


async def run(args) -> dict:
    levels: dict = {}
    exit_codes = []
    for round_ in range(args.rounds):
        shift = round_ % len(args.workers)
        for workers in args.workers[shift:] + args.workers[:shift]:
            exit_codes.append(await _serve(args, workers, levels))
    settings = {
        "workers": args.workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "device": args.device or "the server's default",
        "requests": "unary Translate, one sentence each (bench.soak)",
    }
    return {
        "settings": settings,
        **summary(levels, args.workers, args.clients),
        "server_exit_codes": exit_codes,
    }


def _counts(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling")
    parser.add_argument("--workers", type=_counts, default=[1, 2])
    parser.add_argument("--clients", type=_counts, default=[16, 64])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: the server's choice")
    return run_server_bench(parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
