"""Workers on a Ray cluster against the same number of local worker processes.

    python -m bench.cluster [--workers 2] [--clients 1,64] [--seconds 15] [--rounds 2]
        [--repository ROOT] [--json FILE]

Two servers on 127.0.0.1 take turns, each round starting both again in an order that rotates:
`--workers N` local worker processes (service.front.pool), and `--ray` over a Ray cluster of N
nodes of one CPU each started here (`ray.cluster_utils.Cluster`, the nodes processes of this
machine) with N replicas, one a node. Against each, closed loops of unary Translate calls (one
sentence each, bench.lib.sentence_loads' fixed pool) at every client count for `--seconds`,
after a warm-up at the most clients. Reported per server and level: sentences/s and p50/p99
latency. The goals, side by side in one run:
- sentences/s through Ray at the most clients at least 85% of the local pool's;
- p50 at one client at most 2 ms above the local pool's.
The cluster's own processes (its GCS, raylets, the Serve controller) share the host with the
servers and the clients, as the local pool does not: that is part of what is measured. Needs
the ray extra. Ends by itself.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import grpc
import numpy as np

from bench.lib.arguments import run_server_bench
from bench.lib.sentence_loads import closed_loop
from bench.lib.server import Server
from service.wire.v1 import translation_pb2_grpc

THROUGHPUT_GOAL = 0.85  # Ray's sentences/s over the local pool's, at the most clients
LATENCY_GOAL_MS = 2.0  # Ray's p50 above the local pool's, at one client
CHANNELS = 8  # connections the clients share


async def _serve(args, flags: list[str], name: str, levels: dict) -> int | None:
    directory = Path(tempfile.mkdtemp(prefix="attnserve-cluster-"))
    server = Server(args.repository, directory, [*flags, "--fronts", "1", "--watch-seconds", "0"])
    channels = []
    try:
        await server.wait()
        options = [("grpc.use_local_subchannel_pool", 1)]
        channels = [
            grpc.aio.insecure_channel(server.address, options=options) for _ in range(CHANNELS)
        ]
        stubs = [translation_pb2_grpc.TranslationServiceStub(c) for c in channels]
        await closed_loop(stubs, max(args.clients), min(5.0, args.seconds))  # warm-up
        for clients in args.clients:
            outcomes, elapsed = await closed_loop(stubs, clients, args.seconds)
            level = levels.setdefault((name, clients), {"latencies": [], "failed": 0, "s": 0.0})
            level["latencies"] += [seconds for code, seconds in outcomes if code == "OK"]
            level["failed"] += sum(code != "OK" for code, _ in outcomes)
            level["s"] += elapsed
    finally:
        for channel in channels:
            await channel.close()
        exit_code = server.stop()
    return exit_code


def summary(levels: dict, clients: list[int]) -> dict:
    table = {}
    for (name, count), level in sorted(levels.items()):
        latencies = np.array(level["latencies"]) * 1000
        table.setdefault(name, {})[str(count)] = {
            "sentences_per_s": round(len(latencies) / level["s"], 1),
            "p50_ms": round(float(np.percentile(latencies, 50)), 2) if len(latencies) else None,
            "p99_ms": round(float(np.percentile(latencies, 99)), 2) if len(latencies) else None,
            "failed": level["failed"],
        }
    most, fewest = str(max(clients)), str(min(clients))
    local, ray = table["local"], table["ray"]
    # a server that answered no call leaves its goal unmeasured (None), and so not met
    rates = ray[most]["sentences_per_s"], local[most]["sentences_per_s"]
    ratio = round(rates[0] / rates[1], 3) if rates[1] else None
    medians = ray[fewest]["p50_ms"], local[fewest]["p50_ms"]
    above = None if None in medians else round(medians[0] - medians[1], 2)
    return {
        "levels": table,
        "throughput_ratio": {
            "clients": int(most),
            "ray_over_local": ratio,
            "goal": THROUGHPUT_GOAL,
            "met": ratio is not None and ratio >= THROUGHPUT_GOAL,
        },
        "p50_above_ms": {
            "clients": int(fewest),
            "ray_minus_local": above,
            "goal": LATENCY_GOAL_MS,
            "met": above is not None and above <= LATENCY_GOAL_MS,
        },
        "failed": sum(level["failed"] for level in levels.values()),
    }


async def run(args) -> dict:
    from ray.cluster_utils import Cluster  # the ray extra

    node = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    for _ in range(args.workers - 1):
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    servers = {
        "local": ["--workers", str(args.workers)],
        "ray": ["--ray", cluster.address, "--min-replicas", str(args.workers)],
    }
    levels: dict = {}
    try:
        for turn in range(args.rounds):
            names = sorted(servers)
            for name in names[turn % 2 :] + names[: turn % 2]:
                await _serve(args, servers[name], name, levels)
    finally:
        cluster.shutdown()
    return {
        "bench": "cluster",
        "workers": args.workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "rounds": args.rounds,
        **summary(levels, args.clients),
    }


def _counts(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=_counts, default=[1, 64])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    return run_server_bench(parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
