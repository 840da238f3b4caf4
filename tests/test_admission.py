"""The pool's admission control: a call that would wait longer than max_queue_seconds, at the
rate calls were admitted lately, is refused with RESOURCE_EXHAUSTED at once."""

from __future__ import annotations

import asyncio

import pytest

from service.errors import ResourceExhausted
from service.metrics import Metrics
from service.pool import Call, WorkerPool
from service.scheduler import Job


def _admit(pool: WorkerPool, count: int) -> None:
    for i in range(count):
        pool.queued += 1
        pool._dequeue(Call(Job(i, {}, None), "translator/1", "translator", "Translate"))


def test_the_expected_wait_follows_the_admission_rate(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("service.pool.time.monotonic", lambda: clock[0])
    pool = WorkerPool([], Metrics(), max_queued=100, max_queue_seconds=1.0)
    assert pool.expected_wait() is None  # nothing waiting
    pool.queued = 5
    assert pool.expected_wait() is None  # no rate measured yet: only max_queued applies
    for _ in range(10):  # ten admissions, one every 0.1 s: 10 calls a second
        _admit(pool, 1)
        clock[0] += 0.1
    pool.queued = 5
    assert pool.expected_wait() == pytest.approx(0.5, rel=0.05)
    pool.queued = 20
    assert pool.expected_wait() == pytest.approx(2.0, rel=0.05)
    with pytest.raises(ResourceExhausted, match=r"about 2\.0 s"):
        asyncio.run(pool.submit("translator/1", "Translate", Job(99, {}, None), 5.0))
    clock[0] += 10  # the window passed: no rate, no estimate
    assert pool.expected_wait() is None


def test_no_limit_when_max_queue_seconds_is_zero():
    pool = WorkerPool([], Metrics(), max_queued=100, max_queue_seconds=0.0)
    _admit(pool, 5)
    pool.queued = 50
    assert pool.expected_wait() is None
