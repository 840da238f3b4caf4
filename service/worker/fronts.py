"""The front processes a worker answers: the pipe to the front that started it, and the
fronts connected on its socket since (several front processes share one batch; a replica's
fronts on a cluster, over TCP), and the model versions they ask it to load while it serves."""

from __future__ import annotations

import contextlib
import os
import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import AuthenticationError, Listener

from service.worker.inbox import Inbox
from service.worker.messages import (
    Failure,
    Last,
    Load,
    Loaded,
    NotLoaded,
    Ready,
    Report,
    Submit,
)
from service.worker.outbox import Outbox
from service.worker.scheduler import Scheduler
from service.worker.settings import no_delay, socket_address
from service.worker.startup import load_model

ACCEPT_SECONDS = 2.0  # how long closing waits for the accepting thread to end


@dataclass
class _Loading:
    """A model version being loaded: the fronts that asked for it, a link once a Load
    (each is answered once the load ends, even those that let go meanwhile: the front drops
    the answer of a Load it gave up), and those that serve it once it is loaded."""

    asked: list = field(default_factory=list)
    holders: set = field(default_factory=set)


class Fronts:
    """The front processes a worker answers: `parent`, the pipe to the front that started it,
    and the fronts connected on its socket since. Keeps which front submitted each job and
    which fronts serve each model version."""

    def __init__(self, parent, schedulers: dict[str, Scheduler], info: dict, settings):
        self.parent, self.links = parent, [parent]
        # what the loop waits on, kept from step to step (multiprocessing's `wait` would
        # build a selector and register everything at every call)
        self._selector = selectors.DefaultSelector()
        self._selector.register(parent, selectors.EVENT_READ)
        self.inboxes = {parent: Inbox(parent)}  # each link's messages, read in bulk
        self.schedulers, self.info = schedulers, info
        self.owner: dict[int, tuple] = {}  # job id -> (link, key), jobs of the other fronts
        self.holders = {key: {parent} for key in schedulers}  # key -> links serving it
        self.listener = self._wake = None
        self.replica = settings.replica
        self.outbox = Outbox()
        # model versions being loaded (key -> _Loading); beside the loop but on CUDA
        # (`load`), their outcomes queued by the loading threads, a byte on `_loaded_wake`
        self.loading: dict[str, _Loading] = {}
        self.load_beside = settings.device != "cuda"
        self._loaded: queue.SimpleQueue = queue.SimpleQueue()
        self._loaded_wake, self._loaded_waker = os.pipe()
        self._selector.register(self._loaded_wake, selectors.EVENT_READ)
        self._ended = False  # closed: a load that ends now is let go of at once
        self._ending = threading.Lock()
        self._accepted: list = []
        self._closing = False  # the loop ended: the accepting thread takes no one more
        if settings.socket:
            family, address = socket_address(settings.socket)
            if family == "AF_UNIX":
                with contextlib.suppress(FileNotFoundError):  # a worker's before this one
                    os.unlink(address)
            self.listener = Listener(address, family, authkey=settings.authkey)
            if family == "AF_INET":  # the port the system chose, for the replica to name
                host, port = self.listener.address
                info["address"] = f"{host}:{port}"
            self._wake, self._waker = os.pipe()
            self._selector.register(self._wake, selectors.EVENT_READ)
            self._accepting = threading.Thread(target=self._accept, name="accept", daemon=True)
            self._accepting.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                link = self.listener.accept()
            except (AuthenticationError, EOFError, ConnectionError):
                continue  # a connection that did not know the key, or left mid-handshake
            except OSError:
                return  # closed
            if self._closing:  # no loop would answer it
                link.close()
                return
            no_delay(link)
            self._accepted.append(link)
            os.write(self._waker, b"\0")

    def wait(self, timeout: float | None) -> list:
        """The links with messages waiting (fronts that connected are added first, and the
        model versions whose load ended are served or refused)."""
        ready = [key.fileobj for key, _ in self._selector.select(timeout)]
        if self._loaded_wake in ready:
            ready.remove(self._loaded_wake)
            os.read(self._loaded_wake, 4096)
            while not self._loaded.empty():
                self._settle(*self._loaded.get())
        if self._wake in ready:
            ready.remove(self._wake)
            os.read(self._wake, 4096)
            while self._accepted:
                link = self._accepted.pop()
                self.links.append(link)
                self.inboxes[link] = Inbox(link)
                self._selector.register(link, selectors.EVENT_READ)
                for holders in self.holders.values():
                    holders.add(link)
                self.send(link, Ready(self.info))
        return ready

    @property
    def measurer(self):
        """The front the measurements go to: the parent, or a replica's first front."""
        if self.replica and len(self.links) > 1:
            return self.links[1]
        return self.parent

    def send(self, link, message) -> None:
        """Sends to one front, by the outbox's thread (a replica's report stamped with its
        clock: Report.sent_at; on the front's machine the clock is the same)."""
        if self.replica and isinstance(message, Report):
            message = replace(message, sent_at=time.monotonic())
        self.outbox.put(link, message)

    def check_sent(self) -> None:
        """Fronts whose messages could not be sent are gone: the parent ends the worker,
        another is dropped."""
        for link in self.outbox.failed():
            if link is self.parent:
                raise BrokenPipeError("the front that started this worker is gone")
            self.drop(link)

    def drop(self, link) -> None:
        """A front went away: its jobs are cancelled and its model versions let go."""
        if link not in self.links:
            return
        self.links.remove(link)
        self._selector.unregister(link)
        self.inboxes.pop(link).close()
        link.close()
        for job_id, (owner, key) in list(self.owner.items()):
            if owner is link and key in self.schedulers:  # its last event goes nowhere
                self.schedulers[key].cancel(job_id)
        for key in list(self.holders):
            self.unload(link, key)

    def submit(self, link, message: Submit) -> None:
        scheduler = self.schedulers.get(message.key)
        if scheduler is None:  # unloaded while that front still named it
            failure = Failure(
                message.job.id,
                "Unavailable",
                f"model version {message.key} is not loaded here; retry",
            )
            self.send(link, Report(message.key, [failure], None, 0, 0))
            return
        if link is not self.parent:
            self.owner[message.job.id] = (link, message.key)
        job = message.job
        if self.replica and job.deadline is not None:  # onto this machine's clock
            job = replace(job, deadline=job.deadline + time.monotonic() - message.sent_at)
        scheduler.submit(job)

    def load(self, link, message: Load, settings) -> None:
        """Loads one more model version and answers Loaded or NotLoaded; a version loaded
        already is answered at once, one being loaded when its load ends. The load runs on a
        thread of its own while the loop serves the other versions, and the loop's `wait`
        takes its outcome. On CUDA it runs in the loop, between two steps (the other
        versions wait meanwhile): the static step's first run in a bucket records a CUDA
        graph, and onnxruntime records in CUDA's global mode, in which a run of another
        thread of the process fails the recording and itself."""
        key = message.key
        if key in self.schedulers:
            self.holders[key].add(link)
            self.send(link, Loaded(key, self.info["models"][key]))
            return
        loading = self.loading.get(key)
        if loading is None:
            loading = self.loading[key] = _Loading()
            if self.load_beside:
                thread = threading.Thread(
                    target=self._load, args=(message, settings), name=f"load {key}", daemon=True
                )
                thread.start()
        loading.asked.append(link)
        loading.holders.add(link)
        if not self.load_beside:
            self._settle(key, _outcome(message, settings))

    def _load(self, message: Load, settings) -> None:
        """A loading thread: the version's outcome to the loop, or, once the loop has
        ended, let go of."""
        outcome = _outcome(message, settings)
        with self._ending:
            if not self._ended:
                self._loaded.put((message.key, outcome))
                os.write(self._loaded_waker, b"\0")
                return
        if isinstance(outcome, tuple):
            outcome[0].close()

    def _settle(self, key: str, outcome) -> None:
        """A load ended: the version is served by the fronts that asked for it and still
        hold it (else let go of at once), and every Load is answered."""
        loading = self.loading.pop(key)
        if isinstance(outcome, tuple):
            scheduler, info = outcome
            holders = {link for link in loading.holders if link in self.links}
            if holders:
                self.schedulers[key], self.info["models"][key] = scheduler, info
                self.info.get("skipped", {}).pop(key, None)  # its content is back
                self.holders[key] = holders
            else:
                scheduler.close()
            answer = Loaded(key, info)
        else:
            answer = NotLoaded(key, outcome)
        for link in loading.asked:
            if link in self.links:
                self.send(link, answer)

    def unload(self, link, key: str, asked: bool = False) -> None:
        """`link`'s front serves `key` no more; the last one to let go unloads it. A
        replica's front that `asked` (an Unload) lets go for the replica as well."""
        if key in self.loading:  # it is served by the fronts that hold it once loaded
            self.loading[key].holders.discard(link)
            if asked and self.replica:
                self.loading[key].holders.discard(self.parent)
        holders = self.holders.get(key)
        if holders is None:
            return
        holders.discard(link)
        if asked and self.replica:
            holders.discard(self.parent)
        if not holders:
            del self.holders[key]
            scheduler = self.schedulers.pop(key, None)
            if scheduler is not None:
                self.stop(key, scheduler, f"model version {key} was unloaded")
            self.info["models"].pop(key, None)

    def stop(self, key: str, scheduler: Scheduler, why: str = "the worker stopped") -> None:
        """`key`'s scheduler stops; what it still held is answered (Unavailable, saying
        `why`), to each front still here its own jobs."""
        scheduler.close(why)
        for link, events in self.route(scheduler.events).items():
            if link in self.links:
                self.send(link, Report(key, events, None, 0, 0))
        scheduler.events = []

    def route(self, events: list) -> dict:
        """{link: its events}: each event to the front whose job it is."""
        if not self.owner:  # the parent's jobs alone (always so with one front)
            return {self.parent: events} if events else {}
        routed: dict = {}
        for event in events:
            owner = self.owner.get(event.job_id)
            link = self.parent if owner is None else owner[0]
            routed.setdefault(link, []).append(event)
            if owner is not None and isinstance(event, Last):
                del self.owner[event.job_id]
        return routed

    def close(self) -> None:
        """Sends what is queued, then lets go of the fronts connected to the socket, so that
        each sees the worker end at once and sends its calls elsewhere (a replica's worker
        ends on a thread of a process that lives on: their connections would stay open).
        The parent's pipe is its caller's: it ends with the process, whose exit code the
        front that started it reads."""
        with self._ending:  # the loads still running let go of their versions
            ended, self._ended = self._ended, True
        self._selector.close()
        if not ended:
            while not self._loaded.empty():
                outcome = self._loaded.get()[1]
                if isinstance(outcome, tuple):
                    outcome[0].close()
            os.close(self._loaded_wake)
            os.close(self._loaded_waker)
        self.outbox.close()
        if self.listener is not None and not self._closing:
            self._stop_accepting()
        for inbox in self.inboxes.values():
            inbox.close()
        for link in [*self.links[1:], *self._accepted]:
            link.close()

    def _stop_accepting(self) -> None:
        """Ends the accepting thread, then the listener. A listener closed while its thread
        waits in accept goes on listening (the call holds the socket) and lets one more front
        in, which would hear nothing: a connection of the worker's own wakes the thread."""
        self._closing = True
        with contextlib.suppress(OSError):
            if isinstance(self.listener.address, str):  # a Unix socket's path
                with socket.socket(socket.AF_UNIX) as waking:
                    waking.connect(self.listener.address)
            else:
                socket.create_connection(self.listener.address, ACCEPT_SECONDS).close()
        self._accepting.join(ACCEPT_SECONDS)
        self.listener.close()
        if not self._accepting.is_alive():
            os.close(self._wake)
            os.close(self._waker)


def _outcome(message: Load, settings) -> tuple | str:
    """(scheduler, info) of the version `message` names, loaded and checked (load_model), or
    why it cannot be: a broken version is refused, the others go on."""
    try:
        return load_model(settings, message.version, message.variant)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
