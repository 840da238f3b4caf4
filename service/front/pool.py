"""The front's side of the worker processes: start, dispatch, collect, restart.

Each worker is a spawned process with a pipe; the front reads it from the event loop (no
threads). A call goes to the ready worker holding the fewest batch rows among those that hold
its model version (`_Worker.holds`: a worker started while a version replaced in place drains
holds the new content alone), and waits for one while a worker loads it, or restarts and
loads it as it starts (not the content a version replaced in place held, nor a version
unloaded: those calls fail at once). When a worker dies, a new worker takes its place and
the other workers' calls go on untouched; each call it held is sent once more to another
worker, with its remaining deadline, if none of its output has left the front (decoding is
deterministic, so the client cannot tell), and fails with UNAVAILABLE (retryable) otherwise:
a stream that already sent events, or a call already retried.

With several fronts, the first starts the workers (and restarts them) and the others connect
to each worker's socket (`WorkerSettings.socket`): a front that is not the workers' parent
reconnects when a worker comes back. Every front sends calls to every worker; job ids are
unique across fronts (front i of n numbers its jobs i+1, i+1+n, ...). Each front holds its
share of `max_queued_requests` and of the latency budget's rows, and only the first reports
what belongs to the workers (their readiness, rows in use, restarts, measurements).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import multiprocessing
import time
from dataclasses import dataclass, field, replace
from functools import partial
from multiprocessing.connection import Client

from service.front.admission import AdmissionLimit
from service.front.config import gpu_count
from service.front.metrics import Metrics
from service.runtime.errors import ModelRepositoryError, ResourceExhausted, Unavailable
from service.worker.inbox import Inbox
from service.worker.messages import (
    Admitted,
    Cancel,
    Event,
    Failed,
    Failure,
    Job,
    Load,
    Loaded,
    NotLoaded,
    Partial,
    Ready,
    Report,
    Result,
    Stop,
    Submit,
    Unload,
)
from service.worker.process import run_worker
from service.worker.settings import WorkerSettings

log = logging.getLogger("attnserve")
QUEUED_BATCHES = 2  # the admission limit's ceiling: this many full batches per worker
RESTART_DELAYS = (0.0, 0.5, 1.0, 2.0, 5.0)  # seconds before successive restarts of a slot
RECONNECT_SECONDS = 0.1  # a front that is not the workers' parent tries a worker again after
LOAD_SECONDS = 600.0  # a worker's answer to a Load (the version loaded and checked), within


class CallState(enum.Flag):
    """What has happened to a call in flight; each a step it never takes back. QUEUED (no
    flag) until a worker admits it to its batch."""

    QUEUED = 0
    ADMITTED = enum.auto()  # its rows joined a batch: it no longer counts as queued
    RETRIED = enum.auto()  # sent to a second worker after the first died
    STREAMED = enum.auto()  # a partial event has gone to the client
    CANCELLED = enum.auto()  # the client went away

    @property
    def retriable(self) -> bool:
        """Whether a worker's death may send it to another one unseen: nothing of it has left
        the front, it was not retried already, and its client is still there."""
        return not self & (CallState.RETRIED | CallState.STREAMED | CallState.CANCELLED)


@dataclass
class Call:
    """A job in flight, as the front sees it: its events arrive on `events`."""

    job: Job
    key: str
    model: str  # for metric labels
    method: str
    worker: _Worker | None = None
    state: CallState = CallState.QUEUED
    started: float = field(default_factory=time.monotonic)  # when it was submitted
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)

    def fail(self, error: Exception) -> None:
        self.events.put_nowait(Failure(self.job.id, type(error).__name__, str(error)))


class _Worker:
    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.process = None
        self.conn = None
        self.ready: asyncio.Future | None = None
        self.calls: dict[int, Call] = {}
        self.held = 0  # batch rows its calls need, kept as calls come and go
        self.rows: dict[str, int] = {}  # batch rows in use by model key, as last reported
        self.info: dict = {}
        self.failures = 0
        self.loading: dict[str, asyncio.Future] = {}  # model key -> Loaded/NotLoaded
        # model key -> answers still to come to Loads given up (timed out): each is dropped,
        # not taken for the answer to a later Load of the key (the pipe keeps their order)
        self.owed: dict[str, int] = {}
        self.leaving = False  # a cluster's replica scaled down: it gets no new calls
        self.inbox: Inbox | None = None  # `conn`'s messages, read in bulk

    def attach(self, conn) -> None:
        """`conn` the link to the worker from now on (its batch rows not yet reported)."""
        self.conn, self.inbox, self.rows = conn, Inbox(conn), {}

    def read(self) -> list:
        """Every whole message waiting on `conn` (service.worker.inbox: one read for all of
        them, where the connection's own `poll` and `recv` take three system calls a
        message); EOFError once the worker closed its end, OSError where the link broke."""
        return self.inbox.read()

    def let_go(self) -> None:
        """Closes `conn` (and the inbox's descriptor over it: the worker sees its end)."""
        if self.inbox is not None:
            self.inbox.close()
            self.inbox = None
        self.conn.close()
        self.conn = None

    @property
    def alive(self) -> bool:
        ready = self.ready is not None and self.ready.done() and not self.ready.exception()
        return ready and not self.leaving

    def holds(self, key: str) -> bool:
        """Whether it takes calls of model version `key`: ready, with the version loaded."""
        return self.alive and key in self.info.get("models", {})

    def may_hold(self, key: str, at_start: bool) -> bool:
        """Whether it may come to hold `key`: it is loading the version, or (re)starting
        while a worker that starts comes to hold it (`at_start`, WorkerPool._at_start)."""
        return key in self.loading or (at_start and not (self.alive or self.leaving))

    def load(self) -> int:
        return self.held

    def add(self, call: Call) -> None:
        self.calls[call.job.id] = call
        self.held += call.job.rows

    def remove(self, job_id: int) -> Call | None:
        call = self.calls.pop(job_id, None)
        if call is not None:
            self.held -= call.job.rows
        return call


class WorkerPool:
    def __init__(
        self,
        settings: list[WorkerSettings],
        metrics: Metrics,
        max_queued: int,
        latency_budget_seconds: float = 0.0,
        front: int = 0,
        fronts: int = 1,
    ):
        self.metrics, self.max_queued = metrics, max(1, max_queued // fronts)
        self.parent = front == 0  # starts the workers; else connects to them
        self.workers = [_Worker(s) for s in settings]
        # what a worker started from now on loads
        self.template = settings[0] if settings else WorkerSettings(index=0, models=())
        self.admission = None  # service.front.admission: rows in flight under a latency budget
        if latency_budget_seconds > 0:
            # one full batch per worker to start with, shared by the fronts
            rows = max(1, sum(s.max_rows for s in settings) // fronts)
            self.admission = AdmissionLimit(
                latency_budget_seconds, QUEUED_BATCHES * rows, len(settings), start=rows
            )
            metrics.admission_limit.set(self.admission.limit)
        self.models: dict[str, str] = {}  # key -> model name, for metric labels
        self.queued = 0
        self.stopping = False
        # told whether health may say SERVING (a worker is ready), at every change
        self.on_serving = None
        self._told_serving = True  # the start waits for every worker
        self._telling: set[asyncio.Task] = set()
        self._context = multiprocessing.get_context("spawn")
        self._ids = itertools.count(front + 1, fronts)
        self._changed = asyncio.Event()  # set at a change of what the workers hold (_notify)
        self._retries: dict[asyncio.Task, Call] = {}  # calls waiting to be sent again
        self._adding: dict[str, Load] = {}  # versions being loaded by the ready workers
        self._answers: dict[str, list[asyncio.Future]] = {}  # each load's workers' answers
        self._refusal: Exception | None = None  # set by fail_all: no call waits for a worker

    # -- life cycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Starts every worker; raises ModelRepositoryError-like failures as RuntimeError."""
        for worker in self.workers:
            self._start(worker)
        results = await asyncio.gather(*(w.ready for w in self.workers), return_exceptions=True)
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        if failures:
            await self.stop()
            raise RuntimeError("; ".join(failures))

    def _start(self, worker: _Worker) -> None:
        if self.parent:
            self._spawn(worker)
        else:
            self._connect(worker)

    def _connect(self, worker: _Worker) -> None:
        """Connects to a worker another front started; tries again while it is (re)starting."""
        loop = asyncio.get_running_loop()
        if worker.ready is None or worker.ready.done():
            worker.ready = loop.create_future()
        if self.stopping:
            return
        try:
            conn = Client(worker.settings.socket, "AF_UNIX", authkey=worker.settings.authkey)
        except OSError:  # not listening (yet, or again)
            loop.call_later(RECONNECT_SECONDS, self._connect, worker)
            return
        worker.attach(conn)
        loop.add_reader(conn.fileno(), self._on_readable, worker)

    def _spawn(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=run_worker,
            args=(child, worker.settings),
            name=f"attnserve-worker-{worker.settings.index}",
            daemon=True,
        )
        process.start()
        child.close()
        worker.process, worker.ready = process, loop.create_future()
        worker.attach(parent)
        loop.add_reader(parent.fileno(), self._on_readable, worker)

    async def stop(self) -> None:
        self.stopping = True
        for task in list(self._retries):
            task.cancel()
        loop = asyncio.get_running_loop()
        for worker in self.workers:
            if worker.conn is None:
                continue
            loop.remove_reader(worker.conn.fileno())
            if worker.process is None:  # a worker of another front: let go of it
                worker.let_go()
                continue
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(Stop())
        await wait_or_kill([w.process for w in self.workers if w.process is not None], 5.0)
        for worker in self.workers:
            if worker.conn is not None:
                worker.let_go()
        self.fail_all(Unavailable("the server is stopping"))

    # -- model versions while serving ------------------------------------------------------
    async def load(self, key: str, version, variant: str, timeout: float = LOAD_SECONDS) -> None:
        """Every ready worker loads and checks one more model version; ModelRepositoryError
        when one of them cannot, Unavailable when a worker died before it answered,
        TimeoutError when one has not answered within `timeout` (each time the version
        unloaded again from the workers that loaded it). A worker that comes up while it
        loads is asked too, and its answer counts as the others' (else it would take the
        version's calls without it); one started later loads it with the others."""
        message = Load(key, version, variant)
        self._adding[key], self._answers[key] = message, []
        for worker in self.workers:
            if worker.alive and worker.conn is not None:
                self._ask(worker, message)
        try:
            outcomes = await asyncio.wait_for(self._answered(key), timeout)
        except TimeoutError:
            self.unload(key)
            raise TimeoutError(f"{key}: not loaded by every worker within {timeout:g} s") from None
        finally:
            answers = self._answers.pop(key)
            del self._adding[key]
            for worker in self.workers:  # not a future a cluster's replica syncs with
                if (future := worker.loading.get(key)) in answers:
                    self._stop_waiting(worker, key, future)
        problems = [o for o in outcomes if isinstance(o, BaseException)]
        if problems:
            self.unload(key)
            text = "; ".join(dict.fromkeys(map(str, problems)))
            if all(isinstance(problem, Unavailable) for problem in problems):
                raise Unavailable(text)  # nothing wrong with the version itself
            raise ModelRepositoryError(text)
        self._set_models(
            (*((k, v) for k, v in self.template.models if k != key), (key, version)),
            {**dict(self.template.variants), key: variant},
        )

    @staticmethod
    def _stop_waiting(worker: _Worker, key: str, answer: asyncio.Future) -> None:
        """The load of `key` waits no more for `worker`'s `answer`: one not come yet (the
        wait for the answers cancels their futures) is owed, and dropped when it comes."""
        if worker.loading.get(key) is answer:
            del worker.loading[key]
        if answer.cancelled() or not answer.done():
            answer.cancel()
            worker.owed[key] = worker.owed.get(key, 0) + 1

    @property
    def serving(self) -> bool:
        """Whether health may say SERVING: a worker is ready to take calls (while none is,
        a call waits for one restarted, and a probe sends the next ones elsewhere)."""
        return any(w.alive for w in self.workers)

    def _tell_serving(self) -> None:
        """Tells `on_serving` (the server's health) whether a worker is ready, at a change."""
        serving = self.serving
        if serving == self._told_serving:
            return
        self._told_serving = serving
        if self.on_serving is not None and not self.stopping:
            task = asyncio.get_running_loop().create_task(self.on_serving(serving))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)

    def _ask(self, worker: _Worker, message: Load) -> None:
        """Sends `worker` a version to load; the load waits for its answer."""
        future = self._send_load(worker, message)
        if future is not None:
            self._answers[message.key].append(future)

    def _send_load(self, worker: _Worker, message: Load) -> asyncio.Future | None:
        """Sends `worker` a version to load -> the future of its answer (None: it is dying,
        its answer never comes)."""
        future = worker.loading[message.key] = asyncio.get_running_loop().create_future()
        try:
            worker.conn.send(message)
        except (OSError, ValueError):
            return None
        return future

    async def _answered(self, key: str) -> list:
        """Every answer to the load of `key`, those of the workers that came up while it
        waited (asked by `_catch_up`) included."""
        answers = self._answers[key]
        while True:
            asked = len(answers)
            outcomes = await asyncio.gather(*answers, return_exceptions=True)
            if len(answers) == asked:
                return outcomes

    def unload(self, key: str) -> None:
        """The workers drop a model version (send nothing more for it first); its rows
        leave the gauge, even those of calls cut while it was busy."""
        settings = self.template
        self._set_models(
            tuple((k, v) for k, v in settings.models if k != key),
            {k: v for k, v in settings.variants if k != key},
        )
        for worker in self.workers:
            worker.rows.pop(key, None)
            worker.info.get("models", {}).pop(key, None)  # no call is sent it for key
            if worker.conn is not None:
                with contextlib.suppress(OSError, ValueError):
                    worker.conn.send(Unload(key))
        if self.parent:
            self._update_rows(self.models.get(key, key))
        self._notify()

    def serves(self, key: str) -> bool:
        """Whether the workers serve model version `key` for this front (loaded, not yet
        unloaded)."""
        return any(k == key for k, _ in self.template.models)

    def _set_models(self, models: tuple, variants: dict) -> None:
        self.template = replace(self.template, models=models, variants=tuple(variants.items()))
        for worker in self.workers:  # what a worker started from now on loads
            worker.settings = replace(
                worker.settings, models=models, variants=tuple(variants.items())
            )

    def calls_of(self, key: str) -> int:
        """Calls of one model version in flight (queued or decoding)."""
        held = sum(c.key == key for w in self.workers for c in w.calls.values())
        return held + sum(c.key == key for c in self._retries.values())

    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process is not None and w.alive]

    # -- calls ----------------------------------------------------------------------------
    def next_id(self) -> int:
        return next(self._ids)

    def check_admission(self, rows: int = 1) -> None:
        """RESOURCE_EXHAUSTED when a call of `rows` batch rows may not start now:
        `max_queued_requests` jobs wait already, or its rows would pass the latency budget's
        limit. Asked once per call, for all its jobs' rows before any is submitted (a call cut
        into jobs is admitted or refused whole; an idle pool admits any), and before the
        front tokenises, so that a refusal costs little."""
        if self.queued >= self.max_queued:
            raise ResourceExhausted(
                f"{self.queued} requests are already waiting (max_queued_requests "
                f"{self.max_queued}); retry later"
            )
        if self.admission is None:
            return
        in_flight = self.rows_in_flight()
        if not self.admission.admits(in_flight, rows):
            raise ResourceExhausted(
                f"{in_flight} batch rows are in flight, at most {self.admission.limit} keep "
                f"calls within latency_budget_seconds {self.admission.budget:g}; retry later"
            )

    async def submit(
        self, key: str, method: str, job: Job, timeout: float | None, received: float | None = None
    ) -> Call:
        """Sends `job` to the ready worker holding the fewest rows; its call passed
        `check_admission` first. `received` (monotonic) is when the front got the request:
        the call's latency for the admission limit runs from it."""
        worker = await self._ready_worker(key, timeout)
        call = Call(job, key, self.models.get(key, key), method, worker)
        if received is not None:
            call.started = received
        worker.add(call)
        self.queued += 1
        self.metrics.requests_queued.labels(call.model, method).inc()
        try:
            worker.conn.send(Submit(key, job, time.monotonic()))
        except (OSError, ValueError):  # the worker died a moment ago, before its pipe said
            self._on_death(worker)  # so: its calls, this one among them, go to another
        return call

    async def _ready_worker(
        self, key: str, timeout: float | None, late: Unavailable | None = None
    ) -> _Worker:
        """The ready worker that holds model version `key` with the fewest rows. While none
        holds it but one may (a worker loading it, or restarting while a worker that starts
        loads it), waits within `timeout`, then raises `late` (by default: no worker is
        ready); UNAVAILABLE at once when a worker is ready and none may hold it (the content
        a version replaced in place held, which a worker started since never loads, or a
        version unloaded)."""
        end = time.monotonic() + (timeout or 30.0)
        # a loop: the worker whose start woke this wait may have died again before it ran
        while not (holders := [w for w in self.workers if w.holds(key)]):
            if self._refusal is not None:
                raise Unavailable(str(self._refusal))
            ready, at_start = any(w.alive for w in self.workers), self._at_start(key)
            if ready and not any(w.may_hold(key, at_start) for w in self.workers):
                raise Unavailable(
                    f"no worker holds model version {key} any more (its content was replaced "
                    "or retired since the call named it); retry the request"
                )
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), max(0.0, end - time.monotonic()))
            except TimeoutError as error:
                raise late or self._not_held(key) from error
        return min(holders, key=_Worker.load)

    def _not_held(self, key: str) -> Unavailable:
        """Why a call of `key` found no worker holding it within its wait: none was ready, or
        those ready were still loading the version."""
        if any(w.alive for w in self.workers):
            return Unavailable(f"model version {key} is still loading on the workers; retry later")
        return Unavailable("no worker is ready; retry later")

    def _at_start(self, key: str) -> bool:
        """Whether a worker that starts now comes to hold `key` (loaded at its start, or
        caught up): a version served or being added whose content no worker skipped at its
        start (its directory holds another content since: every worker started skips it)."""
        skipped = any(key in w.info.get("skipped", {}) for w in self.workers)
        return key in self._wanted() and not skipped

    def _notify(self) -> None:
        """Wakes the calls that wait for a worker holding their version: what a worker holds,
        or whether it is ready, changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _retry(self, call: Call, error: Exception) -> None:
        """Sends a call whose worker died to another one, within its remaining deadline; the
        call fails with `error` when none is ready in time or the server is stopping."""
        deadline = call.job.deadline
        try:
            if self.stopping:
                raise error
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise error
            worker = await self._ready_worker(call.key, remaining, error)
            if self.stopping or CallState.CANCELLED in call.state or worker.conn is None:
                raise error
            call.worker = worker
            worker.add(call)
            worker.conn.send(Submit(call.key, call.job, time.monotonic()))
            self.metrics.retried_calls.labels(call.model, call.method).inc()
        except (Unavailable, OSError, ValueError, asyncio.CancelledError) as stopped:
            if call.worker is not None:
                call.worker.remove(call.job.id)
            if CallState.ADMITTED not in call.state:
                self._dequeue(call)
            # why it was not sent again: no worker holds its version, or `error`
            call.fail(self._refusal or (stopped if isinstance(stopped, Unavailable) else error))
            if isinstance(stopped, asyncio.CancelledError):
                raise

    def cancel(self, call: Call) -> None:
        """Frees the call's batch rows at the worker's next step (client gone). Once: the
        handler and its events generator may both ask."""
        if CallState.CANCELLED in call.state:
            return
        call.state |= CallState.CANCELLED
        worker = call.worker
        if worker is not None and call.job.id in worker.calls and worker.conn is not None:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(Cancel(call.key, call.job.id))

    def _settle(self, worker: _Worker, job_id: int) -> Call | None:
        call = worker.remove(job_id)
        if call is not None and CallState.ADMITTED not in call.state:
            self._dequeue(call)
        return call

    def _dequeue(self, call: Call) -> None:
        call.state |= CallState.ADMITTED
        self.queued -= 1
        self.metrics.requests_queued.labels(call.model, call.method).dec()

    def rows_in_flight(self) -> int:
        """Batch rows of every call sent to a worker and not finished, queued ones included."""
        return sum(w.held for w in self.workers) + sum(c.job.rows for c in self._retries.values())

    # -- messages from workers ------------------------------------------------------------
    def _on_readable(self, worker: _Worker) -> None:
        conn = worker.conn
        try:
            for message in worker.read():
                if worker.conn is not conn:  # ended by a message (a leaving replica let go of)
                    break
                self._handle(worker, message)
        except (EOFError, OSError):
            self._on_death(worker)

    def _handle(self, worker: _Worker, message) -> None:
        if isinstance(message, Report):
            model = self.models.get(message.key, message.key)
            offset = time.monotonic() - message.sent_at if message.sent_at else 0.0
            for event in message.events:
                if isinstance(event, Result) and offset:  # onto this front's clock
                    event = replace(event, timings=event.timings.moved(offset))
                self._event(worker, model, event)
            if message.stats is not None:  # before the calls its events woke answer
                self.metrics.observe_worker_stats(model, message.stats)
            if self.serves(message.key):  # not a report sent before an Unload arrived
                worker.rows[message.key] = message.rows
            if self.parent:
                self._update_rows(model)
        elif isinstance(message, Ready):
            worker.info, worker.failures = message.info, 0
            self._catch_up(worker)
            worker.ready.set_result(message.info)
            if self.parent:
                self.metrics.workers_ready.set(sum(w.alive for w in self.workers))
            self._tell_serving()
            self._notify()
        elif isinstance(message, Failed):
            worker.ready.set_exception(RuntimeError(message.message))
        elif isinstance(message, Loaded | NotLoaded):
            if worker.owed.get(message.key):  # the answer to a Load given up
                worker.owed[message.key] -= 1
                return
            future = worker.loading.pop(message.key, None)
            answered = future is not None and not future.done()
            if isinstance(message, Loaded):
                if self.serves(message.key) or message.key in self._adding:  # not given up
                    worker.info.setdefault("models", {})[message.key] = message.info
                    worker.info.get("skipped", {}).pop(message.key, None)  # its content is back
                if answered:
                    future.set_result(message.info)
            elif answered:
                future.set_exception(ModelRepositoryError(message.message))
            self._notify()

    def _wanted(self) -> dict[str, Load]:
        """{key: its Load}: the versions served, and those being added."""
        variants = dict(self.template.variants)
        wanted = {key: Load(key, version, variants[key]) for key, version in self.template.models}
        return wanted | self._adding

    def _catch_up(self, worker: _Worker) -> None:
        """A worker that reports ready without a version this front serves or is adding
        (started before the version came, or met by a front that is not its parent) is sent
        its Load, and takes the version's calls once it answers Loaded (`holds`). One that
        holds a version this front does not serve (met by a front started after the version
        went, or was replaced in place) is sent its Unload: it drops the version once no
        front serves it. A version the worker skipped at its start is not asked again: its
        directory holds another content now (service.worker.startup.load)."""
        index, wanted = worker.settings.index, self._wanted()
        have = worker.info.setdefault("models", {})
        skipped = {k: why for k, why in worker.info.get("skipped", {}).items() if k in wanted}
        for key, why in skipped.items():
            log.warning("worker %d skipped %s at its start: %s", index, key, why)
        for key, load in wanted.items():
            if key in have or key in skipped:
                continue
            log.info("worker %d loads %s", index, key)
            if key in self._adding:  # not served until this worker has it too
                self._ask(worker, load)
            elif (future := self._send_load(worker, load)) is not None:
                future.add_done_callback(partial(self._caught_up, index, key))
        for key in [k for k in have if k not in wanted]:
            del have[key]
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(Unload(key))

    @staticmethod
    def _caught_up(index: int, key: str, answer: asyncio.Future) -> None:
        """Logs a worker's refusal of a version it was sent as it came up."""
        error = None if answer.cancelled() else answer.exception()
        if isinstance(error, ModelRepositoryError):
            log.error("worker %d cannot load %s: %s", index, key, error)

    def _event(self, worker: _Worker, model: str, event: Event) -> None:
        if isinstance(event, Admitted):
            call = worker.calls.get(event.job_id)
            if call is not None and CallState.ADMITTED not in call.state:
                self._dequeue(call)
                self.metrics.queue_wait.labels(model, call.method).observe(event.waited)
            return
        if isinstance(event, Partial):
            call = worker.calls.get(event.job_id)
            if call is not None:
                call.state |= CallState.STREAMED
        else:  # a Result or a Failure ends the call
            call = self._settle(worker, event.job_id)
            # the admission limit learns from answers and from calls that ran out of time
            # (under overload those are the slow ones), not from what the client cancelled
            slow = isinstance(event, Result) or event.kind == "DeadlineExceeded"
            if call is not None and slow and self.admission is not None:
                now = time.monotonic()
                self.admission.observe(now - call.started, now)
                self.metrics.admission_limit.set(self.admission.limit)
        if call is not None:
            call.events.put_nowait(event)

    def _update_rows(self, model: str) -> None:
        """The gauge of `model`'s rows: its versions' rows in every worker's batches."""
        named = self.models.get
        rows = [n for w in self.workers for key, n in w.rows.items() if named(key, key) == model]
        self.metrics.batch_rows_in_use.labels(model).set(sum(rows))

    def _on_death(self, worker: _Worker) -> None:
        if worker.conn is None:
            return
        code, was_alive = self._lost(worker)
        if not self.stopping:
            self._replace(worker, code, was_alive)

    def _lost(self, worker: _Worker) -> tuple[int | None, bool]:
        """A worker's connection ended: its calls go to other workers (or fail), its loads
        fail. (Its exit code where this front started it, whether it was serving.)"""
        loop = asyncio.get_running_loop()
        loop.remove_reader(worker.conn.fileno())
        worker.let_go()
        code = None  # known to the workers' parent only
        if worker.process is not None:
            worker.process.join(1)
            code = worker.process.exitcode
        if worker.ready is not None and not worker.ready.done():
            worker.ready.set_exception(RuntimeError(f"worker exited with code {code}"))
        was_alive = worker.alive or worker.calls
        for future in worker.loading.values():
            if not future.done():
                future.set_exception(Unavailable(f"worker exited with code {code}"))
        worker.loading.clear()
        worker.owed.clear()
        worker.ready = None
        worker.rows = {}
        if self.parent:
            self.metrics.workers_ready.set(sum(w.alive for w in self.workers))
        self._tell_serving()
        error = Unavailable(
            f"the worker decoding this request stopped (exit code {code}); retry the request"
        )
        for job_id in list(worker.calls):
            call = worker.remove(job_id)
            if self.stopping or not call.state.retriable:
                if CallState.ADMITTED not in call.state:
                    self._dequeue(call)
                call.fail(error)
                continue
            call.state |= CallState.RETRIED
            call.worker = None
            task = loop.create_task(self._retry(call, error))
            self._retries[task] = call
            task.add_done_callback(lambda done: self._retries.pop(done, None))
        if self.parent:
            for model in set(self.models.values()):
                self._update_rows(model)
        return code, bool(was_alive)

    def _replace(self, worker: _Worker, code: int | None, was_alive: bool) -> None:
        """A new worker in the lost one's place: restarted by its parent front, which the
        others connect to again."""
        loop = asyncio.get_running_loop()
        if not self.parent:  # its parent front restarts it; this one connects again
            log.warning("worker %d went away; connecting again", worker.settings.index)
            loop.call_later(RECONNECT_SECONDS, self._connect, worker)
            return
        log.warning("worker %d exited with code %s; restarting it", worker.settings.index, code)
        if was_alive:
            self.metrics.worker_restarts.inc()
        delay = RESTART_DELAYS[min(worker.failures, len(RESTART_DELAYS) - 1)]
        worker.failures += 1
        loop.call_later(delay, self._restart, worker)

    def _restart(self, worker: _Worker) -> None:
        if self.stopping:
            return
        self._spawn(worker)
        worker.ready.add_done_callback(lambda future: future.exception())  # logged by death

    def fail_all(self, error: Exception) -> None:
        """Ends every call in flight with `error`, those waiting for a restarted worker too
        (sent again after their worker died, or not yet sent); a call that would wait for
        one from now on is refused with it at once."""
        self._refusal = error
        self._notify()  # the waits see the refusal
        for worker in self.workers:
            for job_id in list(worker.calls):
                self._settle(worker, job_id).fail(error)


async def wait_or_kill(processes: list, seconds: float) -> None:
    """Waits at most `seconds` for the processes to end, then kills what is left."""
    deadline = time.monotonic() + seconds
    for process in processes:
        while process.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if process.is_alive():
            process.kill()
        process.join(1)


def worker_settings(config, models: tuple, device: str, variants: dict) -> list[WorkerSettings]:
    """One worker's settings per worker; `models` is ((key, ModelVersion), ...), `device` and
    `variants` ({key: variant}) as the front chose them."""
    gpus = max(1, gpu_count()) if device == "cuda" else 1
    base = WorkerSettings(
        index=0,
        models=models,
        variants=tuple(variants.items()),
        device=device,
        io_binding=config.io_binding,
        cache=config.cache,
        max_rows=config.max_batch_rows,
        batching=config.batching,
        window=config.batch_window_ms / 1000,
        encoder=config.encoder,
        step=config.step,
        steps_ahead=config.steps_ahead,
        ahead_wait=config.ahead_wait_ms / 1000,
    )
    return [replace(base, index=i, gpu=i % gpus) for i in range(config.worker_count(device))]
