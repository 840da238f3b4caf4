"""The front's workers on a Ray cluster (`ray` in the configuration): Ray Serve replicas.

The front connects to the cluster, deploys the workers as one Ray Serve application
(service.worker.replica: `num_cpus` / `num_gpus` a replica, autoscaled between
`min_replicas` and `max_replicas` on the rows they report), and reaches each replica the way a
second front reaches a worker on one machine (service.front.pool), over TCP: the replicas it
knows of come from the directory they register in, and a call goes to the ready replica holding
the fewest rows. Everything else is the pool's: admission, deadlines, retries of a call whose
replica was lost before any of its output left (on another replica, within its deadline),
cancellation, model versions loaded and unloaded on every replica.

One front serves a cluster: the directory's Ray name (DIRECTORY, in NAMESPACE) is taken while
its front lives, and Ray frees it when that front's process ends, however it ends. A second
front is refused at start rather than redeploying the application of the first (whose
replicas it would replace) and deleting it on its way out; a front started after one that
died takes the name over and replaces what that one left deployed.

A replica the front has not seen loads the versions the front added since the deployment (and
drops those it removed) before it gets a call; a version it cannot load (refused, or not
answered within LOAD_SECONDS) is logged and left to the replicas that hold it, and the replica
serves the others. One that leaves the directory (scaled down) gets no new call and ends its
jobs; one whose connection ends while still listed is tried again, for RECONNECT_GIVE_UP
seconds (its node may be gone for good: Ray Serve starts another).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import AuthenticationError, Client

import ray
from ray import serve
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from service.front.metrics import Metrics
from service.front.pool import LOAD_SECONDS, WorkerPool, _Worker
from service.runtime.errors import ModelRepositoryError, Unavailable
from service.worker.messages import Ready, Unload
from service.worker.replica import Directory, WorkerReplica
from service.worker.settings import WorkerSettings, no_delay, socket_address

log = logging.getLogger("attnserve")
NAMESPACE = "attnserve"
APPLICATION = "attnserve-workers"
DIRECTORY = "attnserve-directory"  # the front's Ray name: one front a cluster
TAKEN_SECONDS = 5.0  # a name taken is looked at again for this long (its front just ended)
CONNECT_SECONDS = 5.0  # a replica's TCP connection and handshake
RECONNECT_SECONDS = 0.5  # a listed replica whose connection ended is tried again after
RECONNECT_GIVE_UP = 60.0  # ... for at most this long
WATCH_SECONDS = 10.0  # a directory long-poll
READY_SECONDS = 600.0  # the deployment's replicas, loaded and checked, within
STATUS_SECONDS = 2.0  # between looks at the deployment's status while it starts


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster part of the server's configuration (service.front.config)."""

    address: str  # Ray's: "auto", "HOST:PORT" of the head's GCS, or "ray://..."
    min_replicas: int = 1
    max_replicas: int = 1
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    target_rows: int = 16  # a replica's rows in use and waiting that autoscaling keeps
    upscale_seconds: float = 10.0
    downscale_seconds: float = 120.0
    drain_seconds: float = 20.0

    @classmethod
    def of(cls, config) -> ClusterSettings:
        """The cluster settings of a server's configuration (service.front.config)."""
        return cls(
            address=config.ray,
            min_replicas=config.min_replicas,
            max_replicas=max(config.min_replicas, config.max_replicas),
            num_cpus=config.replica_cpus,
            num_gpus=config.replica_gpus,
            target_rows=config.replica_target_rows,
            upscale_seconds=config.replica_upscale_seconds,
            downscale_seconds=config.replica_downscale_seconds,
            drain_seconds=config.drain_seconds,
        )

    def deployment_options(self) -> dict:
        options = {
            "name": "workers",
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
            "graceful_shutdown_timeout_s": self.drain_seconds + 10.0,
            "graceful_shutdown_wait_loop_s": 0.5,
            "health_check_period_s": 2.0,
            "health_check_timeout_s": 10.0,
        }
        if self.max_replicas > self.min_replicas:
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas,
                "initial_replicas": self.min_replicas,
                "max_replicas": self.max_replicas,
                "upscale_delay_s": self.upscale_seconds,
                "downscale_delay_s": self.downscale_seconds,
                # over Ray Serve's interval of the replicas' reports (10 s unless
                # RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S says less)
                "look_back_period_s": max(10.5, self.upscale_seconds),
                "policy": {
                    "policy_function": "service.worker.replica:RowsPolicy",
                    "policy_kwargs": {"target_rows": self.target_rows},
                },
            }
        else:
            options["num_replicas"] = self.min_replicas
        return options


def _directory():
    """The front's Directory actor under DIRECTORY, on the front's own node (it lives as long
    as the front, whatever node goes); RuntimeError while another front holds the name."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    directory = ray.remote(num_cpus=0)(Directory).options(name=DIRECTORY, scheduling_strategy=here)
    end = time.monotonic() + TAKEN_SECONDS
    while True:
        try:
            return directory.remote()
        except ValueError as taken:  # Ray: "The name ... is already taken"
            if time.monotonic() > end:
                raise RuntimeError(
                    f"another front serves this cluster (the Ray actor {DIRECTORY} in namespace "
                    f"{NAMESPACE} is taken): one front reaches a cluster's replicas"
                ) from taken
            time.sleep(0.25)


class ClusterPool(WorkerPool):
    """The pool of service.front.pool over a Ray Serve application's replicas."""

    def __init__(
        self,
        template: WorkerSettings,
        cluster: ClusterSettings,
        metrics: Metrics,
        max_queued: int,
        latency_budget_seconds: float = 0.0,
    ):
        # the admission limit sized for the most replicas there may be
        super().__init__(
            [template] * cluster.max_replicas, metrics, max_queued, latency_budget_seconds
        )
        self.workers = []
        self.template = replace(template, socket="", authkey=secrets.token_bytes(32))
        self.cluster = cluster
        self.replicas: dict[str, _Worker] = {}  # replica id -> its worker as seen here
        self.nodes: dict[str, str] = {}  # replica id -> node id
        self.lost: dict[str, float] = {}  # replica id -> when its connection ended
        self.directory = None
        self.deployed = False  # whether APPLICATION is this front's, to delete at its stop
        self._watcher: asyncio.Task | None = None
        self._indices = iter(range(1 << 30))
        self._tasks: set[asyncio.Task] = set()  # connections and syncs under way
        self._told_serving = False  # the start waits for min_replicas of them

    def _spawn_task(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- life cycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Connects to the cluster, deploys the replicas and waits for min_replicas of them
        (each loaded and checked); RuntimeError when the deployment fails. Cancelled (the
        front stopped while it waits), it deletes what it deployed without waiting."""
        deploying = asyncio.ensure_future(asyncio.to_thread(self._deploy))
        try:
            await self._started(deploying)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # a thread is not cut short: it ends first
                await deploying
            await self.stop(settled=False)
            raise

    async def _started(self, deploying: asyncio.Future) -> None:
        try:
            await asyncio.shield(deploying)
        except Exception as error:
            await self.stop(settled=False)
            raise RuntimeError(f"the Ray cluster at {self.cluster.address}: {error}") from error
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        end = time.monotonic() + READY_SECONDS
        looked = time.monotonic()
        while sum(w.alive for w in self.workers) < self.cluster.min_replicas:
            problem = None
            if self._watcher.done():
                problem = "the replicas did not become ready"
            elif time.monotonic() - looked > STATUS_SECONDS or time.monotonic() > end:
                looked = time.monotonic()
                problem = await self._starting_problem(time.monotonic() > end)
            if problem is not None:
                await self.stop(settled=False)
                raise RuntimeError(problem)
            await asyncio.sleep(0.05)

    async def _starting_problem(self, late: bool) -> str | None:
        """Why the replicas will not be ready: their deployment failed, or they are `late`
        (their resources not in the cluster, say); None while they may still be."""
        try:
            failed, message = await asyncio.to_thread(self._deployment)
        except Exception as error:  # the cluster may be gone
            return f"the Ray cluster at {self.cluster.address}: {error}"
        if failed:
            return f"deploying the replicas failed: {message}"
        if late:
            return f"the replicas were not ready within {READY_SECONDS:g} s" + (
                f" ({message})" * bool(message)
            )
        return None

    def _deploy(self) -> None:
        if not ray.is_initialized():
            ray.init(
                address=self.cluster.address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        self.directory = _directory()
        self.deployed = True
        serve.start(proxy_location="Disabled")
        deployment = serve.deployment(WorkerReplica).options(**self.cluster.deployment_options())
        app = deployment.bind(self.template, DIRECTORY, self.cluster.drain_seconds)
        # not waited for here (serve.run waits as long as its replicas cannot be placed):
        # start waits for them within READY_SECONDS
        target = serve.RunTarget(app, name=APPLICATION, route_prefix=None)
        serve.run_many([target], wait_for_applications_running=False)

    def _deployment(self) -> tuple[bool, str]:
        """(whether the deployment failed, what Ray Serve says of it)."""
        app = serve.status().applications.get(APPLICATION)
        if app is None:
            return True, "the application is gone"
        said = [app.message, *(d.message for d in app.deployments.values())]
        return app.status == "DEPLOY_FAILED", "; ".join(m for m in said if m)

    async def stop(self, settled: bool = True) -> None:
        """Lets go of the replicas and deletes the application, waiting until Ray Serve has
        stopped them when `settled`. A failed start does not wait: Serve gives a replica it
        never placed its whole graceful shutdown (`drain_seconds` + 10 s) before it ends it,
        and its controller deletes the application without this process."""
        if self._watcher is not None:
            self._watcher.cancel()
        for task in list(self._tasks):
            task.cancel()
        await super().stop()
        if ray.is_initialized():
            if self.deployed:
                with contextlib.suppress(Exception):  # the cluster may be gone already
                    await asyncio.to_thread(serve.delete, APPLICATION, _blocking=settled)
            ray.shutdown()

    def pids(self) -> list[int]:
        return []

    # -- the replicas as the directory lists them ------------------------------------------
    async def _watch(self) -> None:
        seen = -1
        while not self.stopping:
            try:
                seen, listed = await self.directory.changes.remote(seen, WATCH_SECONDS)
            except ray.exceptions.RayError as error:
                log.warning("the replicas' directory: %s", error)
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            self._apply(listed)

    def _apply(self, listed: dict[str, tuple[str, str]]) -> None:
        for replica, (address, node) in listed.items():
            if replica not in self.replicas:
                settings = replace(self.template, index=next(self._indices), socket=address)
                worker = _Worker(settings)
                self.replicas[replica], self.nodes[replica] = worker, node
                self.workers.append(worker)
                log.info("replica %s on node %s at %s", replica[:8], node[:8], address)
                self._start(worker)
        for replica, worker in list(self.replicas.items()):
            if replica not in listed and not worker.leaving:  # scaled down: it drains
                worker.leaving = True
                log.info("replica %s leaves", replica[:8])
                if worker.conn is None:
                    self._forget(worker)
        self._update_placement()

    def _start(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        if worker.ready is None or worker.ready.done():
            worker.ready = loop.create_future()
            worker.ready.add_done_callback(lambda future: future.exception())
        self._spawn_task(self._open(worker))

    async def _open(self, worker: _Worker) -> None:
        family, address = socket_address(worker.settings.socket)
        try:
            conn = await asyncio.wait_for(
                asyncio.to_thread(Client, address, family, authkey=self.template.authkey),
                CONNECT_SECONDS,
            )
        except (OSError, TimeoutError, EOFError, AuthenticationError) as error:
            self._unreachable(worker, error)
            return
        if self.stopping or worker not in self.workers:
            conn.close()
            return
        no_delay(conn)
        worker.attach(conn)
        asyncio.get_running_loop().add_reader(conn.fileno(), self._on_readable, worker)

    def _unreachable(self, worker: _Worker, error: BaseException | str) -> None:
        replica = self._id_of(worker)
        if replica is None or self.stopping:
            return
        first = self.lost.setdefault(replica, time.monotonic())
        if worker.leaving or time.monotonic() - first > RECONNECT_GIVE_UP:
            log.warning("replica %s is unreachable (%s); forgotten", replica[:8], error)
            self._forget(worker)
            if not worker.leaving and self.directory is not None:
                # a replica lost with its node never leaves by itself: its entry would
                # bring it back at the directory's next change
                self.directory.leave.remote(replica)
            return
        asyncio.get_running_loop().call_later(RECONNECT_SECONDS, self._start, worker)

    def _forget(self, worker: _Worker) -> None:
        replica = self._id_of(worker)
        if replica is not None:
            del self.replicas[replica]
            self.nodes.pop(replica, None)
            self.lost.pop(replica, None)
        if worker in self.workers:
            self.workers.remove(worker)
        worker.rows = {}  # its rows leave the gauge with it
        for model in set(self.models.values()):
            self._update_rows(model)
        self._update_placement()

    def _id_of(self, worker: _Worker) -> str | None:
        return next((r for r, w in self.replicas.items() if w is worker), None)

    def _replace(self, worker: _Worker, code: int | None, was_alive: bool) -> None:
        """A replica's connection ended: a leaving one is forgotten, a listed one tried
        again (Ray restarts or replaces a lost replica; the directory names the new one)."""
        self._update_placement()
        if worker.leaving:
            self._forget(worker)
            return
        if was_alive:
            self.metrics.worker_restarts.inc()
        self._unreachable(worker, "its connection ended")

    # -- a replica's first message: the versions it serves made the front's ---------------
    def _handle(self, worker: _Worker, message) -> None:
        if not isinstance(message, Ready):
            super()._handle(worker, message)
            if worker.leaving and not worker.calls and worker.conn is not None:
                self._close(worker)
            return
        worker.info, worker.failures = message.info, 0
        self._spawn_task(self._sync(worker))

    async def _sync(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        refused: set[str] = set()  # versions it refused or did not load in time: not asked again
        try:
            # again while the versions served changed during the loads
            while True:
                have, want = set(worker.info.get("models", {})), self._wanted()
                # a version skipped at its start holds another content now: not asked again
                skipped = worker.info.get("skipped", {})
                asked = have | set(skipped) | refused
                missing = [key for key in want if key not in asked]
                if not missing and have <= set(want):
                    break
                for key in have - set(want):
                    worker.conn.send(Unload(key))
                    worker.info["models"].pop(key, None)
                for key in missing:
                    worker.loading[key] = loop.create_future()
                    worker.conn.send(want[key])
                refused |= await self._refused(worker, {k: worker.loading[k] for k in missing})
        except (OSError, ValueError, Unavailable, AttributeError) as error:
            log.warning("replica at %s cannot serve: %s", worker.settings.socket, error)
            if worker.conn is not None:
                self._on_death(worker)
            return
        replica = self._id_of(worker)
        if replica is not None:
            self.lost.pop(replica, None)
        if worker.ready is not None and not worker.ready.done():
            worker.ready.set_result(worker.info)
        self._update_placement()
        self._notify()

    async def _refused(self, worker: _Worker, answers: dict[str, asyncio.Future]) -> set[str]:
        """The versions of `answers` (key -> the future of the replica's answer to its Load,
        in the order sent) that the replica will not serve, each logged once: those it
        refused, and those it did not answer within LOAD_SECONDS each (on CUDA it loads them
        one after another: the rest wait behind one it hangs in), given up as WorkerPool.load
        gives up a worker's. It serves the others, as a worker of one machine does
        (WorkerPool._caught_up), and their calls go to the replicas that hold them.
        Unavailable when its connection ended first."""
        refused, late = set(), False
        for key, answer in answers.items():
            if not late:  # once one is late, those not answered by then go with it
                await asyncio.wait([answer], timeout=LOAD_SECONDS)
            if not answer.done():
                late = True
                self._give_up(worker, key, answer)
                refused.add(key)
            elif isinstance(error := answer.exception(), ModelRepositoryError):
                log.error("replica at %s cannot load %s: %s", worker.settings.socket, key, error)
                refused.add(key)
            elif error is not None:
                raise error
        return refused

    def _give_up(self, worker: _Worker, key: str, answer: asyncio.Future) -> None:
        """A Load of `key` the replica did not answer in time: unloaded from it (should it
        load the version after all), its late answer dropped (`owed`)."""
        log.error(
            "replica at %s did not load %s within %g s; it serves the others",
            worker.settings.socket,
            key,
            LOAD_SECONDS,
        )
        self._stop_waiting(worker, key, answer)
        worker.conn.send(Unload(key))

    def _close(self, worker: _Worker) -> None:
        """A leaving replica whose calls all ended: let go of it."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(worker.conn.fileno())
        worker.let_go()
        self._forget(worker)

    # -- what the front reports -------------------------------------------------------------
    def _update_placement(self) -> None:
        per_node: dict[str, int] = {}
        for replica, worker in self.replicas.items():
            if worker.alive:
                node = self.nodes.get(replica, "")
                per_node[node] = per_node.get(node, 0) + 1
        self.metrics.cluster_replicas.clear()
        for node, count in per_node.items():
            self.metrics.cluster_replicas.labels(node).set(count)
        self.metrics.workers_ready.set(sum(w.alive for w in self.workers))
        self._tell_serving()
