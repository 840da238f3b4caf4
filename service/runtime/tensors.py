"""What crosses between an engine, the batch and its row stores: tensors of the engine's own
type by name, a step's output, the encoder's output, a step made ready to run, and the few
helpers every holder of rows uses."""

from __future__ import annotations

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


class Launch(NamedTuple):
    """A step made ready: `run()` runs it (onnxruntime's run, which releases the GIL: it may
    go on another thread), then `output()` gives what it returns (a store's: StepOutput).
    `captures`: the run records a CUDA graph. While it does, no other thread of the process
    may use the device (onnxruntime captures in CUDA's global mode, where another thread's
    synchronisation or allocation fails the capture and the run): the scheduler runs it on
    its own thread with the encoder thread held off (service.worker.scheduler)."""

    run: Callable[[], None]
    output: Callable[[], Any]
    captures: bool = False


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
