"""A call's job is cancelled however its handler ends early: cancelled while it waits for the
next event, or closed while it is suspended at a yield (a stream whose client left while a
message was being written: gRPC closes the generator, which sees GeneratorExit, not
CancelledError). Before, only the first freed the job's rows; the second left it decoding
to its end."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np

from service.front.config import ServerConfig
from service.front.metrics import Metrics
from service.front.pool import Call, CallState, WorkerPool
from service.front.servicer import Method
from service.front.state import Front
from service.front.translate import TranslationServicer
from service.runtime.decoding import DecodingOptions
from service.worker.messages import Job, Partial, Result, Timings


def _servicer() -> tuple[TranslationServicer, list[Call]]:
    pool = WorkerPool([], Metrics(), max_queued=10)
    cancelled: list[Call] = []
    pool.cancel = cancelled.append
    front = Front(ServerConfig(), {}, pool, pool.metrics)
    front.serving = True
    return TranslationServicer(front), cancelled


def _call() -> Call:
    job = Job(1, {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions(), stream=True)
    return Call(job, "translator/1", "translator", "TranslateStream")


def _result() -> Result:
    return Result(1, [[]], Timings(0.0, 0.0, 0.0, 0.0))


def test_events_closed_at_a_yield_cancel_the_job():
    async def run():
        servicer, cancelled = _servicer()
        call = _call()
        call.events.put_nowait(Partial(1, 0, [5], 1))
        events = servicer._events(call)
        assert await anext(events) == [Partial(1, 0, [5], 1)]
        await events.aclose()  # GeneratorExit at the yield
        return call, cancelled

    call, cancelled = asyncio.run(run())
    assert cancelled == [call]


def test_events_cancelled_while_waiting_cancel_the_job():
    async def run():
        servicer, cancelled = _servicer()
        call = _call()
        events = servicer._events(call)
        task = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.01)  # waiting for an event that does not come
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return call, cancelled

    call, cancelled = asyncio.run(run())
    assert cancelled == [call]


def test_events_that_reached_the_result_cancel_nothing():
    async def run():
        servicer, cancelled = _servicer()
        call = _call()
        call.events.put_nowait(_result())
        events = servicer._events(call)
        assert isinstance(await anext(events), Result)
        await events.aclose()  # the caller stopped at the result, as unary calls do
        return cancelled

    assert asyncio.run(run()) == []


def test_a_stream_closed_while_a_message_is_written_cancels_its_job():
    async def run():
        servicer, cancelled = _servicer()
        front, call = servicer.front, _call()
        prepared = SimpleNamespace(inputs=1, keys=None)  # one input, nothing to cache

        async def prepare(model_, request_):
            return prepared

        async def submit(key, method, job, timeout, received):
            return call

        model = SimpleNamespace(
            key="translator/1",
            worker_key="translator/1",
            partial=lambda prepared_, tokens, steps: (tokens, steps),
        )
        # the runtime's partial as it is, not made a message
        servicer.methods = {"TranslateStream": Method(prepare, None, lambda partial: partial)}
        front.resolve = lambda service, name, version: model
        front.jobs = lambda prepared_, context, stream: [call.job]
        front.pool.submit = submit
        context = SimpleNamespace(time_remaining=lambda: None)
        request = SimpleNamespace(model="", version="")
        call.events.put_nowait(Partial(1, 0, [5], 1))
        stream = servicer.stream("TranslateStream", request, context)
        assert await anext(stream) == ([5], 1)  # suspended at its yield, as while written
        await stream.aclose()  # what gRPC does when the client leaves then
        return call, cancelled, front

    call, cancelled, front = asyncio.run(run())
    assert cancelled == [call]
    assert front.in_flight == 0
    assert _count(front.metrics, "CANCELLED") == 1 and _count(front.metrics, "OK") == 0


def _count(metrics: Metrics, code: str) -> float:
    for family in metrics.request_duration.collect():
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels.get("code") == code:
                return sample.value
    return 0.0


def test_a_call_cancelled_twice_sends_one_message():
    sent = []
    pool = WorkerPool([], Metrics(), max_queued=10)
    worker = SimpleNamespace(calls={}, conn=SimpleNamespace(send=sent.append))
    call = _call()
    call.worker = worker
    worker.calls[call.job.id] = call
    pool.cancel(call)
    pool.cancel(call)  # the unary handler and the events generator both ask
    assert CallState.CANCELLED in call.state
    assert len(sent) == 1 and sent[0].job_id == call.job.id


def test_partials_that_wait_together_reach_the_client_as_one():
    """Steps decoded while the last partial was on its way come as one event, the newest
    (as the contract says of `partial`), then the result; nothing is cancelled."""
    servicer, cancelled = _servicer()
    call, result = _call(), _result()
    for step in (1, 2, 3):
        call.events.put_nowait(Partial(1, step - 1, [step], step))
    call.events.put_nowait(result)

    async def events() -> list:
        return [event async for event in servicer._events(call)]

    merged, last = asyncio.run(events())
    assert [partial.steps for partial in merged] == [1, 2, 3] and last is result
    assert cancelled == []
