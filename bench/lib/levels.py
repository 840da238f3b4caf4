"""The load benchmark's measurements against running servers: each server launched and warmed
up, requests over gRPC and in process in turn, and levels (rounds of flows side by side) with
the server's metric and CPU differences over them."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import grpc
import numpy as np

from bench.lib.metrics import server_numbers
from bench.lib.processes import machine_busy
from bench.lib.server import Server
from bench.lib.stream_loads import call, closed_loop, open_loop, unary_call
from bench.lib.summaries import check, spread, summarize
from bench.lib.traffic import Flow, Running, Traffic

IN_TURN = ("grpc", "unary", "local")  # the ways of a request, in a rotating order


class Bench:
    """The measurements of one run."""

    def __init__(self, args, traffic: dict[str, Traffic]):
        self.args, self.traffic = args, traffic
        self.translation = traffic["translator"]
        self.paired: dict = {}  # by model
        self.timeout = args.level_seconds + args.drain_seconds + 30.0

    def launch(self, name: str, flags: list[str], directory: Path) -> Running:
        print(f"starting the {name} server", file=sys.stderr)
        (directory / name).mkdir()
        return Running(name, flags, Server(self.args.repository, directory / name, flags))

    async def ready(self, running: Running) -> None:
        """Waits for the server to serve, connects, and warms every model up."""
        await running.server.wait()
        running.channel = grpc.aio.insecure_channel(running.server.address)
        await asyncio.wait_for(running.channel.channel_ready(), 30)
        for model, traffic in self.traffic.items():
            running.stubs[model] = traffic.stub(running.channel)
            warm = traffic.stream[: self.args.warmup]
            run = await closed_loop(
                traffic.method(running), warm, 4, self.args.level_seconds, self.timeout
            )
            failed = [s.code for s in run["samples"] if s.code != "OK"]
            if failed:
                raise RuntimeError(f"{running.name} server: {model} warm-up calls failed: {failed}")

    async def close(self, running: Running) -> dict:
        """Closes the channel and stops the server; its description."""
        if running.channel is not None:
            await running.channel.close()
        exit_code = running.server.stop()
        workers = len(running.server.state.get("workers", []))
        return {"flags": running.flags, "workers": workers, "exit_code": exit_code}

    async def interleaved(self, running: Running, count: int, traffic: Traffic) -> None:
        """The first `count` requests one at a time, each over gRPC (streaming and unary) and
        in process in turn (rotating which goes first), so that all see the machine in the same
        state."""
        what = f"{count} {traffic.model} requests over gRPC and in process in turn"
        print(f"{running.name} server: {what}", file=sys.stderr)
        ways: dict[str, list] = {way: [] for way in IN_TURN}
        for index in range(count):
            for way in IN_TURN[index % 3 :] + IN_TURN[: index % 3]:
                ways[way].append(await self._one(running, traffic, index, way))
        self.paired[traffic.model] = _paired(traffic, count, *ways.values())

    async def _one(self, running: Running, traffic: Traffic, index: int, way: str):
        """One request one way: its gRPC sample, or its seconds in process."""
        if way == "grpc":
            message, method = traffic.stream[index], traffic.method(running)
            return await call(method, index, message, self.timeout)
        if way == "unary":
            message, method = traffic.unary[index], traffic.method(running, unary=True)
            return await unary_call(method, index, message, self.timeout)
        start = time.perf_counter()
        traffic.local.answer(traffic.pool[index])
        return time.perf_counter() - start

    async def _loop(self, running: Running, flow: Flow) -> dict:
        args, method = self.args, flow.traffic.method(running)
        messages = flow.traffic.stream[: flow.count]
        if flow.load == "closed":
            return await closed_loop(method, messages, flow.value, args.level_seconds, self.timeout)
        seed = args.seed + flow.count + flow.seed
        return await open_loop(
            method, messages, flow.value, seed, args.level_seconds, args.drain_seconds, self.timeout
        )

    async def measure(self, running: Running, *flows: Flow) -> dict:
        """One round of a level: its flows side by side (a closed loop of clients or an open
        loop of requests a second each); the server's metric and CPU differences over it."""
        print(f"{running.name} server: " + "; ".join(map(str, flows)), file=sys.stderr)
        args, server = self.args, running.server
        # Two requests first, untimed: the caches hold the other server's weights.
        for traffic in {flow.traffic.model: flow.traffic for flow in flows}.values():
            warm = traffic.stream[:2]
            await closed_loop(traffic.method(running), warm, 1, args.level_seconds, self.timeout)
        await asyncio.sleep(0.3)  # the workers' last statistics reach the front
        before, cpu, client = server.metrics(), server.cpu_seconds(), time.process_time()
        busy = machine_busy()
        runs = await asyncio.gather(*(self._loop(running, flow) for flow in flows))
        client, busy = time.process_time() - client, machine_busy() - busy
        await asyncio.sleep(0.3)
        after, cpu_after = server.metrics(), server.cpu_seconds()
        cpu_s = {"client": client}
        cpu_s |= {k: cpu_after[k] - cpu[k] for k in ("front", "workers")}
        cpu_s["other"] = max(0.0, busy - sum(cpu_s.values()))
        metrics = {k: v - before.get(k, 0.0) for k, v in after.items()}
        return {"runs": list(runs), "metrics": metrics, "cpu_s": cpu_s}

    def level(self, entry: dict, measured: list[dict], flow: int = 0) -> dict:
        """A level's entry from its rounds: the answers of their `flow`-th flow; the server's
        metrics of that flow's model; the CPU of the whole level."""
        runs = [m["runs"][flow] for m in measured]
        traffic = self.traffic[entry.get("model", "translator")]
        clients = entry.get("clients")
        slo = self.args.slo_ms / 1000
        entry = entry | summarize(runs, traffic.pool, traffic.references, slo, clients)
        cpu_s = {k: sum(m["cpu_s"][k] for m in measured) for k in measured[0]["cpu_s"]}
        entry["cpu_s"] = cpu_s
        entry["cpu_cores"] = {k: v / entry["duration_s"] for k, v in cpu_s.items()}
        metrics: dict = {}
        for m in measured:
            for key, value in m["metrics"].items():
                metrics[key] = metrics.get(key, 0.0) + value
        entry["server_metrics"] = server_numbers({}, metrics, traffic.label)
        if "arrival_lateness" in runs[0]:
            entry["arrival_lateness"] = runs[0]["arrival_lateness"]
        return entry


def _paired(traffic: Traffic, count: int, remote: list, unary: list, local: list) -> dict:
    """The requests sent over gRPC and answered in process in turn: their latencies, and
    whether both gRPC answers of each are right."""
    references, pool = traffic.references, traffic.pool
    checks = [  # a request is correct when both its gRPC answers are
        all(check(s, references[s.index], pool[s.index].max_length)["correct"] for s in pair)
        for pair in zip(remote, unary, strict=True)
    ]
    e2e = [s.end - s.start for s in remote]
    e2e_unary = [s.end - s.start for s in unary]
    return {
        "requests": count,
        "order": "rotating: each request over gRPC streaming, gRPC unary and in process, "
        "the first way changing from request to request",
        "correct": sum(checks),
        "errors": sum(s.code != "OK" for s in remote + unary),
        "grpc_e2e_ms": spread(e2e),
        "grpc_unary_e2e_ms": spread(e2e_unary),
        "in_process_ms": spread(local),
        "ratio_of_medians": float(np.median(e2e) / np.median(local)),
        "ratio_of_medians_unary": float(np.median(e2e_unary) / np.median(local)),
        "median_of_ratios": float(np.median(np.divide(e2e, local))),
    }
