"""The static step's buckets: buffers allocated once for a number of slots and a memory size,
and each bucket's bindings of the step, one per form of the step and k.

Nothing here is ever reallocated, so on CUDA the graph a binding's first run records stays
valid as long as the bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from service.runtime.onnx_runtime import allocate, banned_bias, named_shape, numpy_type
from service.runtime.search import CANDIDATES, Candidates
from service.runtime.static_step import StaticStep, StepGraph
from service.runtime.tensors import Recording, Tensors

FED = ("input_ids", "positions", "memory_mask")  # the int64 inputs a step writes, in order
# the most greedy steps run back to back on the device (`Bucket.ahead`): each step after the
# first is fed the ids the one before chose, where they lie
MAX_AHEAD = 8
INT64 = np.dtype(np.int64).itemsize


@dataclass(frozen=True)
class SlotBuffer:
    """A buffer of slots (rows on axis 0) allocated once on its device, with its layout, so
    that a run of its slots is bound as a graph's output at their address."""

    value: ort.OrtValue
    dtype: np.dtype
    row: tuple[int, ...]  # a slot's shape
    row_bytes: int
    start: int  # the address of slot 0

    @classmethod
    def allocate(cls, device: str, shape: list[int], dtype) -> SlotBuffer:
        value, dtype = allocate(device, shape, dtype), np.dtype(dtype)
        row = tuple(shape[1:])
        size = int(np.prod(row, dtype=np.int64)) * dtype.itemsize
        return cls(value, dtype, row, size, value.data_ptr())

    def bind_rows(self, binding: ort.IOBinding, name: str, device: str, slot: int, count: int):
        """Binds output `name` to `count` slots from `slot` on, in place."""
        address = self.start + slot * self.row_bytes
        binding.bind_output(name, device, 0, self.dtype, [count, *self.row], address)


@dataclass(frozen=True)
class CandidateBuffer:
    """The lean step's search outputs at one k, ids (slots, k) int64 then log_probs (slots,
    k), bound to the two parts of one buffer, so that they leave the device in one copy a
    step."""

    value: ort.OrtValue  # (bytes,) uint8
    shape: tuple[int, int]  # (slots, k)
    dtypes: tuple[np.dtype, ...]  # of ids and log_probs
    on_host: bool  # on the CPU, where `numpy()` is a view of the buffer, not a copy

    @classmethod
    def allocate(cls, session: ort.InferenceSession, device: str, slots: int, k: int):
        types = {o.name: np.dtype(numpy_type(o.type)) for o in session.get_outputs()}
        dtypes = tuple(types[n] for n in CANDIDATES)
        size = slots * k * sum(d.itemsize for d in dtypes)
        value = allocate(device, (size,), np.uint8)
        return cls(value, (slots, k), dtypes, value.device_name().lower() == "cpu")

    def bind(self, binding: ort.IOBinding, device: str) -> None:
        address, count = self.value.data_ptr(), self.shape[0] * self.shape[1]
        for name, dtype in zip(CANDIDATES, self.dtypes, strict=True):  # int64 first: aligned
            binding.bind_output(name, device, 0, dtype, list(self.shape), address)
            address += count * dtype.itemsize

    def read(self) -> Candidates:
        """The last step's candidates, copied once (the next step writes the buffer again:
        on the CPU `numpy()` is a view of it, on a GPU already a copy)."""
        raw, start, count = self.value.numpy(), 0, self.shape[0] * self.shape[1]
        if self.on_host:
            raw = raw.copy()
        parts = []
        for dtype in self.dtypes:
            end = start + count * dtype.itemsize
            parts.append(raw[start:end].view(dtype).reshape(self.shape))
            start = end
        return Candidates(*parts)


def _buffers(step: StaticStep, names, sizes: dict[str, int]) -> dict[str, SlotBuffer]:
    """Buffers of the step's float inputs `names`, their named axes sized by `sizes`."""
    inputs = step.inputs()
    return {
        n: SlotBuffer.allocate(step.device, named_shape(inputs[n], sizes), step.float_dtype)
        for n in names
    }


class SlotBuffers:
    """What a number of slots holds whatever its memory size: the cache buffers (read and
    written in place), shared by its buckets of every memory size (a batch is in one of them
    at a time, so the cache never moves between them)."""

    def __init__(self, step: StaticStep, slots: int):
        inputs = [s.input for s in step.interface.states]
        self.buffers = _buffers(step, inputs, {"batch": slots})
        self.state: Tensors = {n: b.value for n, b in self.buffers.items()}


@dataclass
class BucketBinding:
    """A bucket's binding of one form of the step at one k, made for its first run (which
    records its CUDA graph where the step is captured: `recording`, on each thread that runs
    it)."""

    binding: ort.IOBinding
    options: ort.RunOptions | None
    recording: Recording | None
    outputs: dict[str, ort.OrtValue | None]  # what a run returns by name (a state's: None)
    kept: tuple  # host arrays bound (k): alive while bound
    bias: ort.OrtValue | None = None  # the lean step's banned tokens, written in place
    candidates: CandidateBuffer | None = None  # the lean step's search outputs
    banned: tuple[int, ...] = ()  # the tokens `bias` bans now
    # `options` without the wait for the device at the end of a run, where it is captured:
    # for a step that another follows at once (`Bucket.ahead`)
    unsynced: ort.RunOptions | None = None


class Bucket:
    """The buffers of one bucket, (slots, memory size), allocated once: its slots', the
    memory and its mask, the step's outputs; and a binding per form of the step and k."""

    def __init__(self, step: StaticStep, shared: SlotBuffers, count: int, memory: int):
        self.slots, self.memory_size = count, memory
        self.state_buffers, self.state = shared.buffers, shared.state
        # every int64 input of a step in one buffer: the ids fed (slots,), their positions
        # (slots,) and the memory mask (slots, memory), each input bound to its part, so that
        # a step's inputs cross to the device in one copy
        self.fed = allocate(step.device, (count * (2 + memory),), np.int64)
        sizes = {"batch": count, "memory": memory}
        self.memory_buffers = _buffers(step, step.interface.memory_tensors, sizes)
        self.memory: Tensors = {n: b.value for n, b in self.memory_buffers.items()}
        self.outputs: dict[tuple[str, int | None], ort.OrtValue] = {}  # by (name, k)
        self.candidates: dict[int, CandidateBuffer] = {}  # by k
        self.bindings: dict[tuple[StepGraph, int | None], BucketBinding] = {}
        # steps ahead (`ahead`): the positions of steps 1.. of a run (MAX_AHEAD - 1 parts of
        # (slots,)), and each step's binding, by its place in the run
        self.positions_ahead: ort.OrtValue | None = None
        self.ahead_bindings: dict[int, BucketBinding] = {}

    def binding(self, step: StaticStep, graph: StepGraph, k: int | None) -> BucketBinding:
        """The binding of form `graph` at `k` (None: the full step), made on first use."""
        made = self.bindings.get((graph, k))
        if made is None:
            made = self.bindings[(graph, k)] = self._bind(step, graph, k)
        return made

    def ahead(self, step: StaticStep, steps: int) -> list[BucketBinding]:
        """The bindings of `steps` greedy steps run back to back (the lean step at k = 1):
        the first is the bucket's own; each next one is fed the ids the one before chose, in
        that one's candidate buffer, at the position after (`write_ahead`), so that no step
        but the first waits for the host. Each writes a candidate buffer of its own, and on
        CUDA records a graph of its own."""
        if not 1 <= steps <= MAX_AHEAD:
            raise ValueError(f"1 to {MAX_AHEAD} steps ahead, not {steps}")
        made = [self.binding(step, StepGraph.LEAN, 1)]
        for place in range(1, steps):
            binding = self.ahead_bindings.get(place)
            if binding is None:
                binding = self.ahead_bindings[place] = self._bind_ahead(step, place, made[-1])
            made.append(binding)
        return made

    def write_ahead(self, positions: np.ndarray, steps: int) -> None:
        """The positions of steps 1 to `steps` - 1 of a run whose first step is fed at
        `positions` (slots, 1): each one further."""
        if steps > 1:
            ahead = positions[:, 0] + np.arange(1, MAX_AHEAD, dtype=np.int64)[:, None]
            self.positions_ahead.update_inplace(np.ascontiguousarray(ahead).ravel())

    def _bind_ahead(self, step: StaticStep, place: int, before: BucketBinding) -> BucketBinding:
        if self.positions_ahead is None:
            self.positions_ahead = allocate(step.device, ((MAX_AHEAD - 1) * self.slots,), np.int64)
        first = self.bindings[(StepGraph.LEAN, 1)]
        feeds = {
            "input_ids": before.candidates.value.data_ptr(),  # its ids: (slots, 1) int64 first
            "positions": self.positions_ahead.data_ptr() + (place - 1) * self.slots * INT64,
        }
        made = self._bind(step, StepGraph.LEAN, 1, feeds, first.bias)
        made.candidates = CandidateBuffer.allocate(
            step.graphs[StepGraph.LEAN], step.device, self.slots, 1
        )
        made.candidates.bind(made.binding, step.device)
        return made

    def _bind(
        self,
        step: StaticStep,
        graph: StepGraph,
        k: int | None,
        feeds: dict[str, int] | None = None,
        bias: ort.OrtValue | None = None,
    ) -> BucketBinding:
        """`feeds`: int64 inputs bound at these addresses instead of their parts of `fed`;
        `bias`: the lean step's, shared with another binding (which bans for both)."""
        session = step.graphs[graph]
        binding = session.io_binding()
        self._bind_fed(binding, step.device, feeds or {})
        for name, value in {**self.memory, **self.state}.items():
            binding.bind_ortvalue_input(name, value)
        recording = Recording() if step.capture else None
        options = step.run_options()
        made = BucketBinding(binding, options, recording, {}, (), unsynced=step.unsynced(options))
        if k is not None:  # the lean step's search: its bias kept at one address
            if bias is None:
                bias = ort.OrtValue.ortvalue_from_numpy(banned_bias((), step.vocab), step.device, 0)
            made.bias = bias
            made.kept = (np.array([k], dtype=np.int64),)  # read by TopK on the host
            binding.bind_ortvalue_input("bias", made.bias)
            binding.bind_cpu_input("k", made.kept[0])
            if feeds is None:  # (steps ahead bind candidate buffers of their own)
                made.candidates = self.candidates.get(k)
                if made.candidates is None:
                    made.candidates = CandidateBuffer.allocate(session, step.device, self.slots, k)
                    self.candidates[k] = made.candidates
                made.candidates.bind(binding, step.device)
        into = {s.output: s.input for s in step.interface.states}
        for o in session.get_outputs():
            if o.name in CANDIDATES:  # the lean step's: bound to its candidate buffer
                continue
            if o.name in into:
                binding.bind_ortvalue_output(o.name, self.state[into[o.name]])
                made.outputs[o.name] = None
                continue
            value = self.outputs.get((o.name, k))
            if value is None:
                sizes = {"batch": self.slots, "memory": self.memory_size, "k": k}
                value = allocate(step.device, named_shape(o, sizes), numpy_type(o.type))
                self.outputs[(o.name, k)] = value
            binding.bind_ortvalue_output(o.name, value)
            made.outputs[o.name] = value
        return made

    def _bind_fed(self, binding: ort.IOBinding, device: str, at: dict[str, int]) -> None:
        """The step's int64 inputs bound to their parts of `fed`, or at the address `at`
        gives."""
        count, size, start = self.slots, INT64, self.fed.data_ptr()
        shapes = ([count, 1], [count, 1], [count, self.memory_size])
        for name, shape in zip(FED, shapes, strict=True):
            binding.bind_input(name, device, 0, np.int64, shape, at.get(name, start))
            start += int(np.prod(shape)) * size

    def write_fed(self, tokens: np.ndarray, positions: np.ndarray, mask: np.ndarray) -> None:
        """A step's tokens, positions (slots, 1) and memory mask (slots, memory) into `fed`,
        in one copy."""
        count = self.slots
        fed = np.empty(count * (2 + self.memory_size), dtype=np.int64)
        fed[:count], fed[count : 2 * count] = tokens[:, 0], positions[:, 0]
        fed[2 * count :] = mask.ravel()
        self.fed.update_inplace(fed)
