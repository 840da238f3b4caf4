"""The closed loop's requests through the worker's own scheduler, without the server: as many
processes as the server has workers, each one scheduler with its share of the clients and of
the requests (the serving overhead is the server's throughput over theirs)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import time
from pathlib import Path

from bench import machine
from bench.lib.summaries import all_busy
from bench.lib.workload import Request
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.repository import verify
from service.runtime.tokenizer import Tokenizer
from service.worker.messages import Failure, Job, Result
from service.worker.scheduler import Scheduler


class _Scheduled:
    """The worker's scheduler over the worker's engine (fp32, one thread) in this process,
    `clients` jobs in flight, each request's next one submitted when it ends; tokenizing and
    detokenizing included, as the front does them."""

    def __init__(self, version_dir: str, requests: list, clients: int, max_rows: int):
        from service.runtime.onnx_engine import OnnxEngine

        version = verify(Path(version_dir))
        engine = OnnxEngine(version, "fp32", "cpu", 1)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        self.limit = version.manifest["limits"]["max_source_tokens"]
        self.scheduler = Scheduler(engine, max_rows)
        self.requests, self.clients = requests, clients
        self.submitted: list[float] = []

    def submit(self, index: int) -> None:
        text, max_length = self.requests[index]
        src_ids, src_mask = source_batch([self.tokenizer.encode(text)], self.limit)
        options = DecodingOptions(max_length=max_length)
        self.scheduler.submit(Job(index, {"src_ids": src_ids, "src_mask": src_mask}, options))
        self.submitted.append(time.perf_counter())

    def run(self, indices: list[int]) -> list[tuple[float, int, bool]]:
        """(end, output tokens, answered) of every request of `indices`."""
        scheduler = self.scheduler
        waiting, answers = list(reversed(indices)), []
        for _ in range(min(self.clients, len(waiting))):
            self.submit(waiting.pop())
        while scheduler.busy:
            scheduler.iterate()
            for event in scheduler.events:
                if isinstance(event, Result):
                    best = event.results[0][0]
                    self.tokenizer.decode(best.tokens)
                    answers.append((time.perf_counter(), len(best.tokens), True))
                elif isinstance(event, Failure):
                    answers.append((time.perf_counter(), 0, False))
                else:
                    continue
                if waiting:
                    self.submit(waiting.pop())
            scheduler.events.clear()
        return answers


def _counted(start: float, last_send: float, answers: list, clients: int) -> dict:
    """A process's answers inside the closed loop's throughput window (as `summaries`
    decides it): from the first request to the last one submitted when every client was busy
    all along, else to the last answer."""
    ok = [a for a in answers if a[2]]
    busy = all_busy(start, last_send, [a[0] for a in ok], clients)
    end = last_send if busy else max(a[0] for a in answers)
    counted = [a for a in ok if a[0] <= end]
    return {
        "requests": len(counted),
        "tokens": sum(a[1] for a in counted),
        "seconds": end - start,
        "steady": busy,
        "failed": sum(not a[2] for a in answers),
    }


def _scheduler_share(
    index: int, version_dir: str, requests: list, clients: int, max_rows: int, barrier, out
) -> None:
    """One process of the in-process run: a warm-up, then every request of its share timed
    once the other processes are ready too."""
    os.environ.update(dict.fromkeys(machine.THREAD_VARIABLES, "1"))
    scheduled = _Scheduled(version_dir, requests, clients, max_rows)
    scheduled.run(list(range(min(2, len(requests)))))  # warm-up, untimed
    barrier.wait()
    scheduled.submitted.clear()
    start = time.perf_counter()
    answers = scheduled.run(list(range(len(requests))))
    out.put({"process": index, **_counted(start, scheduled.submitted[-1], answers, clients)})


def _collect(out, processes: list, count: int) -> list[dict]:
    """The `count` processes' results, as they come; fails when one of them does."""
    parts: list[dict] = []
    deadline = time.monotonic() + 900
    while len(parts) < count:
        with contextlib.suppress(queue.Empty):
            parts.append(out.get(timeout=1.0))
            continue
        dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"the in-process run failed (exit codes {dead})")
    return parts


def in_process_closed_loop(
    version, pool: list[Request], clients: int, workers: int, max_rows: int
) -> dict:
    """The requests of a closed loop of `clients` through the server's own scheduler, without
    the server: `workers` processes (as many as the server's workers), each one scheduler with
    its share of the clients and of the requests. Throughput: the sum of the processes'."""
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(workers), context.Queue()
    share = max(1, clients // workers)
    shares = [[(r.text, r.max_length) for r in pool[w::workers]] for w in range(workers)]
    directory, processes = str(version.directory), []
    for w, part in enumerate(shares):
        arguments = (w, directory, part, share, max_rows, barrier, out)
        processes.append(context.Process(target=_scheduler_share, args=arguments))
    for process in processes:
        process.start()
    try:
        parts = _collect(out, processes, workers)
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    return {
        "clients": clients,
        "processes": workers,
        "parts": sorted(parts, key=lambda p: p["process"]),
        "throughput_rps": sum(p["requests"] / p["seconds"] for p in parts),
        "tokens_per_s": sum(p["tokens"] / p["seconds"] for p in parts),
        "failed": sum(p["failed"] for p in parts),
    }


def _pooled(parts: list[dict], key: str) -> float:
    """A process's `key` per second over all its rounds' windows."""
    return sum(p[key] for p in parts) / sum(p["seconds"] for p in parts)


def pooled(runs: list[dict], clients: int, workers: int) -> dict:
    """The in-process runs of every round pooled as a level is: each process's answers over
    its windows."""
    parts = [[r["parts"][w] for r in runs] for w in range(workers)]
    return {
        "clients": clients,
        "processes": workers,
        "rounds": runs,
        "throughput_rps": sum(_pooled(share, "requests") for share in parts),
        "tokens_per_s": sum(_pooled(share, "tokens") for share in parts),
        "failed": sum(r["failed"] for r in runs),
    }
