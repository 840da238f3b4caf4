"""The GPU benchmark's service level: `attnserve serve` on the device, warmed up at the most
clients, then closed loops of unary Translate calls over client processes at every client
count for a fixed time each (requests/s, tokens/s, latency, the CPU of the front, the workers
and the clients), and the latency of one sentence, one call at a time."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from bench.lib.client_processes import CHANNELS, client_ping, client_run
from bench.lib.gpu_plan import Plan
from bench.lib.metrics import server_numbers
from bench.lib.server import Server

SERVER_MAX_LENGTH = 128  # max_length of the service level's requests
SENTENCE_TOKENS = 30  # the single-sentence latency's output length


def _missing_for_server() -> str | None:
    """Why the server cannot start here, when something it imports is missing."""
    for module, package in (
        ("grpc", "grpcio"),
        ("grpc_health", "grpcio-health-checking"),
        ("grpc_reflection", "grpcio-reflection"),
        ("prometheus_client", "prometheus-client"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed"
    try:
        from service.wire.v1 import translation_pb2, translation_pb2_grpc  # noqa: F401
    except ImportError as error:
        return f"the generated gRPC code service/wire cannot be imported ({error})"
    return None


def _server_flags(args, plan: Plan) -> dict[str, str]:
    """The server's flags, {name: value}: the device's defaults, then the command line's."""
    if args.device == "cuda":  # the server's own choice of workers (one per GPU)
        flags = {"variant": "auto", "max-batch-rows": "1024"}
    else:
        flags = {"variant": "fp32", "workers": "0", "max-batch-rows": "64"}
    if args.server_variant:
        flags["variant"] = args.server_variant
    if args.server_rows:
        flags["max-batch-rows"] = str(args.server_rows)
    if args.server_fronts:
        flags["fronts"] = str(args.server_fronts)
    if args.server_workers:
        flags["workers"] = str(args.server_workers)
    if args.server_cache:
        flags["cache"] = args.server_cache
    if args.server_step:
        flags["step"] = args.server_step
    if args.server_encoder:
        flags["encoder"] = args.server_encoder
    if args.server_steps_ahead:
        flags["steps-ahead"] = str(args.server_steps_ahead)
    if args.server_ahead_wait_ms is not None:
        flags["ahead-wait-ms"] = str(args.server_ahead_wait_ms)
    flags["device"] = args.device
    flags["max-queued-requests"] = str(4 * max(plan.clients))
    return flags


def _answers(parts: list[dict], start_at: float, seconds: float, count: int) -> tuple:
    """(every answer, those counted, the window they are counted over) of a level."""
    answers = [a for part in parts for a in part["answers"]]
    if count:  # every answer, over the time to the last one
        return answers, answers, max([a[1] for a in answers], default=start_at) - start_at
    inside = [a for a in answers if a[1] <= start_at + seconds]  # within the level's time
    return answers, inside, seconds


def _errors(parts: list[dict]) -> dict[str, int]:
    errors: dict[str, int] = {}
    for part in parts:
        for code, n in part["errors"].items():
            errors[code] = errors.get(code, 0) + n
    return errors


def _latency(answers: list) -> dict | None:
    """p50, p99 and mean of the answers' latencies in milliseconds."""
    latencies = np.array([1000 * a[0] for a in answers])
    if not len(latencies):
        return None
    return {
        "p50": float(np.percentile(latencies, 50)),
        "p99": float(np.percentile(latencies, 99)),
        "mean": float(latencies.mean()),
    }


class LoadBench:
    """The service section: one server, closed loops over client processes."""

    def __init__(self, args, plan: Plan, repository: dict, texts: list[str], workdir: Path):
        self.args, self.plan, self.repository = args, plan, repository
        self.texts, self.workdir = texts, workdir
        cores = os.cpu_count() or 2
        self.max_processes = max(1, cores // 4)
        self.flags = _server_flags(args, plan)

    def processes(self, clients: int) -> int:
        return max(1, min(self.max_processes, clients // 64))

    def run(self) -> dict:
        missing = _missing_for_server()
        if missing:
            return {"status": f"not run: {missing}"}
        directory = self.workdir / "server"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        flags = [item for key, value in self.flags.items() for item in (f"--{key}", value)]
        print(f"starting the server: {' '.join(flags)}", file=sys.stderr)
        started = time.perf_counter()
        server = Server(Path(self.repository["served_root"]), directory, flags)
        pool = ProcessPoolExecutor(self.max_processes, get_context("spawn"))
        try:
            return self._serve(server, pool, started)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            code = server.stop()
            print(f"server stopped ({code})", file=sys.stderr)

    def _serve(self, server: Server, pool: ProcessPoolExecutor, started: float) -> dict:
        """The section once the server was started: its status, and its levels when it ran."""
        try:
            asyncio.run(server.wait())
        except RuntimeError as error:
            return {"status": f"not run: {error}"[:3000], "flags": self.flags}
        startup = time.perf_counter() - started
        for ping in [pool.submit(client_ping) for _ in range(self.max_processes)]:
            ping.result()
        try:
            result = self._measure(server, pool)
        except Exception as error:  # the engine level's results are kept all the same
            failure = f"failed: {type(error).__name__}: {error}"[:3000]
            return {"status": failure, "flags": self.flags, "startup_s": startup}
        fronts = 1 + len(server.state.get("fronts", []))  # the default: by the cores
        workers = len(server.state.get("workers", []))
        ran = {"status": "run", "flags": self.flags, "startup_s": startup}
        return result | ran | {"fronts": fronts, "workers": workers}

    @staticmethod
    def _metrics(server) -> dict | None:
        try:
            return server.metrics()
        except OSError:  # the metrics endpoint did not answer: the level goes on without
            return None

    def _clients(self, pool, address: str, clients: int, start_at: float, call: tuple) -> list:
        """Every client process's part of a closed loop of `clients` (futures), all of them
        starting at `start_at`; `call`: (texts, max_length, seconds, count) of client_run."""
        texts, max_length, seconds, count = call
        processes = self.processes(clients)
        shares = [clients // processes + (p < clients % processes) for p in range(processes)]
        futures = []
        for p, share in enumerate(shares):
            loop = (address, texts, max_length, share, seconds, start_at, p * 7919, count)
            futures.append(pool.submit(client_run, *loop))
        return futures

    def _loop(
        self,
        server,
        pool: ProcessPoolExecutor,
        clients: int,
        seconds: float,
        texts: list[str] | None = None,
        max_length: int = SERVER_MAX_LENGTH,
        count: int = 0,
    ) -> dict:
        """A closed loop of `clients` over client processes for `seconds` (with `count`: until
        that many calls are answered); the server's CPU and metrics around it."""
        texts = texts or self.texts
        start_at = time.time() + 0.5  # every client process starts then
        call = (texts, max_length, seconds, count)
        futures = self._clients(pool, server.address, clients, start_at, call)
        time.sleep(max(0.0, start_at - 0.05 - time.time()))  # the server's figures from then
        metrics_before, cpu_before = self._metrics(server), server.cpu_seconds()
        parts = [f.result() for f in futures]
        cpu_after, metrics_after = server.cpu_seconds(), self._metrics(server)
        answers, inside, window = _answers(parts, start_at, seconds, count)
        cpu = {k: cpu_after[k] - cpu_before[k] for k in ("front", "workers")}
        cpu["client"] = sum(part["cpu_s"] for part in parts)
        level = {
            "clients": clients,
            "client_processes": self.processes(clients),
            "seconds": window,
            "requests": len(answers),
            "errors": _errors(parts),
            "requests_per_s": len(inside) / window if window > 0 else 0.0,
            "tokens_per_s": sum(a[3] for a in inside) / window if window > 0 else 0.0,
            "output_tokens_mean": float(np.mean([a[3] for a in answers])) if answers else 0.0,
            "latency_ms": _latency(answers),
            "cpu_s": cpu,
            "cpu_cores": {k: v / window for k, v in cpu.items()} if window > 0 else None,
            "outputs": [(a[2], a[3]) for a in answers],  # (text index, tokens), popped
        }
        if metrics_before is not None and metrics_after is not None:
            numbers = server_numbers(metrics_before, metrics_after)
            keys = (
                "step_rows_mean",
                "step_ms_mean",
                "queue_wait_ms_mean",
                "encoder_ms_mean",
                "encoder_runs",
                "ttft_ms_mean",
                "ttft_ms_p50",
                "steps",
                "worker_restarts",
                "loop_seconds",
                "outbox_seconds",
                "device_alone_runs",
                "device_alone_seconds",
            )
            level["server"] = {k: numbers.get(k) for k in keys}
        return level

    def _measure(self, server, pool) -> dict:
        plan = self.plan
        print(f"warm-up: {max(plan.clients)} clients", file=sys.stderr)
        warm = self._loop(server, pool, max(plan.clients), plan.warmup_seconds)
        outputs = dict(warm.pop("outputs"))
        levels = []
        for clients in plan.clients:
            print(f"level: {clients} clients, {plan.level_seconds:g} s", file=sys.stderr)
            level = self._loop(server, pool, clients, plan.level_seconds)
            level.pop("outputs")
            levels.append(level)
        sentence = self._sentence(server, pool, outputs)
        return {
            "settings": {
                "clients": list(plan.clients),
                "level_seconds": plan.level_seconds,
                "warmup_seconds": plan.warmup_seconds,
                "max_length": SERVER_MAX_LENGTH,
                "requests": "unary Translate, one test sentence each, greedy, natural end",
                "client": f"closed loop; one asyncio loop and {CHANNELS} grpc.aio channels "
                "(a connection each) per client process; requests/s and tokens/s count "
                "answers within the level's time",
            },
            "warmup": {"requests": warm["requests"], "errors": warm["errors"]},
            "levels": levels,
            "sentence": sentence,
        }

    def _sentence(self, server, pool, outputs: dict[int, int]) -> dict:
        """One call at a time of a sentence whose translation reaches SENTENCE_TOKENS."""
        if not outputs:
            return {"status": "not run: no answers in the warm-up"}

        def distance(i: int) -> tuple[bool, int]:  # at least the length first, then nearest
            return outputs[i] < SENTENCE_TOKENS, abs(outputs[i] - SENTENCE_TOKENS)

        index = min(outputs, key=distance)
        text = self.texts[index]
        print(f"single sentence: {self.plan.latency_requests} calls", file=sys.stderr)
        self._loop(server, pool, 1, 60.0, [text], SENTENCE_TOKENS, count=3)  # warm-up
        level = self._loop(
            server, pool, 1, 120.0, [text], SENTENCE_TOKENS, count=self.plan.latency_requests
        )
        level.pop("outputs")
        return {
            "text": text,
            "natural_output_tokens": outputs[index],
            "max_length": SENTENCE_TOKENS,
            "output_tokens": level["output_tokens_mean"],
            "calls": level["requests"],
            "errors": level["errors"],
            "latency_ms": level["latency_ms"],
            "server": level.get("server"),
        }
