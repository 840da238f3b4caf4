"""Admission by a latency budget (service.front.admission): the limit on batch rows in flight falls
when the calls' p99 latency passes the budget, rises again under pressure (in proportion to
the room under the budget), and comes down to what traffic has proven within the budget
when nothing presses on it; the pool refuses a call beyond it with RESOURCE_EXHAUSTED at
once."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from stand_in import CONTEXT, REQUEST, StandInWorker, servicer

from service.front.admission import HEADROOM, MIN_SAMPLES, WINDOW_SECONDS, AdmissionLimit
from service.front.config import ServerConfig
from service.front.metrics import Metrics
from service.front.pool import QUEUED_BATCHES, Call, WorkerPool
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import ResourceExhausted, Unavailable
from service.runtime.kinds import Prepared
from service.worker.messages import Failure, Job
from service.worker.settings import WorkerSettings


def _window(limit: AdmissionLimit, seconds: float, now: float) -> float:
    """One window of calls that each took `seconds`; returns the time after it."""
    for i in range(MIN_SAMPLES):
        limit.observe(seconds, now + i * WINDOW_SECONDS / (MIN_SAMPLES - 1))
    return now + WINDOW_SECONDS + 0.01


def test_the_limit_falls_in_proportion_and_at_most_by_half():
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=128, floor=2)
    now = _window(limit, 0.25, 0.0)  # p90 1.25x the budget: 128 -> 102
    assert limit.limit == int(128 * 0.2 / 0.25)
    now = _window(limit, 2.0, now)  # 10x the budget: halved, not divided by 10
    assert limit.limit == int(128 * 0.2 / 0.25) // 2
    for _ in range(20):
        now = _window(limit, 5.0, now)
    assert limit.limit == 2  # never under the floor


def test_the_limit_rises_only_under_pressure_and_up_to_the_ceiling():
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=40, floor=1)
    now = _window(limit, 1.0, 0.0)
    now = _window(limit, 1.0, now)
    assert limit.limit == 10
    now = _window(limit, 0.05, now)  # fast, but nobody pressed on the limit: unchanged
    assert limit.limit == 10
    for _ in range(30):
        assert limit.admits(in_flight=limit.limit - 1, rows=1)  # at the limit: pressed
        now = _window(limit, 0.05, now)
    assert limit.limit == 40


def test_an_untried_limit_comes_down_to_what_traffic_held_within_the_budget():
    # a full batch per worker to start with (128 rows), traffic of 16 rows within the budget
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=256, floor=2, start=128)
    now = 0.0
    for _ in range(3):
        assert limit.admits(in_flight=15, rows=1)
        now = _window(limit, 0.1, now)
    validated = math.ceil(HEADROOM * 16)
    assert limit.limit == validated  # 24, not 128: the first burst of an overload takes 24
    # lighter traffic afterwards does not lower it: what was proven stays proven
    assert limit.admits(in_flight=0, rows=1)
    now = _window(limit, 0.05, now)
    assert limit.limit == validated
    assert not limit.admits(in_flight=validated, rows=1)  # refused: pressure
    # pressed within the budget, it rises again past what was proven
    now = _window(limit, 0.19, now)  # near the budget: by a tenth
    assert limit.limit == validated + max(1, int(validated * 0.1))


def test_the_limit_rises_in_proportion_to_the_room_under_the_budget():
    # quiet traffic (one call at a time) brought the limit down to 2
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=256, floor=1, start=128)
    assert limit.admits(in_flight=0, rows=1)
    now = _window(limit, 0.02, 0.0)
    assert limit.limit == 2
    # a burst: calls refused (pressure) while the answered ones take a tenth of the budget;
    # the limit doubles a window instead of creeping up a row at a time
    for expected in (4, 8, 16, 32):
        assert not limit.admits(in_flight=limit.limit, rows=1)
        now = _window(limit, 0.02, now)
        assert limit.limit == expected
    # at 0.8 of the budget: 1.25x
    assert not limit.admits(in_flight=limit.limit, rows=1)
    now = _window(limit, 0.16, now)
    assert limit.limit == 40


def test_a_cut_forgets_what_was_proven_before_it():
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=256, floor=2, start=100)
    assert limit.admits(in_flight=59, rows=1)
    now = _window(limit, 0.1, 0.0)
    assert limit.limit == 90  # 1.5 x 60
    now = _window(limit, 0.4, now)  # twice the budget: halved
    assert limit.limit == 45
    now = _window(limit, 0.1, now)  # within the budget, nothing admitted: nothing proven
    assert limit.limit == 45  # not back to 90 from the proof before the cut


def test_the_window_is_held_to_its_p99_not_its_median():
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=100, floor=2)
    for i in range(98):
        limit.observe(0.05, i * WINDOW_SECONDS / 200)
    limit.observe(0.4, WINDOW_SECONDS / 2)
    limit.observe(0.4, WINDOW_SECONDS + 0.01)  # 2 calls in 100 at twice the budget
    assert limit.limit == 50


def test_a_call_beyond_the_limit_is_refused_but_an_idle_pool_admits_anything():
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=16)
    assert limit.admits(in_flight=12, rows=4)
    assert not limit.admits(in_flight=13, rows=4)
    assert limit.admits(in_flight=0, rows=64)  # alone, however large


def test_a_few_slow_calls_close_a_long_window():
    limit = AdmissionLimit(budget_seconds=0.2, ceiling=16)
    limit.observe(1.0, 0.0)
    limit.observe(1.0, 4.0)
    assert limit.limit == 16  # 2 samples, window not closed
    limit.observe(1.0, 5.5)
    assert limit.limit == 8


def test_the_pool_refuses_beyond_the_limit_and_counts_rows_in_flight():
    settings = [WorkerSettings(index=i, models=(), device="cpu", max_rows=8) for i in range(2)]
    pool = WorkerPool(settings, Metrics(), max_queued=100, latency_budget_seconds=0.5)
    assert pool.admission.limit == 16  # one batch per worker to start with
    assert pool.admission.ceiling == QUEUED_BATCHES * 16
    pool.workers[0].held, pool.workers[1].held = 10, 6
    assert pool.rows_in_flight() == 16
    job = Job(1, {"src_ids": np.zeros((2, 5), np.int64)}, DecodingOptions())  # 2 rows
    with pytest.raises(ResourceExhausted, match="16 batch rows are in flight, at most 16"):
        pool.check_admission(job.rows)
    with pytest.raises(ResourceExhausted):
        pool.check_admission()  # what the front asks before it tokenises: 17 rows
    pool.workers[0].held = 8
    assert pool.admission.admits(pool.rows_in_flight(), job.rows)  # 14 + 2 fit


def test_no_limit_without_a_budget():
    pool = WorkerPool([], Metrics(), max_queued=100, latency_budget_seconds=0.0)
    assert pool.admission is None


def test_answers_and_deadlines_teach_the_limit_cancellations_do_not():
    settings = [WorkerSettings(index=0, models=(), device="cpu", max_rows=8)]
    pool = WorkerPool(settings, Metrics(), max_queued=100, latency_budget_seconds=0.5)
    worker = pool.workers[0]
    for job_id, event in (
        (1, Failure(1, "DeadlineExceeded", "deadline passed")),
        (2, Failure(2, "Cancelled", "cancelled by the client")),
    ):
        call = Call(
            Job(job_id, {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions()),
            "translator/1",
            "translator",
            "Translate",
            worker,
        )
        call.started -= 3.0
        worker.add(call)
        pool._event(worker, "translator", event)
        assert not worker.calls  # settled
    assert len(pool.admission._latencies) == 1 and pool.admission._latencies[0] >= 3.0


def test_a_worker_dead_again_before_the_waiter_runs_leaves_it_waiting_not_failing():
    """A worker's start wakes the calls waiting for one; when it dies again before they run,
    they wait on (and get UNAVAILABLE at their deadline), never an unexpected error."""
    settings = [WorkerSettings(index=0, models=(), device="cpu", max_rows=8)]

    async def scenario():
        pool = WorkerPool(settings, Metrics(), max_queued=100)
        worker = pool.workers[0]
        waiter = asyncio.create_task(pool._ready_worker("translator/1", 0.3))
        await asyncio.sleep(0.01)
        pool._notify()  # a start announced, and the worker gone before the wait ran
        assert not worker.alive
        with pytest.raises(Unavailable, match="no worker is ready"):
            await waiter
        waiter = asyncio.create_task(pool._ready_worker("translator/1", 1.0))
        await asyncio.sleep(0.01)
        worker.ready = asyncio.get_running_loop().create_future()
        worker.info = {"models": {"translator/1": {}}}
        worker.ready.set_result(worker.info)  # a worker that is alive when the wait runs is taken
        pool._notify()
        assert await waiter is worker

    asyncio.run(scenario())


def test_a_call_s_state_says_when_a_worker_s_death_may_send_it_again():
    from service.front.pool import CallState

    state = CallState.QUEUED
    assert state.retriable and CallState.ADMITTED not in state
    state |= CallState.ADMITTED
    assert state.retriable  # admitted, nothing sent to the client yet
    assert not (state | CallState.STREAMED).retriable  # the client saw part of it
    assert not (state | CallState.RETRIED).retriable  # once only
    assert not (state | CallState.CANCELLED).retriable  # the client left
    assert CallState.ADMITTED in state


@pytest.mark.parametrize("bound", ["latency budget", "queue"])
def test_a_call_cut_into_jobs_is_admitted_whole_by_an_idle_pool(bound):
    """A call of 4 batches is cut into 4 jobs; an idle pool admits the call whole, under a
    latency budget whose limit is one batch as under a queue bound of 2 requests. Before,
    each job was checked against the rows and jobs of the call's own earlier ones, and the
    second job of the call was refused RESOURCE_EXHAUSTED on an idle server."""
    settings = [WorkerSettings(index=0, models=(), device="cpu", max_rows=8)]
    budget, queued = (0.5, 100) if bound == "latency budget" else (0.0, 2)

    async def scenario():
        pool = WorkerPool(settings, Metrics(), queued, latency_budget_seconds=budget)
        worker = StandInWorker(pool)
        inputs = {"src_ids": np.zeros((32, 3), np.int64)}
        prepared = Prepared(inputs, DecodingOptions(), ["texts"] * 32)
        translator = servicer(pool, prepared, ServerConfig(max_batch_rows=8))
        answered = await translator.unary("Translate", REQUEST, CONTEXT)
        return answered, worker.jobs, pool

    answered, jobs, pool = asyncio.run(scenario())
    assert len(answered) == 32 and [job.inputs for job in jobs] == [8, 8, 8, 8]
    assert pool.queued == 0 and pool.rows_in_flight() == 0


def test_a_cancelled_call_whose_worker_dies_leaves_at_once_and_is_not_sent_again():
    """The client left and its Cancel went to the worker, which died before it answered:
    the call ends there. Before, it was taken for a retry, and while the only worker
    restarted it waited on as a request queued, its rows in flight."""
    settings = [WorkerSettings(index=0, models=(), device="cpu", max_rows=8)]

    async def scenario():
        pool = WorkerPool(settings, Metrics(), max_queued=100)
        worker = StandInWorker(pool)
        job = Job(pool.next_id(), {"src_ids": np.zeros((2, 3), np.int64)}, DecodingOptions())
        worker.answer = False  # the worker dies before it answers
        call = await pool.submit("translator/1", "Translate", job, 5.0)
        pool.cancel(call)
        pool._lost(pool.workers[0])  # its connection ended
        await asyncio.sleep(0.05)  # (a retry would still wait for a worker)
        assert not pool._retries and pool.queued == 0 and pool.rows_in_flight() == 0
        assert isinstance(call.events.get_nowait(), Failure)
        return worker.sent, pool.metrics

    sent, metrics = asyncio.run(scenario())
    assert [type(m).__name__ for m in sent] == ["Submit", "Cancel"]
    retried = {"model": "translator/1", "method": "Translate"}
    assert not metrics.registry.get_sample_value("attnserve_retried_calls_total", retried)
