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
import time

from service.worker.fronts import Fronts
from service.worker.messages import Cancel, Failed, Load, Ready, Report, Stats, Stop, Submit, Unload
from service.worker.scheduler import Scheduler
from service.worker.settings import WorkerSettings
from service.worker.startup import load

STATS_EVERY = 0.1  # seconds between reports when only measurements or the batch state are new


def run_worker(conn, settings: WorkerSettings) -> None:
    """The worker process's main function."""
    # The front owns the workers' lives (a Stop message, or the pipe closing when it is
    # gone): a Ctrl-C or SIGTERM sent to the whole process group must not end them in the
    # middle of a drain, with calls in flight.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    if settings.device == "cuda":
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
        scheduler.close()
        for link, events in fronts.route(scheduler.events).items():
            fronts.send(link, Report(key, events, None, 0, 0))
        scheduler.events = []


def _loop(fronts: Fronts, schedulers: dict[str, Scheduler], settings: WorkerSettings) -> None:
    reported = {key: (0, 0) for key in schedulers}  # (rows, waiting) last sent
    last_report = time.monotonic()
    while True:
        fronts.check_sent()
        waits = [w for s in schedulers.values() if (w := s.wait_time()) is not None]
        for link in fronts.wait(min(waits) if waits else None):
            while link in fronts.links:
                try:
                    message = link.recv()
                except (EOFError, OSError):
                    if link is fronts.parent:
                        raise
                    fronts.drop(link)
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
                    fronts.unload(link, message.key)
                if not link.poll(0):
                    break
        for scheduler in schedulers.values():
            if scheduler.busy:
                scheduler.iterate()
        now = time.monotonic()
        due = now - last_report >= STATS_EVERY
        for key, scheduler in list(schedulers.items()):  # a front gone may unload one
            state = (scheduler.rows, len(scheduler.waiting))
            measured = scheduler.stats.step_seconds or scheduler.stats.encoder_seconds
            routed = fronts.route(scheduler.events)
            scheduler.events = []
            own = routed.pop(fronts.parent, [])
            # events at once; measurements and the batch state (a gauge) at most every
            # STATS_EVERY, so a busy worker does not send a message a step
            if own or (due and (measured or state != reported.get(key, (0, 0)))):
                fronts.send(fronts.parent, Report(key, own, scheduler.stats, *state))
                scheduler.stats, reported[key] = Stats(), state
                last_report = now
            for link, events in routed.items():  # the other fronts' calls: their events
                if link in fronts.links:
                    fronts.send(link, Report(key, events, None, *state))
