"""A worker process: onnxruntime sessions and one continuous batch per served model version.

It loads and verifies every model version of the repository, whatever its kind
(service.worker.startup: the engine its cache choice names, the static step checked on the
device, the golden sets decoded through its own schedulers: warm-up and check in one),
reports ready, then loops here: read messages from the fronts (`Submit`, `Cancel`, `Load`,
`Unload`, `Stop`), run one scheduling round per busy model, send back what happened
(`Report`). The messages are the dataclasses of service.worker.messages.

With several front processes (`fronts` in the configuration) the worker also listens on a Unix
socket of its own (`WorkerSettings.socket`, authenticated by `authkey`), and every other front
connects to it (service.worker.fronts): one batch serves the calls of every front. Each
front's events go back to it alone; the measurements (`Stats`) go to the front that started
the worker, so that every metric is counted once. A model version stays loaded while any
connected front serves it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from service.worker.device import DEVICE
from service.worker.fronts import Fronts
from service.worker.loop_clock import LoopClock
from service.worker.messages import (
    Cancel,
    Failed,
    Last,
    Load,
    Ready,
    Report,
    Stats,
    Stop,
    Submit,
    Unload,
)
from service.worker.scheduler import Scheduler
from service.worker.settings import WorkerSettings
from service.worker.startup import load

STATS_EVERY = 0.1  # seconds between reports when only measurements or the batch state are new


def run_worker(conn, settings: WorkerSettings) -> None:
    """The worker process's main function."""
    # The front owns the workers' lives (a Stop message, or the pipe closing when it is
    # gone): a Ctrl-C or SIGTERM sent to the whole process group must not end them in the
    # middle of a drain, with calls in flight.
    if threading.current_thread() is threading.main_thread():  # not a replica's thread
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    if settings.device == "cuda" and settings.gpu >= 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(settings.gpu)
    try:
        schedulers, info = load(settings)
        fronts = Fronts(conn, schedulers, info, settings)
    except Exception as error:  # reported to the front, which refuses to serve
        conn.send(Failed(f"worker {settings.index}: {type(error).__name__}: {error}"))
        return
    conn.send(Ready(info))
    try:
        with contextlib.suppress(EOFError, BrokenPipeError, KeyboardInterrupt):
            _loop(fronts, schedulers, settings)  # ends on "stop", or when the front is gone
    finally:
        fronts.close()


def _stop(fronts: Fronts, schedulers: dict[str, Scheduler]) -> None:
    """Every scheduler stops; what each still held is answered (Unavailable), each front its
    own jobs."""
    for key, scheduler in schedulers.items():
        fronts.stop(key, scheduler)


def _loop(fronts: Fronts, schedulers: dict[str, Scheduler], settings: WorkerSettings) -> None:
    reported = {key: (0, 0) for key in schedulers}  # (rows, waiting) last sent
    parent = _Load()  # a replica's: what its parent hears of the batches' load
    last_report = time.monotonic()
    clock = LoopClock()
    while True:
        fronts.check_sent()
        clock.lap("reports")
        waits = [w for s in schedulers.values() if (w := s.wait_time()) is not None]
        waiting = "messages" if waits else "idle"  # idle: no job held
        # a replica's parent hears of an emptied batch within STATS_EVERY, and the metrics
        # of the loop's idle time as it passes
        ready = fronts.wait(min([*waits, STATS_EVERY]))
        clock.lap(waiting)
        for link in ready:
            try:
                messages = fronts.inboxes[link].read()
            except (EOFError, OSError):
                if link is fronts.parent:
                    raise
                fronts.drop(link)
                continue
            for message in messages:
                if link not in fronts.links:  # dropped by one of its messages
                    break
                if isinstance(message, Stop) and link is fronts.parent:
                    _stop(fronts, schedulers)
                    return
                if isinstance(message, Submit):
                    fronts.submit(link, message)
                elif isinstance(message, Cancel):
                    if message.key in schedulers:
                        schedulers[message.key].cancel(message.job_id)
                elif isinstance(message, Load):
                    fronts.load(link, message, settings)
                elif isinstance(message, Unload):
                    fronts.unload(link, message.key, asked=True)
        clock.lap("messages")
        for scheduler in schedulers.values():
            if scheduler.busy:
                scheduler.iterate()
                clock.schedule(scheduler.take_phases())
            else:
                scheduler.rest()
        now = time.monotonic()
        due = now - last_report >= STATS_EVERY
        for key, scheduler in list(schedulers.items()):  # a front gone may unload one
            state = (scheduler.rows, len(scheduler.waiting))
            measured = scheduler.stats.step_seconds or scheduler.stats.encoder_seconds
            routed = fronts.route(scheduler.events)
            scheduler.events = []
            # events at once; measurements and the batch state (a gauge) at most every
            # STATS_EVERY, so a busy worker does not send a message a step, and with a report
            # that ends one of the measurer's jobs, so a call's metrics are in when it returns
            changed = due and (measured or clock.pending or state != reported.get(key, (0, 0)))
            measurer = fronts.measurer
            if changed:
                routed.setdefault(measurer, [])
            if measurer is not fronts.parent and parent.tell(key, state, now):
                routed[fronts.parent] = routed.get(fronts.parent, [])
            measuring = changed or _ends_a_job(routed.get(measurer, ()))
            if measuring:  # the loop's time since its last report goes with one
                scheduler.stats.loop_seconds = clock.take()
                scheduler.stats.outbox_seconds = fronts.outbox.take_seconds()
                scheduler.stats.alone_runs, scheduler.stats.alone_seconds = DEVICE.take_alone()
            for link, events in routed.items():
                if link in fronts.links:
                    stats = scheduler.stats if measuring and link is measurer else None
                    telling = fronts.replica and link is fronts.parent
                    told = parent.peak(key, state, now) if telling else state
                    fronts.send(link, Report(key, events, stats, *told))
            if measuring:
                scheduler.stats, reported[key] = Stats(), state
                last_report = now
        clock.lap("reports")


def _ends_a_job(events) -> bool:
    """Whether `events` hold a job's last."""
    return any(isinstance(event, Last) for event in events)


class _Load:
    """What a replica's worker tells its parent of each model's batch: the most rows in use
    and jobs waiting since it last told (Ray Serve samples the replica's load now and then: a
    batch that empties between calls would look idle), at most every STATS_EVERY, and an
    emptied batch once more within STATS_EVERY (the loop wakes at least that often)."""

    def __init__(self):
        self.peaks: dict[str, tuple[int, int]] = {}  # since the last tell
        self.told: dict[str, tuple[tuple[int, int], float]] = {}  # (state, when) last told

    def tell(self, key: str, state: tuple[int, int], now: float) -> bool:
        peak = self.peaks.get(key, (0, 0))
        self.peaks[key] = (max(peak[0], state[0]), max(peak[1], state[1]))
        last, when = self.told.get(key, ((0, 0), 0.0))
        return now - when >= STATS_EVERY and (self.peaks[key] != last or state != last)

    def peak(self, key: str, state: tuple[int, int], now: float) -> tuple[int, int]:
        """The peak to tell now; the next one starts from the present state."""
        told = self.peaks.get(key, state)
        self.told[key] = (told, now)
        self.peaks[key] = state
        return told
