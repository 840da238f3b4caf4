"""The device a worker's threads share, and the one thing they may not do beside each other.

A worker runs the device from several threads: the scheduler's, the step thread's, the
encoder thread's of each model it serves. Most runs go beside each other (the encoder of one
admission while the step of the rows before runs). A run that records a CUDA graph may not:
onnxruntime captures in CUDA's global mode, where any other thread's synchronisation or
allocation on the device fails the capture and that thread's run (the worker's loop raised,
and the process ended). `DEVICE` is the worker's lock: every run holds it shared, a run that
records holds it alone, after the runs in progress and before any that asked later.

A binding records its graph on each thread that first runs it (onnxruntime keeps graphs per
thread: service.runtime.tensors.Recording), so `run_step` asks the launch on the thread that
runs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from service.runtime.tensors import Launch


class DeviceLock:
    """Shared by runs beside each other, held alone by a run that records a CUDA graph; one
    that waits to be alone goes before shared runs that ask after it (encoder runs back to
    back never keep a capture waiting). Not reentrant."""

    def __init__(self):
        self._changed = threading.Condition(threading.Lock())
        self._sharing = 0  # runs holding it shared
        self._alone = False
        self._waiting = 0  # runs waiting to hold it alone
        # since last taken: runs that held it alone, and their seconds from asking to
        # letting go (every other run of the worker waited meanwhile)
        self._alone_runs, self._alone_seconds = 0, 0.0

    def enter(self) -> None:
        """Holds it shared (beside other shared runs), once no run is alone or waits to be."""
        with self._changed:
            while self._alone or self._waiting:
                self._changed.wait()
            self._sharing += 1

    def leave(self) -> None:
        with self._changed:
            self._sharing -= 1
            if not self._sharing and self._waiting:
                self._changed.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()

    @contextmanager
    def alone(self) -> Iterator[None]:
        asked = time.perf_counter()
        with self._changed:
            self._waiting += 1
            while self._alone or self._sharing:
                self._changed.wait()
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._changed:
                self._alone = False
                self._alone_runs += 1
                self._alone_seconds += time.perf_counter() - asked
                self._changed.notify_all()

    def take_alone(self) -> tuple[int, float]:
        """(runs held alone, their seconds from asking to letting go) since the last call:
        on CUDA the steps that recorded a graph, which held every other run off."""
        with self._changed:
            taken = self._alone_runs, self._alone_seconds
            self._alone_runs, self._alone_seconds = 0, 0.0
        return taken


DEVICE = DeviceLock()  # the worker process's


def run_step(launch: Launch, device: DeviceLock = DEVICE) -> None:
    """Runs `launch` on this thread: alone on the device where it records its CUDA graph
    here, else beside the others."""
    if launch.records():
        with device.alone():
            launch.run()
        launch.recording.add_here()
    else:  # enter and leave called, not `shared()`: a step's run is the loop's hot path
        device.enter()
        try:
            launch.run()
        finally:
            device.leave()
