"""The cluster mode's settings: the server's configuration names the Ray cluster and its
replicas, and service.front.cluster makes the Ray Serve deployment of them (a fixed count, or
autoscaled by the replicas' rows) and tells the server's health whether any replica is ready.
tests/server/test_cluster.py serves through a real one."""

from __future__ import annotations

import importlib

import pytest

from service.front.config import ServerConfig
from service.runtime.errors import InvalidArgument

pytest.importorskip("ray")  # the ray extra, installed by ./dev.sh
from service.front.cluster import ClusterSettings  # after the skip: it imports ray


def test_a_fixed_count_of_replicas_is_deployed_as_such():
    config = ServerConfig(ray="auto", min_replicas=3, replica_cpus=2).validate()
    options = ClusterSettings.of(config).deployment_options()
    assert options["num_replicas"] == 3 and "autoscaling_config" not in options
    assert options["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 0}
    # a replica scaled down gets the drain and some to stop its worker
    assert options["graceful_shutdown_timeout_s"] > config.drain_seconds


def test_more_replicas_allowed_than_needed_are_autoscaled_on_rows():
    config = ServerConfig(
        ray="10.0.0.1:6379",
        min_replicas=1,
        max_replicas=4,
        replica_target_rows=8,
        replica_upscale_seconds=5,
        replica_downscale_seconds=60,
    ).validate()
    scaling = ClusterSettings.of(config).deployment_options()["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["max_replicas"]) == (1, 4)
    assert (scaling["upscale_delay_s"], scaling["downscale_delay_s"]) == (5, 60)
    policy = scaling["policy"]
    module, name = policy["policy_function"].split(":")
    rows_policy = getattr(importlib.import_module(module), name)  # what Serve's controller loads
    assert rows_policy(**policy["policy_kwargs"]).target_rows == 8


def test_the_cluster_settings_are_checked():
    with pytest.raises(InvalidArgument, match="fronts must be 0 or 1 with ray"):
        ServerConfig(ray="auto", fronts=2).validate()
    with pytest.raises(InvalidArgument, match="max_replicas must be 0"):
        ServerConfig(ray="auto", min_replicas=3, max_replicas=2).validate()
    with pytest.raises(InvalidArgument, match="min_replicas must be 1 or more"):
        ServerConfig(ray="auto", min_replicas=0).validate()
    with pytest.raises(InvalidArgument, match="replica_gpus must be 0 or more"):
        ServerConfig(ray="auto", replica_gpus=-1).validate()


def test_with_ray_one_front_and_the_replicas_device():
    config = ServerConfig(ray="auto", min_replicas=2, replica_gpus=1)
    assert config.front_choice()[0] == 1
    assert config.worker_choice("cuda")[0] == 2
    assert config.device_choice()[0] == "cuda"  # the replicas' GPUs, not this machine's
    assert ServerConfig(ray="auto").device_choice()[0] == "cpu"


def test_health_follows_whether_any_replica_is_ready():
    import asyncio

    from service.front.cluster import ClusterPool
    from service.front.metrics import Metrics
    from service.front.pool import _Worker
    from service.worker.settings import WorkerSettings

    async def run() -> list[bool]:
        config = ServerConfig(ray="auto", min_replicas=2).validate()
        metrics = Metrics()
        pool = ClusterPool(
            WorkerSettings(index=0, models=()), ClusterSettings.of(config), metrics, 16
        )
        told = []

        async def on_serving(serving: bool) -> None:
            told.append(serving)

        pool.on_serving = on_serving
        loop = asyncio.get_running_loop()
        workers = [_Worker(pool.template) for _ in range(2)]
        for i, worker in enumerate(workers):
            pool.replicas[f"r{i}"], pool.nodes[f"r{i}"] = worker, f"node{i}"
            pool.workers.append(worker)
            worker.ready = loop.create_future()
            worker.ready.set_result({})
            pool._update_placement()
        await asyncio.sleep(0)
        assert metrics.workers_ready._value.get() == 2
        assert {n: metrics.cluster_replicas.labels(n)._value.get() for n in ("node0", "node1")} == {
            "node0": 1,
            "node1": 1,
        }
        workers[0].leaving = True  # scaled down: no new calls, not ready
        pool._update_placement()
        workers[1].ready = None  # lost
        pool._update_placement()
        await asyncio.sleep(0)
        assert metrics.workers_ready._value.get() == 0
        return told

    assert asyncio.run(run()) == [True, False]  # told at each change, once


def test_a_replica_unreachable_for_long_is_forgotten_and_leaves_the_directory(monkeypatch):
    import asyncio

    from service.front import cluster
    from service.front.metrics import Metrics
    from service.front.pool import _Worker
    from service.worker.settings import WorkerSettings

    class Directory:  # what the pool asks of the Ray actor
        def __init__(self):
            self.left = []
            self.leave = self

        def remote(self, replica):
            self.left.append(replica)

    async def run():
        config = ServerConfig(ray="auto").validate()
        pool = cluster.ClusterPool(
            WorkerSettings(index=0, models=()), ClusterSettings.of(config), Metrics(), 16
        )
        pool.directory = Directory()
        worker = _Worker(pool.template)
        pool.replicas["gone"], pool.nodes["gone"] = worker, "node"
        pool.workers.append(worker)
        monkeypatch.setattr(cluster, "RECONNECT_SECONDS", 3600.0)  # no retry within the test
        pool._unreachable(worker, "refused")  # the first failure: tried again later
        assert "gone" in pool.replicas and pool.directory.left == []
        pool.lost["gone"] -= cluster.RECONNECT_GIVE_UP + 1  # a minute of failures
        pool._unreachable(worker, "refused")
        assert "gone" not in pool.replicas and worker not in pool.workers
        assert pool.directory.left == ["gone"]

    asyncio.run(run())


def _cluster_pool():
    """A cluster's pool serving model version m/1 (its version a stand-in)."""
    from service.front.cluster import ClusterPool
    from service.front.metrics import Metrics
    from service.worker.settings import WorkerSettings

    config = ServerConfig(ray="auto").validate()
    template = WorkerSettings(index=0, models=(("m/1", "v1"),), variants=(("m/1", "fp32"),))
    pool = ClusterPool(template, ClusterSettings.of(config), Metrics(), 16)
    pool.models = {"m/1": "m"}
    return pool


def _listed_replica(pool, replica: str, models: dict):
    """A replica the pool reaches over a pipe (the other end returned), ready with `models`."""
    import asyncio
    from multiprocessing import Pipe

    from service.front.pool import _Worker

    front_end, replica_end = Pipe()
    worker = _Worker(pool.template)
    pool.replicas[replica], pool.nodes[replica] = worker, "node"
    pool.workers.append(worker)
    worker.attach(front_end)
    worker.info = {"models": dict(models)}
    worker.ready = asyncio.get_running_loop().create_future()
    worker.ready.set_result(worker.info)
    pool._update_placement()
    return worker, replica_end


def test_a_leaving_replica_is_let_go_once_its_last_call_ends():
    import asyncio

    import numpy as np

    from service.runtime.decoding import DecodingOptions
    from service.worker.messages import Job, Report, Result, Submit, Timings

    async def run():
        pool = _cluster_pool()
        worker, replica_end = _listed_replica(pool, "r", {"m/1": {}})
        job = Job(pool.next_id(), {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions())
        call = await pool.submit("m/1", "Translate", job, 10.0)
        assert isinstance(replica_end.recv(), Submit)
        replica_end.send(Report("m/1", [], None, 1, 0))
        pool._on_readable(worker)
        assert pool.metrics.batch_rows_in_use.labels("m")._value.get() == 1
        pool._apply({})  # scaled down: it left the directory
        assert worker.leaving and worker in pool.workers
        # its last call's answer, in a report whose batch still holds the finished row
        result = Result(job.id, [[]], Timings(0.0, 0.0, 0.0, 0.0))
        replica_end.send(Report("m/1", [result], None, 1, 0))
        pool._on_readable(worker)  # let go of it, and no error reading the closed connection
        assert isinstance(call.events.get_nowait(), Result)
        assert worker not in pool.workers and "r" not in pool.replicas
        assert worker.conn is None
        assert pool.metrics.batch_rows_in_use.labels("m")._value.get() == 0  # its rows gone
        replica_end.close()

    asyncio.run(run())


def test_a_replica_met_while_a_version_is_added_serves_that_version_too():
    import asyncio
    import dataclasses

    from service.worker.messages import Load, Loaded, Ready

    async def answer(replica_end) -> str:
        """The replica's side: answers the next Load, names its key."""
        message = await asyncio.to_thread(replica_end.recv)
        assert isinstance(message, Load)
        replica_end.send(Loaded(message.key, {}))
        return message.key

    async def run():
        pool = _cluster_pool()
        pool.template = dataclasses.replace(
            pool.template,
            models=(("m/1", "v1"), ("m/2", "v2")),
            variants=(("m/1", "fp32"), ("m/2", "fp32")),
        )
        worker, replica_end = _listed_replica(pool, "r", {})
        worker.ready = asyncio.get_running_loop().create_future()  # met just now: not ready
        asyncio.get_running_loop().add_reader(worker.conn.fileno(), pool._on_readable, worker)
        replica_end.send(Ready({"models": {"m/1": {}}}))  # started with the deployment's m/1
        while not replica_end.poll():  # the front asks it for m/2
            await asyncio.sleep(0.01)
        await pool.load("m/3", "v3", "fp32")  # added meanwhile, on the replicas ready then
        loaded = [await answer(replica_end)]
        if await asyncio.to_thread(replica_end.poll, 1.0):  # asked for m/3 as well
            loaded.append(await answer(replica_end))
        await asyncio.wait_for(worker.ready, 5.0)
        assert set(worker.info["models"]) == {"m/1", "m/2", "m/3"}
        assert loaded == ["m/2", "m/3"]
        await pool.stop()
        replica_end.close()

    asyncio.run(run())


def test_a_second_front_on_the_cluster_is_refused_and_deletes_nothing(monkeypatch):
    """Another front holds the directory's Ray name: this one neither deploys over that
    front's application (replacing its replicas) nor deletes it on its way out."""
    import asyncio
    from types import SimpleNamespace

    from service.front import cluster
    from service.front.metrics import Metrics
    from service.worker.settings import WorkerSettings

    tried, done = [], []

    class Directory:  # the actor class as Ray wraps it
        def options(self, name, scheduling_strategy):
            return SimpleNamespace(remote=lambda: self.taken(name))

        def taken(self, name):
            tried.append(name)
            if name == cluster.DIRECTORY:  # as Ray refuses a name another driver's actor holds
                raise ValueError(f"The name {name} (namespace=attnserve) is already taken.")
            return SimpleNamespace()

    ray = SimpleNamespace(
        is_initialized=lambda: True,
        get_runtime_context=lambda: SimpleNamespace(get_node_id=lambda: "node"),
        remote=lambda **_: lambda actor: Directory(),
        shutdown=lambda: done.append("shutdown"),
    )

    def refused(*_, **__):
        raise AssertionError("the other front's application deployed over")

    serve = SimpleNamespace(
        start=refused, run_many=refused, delete=lambda app: done.append(f"delete {app}")
    )
    monkeypatch.setattr(cluster, "ray", ray)
    monkeypatch.setattr(cluster, "serve", serve)
    monkeypatch.setattr(cluster, "NodeAffinitySchedulingStrategy", lambda *_, **__: None)
    monkeypatch.setattr(cluster, "TAKEN_SECONDS", 0.3)  # looked at again: it may be just gone
    config = ServerConfig(ray="auto").validate()
    pool = cluster.ClusterPool(
        WorkerSettings(index=0, models=()), ClusterSettings.of(config), Metrics(), 16
    )
    with pytest.raises(RuntimeError, match="another front serves this cluster"):
        asyncio.run(pool.start())
    assert len(tried) > 1 and set(tried) == {cluster.DIRECTORY}
    assert done == ["shutdown"]  # its own connection closed; the application left alone


def test_http_health_says_what_grpc_health_says_in_every_state(tmp_path):
    """The HTTP routes read only whether the front had started and was draining, so with
    no replica ready they said SERVING (200) where gRPC said NOT_SERVING: both now read
    `Front.health`, through warm-up, serving, no replica ready and the drain. The health
    service's own name (LIVENESS, what a liveness probe asks) says whether the front
    answers: SERVING whatever the replicas, until the drain."""
    import asyncio

    from grpc_health.v1 import health_pb2
    from grpc_health.v1.health import aio
    from starlette.testclient import TestClient

    from service.front.cluster import ClusterPool
    from service.front.http.app import build_app
    from service.front.metrics import Metrics
    from service.front.pool import _Worker
    from service.front.server import set_health
    from service.front.state import LIVENESS, Front
    from service.worker.settings import WorkerSettings

    config = ServerConfig(ray="auto").validate()
    metrics = Metrics()
    pool = ClusterPool(WorkerSettings(index=0, models=()), ClusterSettings.of(config), metrics, 16)
    front = Front(config, {}, pool, metrics)
    servicer = aio.HealthServicer()
    web = TestClient(build_app(front, [], [], lambda code: None, tmp_path / "files"))
    worker = _Worker(pool.template)
    pool.replicas["r0"], pool.nodes["r0"] = worker, "node0"
    pool.workers.append(worker)

    async def replica(ready: bool) -> None:
        worker.ready = asyncio.get_running_loop().create_future()
        if ready:
            worker.ready.set_result({})
        pool._update_placement()

    async def look() -> list[tuple[str, str, int]]:
        """(gRPC's status, HTTP's, HTTP's code) of the server and of LIVENESS."""
        await set_health(servicer, front, ("", LIVENESS))
        seen = []
        for name in ("", LIVENESS):
            answer = await servicer.Check(health_pb2.HealthCheckRequest(service=name), None)
            http = web.get("/v1/health", params={"service": name} if name else {})
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
            seen.append((status, http.json()["status"], http.status_code))
        return seen

    async def states() -> dict[str, list]:
        seen = {}
        await replica(True)
        seen["warming up"] = await look()
        front.serving = True
        seen["serving"] = await look()
        await replica(False)
        seen["no replica ready"] = await look()
        await replica(True)
        seen["serving again"] = await look()
        front.draining = True
        seen["draining"] = await look()
        return seen

    serving, not_serving = ("SERVING", "SERVING", 200), ("NOT_SERVING", "NOT_SERVING", 503)
    assert asyncio.run(states()) == {  # the server's, then LIVENESS
        "warming up": [not_serving, serving],
        "serving": [serving, serving],
        "no replica ready": [not_serving, serving],
        "serving again": [serving, serving],
        "draining": [not_serving, not_serving],
    }


def test_a_start_cancelled_while_the_replicas_start_deletes_them_without_waiting(monkeypatch):
    """A front stopped (SIGTERM) while its replicas started kept waiting for them, up to
    READY_SECONDS, and left them deployed: a cancelled start deletes the application without
    waiting for Ray Serve's graceful shutdown of replicas never placed, and lets go of Ray."""
    import asyncio
    from types import SimpleNamespace

    from service.front import cluster
    from service.front.metrics import Metrics
    from service.worker.settings import WorkerSettings

    done = []

    async def never(*_):  # the directory's long poll: no replica ever registers
        await asyncio.sleep(3600)

    directory = SimpleNamespace(changes=SimpleNamespace(remote=never))
    actor = SimpleNamespace(options=lambda **_: SimpleNamespace(remote=lambda: directory))
    ray = SimpleNamespace(
        is_initialized=lambda: "init" in done,
        init=lambda **_: done.append("init"),
        get_runtime_context=lambda: SimpleNamespace(get_node_id=lambda: "node"),
        remote=lambda **_: lambda _: actor,
        shutdown=lambda: done.append("shutdown"),
        exceptions=SimpleNamespace(RayError=ConnectionError),
    )
    deployment = SimpleNamespace(bind=lambda *_: "app")
    serve = SimpleNamespace(
        start=lambda **_: None,
        deployment=lambda _: SimpleNamespace(options=lambda **_: deployment),
        RunTarget=lambda app, **_: app,
        run_many=lambda targets, **_: done.append("deployed"),
        delete=lambda app, _blocking=True: done.append(f"delete {app}, waiting {_blocking}"),
    )
    monkeypatch.setattr(cluster, "ray", ray)
    monkeypatch.setattr(cluster, "serve", serve)
    monkeypatch.setattr(cluster, "NodeAffinitySchedulingStrategy", lambda *_, **__: None)
    config = ServerConfig(ray="auto").validate()
    pool = cluster.ClusterPool(
        WorkerSettings(index=0, models=()), ClusterSettings.of(config), Metrics(), 16
    )

    async def stopped_while_starting() -> None:
        starting = asyncio.ensure_future(pool.start())
        while "deployed" not in done:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # waiting for the replicas
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting

    asyncio.run(stopped_while_starting())
    assert done == ["init", "deployed", f"delete {cluster.APPLICATION}, waiting False", "shutdown"]


async def _met(pool, replica: str, models: dict):
    """A replica the pool meets just now (not ready, read from the event loop), whose Ready
    says it holds `models` -> (its worker, its end of the connection)."""
    import asyncio

    from service.worker.messages import Ready

    worker, replica_end = _listed_replica(pool, replica, {})
    worker.ready = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_reader(worker.conn.fileno(), pool._on_readable, worker)
    replica_end.send(Ready({"models": models}))
    return worker, replica_end


async def _asked(replica_end):
    """The next message the front sends the replica."""
    import asyncio

    assert await asyncio.to_thread(replica_end.poll, 5.0), "the front sent nothing"
    return replica_end.recv()


async def _calls_go_to(pool, key: str):
    """The worker a call of model version `key` is sent to."""
    import numpy as np

    from service.runtime.decoding import DecodingOptions
    from service.worker.messages import Job

    job = Job(pool.next_id(), {"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions())
    return (await pool.submit(key, "Translate", job, 5.0)).worker


def _serving(pool, *keys: str) -> None:
    """The pool serves model versions `keys` (their versions stand-ins)."""
    import dataclasses

    pool.template = dataclasses.replace(
        pool.template,
        models=tuple((key, f"v of {key}") for key in keys),
        variants=tuple((key, "fp32") for key in keys),
    )
    pool.models = dict.fromkeys(keys, "m")


def test_a_replica_that_cannot_load_a_version_serves_the_others(monkeypatch, caplog):
    """A replica that answers NotLoaded to a served version it was sent as it came up was
    closed and connected to again, loading and refusing in a loop for RECONNECT_GIVE_UP
    seconds, then forgotten: as a worker of one machine, it logs the refusal once and serves
    the versions it holds, and the refused version's calls go to the replicas that hold it."""
    import asyncio

    from service.front import cluster
    from service.worker.messages import Load, NotLoaded, Submit

    monkeypatch.setattr(cluster, "RECONNECT_SECONDS", 0.05)  # a reconnect would come at once

    async def run():
        pool = _cluster_pool()
        _serving(pool, "m/1", "m/2")
        holder, holder_end = _listed_replica(pool, "holder", {"m/1": {}, "m/2": {}})
        worker, replica_end = await _met(pool, "r", {"m/1": {}})
        load = await _asked(replica_end)
        assert isinstance(load, Load) and load.key == "m/2"
        replica_end.send(NotLoaded("m/2", "out of memory"))
        await asyncio.wait_for(asyncio.shield(worker.ready), 5.0)
        await asyncio.sleep(0.2)  # past a reconnect
        assert worker.alive and worker.conn is not None and "r" not in pool.lost
        assert set(worker.info["models"]) == {"m/1"}
        holder.held = 5  # the refusing replica holds fewer rows: m/1's calls go to it
        assert await _calls_go_to(pool, "m/1") is worker
        assert await _calls_go_to(pool, "m/2") is holder
        assert isinstance(replica_end.recv(), Submit) and not replica_end.poll()
        refusals = [r for r in caplog.records if "cannot load m/2" in r.getMessage()]
        assert len(refusals) == 1 and "out of memory" in refusals[0].getMessage()
        await pool.stop()
        replica_end.close()
        holder_end.close()

    asyncio.run(run())


def test_a_replica_that_does_not_answer_a_load_in_time_serves_the_others(monkeypatch, caplog):
    """A replica alive but hung in a Load it was sent as it came up was waited for without
    end: never ready, and the calls of its versions with it. Within LOAD_SECONDS (as a
    load on one machine) it is given up for that version and serves the others: the version
    is unloaded from it and its late answer dropped, as WorkerPool.load does for a worker
    whose load timed out, so its calls go to the replicas that hold it."""
    import asyncio
    import time

    from service.front import cluster
    from service.worker.messages import Load, Loaded, Unload

    monkeypatch.setattr(cluster, "LOAD_SECONDS", 0.3)

    async def run():
        pool = _cluster_pool()
        _serving(pool, "m/1", "m/2", "m/3")
        held = {"m/1": {}, "m/2": {}, "m/3": {}}
        holder, holder_end = _listed_replica(pool, "holder", held)
        worker, replica_end = await _met(pool, "r", {"m/1": {}})
        asked = [await _asked(replica_end), await _asked(replica_end)]
        assert [(type(m), m.key) for m in asked] == [(Load, "m/2"), (Load, "m/3")]
        started = time.monotonic()
        await asyncio.wait_for(asyncio.shield(worker.ready), 5.0)  # no answer: given up
        # m/3 waits behind m/2 in the replica: given up with it, not a bound later
        assert time.monotonic() - started < 2 * cluster.LOAD_SECONDS
        assert worker.alive and worker.conn is not None
        assert [await _asked(replica_end) for _ in asked] == [Unload("m/2"), Unload("m/3")]
        replica_end.send(Loaded("m/2", {}))  # its late answers, to no one
        replica_end.send(Loaded("m/3", {}))
        await asyncio.sleep(0.1)
        assert set(worker.info["models"]) == {"m/1"} and worker.owed == {"m/2": 0, "m/3": 0}
        holder.held = 5
        assert await _calls_go_to(pool, "m/1") is worker
        assert await _calls_go_to(pool, "m/2") is holder
        late = [r.getMessage() for r in caplog.records if "did not load" in r.getMessage()]
        assert len(late) == 2 and "m/2" in late[0] and "m/3" in late[1]
        await pool.stop()
        replica_end.close()
        holder_end.close()

    asyncio.run(run())
