"""Model versions added and removed while workers come and go, as the front's worker pool
sees them (no process started: each worker's connection is a stand-in that keeps what it is
sent): a worker that comes up after a version came, or while it loads, is sent its Load before
any call; a worker's death during a load is not the version's fault; a call goes only to a
worker that holds its version (a worker restarted while a version replaced in place drains
holds the new content alone)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from stand_in import Link

from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import ModelRepositoryError, Unavailable
from service.worker.messages import Failure, Job, Load, Loaded, NotLoaded, Ready, Submit, Unload
from service.worker.settings import WorkerSettings


def _pool(workers: int) -> WorkerPool:
    """A pool of `workers` workers serving translator/1, each reached by a Link, not ready."""
    served = (("translator/1", "version 1"),)
    settings = [
        WorkerSettings(index=i, models=served, variants=(("translator/1", "fp32"),))
        for i in range(workers)
    ]
    pool = WorkerPool(settings, Metrics(), 8)
    loop = asyncio.get_running_loop()
    for worker in pool.workers:
        worker.conn, worker.ready = Link(), loop.create_future()
    return pool


def _ready(pool: WorkerPool, index: int, *keys: str) -> None:
    pool._handle(pool.workers[index], Ready({"models": {key: {} for key in keys}}))


def test_a_worker_that_comes_up_after_a_version_came_loads_it_before_any_call():
    async def run():
        pool = _pool(2)
        first, second = pool.workers
        _ready(pool, 0, "translator/1")  # the second is restarting: started with version 1
        loading = asyncio.create_task(pool.load("translator/2", "version 2", "int8"))
        await asyncio.sleep(0)
        assert first.conn.sent == [Load("translator/2", "version 2", "int8")]
        _ready(pool, 1, "translator/1")  # up while the first still loads
        assert second.conn.sent == [Load("translator/2", "version 2", "int8")]
        pool._handle(first, Loaded("translator/2", {}))
        await asyncio.sleep(0.05)
        assert not loading.done()  # the second's answer counts too
        pool._handle(second, Loaded("translator/2", {}))
        await loading
        assert pool.serves("translator/2")
        assert second.settings.models[-1] == ("translator/2", "version 2")

        pool._lost(second)  # killed again: its replacement starts with both versions
        second.conn, second.ready = Link(), asyncio.get_running_loop().create_future()
        _ready(pool, 1, "translator/1", "translator/2")
        assert second.conn.sent == []

    asyncio.run(run())


def test_a_worker_s_death_during_a_load_is_unavailable_a_refusal_is_not():
    async def run():
        pool = _pool(2)
        first, second = pool.workers
        _ready(pool, 0, "translator/1")
        _ready(pool, 1, "translator/1")
        loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32"))
        await asyncio.sleep(0)
        pool._handle(first, Loaded("translator/2", {}))
        pool._lost(second)
        with pytest.raises(Unavailable, match="worker exited"):
            await loading
        assert not pool.serves("translator/2")
        assert first.conn.sent[-1] == Unload("translator/2")  # loaded by the first: dropped

        loading = asyncio.create_task(pool.load("translator/3", "version 3", "fp32"))
        await asyncio.sleep(0)
        pool._handle(first, NotLoaded("translator/3", "fails its golden set"))
        with pytest.raises(ModelRepositoryError, match="fails its golden set"):
            await loading

    asyncio.run(run())


async def _loaded_by_the_first(timeout: float):
    """Two ready workers holding translator/1, asked to load translator/2 within `timeout`:
    the first has answered Loaded, the second not -> the pool, its workers, the load."""
    pool = _pool(2)
    first, second = pool.workers
    _ready(pool, 0, "translator/1")
    _ready(pool, 1, "translator/1")
    loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32", timeout))
    await asyncio.sleep(0)
    pool._handle(first, Loaded("translator/2", {}))
    return pool, first, second, loading


def test_a_load_that_times_out_is_unloaded_from_the_workers_that_loaded_it():
    """One worker loaded the version, the other did not answer in time: the version is not
    served, and the worker that loaded it drops it again (it held a whole version's
    sessions for nothing), as after a refusal."""

    async def run():
        pool, first, second, loading = await _loaded_by_the_first(0.2)
        with pytest.raises(TimeoutError, match="translator/2: not loaded by every worker"):
            await loading
        assert not pool.serves("translator/2")
        assert first.conn.sent[-1] == second.conn.sent[-1] == Unload("translator/2")
        assert first.loading == second.loading == {}
        pool._handle(second, Loaded("translator/2", {}))  # late: dropped by the Unload
        assert not second.holds("translator/2")  # so no call of it is sent there

    asyncio.run(run())


def test_a_late_answer_to_a_load_given_up_is_not_taken_for_the_next_load_s():
    """A load timed out on the second worker, and the same version is loaded again (its
    manifest written again): the second's answer to the first Load, late, is not its answer
    to the second Load, which it may yet refuse. Taken for it, the version was served while
    the second, which dropped it (the Unload) and then refused it, was sent its calls."""

    async def run():
        pool, first, second, loading = await _loaded_by_the_first(0.1)
        with pytest.raises(TimeoutError):
            await loading
        loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32", 5.0))
        await asyncio.sleep(0)
        pool._handle(second, Loaded("translator/2", {}))  # to the first Load, late
        pool._handle(first, Loaded("translator/2", {}))
        await asyncio.sleep(0.05)
        assert not loading.done() and not second.holds("translator/2")
        pool._handle(second, NotLoaded("translator/2", "out of memory"))
        with pytest.raises(ModelRepositoryError, match="out of memory"):
            await loading
        assert not pool.serves("translator/2")

        loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32", 0.1))
        await asyncio.sleep(0)
        pool._handle(first, Loaded("translator/2", {}))
        with pytest.raises(TimeoutError):  # the second owes an answer again, then dies
            await loading
        pool._lost(second)
        second.conn, second.ready = Link(), asyncio.get_running_loop().create_future()
        _ready(pool, 1, "translator/1")  # a new connection: its first answer is its own
        loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32", 5.0))
        await asyncio.sleep(0)
        pool._handle(first, Loaded("translator/2", {}))
        pool._handle(second, Loaded("translator/2", {}))
        await asyncio.wait_for(loading, 1.0)
        assert second.holds("translator/2")

    asyncio.run(run())


def test_a_version_a_worker_that_came_up_during_its_load_refuses_is_not_served():
    """A worker restarted while a version loads is sent its Load as it comes up; it could
    not load it, the others could: the version was served anyway, and each call the pool
    sent that worker failed UNAVAILABLE ("not loaded here")."""

    async def run():
        pool = _pool(2)
        first, second = pool.workers
        _ready(pool, 0, "translator/1")
        loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32"))
        await asyncio.sleep(0)
        _ready(pool, 1, "translator/1")
        pool._handle(second, NotLoaded("translator/2", "out of memory"))
        pool._handle(first, Loaded("translator/2", {}))
        with pytest.raises(ModelRepositoryError, match="out of memory"):
            await loading
        assert not pool.serves("translator/2")
        assert first.conn.sent[-1] == second.conn.sent[-1] == Unload("translator/2")

    asyncio.run(run())


def test_a_load_leaves_alone_what_it_did_not_ask_a_worker():
    """A cluster's replica coming up loads the versions being added on its own, waiting on
    futures of its own in `loading`: a load that ends takes back only its own."""

    async def run():
        pool = _pool(2)
        first, second = pool.workers
        _ready(pool, 0, "translator/1")
        syncing = second.loading["translator/2"] = asyncio.get_running_loop().create_future()
        loading = asyncio.create_task(pool.load("translator/2", "version 2", "fp32"))
        await asyncio.sleep(0)
        pool._handle(first, Loaded("translator/2", {}))
        await loading
        assert second.loading == {"translator/2": syncing} and first.loading == {}

    asyncio.run(run())


OLD, NEW = "translator/1@old", "translator/1@new"  # one version's content, and its replacement


def _job(pool: WorkerPool) -> Job:
    return Job(pool.next_id(), {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions())


def test_a_worker_restarted_while_a_replaced_content_drains_serves_the_new_one():
    """translator/1 replaced in place: both contents are loaded while the old one's calls
    drain. A worker restarted then skips the old content (its files are gone) and takes the
    new one's calls at once; the old content's calls go to the worker that still holds it,
    and once none does they fail UNAVAILABLE saying so, the new content's calls untouched."""

    async def run():
        pool = _pool(2)
        pool._set_models(((OLD, "old"), (NEW, "new")), {OLD: "fp32", NEW: "fp32"})
        first, second = pool.workers
        _ready(pool, 0, OLD, NEW)
        _ready(pool, 1, OLD, NEW)
        pool._lost(first)  # killed during the drain, then back without the old content
        first.conn, first.ready = Link(), asyncio.get_running_loop().create_future()
        skipped = {OLD: "replaced since it was verified"}
        pool._handle(first, Ready({"models": {NEW: {}}, "skipped": skipped}))
        assert first.alive and first.conn.sent == []  # the old content is not asked again
        old = await pool.submit(OLD, "Translate", _job(pool), 5.0)
        assert old.worker is second  # though both hold no rows and the first comes first
        busy = await pool.submit(NEW, "Translate", _job(pool), 5.0)
        assert busy.worker is first

        # the last worker with the old content dies: it comes back without it (the first
        # skipped it at its start, so its files are gone), and its call fails at once
        pool._lost(second)
        second.conn, second.ready = Link(), asyncio.get_running_loop().create_future()
        failure = await asyncio.wait_for(old.events.get(), 1.0)
        assert isinstance(failure, Failure) and "no worker holds" in failure.message
        assert not second.alive  # failed before the restart, not after it
        with pytest.raises(Unavailable, match=f"no worker holds model version {OLD}"):
            await asyncio.wait_for(pool.submit(OLD, "Translate", _job(pool), 5.0), 1.0)
        pool._handle(second, Ready({"models": {NEW: {}}, "skipped": skipped}))
        assert busy.events.empty() and first.calls == {busy.job.id: busy}

        pool.unload(OLD)  # drained; then the old content is published again (a rollback)
        loading = asyncio.create_task(pool.load(OLD, "old", "fp32"))
        await asyncio.sleep(0)
        pool._handle(first, Loaded(OLD, {}))
        pool._handle(second, Loaded(OLD, {}))
        await loading
        assert pool._at_start(OLD)  # its content is back: a worker that starts loads it

    asyncio.run(run())


def test_a_call_that_no_restarting_worker_would_take_fails_at_once():
    """A call of a version that no ready worker holds waits for a worker that restarts, when
    that worker loads the version as it starts; once the version is unloaded (its drain over)
    no worker that starts loads it, and the call fails UNAVAILABLE at once rather than at the
    restart (seconds on a GPU) or at its deadline."""

    async def run():
        pool = _pool(2)
        first, second = pool.workers
        _ready(pool, 0)  # up without translator/1, which it then cannot load
        assert first.conn.sent == [Load("translator/1", "version 1", "fp32")]
        pool._handle(first, NotLoaded("translator/1", "out of memory"))
        waiting = asyncio.create_task(pool.submit("translator/1", "Translate", _job(pool), 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the second, starting, loads translator/1
        pool.unload("translator/1")
        with pytest.raises(Unavailable, match="no worker holds model version translator/1"):
            await asyncio.wait_for(waiting, 1.0)
        assert not second.alive

    asyncio.run(run())


def test_a_call_that_outwaits_a_load_is_told_the_version_is_loading():
    """A call whose version the ready workers are still loading when its wait ends is told
    so (UNAVAILABLE, retryable), not that no worker is ready: one is."""

    async def run():
        settings = WorkerSettings(index=0, models=((NEW, "new"),), variants=((NEW, "fp32"),))
        pool = WorkerPool([settings], Metrics(), 8, front=1, fronts=2)
        (worker,) = pool.workers
        worker.conn, worker.ready = Link(), asyncio.get_running_loop().create_future()
        pool._handle(worker, Ready({"models": {}}))
        assert worker.alive and worker.conn.sent == [Load(NEW, "new", "fp32")]
        with pytest.raises(Unavailable, match=f"model version {NEW} is still loading"):
            await pool.submit(NEW, "Translate", _job(pool), 0.1)

    asyncio.run(run())


def test_a_front_that_meets_a_worker_without_its_version_waits_for_the_load():
    """A front that is not the workers' parent, started after translator/1 was replaced in
    place, serves the new content, which the worker it connects to has not loaded (the first
    front has not looked at the repository since): the worker is sent its Load and the old
    content's Unload, and calls wait for the load, sent only once the worker holds it."""

    async def run():
        settings = WorkerSettings(index=0, models=((NEW, "new"),), variants=((NEW, "fp32"),))
        pool = WorkerPool([settings], Metrics(), 8, front=1, fronts=2)
        (worker,) = pool.workers
        worker.conn, worker.ready = Link(), asyncio.get_running_loop().create_future()
        pool._handle(worker, Ready({"models": {OLD: {}}}))
        assert worker.conn.sent == [Load(NEW, "new", "fp32"), Unload(OLD)]
        waiting = asyncio.create_task(pool.submit(NEW, "Translate", _job(pool), 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done() and not worker.calls
        pool._handle(worker, Loaded(NEW, {}))
        call = await asyncio.wait_for(waiting, 1.0)
        assert call.worker is worker and isinstance(worker.conn.sent[-1], Submit)

        pool._lost(worker)  # back, and this time the new content fails its golden set
        worker.conn, worker.ready = Link(), asyncio.get_running_loop().create_future()
        pool._handle(worker, Ready({"models": {}}))
        waiting = asyncio.create_task(pool.submit(NEW, "Translate", _job(pool), 5.0))
        await asyncio.sleep(0.05)
        pool._handle(worker, NotLoaded(NEW, "fails its golden set"))
        with pytest.raises(Unavailable, match="no worker holds"):
            await asyncio.wait_for(waiting, 1.0)

    asyncio.run(run())
