"""The encoder beside the steps: admissions' encoder runs on a thread of their own.

onnxruntime releases the GIL while it runs a graph, so an admission's encoder runs while the
scheduler's thread steps the running rows (on a GPU, in a session of its own, on its own
stream); the admitted rows join the batch at the first step boundary after it has finished.
Where the batch reserved slots for them (service.runtime.rows.static), their memory is written into
those slots here too. Every other change to the batch, and every event, stays on the
scheduler's thread. Each run holds the worker's device lock shared (service.worker.device):
a step that records a CUDA graph waits for it, and it for such a step.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from service.runtime.batching import concat_padded
from service.runtime.inference import Engine
from service.runtime.tensors import EncoderOutput
from service.worker.device import DeviceLock


class EncoderThread:
    def __init__(self, engine: Engine, device: DeviceLock):
        self.engine, self.device = engine, device
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="encoder")

    def submit(self, given: list[dict[str, np.ndarray]], then=None) -> Future:
        """Starts one encoder run over the requests' inputs `given` (each by name, put
        together there), then `then(output)` where given (a batch writing the memory into
        slots reserved for it) -> (its output, seconds)."""
        return self._executor.submit(self._encode, given, then)

    def _encode(self, given: list, then) -> tuple[EncoderOutput, float]:
        start = time.perf_counter()
        with self.device.shared():
            encoder = self.engine.encode(**together(given))
            if then is not None:
                then(encoder)
        return encoder, time.perf_counter() - start

    def close(self) -> None:
        """Waits for the run in progress; runs nothing after."""
        self._executor.shutdown(wait=True)


def together(given: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Requests' encoder inputs (each by name) as one batch, padded to the longest."""
    return {name: concat_padded([inputs[name] for inputs in given]) for name in given[0]}
