"""What crosses between an engine, the batch and its row stores: tensors of the engine's own
type by name, a step's output, the encoder's output, a step made ready to run, and the few
helpers every holder of rows uses."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from service.runtime.search import Candidates

Tensor = Any  # the engine's own tensor type (torch.Tensor, numpy array, OrtValue)
Tensors = dict[str, Tensor]  # by decoder input name; rows on axis 0


class StepOutput(NamedTuple):
    """What a decoder step returns."""

    logits: Tensor  # (B, V) the engine's tensor, for `Engine.search` or `Engine.host`
    state: Tensors  # the next state (a growing state one step longer)
    attention: np.ndarray | None  # (B, S) float32 on the host, when asked for
    # the candidates of the search the step was asked for, where the engine answered it
    # within the step (None: ask `Engine.search` for them)
    candidates: Candidates | None = None


@dataclass
class EncoderOutput:
    """What the decoder needs from the encoder, once per request."""

    memory: Tensors  # what every step reads (translator: keys and values per layer)
    memory_mask: Tensor  # (B, S), 1 where the memory position is real
    init: Tensors = field(default_factory=dict)  # states the encoder starts (an LSTM's h, c)

    def rows(self, take, index: np.ndarray) -> EncoderOutput:
        """Rows `index` of every tensor, by the engine's `take`."""
        return EncoderOutput(
            {name: take(t, index) for name, t in self.memory.items()},
            take(self.memory_mask, index),
            {name: take(t, index) for name, t in self.init.items()},
        )


class Recording:
    """The threads on which a binding's CUDA graph is recorded. onnxruntime's CUDA provider
    keeps a session's graphs per thread (its per-thread context): the first run of a
    binding on a thread records the graph there, whichever thread recorded it before, and
    while it records no other thread of the process may use the device (the capture is in
    CUDA's global mode, where another thread's synchronisation or allocation fails it and
    the run)."""

    __slots__ = ("_threads",)

    def __init__(self):
        self._threads: set[int] = set()

    def here(self, serial: int | None = None) -> bool:
        """Whether this thread (or the thread of `serial`: thread_serial) has run the
        binding, its graph recorded there."""
        return (thread_serial() if serial is None else serial) in self._threads

    def add_here(self) -> None:
        self._threads.add(thread_serial())


class Recordings(Recording):
    """The recordings of several bindings run as one (steps run back to back): recorded
    on a thread once every one of them is."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[Recording]):
        super().__init__()
        self.parts = parts

    def here(self, serial: int | None = None) -> bool:
        return all(part.here(serial) for part in self.parts)

    def add_here(self) -> None:
        for part in self.parts:
            part.add_here()


_serials, _this_thread = itertools.count(), threading.local()


def thread_serial() -> int:
    """A number of this thread's own, never given to another thread of the process (a
    thread's ident is reused once it ends; onnxruntime's per-thread state is not)."""
    serial = getattr(_this_thread, "serial", None)
    if serial is None:
        serial = _this_thread.serial = next(_serials)
    return serial


class Launch(NamedTuple):
    """A step made ready: `run()` runs it (onnxruntime's run, which releases the GIL: it may
    go on another thread), then `output()` gives what it returns (a store's: StepOutput).
    `recording`: where the step replays a CUDA graph, the threads that recorded it
    (Recording): on any other, the run records it, alone on the device
    (service.worker.device)."""

    run: Callable[[], None]
    output: Callable[[], Any]
    recording: Recording | None = None

    def records(self, serial: int | None = None) -> bool:
        """Whether the run, made on this thread (or the thread of `serial`), records its
        CUDA graph."""
        return self.recording is not None and not self.recording.here(serial)


def launched(step: Callable[..., StepOutput], *args) -> Launch:
    """The launch of `step(*args)` where the step cannot be split: all of it in `run`."""
    held: list[StepOutput] = []
    return Launch(lambda: held.append(step(*args)), lambda: held[0])


def shape_of(tensor) -> tuple[int, ...]:
    """The shape of an engine tensor: a numpy array, a torch tensor or an OrtValue."""
    return tuple(tensor.shape() if callable(tensor.shape) else tensor.shape)


def written(axis: int, length: int) -> tuple:
    """The index of the positions 0..length on `axis` of a buffer written in place (what lies
    beyond them is never read, so rows are moved without it)."""
    return (slice(None),) * axis + (slice(0, length),)


MIN_CAPACITY = 32  # positions of an in-place buffer when it is first grown


def grown_capacity(capacity: int, needed: int) -> int:
    """The positions an in-place buffer of `capacity` grows to when a row needs `needed`:
    twice as many (or `needed`, at least MIN_CAPACITY), so that a row's growth is copied a
    logarithmic number of times."""
    return max(needed, 2 * capacity, MIN_CAPACITY)


def take_written(tensor: np.ndarray, index: np.ndarray, axis: int, length: int) -> np.ndarray:
    """Rows `index` of a host buffer written in place (the step writes it in place too), only
    their first `length` positions on `axis` moved: within the buffer, whose first
    len(index) rows are returned, copying only the rows that change (a beam that extends its
    own row stays where it is; a fresh buffer would also fault in its pages at every
    reorder); in a new buffer of the same capacity when there are more rows than it has.
    The rows that change are gathered in one copy, then written in one (a source that is
    itself overwritten is read before)."""
    part = written(axis, length)[1:]  # within a row
    if len(index) > len(tensor):
        rows = np.empty((len(index), *tensor.shape[1:]), dtype=tensor.dtype)
        rows[(slice(None), *part)] = tensor[(index, *part)]
        return rows
    changed = np.flatnonzero(index != np.arange(len(index)))
    if changed.size:
        tensor[(changed, *part)] = tensor[(index[changed], *part)]
    # the same array while the rows are as many: an IO binding keeps it bound
    return tensor if len(index) == len(tensor) else tensor[: len(index)]
