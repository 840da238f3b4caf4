"""A worker's messages to its fronts, sent by a thread of their own.

A send to a front's pipe blocks while the pipe is full (a front busy answering its calls), and
pickling a report of many results takes time of its own; neither should hold the worker's
loop, and with it every row of the batch. Messages are queued and sent in order, one link at
a time; a link whose send failed is reported back to the loop (`failed`), which decides what
that means (the parent gone: the worker ends; another front: it is dropped).
"""

from __future__ import annotations

import queue
import threading
import time

CLOSE_SECONDS = 5.0  # how long closing waits for the queue to drain


class Outbox:
    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._failed: list = []  # links whose send failed, for the loop
        self._seconds = 0.0  # spent sending (pickling included) since taken
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="outbox", daemon=True)
        self._thread.start()

    def put(self, link, message) -> None:
        self._queue.put((link, message))

    def failed(self) -> list:
        """The links whose send failed since the last call."""
        with self._lock:
            failed, self._failed = self._failed, []
        return failed

    def take_seconds(self) -> float:
        """The thread's seconds spent sending (pickling included) since the last call: its
        share of the GIL beside the worker's loop."""
        with self._lock:
            seconds, self._seconds = self._seconds, 0.0
        return seconds

    def close(self) -> None:
        """Sends what is queued (for at most CLOSE_SECONDS), then stops."""
        self._queue.put(None)
        self._thread.join(CLOSE_SECONDS)

    def _run(self) -> None:
        broken: set = set()  # links already failed: nothing more is sent to them
        while (item := self._queue.get()) is not None:
            link, message = item
            if link in broken:
                continue
            start = time.perf_counter()
            try:
                link.send(message)
            except (OSError, ValueError):  # closed, or its peer gone
                broken.add(link)
                with self._lock:
                    self._failed.append(link)
            with self._lock:
                self._seconds += time.perf_counter() - start
