"""The step beside the scheduler's own work: a step's onnxruntime run on a thread of its own.

The scheduler makes a step ready on its own thread (its rows, inputs and binding), hands the
run to this thread and waits only until the run has started: onnxruntime releases the GIL
while it runs, so from then on the scheduler's thread finishes the jobs the step before ended,
builds partial events and reads messages while the device (or, on the CPU, another core)
computes. The handshake matters: a thread that needed the GIL to start its run would wait
for the scheduler's thread to block. Then the scheduler waits for the run's end and reads
its outputs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from service.runtime.tensors import thread_serial


class Running:
    """A run handed to the step thread."""

    __slots__ = ("call", "error", "finished", "seconds", "started")

    def __init__(self, call: Callable[[], None]):
        self.call, self.error, self.seconds = call, None, 0.0
        self.started, self.finished = threading.Event(), threading.Event()

    def wait(self) -> float:
        """Waits for the run's end -> the seconds it took (its error raised here)."""
        self.finished.wait()
        if self.error is not None:
            raise self.error
        return self.seconds


class StepThread:
    def __init__(self):
        self._runs: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self.serial = -1  # the thread's (service.runtime.tensors.thread_serial), once started
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="step", daemon=True)
        self._thread.start()
        ready.wait()

    def start(self, call: Callable[[], None]) -> Running:
        """Hands `call` to the thread; returns once it has started it."""
        running = Running(call)
        self._runs.put(running)
        running.started.wait()
        return running

    def close(self) -> None:
        """Ends the thread once the run in progress, if any, has ended."""
        self._runs.put(None)
        self._thread.join()

    def _serve(self, ready: threading.Event) -> None:
        self.serial = thread_serial()
        ready.set()
        while (running := self._runs.get()) is not None:
            start = time.perf_counter()
            running.started.set()
            try:
                running.call()
            except BaseException as error:
                running.error = error
            running.seconds = time.perf_counter() - start
            running.finished.set()
