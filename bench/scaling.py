"""Scaling: one server's throughput with more workers, more front processes, more clients.

    python -m bench.scaling [--workers 1,2] [--fronts 1] [--clients 16,64] [--channels 8]
        [--seconds 15] [--rounds 2] [--device cpu|cuda] [--variant fp32|int8]
        [--baseline CHECKOUT [--baseline-repository ROOT]] [--repository ROOT] [--json FILE]

For every worker count and front count a server on 127.0.0.1 (bench.lib.server.Server, no
admission control), and against it closed loops of unary Translate calls (one sentence each,
bench.lib.sentence_loads' fixed pool) at every client count for `--seconds`, after a warm-up at
the most clients. The clients share `--channels` connections (client i the i-th modulo): the
kernel spreads connections, not calls, over several fronts. The servers take turns: each round
starts every server again, in an order that rotates from round to round, so that a host whose
speed drifts weighs on all alike; each (server, clients) figure pools its rounds. Reported per
level: requests/s, p50/p99 latency, and the CPU seconds per call of the fronts, the workers
and the client (this process). Ratios, each against its goal where the issue sets one:
- the most workers over one (one front), at every client count (goal on a 2-core host: at
  least 1.6);
- the most clients over the fewest, at every server (goal: at least 1, no loss);
- the most fronts over one (the most workers), at every client count (no goal: reported);
- with --baseline (another checkout of the project, say `git worktree add` of an earlier
  commit, and the repository its code exported): its servers take turns with this one's in
  every round, and this checkout over the baseline at every server and client count: a
  change's gain where users see it, side by side.
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

from bench.lib.arguments import run_server_bench
from bench.lib.sentence_loads import closed_loop
from bench.lib.server import Server
from service.wire.v1 import translation_pb2_grpc

WORKERS_GOAL = 1.6  # the most workers over one, on a 2-core host
CLIENTS_GOAL = 1.0  # the most clients over the fewest


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _name(workers: int, fronts: int) -> str:
    return f"{workers} workers" + (f", {fronts} fronts" if fronts > 1 else "")


BASELINE = "baseline"  # the level keys' tree of the baseline checkout (this one's: "")


async def _serve(args, workers: int, fronts: int, levels: dict, tree: str = "") -> int | None:
    """One server with `workers` and `fronts` (the baseline checkout's when `tree` is
    BASELINE): a warm-up, then every client count once; adds each level's measurements to
    `levels[(workers, fronts, clients, tree)]`."""
    directory = Path(tempfile.mkdtemp(prefix="attnserve-scaling-"))
    flags = ["--workers", str(workers), "--fronts", str(fronts)]
    flags += ["--device", args.device] if args.device else []
    flags += ["--variant", args.variant] if args.variant else []
    if tree == BASELINE:
        repository = args.baseline_repository or args.baseline / "data" / "repository"
        server = Server(repository, directory, flags, root=args.baseline)
    else:
        server = Server(args.repository, directory, flags)
    channels = []
    try:
        state = await server.wait()
        if len(state.get("workers", [])) != workers or len(state.get("fronts", [])) != fronts - 1:
            raise RuntimeError(f"asked for {workers} workers and {fronts} fronts: {state}")
        options = [("grpc.use_local_subchannel_pool", 1)]  # a connection per channel
        channels = [
            grpc.aio.insecure_channel(server.address, options=options) for _ in range(args.channels)
        ]
        stub = [translation_pb2_grpc.TranslationServiceStub(channel) for channel in channels]
        await closed_loop(stub, max(args.clients), min(5.0, args.seconds))  # warm-up
        for clients in args.clients:
            cpu_before, own_before = server.cpu_seconds(), _own_cpu()
            outcomes, elapsed = await closed_loop(stub, clients, args.seconds)
            latencies = [seconds for code, seconds in outcomes if code == "OK"]
            cpu_after, own_after = server.cpu_seconds(), _own_cpu()
            level = levels.setdefault(
                (workers, fronts, clients, tree),
                {
                    "latencies": [],
                    "failed": 0,
                    "seconds": 0.0,
                    "cpu_s": {"front": 0.0, "workers": 0.0, "client": 0.0},
                },
            )
            level["latencies"] += latencies
            level["failed"] += len(outcomes) - len(latencies)
            level["seconds"] += elapsed
            for process in ("front", "workers"):
                level["cpu_s"][process] += cpu_after[process] - cpu_before[process]
            level["cpu_s"]["client"] += own_after - own_before
    finally:
        for channel in channels:
            await channel.close()
        exit_code = server.stop()
    return exit_code


def summary(levels: dict, workers: list[int], clients: list[int], fronts=(1,)) -> dict:
    """Each level's figures, and the ratios (against their goals where there is one)."""
    table = {}
    for (w, f, c, tree), level in sorted(levels.items()):
        calls = len(level["latencies"])
        table[f"{tree + ': ' if tree else ''}{_name(w, f)}, {c} clients"] = {
            "workers": w,
            "fronts": f,
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

    def rate(w: int, f: int, c: int) -> float:
        return table[f"{_name(w, f)}, {c} clients"]["requests_per_s"]

    def over(fast: float, slow: float) -> float | None:
        """fast / slow; None where the second answered no call."""
        return round(fast / slow, 3) if slow else None

    def met(ratio: float | None, goal: float) -> bool:
        return ratio is not None and ratio >= goal

    most, fewest, one, front = max(workers), min(clients), min(workers), min(fronts)
    ratios, goals = {}, {}
    if most != one:
        for c in clients:
            name = f"{most} workers / {one}, {c} clients"
            ratios[name] = over(rate(most, front, c), rate(one, front, c))
            goals[f"{name} >= {WORKERS_GOAL}"] = met(ratios[name], WORKERS_GOAL)
    if max(clients) != fewest:
        for w in workers:
            for f in fronts:
                name = f"{max(clients)} clients / {fewest}, {_name(w, f)}"
                ratios[name] = over(rate(w, f, max(clients)), rate(w, f, fewest))
                goals[f"{name} >= {CLIENTS_GOAL}"] = met(ratios[name], CLIENTS_GOAL)
    if max(fronts) != front:
        for c in clients:
            name = f"{max(fronts)} fronts / {front}, {most} workers, {c} clients"
            ratios[name] = over(rate(most, max(fronts), c), rate(most, front, c))
    for w in workers if any(key[3] == BASELINE for key in levels) else ():
        for f in fronts:
            for c in clients:
                name = f"{_name(w, f)}, {c} clients"
                baseline = table[f"{BASELINE}: {name}"]["requests_per_s"]
                ratios[f"this checkout / {BASELINE}, {name}"] = over(rate(w, f, c), baseline)
    return {"levels": table, "ratios": ratios, "goals": goals}


async def run(args) -> dict:
    levels: dict = {}
    exit_codes = []
    trees = ["", BASELINE] if args.baseline else [""]
    servers = [(w, f, t) for w in args.workers for f in args.fronts for t in trees]
    for round_ in range(args.rounds):
        shift = round_ % len(servers)
        for workers, fronts, tree in servers[shift:] + servers[:shift]:
            exit_codes.append(await _serve(args, workers, fronts, levels, tree))
    settings = {
        "workers": args.workers,
        "fronts": args.fronts,
        "clients": args.clients,
        "channels": args.channels,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "device": args.device or "the server's default",
        "variant": args.variant or "the server's default",
        "baseline": str(args.baseline) if args.baseline else None,
        "requests": "unary Translate, one sentence each (bench.soak)",
    }
    return {
        "settings": settings,
        **summary(levels, args.workers, args.clients, args.fronts),
        "server_exit_codes": exit_codes,
    }


def _counts(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling")
    parser.add_argument("--workers", type=_counts, default=[1, 2])
    parser.add_argument("--fronts", type=_counts, default=[1])
    parser.add_argument("--clients", type=_counts, default=[16, 64])
    parser.add_argument("--channels", type=int, default=8, help="connections the clients share")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: the server's choice")
    parser.add_argument("--variant", choices=("fp32", "int8", "fp16"), help="default: the server's")
    parser.add_argument("--baseline", type=Path, help="another checkout, served beside this one")
    parser.add_argument("--baseline-repository", type=Path, help="default: its data/repository")
    return run_server_bench(parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
