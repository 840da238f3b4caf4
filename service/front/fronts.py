"""Several front processes on one port (`fronts` in the configuration).

One front process runs gRPC, parses, tokenises and answers in one Python thread: past about a
thousand calls a second it is the server's limit, whatever the workers could decode. With
`fronts = N` the server runs N front processes that listen on the same port (SO_REUSEPORT:
the kernel spreads new connections over them) and share every worker:

- the first front (the process `attnserve serve` started) loads the repository, starts the
  workers and restarts them, serves /metrics, writes the ready file and starts the others;
- each other front loads and verifies the repository itself, connects to every worker's
  socket (service.front.pool) and loads there any version it read that the worker does not
  hold (the repository may have changed since the first front read it), serves gRPC and
  health on the same port, watches the repository for new versions as the first does, and
  answers the first front over two pipes: `control` (ready, drain) and `scrape` (its
  metrics, at every scrape of /metrics);
- /metrics adds every front's samples of the same name and labels (`MergedRegistry`), so
  counters and histograms are the server's, exact at each scrape (a front started again
  counts from zero: the sums fall by what the dead front had counted, which Prometheus's
  `rate()` reads as a counter reset);
- a drain (SIGTERM to the first front) reaches every front at once; the workers stop after
  the last front has drained. A front that dies is started again; its clients connect again
  (to any front) and its calls in flight fail with UNAVAILABLE, as with a replica gone.

The kernel spreads connections, not calls: a client with one channel keeps one front. Many
clients, or a client opening several channels, fill them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client.metrics_core import Metric

from service.front.pool import wait_or_kill

log = logging.getLogger("attnserve")
SCRAPE_SECONDS = 2.0  # a front that does not answer a scrape within this is left out of it
READY_SECONDS = 600.0  # a front must be serving within this (it loads the repository again)
RESTART_SECONDS = 1.0  # before a front that died is started again


@dataclass(frozen=True)
class Secondary:
    """What a front other than the first is given: its index (1 ...), the workers' settings
    (their sockets), the device the first chose, and its two pipes."""

    index: int
    settings: tuple
    device: str
    control: object  # multiprocessing Connection: "ready" up, "drain" down
    scrape: object  # multiprocessing Connection: a scrape down, its metrics up


def worker_sockets(settings: list, count: int) -> tuple[list, Path | None]:
    """The workers' settings with a Unix socket each (in a directory of this server's, mode
    0700) and a random key, when `count` fronts share them; (settings, directory)."""
    if count <= 1:
        return settings, None
    directory = Path(tempfile.mkdtemp(prefix="attnserve-fronts-"))
    key = os.urandom(32)
    return [
        replace(s, socket=str(directory / f"worker-{s.index}.sock"), authkey=key) for s in settings
    ], directory


class MergedRegistry:
    """What /metrics serves with several fronts: the first front's registry and every other
    front's metrics, samples of the same name and labels added (counters, histograms, and
    gauges of each front's own calls). `_created` takes the earliest, an info sample the
    largest. Metrics of the workers (readiness, rows, steps) are set by the first front
    alone, so adding leaves them as they are."""

    def __init__(self, registry, others):
        self.registry, self.others = registry, others  # others(): [[Metric, ...], ...]

    def collect(self):
        merged: dict[str, Metric] = {}
        values: dict[str, dict] = {}
        for families in (list(self.registry.collect()), *self.others()):
            for family in families:
                if family.name not in merged:
                    merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                    values[family.name] = {}
                kept = values[family.name]
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    if key not in kept:
                        kept[key] = sample
                        continue
                    before = kept[key].value
                    if sample.name.endswith("_created"):
                        value = min(before, sample.value)
                    elif family.type in ("info", "stateset"):
                        value = max(before, sample.value)
                    else:
                        value = before + sample.value
                    kept[key] = kept[key]._replace(value=value)
        for name, family in merged.items():
            family.samples = list(values[name].values())
            yield family

    def restricted_registry(self, names):
        """The merged samples named in `names` alone: what /metrics?name[]=... serves, as
        prometheus_client's own registry does for one front."""
        return _Restricted(self, frozenset(names))


class _Restricted:
    def __init__(self, registry: MergedRegistry, names: frozenset):
        self.registry, self.names = registry, names

    def collect(self):
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if s.name in self.names]
            if family.samples:
                yield family


class _Process:
    def __init__(self, index: int):
        self.index = index
        self.process = None
        self.control = self.scrape = None
        self.ready: asyncio.Future | None = None


class FrontProcesses:
    """The first front's view of the others: starts them, asks them for their metrics,
    drains them, and starts one again when it dies."""

    def __init__(self, config, settings: list, device: str, main):
        """`main(config, role)`: what a front process runs (the server's `run_front`)."""
        self.config, self.settings, self.main = config, tuple(settings), main
        self.device = device
        self.fronts = [_Process(i) for i in range(1, config.fronts)]
        self.stopping = False
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()  # scrapes come from the metrics server's threads

    async def start(self, listen: str, http_listen: str = "") -> None:
        """Starts every other front on `listen` and `http_listen` (the ports the first one
        got) and waits until each serves; RuntimeError when one cannot."""
        self.config = replace(self.config, listen=listen, http_listen=http_listen)
        for front in self.fronts:
            self._spawn(front)
        try:
            await asyncio.wait_for(asyncio.gather(*(f.ready for f in self.fronts)), READY_SECONDS)
        except TimeoutError as error:
            late = f"a front process was not serving after {READY_SECONDS:g} s"
            raise RuntimeError(late) from error

    def _spawn(self, front: _Process) -> None:
        loop = asyncio.get_running_loop()
        control, their_control = self._context.Pipe()
        scrape, their_scrape = self._context.Pipe()
        role = Secondary(front.index, self.settings, self.device, their_control, their_scrape)
        front.process = self._context.Process(
            target=self.main,
            args=(self.config, role),
            name=f"attnserve-front-{front.index}",
            daemon=False,
        )
        front.process.start()
        their_control.close()
        their_scrape.close()
        front.control, front.scrape, front.ready = control, scrape, loop.create_future()
        loop.add_reader(control.fileno(), self._on_control, front)

    def _on_control(self, front: _Process) -> None:
        loop = asyncio.get_running_loop()
        try:
            while front.control.poll():
                message = front.control.recv()
                if front.ready.done():
                    continue
                if message == "ready":
                    front.ready.set_result(True)
                else:  # "failed: ..."
                    front.ready.set_exception(RuntimeError(message))
        except (EOFError, OSError):  # the front is gone
            loop.remove_reader(front.control.fileno())
            front.process.join(0.5)
            code = front.process.exitcode
            if not front.ready.done():
                log.error("front %d exited before serving (code %s)", front.index, code)
                front.ready.set_exception(RuntimeError(f"front {front.index} exited ({code})"))
                return
            if self.stopping:
                return
            log.warning("front %d exited with code %s; starting it again", front.index, code)
            loop.call_later(RESTART_SECONDS, self._restart, front)

    def _restart(self, front: _Process) -> None:
        if not self.stopping:
            self._spawn(front)
            front.ready.add_done_callback(lambda done: done.exception())

    def collect(self) -> list[list[Metric]]:
        """Every other front's metrics, now (called by the /metrics thread). Every front is
        asked at once and all are given SCRAPE_SECONDS together: fronts that do not answer
        cost one wait, not one each, so the scrape ends within Prometheus's timeout."""
        gathered = []
        with self._lock:
            asked = [(front, pipe) for front in self.fronts if (pipe := self._ask(front))]
            deadline = time.monotonic() + SCRAPE_SECONDS
            for front, pipe in asked:
                try:
                    if pipe.poll(max(0.0, deadline - time.monotonic())):
                        gathered.append(pipe.recv())
                    else:
                        log.warning("front %d did not answer a scrape", front.index)
                except (EOFError, OSError):
                    continue
        return gathered

    def _ask(self, front: _Process):
        """Sends a serving front a scrape -> its scrape pipe (None: not serving, or gone)."""
        pipe = front.scrape
        if pipe is None or front.ready is None or not front.ready.done():
            return None
        try:
            while pipe.poll(0):  # a late answer to a scrape that gave up
                pipe.recv()
            pipe.send("scrape")
        except (EOFError, OSError):
            return None
        return pipe

    def drain(self) -> None:
        """Every other front starts its drain."""
        self.stopping = True
        for front in self.fronts:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                front.control.send("drain")

    async def stopped(self, seconds: float) -> None:
        """Waits for every other front to end (its drain done), at most `seconds`; kills
        what is left."""
        await wait_or_kill([f.process for f in self.fronts if f.process is not None], seconds)
        loop = asyncio.get_running_loop()
        for front in self.fronts:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                loop.remove_reader(front.control.fileno())

    def pids(self) -> list[int]:
        return [f.process.pid for f in self.fronts if f.process is not None]


def remove_sockets(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
