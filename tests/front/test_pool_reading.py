"""How the front's worker pool reads its workers' messages: every whole message a readable
link holds in one read, in order; a message not yet whole kept for the next; the messages
before a worker's end handled before its death; and its link let go of whole, so that the
worker sees its end."""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
from dataclasses import replace
from multiprocessing import Pipe

import numpy as np

from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.runtime.decoding import DecodingOptions
from service.worker.messages import Job, Ready, Report, Result, Stats, Submit, Timings
from service.worker.settings import WorkerSettings

KEY = "translator/1"


def _pool():
    """A pool of one worker reached over a real pipe, ready with KEY; (pool, worker, the
    worker's end)."""
    settings = [WorkerSettings(index=0, models=((KEY, "version 1"),), variants=((KEY, "fp32"),))]
    pool = WorkerPool(settings, Metrics(), 8)
    worker = pool.workers[0]
    front_end, worker_end = Pipe()
    worker.attach(front_end)
    worker.ready = asyncio.get_running_loop().create_future()
    pool._handle(worker, Ready({"models": {KEY: {}}}))
    return pool, worker, worker_end


async def _calls(pool, worker_end, count: int) -> list:
    calls = []
    for _ in range(count):
        job = Job(pool.next_id(), {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions())
        calls.append(await pool.submit(KEY, "Translate", job, 10.0))
        assert isinstance(worker_end.recv(), Submit)
    return calls


def _report(call) -> Report:
    return Report(KEY, [Result(call.job.id, [[]], Timings(0.0, 0.0, 0.0, 0.0))], None, 0, 0)


def test_every_report_waiting_is_taken_in_one_read_and_a_part_kept_for_the_next():
    async def run():
        pool, worker, worker_end = _pool()
        calls = await _calls(pool, worker_end, 3)
        worker_end.send(_report(calls[0]))
        worker_end.send(_report(calls[1]))
        body = pickle.dumps(_report(calls[2]))
        whole = struct.pack("!i", len(body)) + body
        raw = worker_end.fileno()
        os.write(raw, whole[:7])  # the third one's header and a few bytes of it, no more
        pool._on_readable(worker)
        assert [c.events.qsize() for c in calls] == [1, 1, 0]
        assert worker.conn is not None and worker.alive
        os.write(raw, whole[7:])
        pool._on_readable(worker)
        assert all(isinstance(c.events.get_nowait(), Result) for c in calls)
        assert worker.calls == {}
        worker_end.close()

    asyncio.run(run())


def test_the_messages_before_a_workers_end_are_handled_before_its_death():
    async def run():
        pool, worker, worker_end = _pool()
        pool.stopping = True  # its death replaces nothing
        calls = await _calls(pool, worker_end, 2)
        worker_end.send(_report(calls[0]))
        worker_end.close()  # then gone: the second call was never answered
        pool._on_readable(worker)  # the report
        assert isinstance(calls[0].events.get_nowait(), Result)
        assert worker.conn is not None and calls[1].events.empty()
        pool._on_readable(worker)  # the link still readable: its end
        assert worker.conn is None and worker.inbox is None
        assert calls[1].events.get_nowait().kind == "Unavailable"

    asyncio.run(run())


def test_a_worker_let_go_of_sees_its_end():
    async def run():
        pool, worker, worker_end = _pool()
        calls = await _calls(pool, worker_end, 1)
        worker_end.send(_report(calls[0]))
        pool._on_readable(worker)  # an inbox made over the link's descriptor
        assert worker.inbox is not None
        worker.let_go()
        assert worker_end.poll(1.0)
        try:
            worker_end.recv()
        except EOFError:
            pass
        else:
            raise AssertionError("the worker's end still open")

    asyncio.run(run())


def test_a_report_s_measurements_are_in_when_the_call_it_ends_wakes():
    """A report that ends a call and carries the worker's measurements: they are observed as
    the report is read, so the woken call (and any client that reads /metrics once it has its
    response) sees them; a report of measurements alone is observed at once too."""

    async def run():
        pool, worker, worker_end = _pool()
        (call,) = await _calls(pool, worker_end, 1)
        stats = Stats(step_seconds=[0.002] * 3, step_rows=[1] * 3, tokens=3)
        seen: list[float] = []

        async def waiter():
            await call.events.get()  # the handler awaiting its result
            seen.append(_tokens(pool))

        waiting = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)  # the waiter waits
        worker_end.send(replace(_report(call), stats=stats))
        pool._on_readable(worker)
        assert _tokens(pool) == 3 and not seen  # in before the woken call runs
        await waiting
        assert seen == [3]
        worker_end.send(Report(KEY, [], stats, 0, 0))
        pool._on_readable(worker)
        assert _tokens(pool) == 6
        worker_end.close()

    asyncio.run(run())


def _tokens(pool) -> float:
    value = pool.metrics.registry.get_sample_value(
        "attnserve_generated_tokens_total", {"model": KEY}
    )
    return value or 0.0
