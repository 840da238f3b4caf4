"""A worker as a Ray Serve replica, for a front whose workers run on a Ray cluster.

Ray places the replicas (each asks for `num_cpus` / `num_gpus` and goes to any node that has
them), restarts or replaces one whose process or node is lost, and scales their number between
`min_replicas` and `max_replicas` on the load the replicas report (`RowsPolicy`: batch rows in
use and waiting). The calls do not go through Ray: a Serve handle call costs milliseconds of a
2-core machine's CPU and latency, and a worker's batch answers a call in a few; each replica
runs the single machine's worker (service.worker.process, its loop on a thread of the
replica's process) listening on TCP, registers its address in the front's `Directory` (a Ray
actor), and the fronts connect to it with our own messages, as a second front connects to a
worker on one machine. docs/architecture.md, "Workers on a Ray cluster", has the measurements.

A replica is ready (Serve sends it nothing, but counts it running, and the autoscaler with it)
once every model version it was given is loaded and has decoded its golden set. Scaled down,
it leaves the directory first, waits for its jobs to end (fronts send it nothing new once it
has left), then stops its worker.

Ray is imported here and in service.front.cluster alone: the single-machine server needs no Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from dataclasses import replace
from multiprocessing import Pipe

import ray

from service.worker.fronts import Fronts
from service.worker.messages import Failed, Ready, Report, Stop
from service.worker.process import _loop
from service.worker.settings import WorkerSettings
from service.worker.startup import load

DRAIN_POLL = 0.05  # seconds between looks at a draining replica's jobs


class Directory:
    """Where the replicas say how to reach them: {replica id: (address, node id)}, with a
    version that grows at every change; the fronts wait for changes (`changes`). A Ray actor
    the front starts (and owns: it ends with the front)."""

    def __init__(self):
        self.replicas: dict[str, tuple[str, str]] = {}
        self.version = 0
        self._changed = asyncio.Event()

    def _change(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def register(self, replica: str, address: str, node: str) -> None:
        self.replicas[replica] = (address, node)
        self._change()

    async def leave(self, replica: str) -> None:
        if self.replicas.pop(replica, None) is not None:
            self._change()

    async def changes(self, seen: int, wait: float) -> tuple[int, dict[str, tuple[str, str]]]:
        """(version, replicas) once the version is past `seen`, or after `wait` seconds."""
        if self.version == seen:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        return self.version, dict(self.replicas)


class WorkerReplica:
    """A Ray Serve replica: one worker, on a thread, listening for fronts on TCP."""

    async def __init__(self, settings: WorkerSettings, directory: str, drain_seconds: float):
        context = ray.get_runtime_context()
        self.id = context.get_actor_id()
        self.node = context.get_node_id()
        host = ray.util.get_node_ip_address()
        # the GPUs Ray gave this replica are its process's CUDA_VISIBLE_DEVICES already
        self.settings = replace(settings, socket=f"{host}:0", replica=True, gpu=-1)
        self.drain_seconds = drain_seconds
        self.rows: dict[str, int] = {}  # model key -> batch rows in use and waiting
        self.directory = ray.get_actor(directory)
        self.conn, child = Pipe()
        self.done = threading.Event()
        self.fronts: Fronts | None = None
        self.thread = threading.Thread(target=self._run, args=(child,), daemon=True)
        self.thread.start()
        # the models loaded and their golden sets decoded
        message = await asyncio.to_thread(self.conn.recv)
        if isinstance(message, Failed):
            raise RuntimeError(message.message)
        assert isinstance(message, Ready)
        self.address = message.info["address"]
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        await self.directory.register.remote(self.id, self.address, self.node)

    def _run(self, child) -> None:
        """The worker's life, as run_worker's in a process of its own."""
        try:
            schedulers, info = load(self.settings)
            self.fronts = Fronts(child, schedulers, info, self.settings)
        except Exception as error:
            child.send(Failed(f"replica {self.id}: {type(error).__name__}: {error}"))
            self.done.set()
            return
        child.send(Ready(info))
        try:
            _loop(self.fronts, schedulers, self.settings)
        except (EOFError, BrokenPipeError):
            pass
        finally:
            self.fronts.close()
            self.done.set()

    def _read(self) -> None:
        """The worker's reports to its parent: the batch state of each model version."""
        while not self.done.is_set():
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return
            if isinstance(message, Report):
                self.rows[message.key] = message.rows + message.waiting

    @property
    def load(self) -> int:
        """Batch rows in use and waiting, over the model versions its worker serves (one
        unloaded sends no report after it goes: its last would stay)."""
        served = self.fronts.schedulers if self.fronts is not None else {}
        return sum(rows for key, rows in list(self.rows.items()) if key in served)

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Ray Serve's custom metric of this replica, for RowsPolicy."""
        return {"rows": float(self.load)}

    async def check_health(self) -> None:
        """Ray Serve replaces a replica whose worker has stopped."""
        if self.done.is_set():
            raise RuntimeError(f"replica {self.id}: its worker stopped")

    async def __del__(self) -> None:
        """Scaled down or deleted: leaves the directory, lets its jobs end, stops."""
        with contextlib.suppress(Exception):  # the front (and its directory) may be gone
            await asyncio.wait_for(self.directory.leave.remote(self.id), 5.0)
        end = time.monotonic() + self.drain_seconds
        while time.monotonic() < end and self._busy():
            await asyncio.sleep(DRAIN_POLL)
        if self.fronts is not None and not self.done.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(Stop())
        await asyncio.to_thread(self.thread.join, 5.0)

    def _busy(self) -> bool:
        """Whether its worker still holds a job: rows in use or waiting, or a job of a front
        (a front's jobs are known by their owner until their last event)."""
        fronts = self.fronts
        return self.load > 0 or (fronts is not None and bool(fronts.owner))


class RowsPolicy:
    """Ray Serve autoscaling on the replicas' load: as many replicas as keep each one's batch
    rows in use and waiting at `target_rows` (Serve applies min_replicas, max_replicas and the
    delays)."""

    def __init__(self, target_rows: float = 8.0):
        self.target_rows = target_rows

    def __call__(self, context) -> tuple[int, dict]:
        metrics = (context.aggregated_metrics or {}).get("rows", {})
        rows = sum(metrics.get(r, 0.0) for r in context.running_replicas)
        if not metrics:  # nothing reported yet: keep the count
            return context.target_num_replicas, {}
        return max(1, math.ceil(rows / self.target_rows)), {}
