"""The drain's bound ends every call with UNAVAILABLE, those waiting for a worker too: a call
sent again after its worker died, or a call not yet sent, while every worker restarts. Before,
only the calls a worker held were failed; the others waited on until gRPC's shutdown cut them
("Cancelling all calls") and uvicorn's answered HTTP 500 with a traceback in the log."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from stand_in import Link

from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import Unavailable
from service.worker.messages import Failure, Job, Ready
from service.worker.settings import WorkerSettings

DRAIN_ENDED = "the server stopped: its drain (1 s) ended before this call did"


def _job(pool: WorkerPool) -> Job:
    return Job(pool.next_id(), {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions())


def test_the_drain_s_bound_fails_the_calls_that_wait_for_a_restarted_worker():
    async def run():
        served = (("translator/1", "version 1"),)
        settings = WorkerSettings(index=0, models=served, variants=(("translator/1", "fp32"),))
        pool = WorkerPool([settings], Metrics(), 8)
        (worker,) = pool.workers
        worker.conn, worker.ready = Link(), asyncio.get_running_loop().create_future()
        pool._handle(worker, Ready({"models": {"translator/1": {}}}))
        retried = await pool.submit("translator/1", "Translate", _job(pool), 60.0)
        pool._lost(worker)  # killed: its call waits to be sent again, no worker is ready
        waiting = asyncio.create_task(pool.submit("translator/1", "Translate", _job(pool), 60.0))
        await asyncio.sleep(0.05)
        assert retried.events.empty() and not waiting.done() and pool.queued == 1

        pool.fail_all(Unavailable(DRAIN_ENDED))
        failure = await asyncio.wait_for(retried.events.get(), 1.0)
        assert isinstance(failure, Failure) and failure.message == DRAIN_ENDED
        with pytest.raises(Unavailable, match="its drain"):
            await asyncio.wait_for(waiting, 1.0)
        with pytest.raises(Unavailable, match="its drain"):  # and any call after it
            await pool.submit("translator/1", "Translate", _job(pool), 60.0)
        assert pool.queued == 0 and pool.rows_in_flight() == 0

    asyncio.run(run())
