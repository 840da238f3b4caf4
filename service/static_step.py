"""A decoder step with static shapes, run over buffers bound once (CUDA graphs on a GPU).

A step whose every input and output has a fixed shape for a given number of rows (the
translator's fixed-capacity step of `service.graphs.decoder_spec(fixed_cache=True)`, the
captioner's step over one image size) can be run by onnxruntime as a captured CUDA graph:
the kernels of the whole step are recorded on its first runs and replayed after with one
launch, instead of one launch per kernel (a batch-1 step is launch-bound: docs/benchmarks-gpu.md).
Replay needs every tensor at the address it was captured with, so a `StaticStep` allocates
its buffers once, for a bucket of rows (rows are padded up to the bucket: 1, 2, 4, ...), and:
- writes new inputs (ids, positions, masks, a request's memory) into them in place;
- carries the state through two buffer sets in turn: the step reads set A and writes set B,
  the next reads B and writes A; each direction is a binding of its own and, on CUDA, a
  graph of its own (onnxruntime's `gpu_graph_id`);
- leaves the outputs (logits) in their own buffers for the search graph.
On the CPU the same code runs without capture (tests prove it equal to the growing cache).
The server runs the static step through `OnnxEngine(cache="static")` and the continuous
batch (service.batch): `StaticBatches` holds the engine's buckets, writes rows into their
slots and runs a bucket's step, captured on CUDA.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from service.errors import ModelRepositoryError
from service.graphs import StateSpec
from service.inference import shape_of
from service.onnx_engine import ORT_TYPES, PROVIDERS, banned_bias, session_options

MIN_MEMORY = 16  # the smallest memory size of the static step's buckets


def power_of_two(n: int) -> int:
    """The smallest power of two at least `n` (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def bucket(rows: int, max_rows: int) -> int:
    """The bucket of `rows`: the next power of two, at most `max_rows` (a bucket too)."""
    if rows < 1 or rows > max_rows:
        raise ValueError(f"{rows} rows: 1 to {max_rows}")
    return min(power_of_two(rows), max_rows)


def cuda_graph_session(path, device: str, threads: int = 1, capture: bool = True):
    """A session for a StaticStep, with the engine's options: on CUDA with onnxruntime's CUDA
    graphs when `capture`."""
    providers = PROVIDERS[device]
    if device == "cuda":
        flag = "1" if capture else "0"
        providers = [("CUDAExecutionProvider", {"enable_cuda_graph": flag}), *providers[1:]]
    return ort.InferenceSession(str(path), session_options(threads), providers=providers)


def _numpy_type(ort_type: str) -> np.dtype:
    return np.dtype(ORT_TYPES[ort_type])


class StaticStep:
    """One bucket's buffers and bindings for one step session."""

    def __init__(
        self,
        session: ort.InferenceSession,
        rows: int,
        sizes: dict[str, int],
        states: Sequence[StateSpec],
        device: str = "cpu",
        graph_ids: tuple[int, int] | None = None,
        in_place: bool = False,
    ):
        """`sizes`: the size of every named axis the graph leaves open but `batch` (e.g.
        {"memory": 128}); `states`: what each step reads and returns for the next (the model
        interface's); `graph_ids`: the CUDA graph ids of the two directions (None: no
        capture); `in_place`: the step writes its state into the buffers it reads (one
        buffer set, bound as input and output; `decoder_spec(in_place=True)`)."""
        self.session, self.rows, self.device = session, rows, device
        self.carried = list(states)
        carried_in = {c.input for c in self.carried}
        carried_out = {c.output for c in self.carried}
        sizes = {"batch": rows, **sizes}

        # on the CPU a buffer is the numpy array it was made from (onnxruntime keeps and
        # reads that memory), so single rows can be written into it without a copy
        self.host: dict[str, np.ndarray] = {}

        def allocate(meta, name: str | None = None) -> ort.OrtValue:
            zeros = np.zeros(_shape(meta, sizes), dtype=_numpy_type(meta.type))
            if device == "cpu" and name is not None:
                self.host[name] = zeros
            return ort.OrtValue.ortvalue_from_numpy(zeros, device, 0)

        inputs = {i.name: i for i in session.get_inputs()}
        outputs = {o.name: o for o in session.get_outputs()}
        self.inputs = {n: allocate(m, n) for n, m in inputs.items() if n not in carried_in}
        self.outputs = {n: allocate(m) for n, m in outputs.items() if n not in carried_out}
        # the buffer sets of every carried state: two that the steps alternate between, or
        # one that an in-place step reads and writes
        self.sets = [
            {c.input: allocate(inputs[c.input]) for c in self.carried}
            for _ in range(1 if in_place else 2)
        ]
        self.bindings = []
        for source, target in ((0, 0),) if in_place else ((0, 1), (1, 0)):
            binding = session.io_binding()
            for name, value in self.inputs.items():
                binding.bind_ortvalue_input(name, value)
            for c in self.carried:
                binding.bind_ortvalue_input(c.input, self.sets[source][c.input])
                binding.bind_ortvalue_output(c.output, self.sets[target][c.input])
            for name, value in self.outputs.items():
                binding.bind_ortvalue_output(name, value)
            self.bindings.append(binding)
        self.in_place = in_place
        self.run_options = []
        for direction in range(len(self.bindings)):
            options = ort.RunOptions()
            if graph_ids is not None:
                options.add_run_config_entry("gpu_graph_id", str(graph_ids[direction]))
            self.run_options.append(options)
        self.current = 0  # the set the next step reads

    def write(self, name: str, array: np.ndarray) -> None:
        """Copies `array` (the buffer's shape and dtype) into input `name` in place."""
        self.inputs[name].update_inplace(np.ascontiguousarray(array))

    def write_row(self, name: str, array: np.ndarray, row: int) -> None:
        """Input `name` takes `array` (the whole input, of which only row `row` changed): that
        row alone where the buffer is host memory, the whole array on a device."""
        host = self.host.get(name)
        if host is None:
            self.write(name, array)
        else:
            host[row] = array[row]

    def write_state(self, name: str, array: np.ndarray) -> None:
        """Copies `array` into the state the next step reads as `name`."""
        self.sets[self.current][name].update_inplace(np.ascontiguousarray(array))

    def state(self, name: str) -> ort.OrtValue:
        """The state the next step reads as `name`."""
        return self.sets[self.current][name]

    def run(self) -> dict[str, ort.OrtValue]:
        """One step over what the buffers hold; returns the output buffers (by name)."""
        direction = self.current
        self.session.run_with_iobinding(self.bindings[direction], self.run_options[direction])
        self.current = direction if self.in_place else 1 - direction
        return self.outputs


class FixedCacheDecoder:
    """The translator's fixed-capacity step over one batch of rows: their memory written into
    the bucket once, every row's self mask kept over the capacity (its newest positions real,
    right-aligned), one token per row a step. Rows beyond the batch pad the bucket (one
    memory position unmasked, so they stay finite) and are not read."""

    def __init__(self, step: StaticStep, capacity: int):
        self.step, self.capacity = step, capacity
        self.lengths = np.zeros(step.rows, dtype=np.int64)

    def start(self, memory: dict[str, np.ndarray], memory_mask: np.ndarray) -> None:
        """A new batch: its memory (encoder keys/values (B, H, S, D), mask (B, S)) padded to
        the bucket's rows and memory size, the cache emptied."""
        step = self.step
        size = step.inputs["memory_mask"].shape()[1]
        rows, length = memory_mask.shape
        if rows > step.rows or length > size:
            raise ValueError(f"{rows} rows of {length} positions: the bucket holds "
                             f"{step.rows} of {size}")  # fmt: skip
        mask = np.zeros((step.rows, size), dtype=np.int64)
        mask[:rows, :length] = memory_mask
        mask[rows:, 0] = 1
        step.write("memory_mask", mask)
        for name, array in memory.items():
            shape = list(array.shape)
            shape[0], shape[2] = step.rows, size
            padded = np.zeros(shape, dtype=array.dtype)
            padded[:rows, :, :length] = array
            step.write(name, padded)
        for c in step.carried:
            state = step.state(c.input)
            step.write_state(c.input, np.zeros(state.shape(), _numpy_type(state.data_type())))
        self.lengths[:] = 0

    def forward(self, tokens: np.ndarray) -> dict[str, ort.OrtValue]:
        """tokens (rows,) -> the step's outputs; every row one position further."""
        step, capacity = self.step, self.capacity
        if int(self.lengths.max()) >= capacity:
            raise ValueError(f"the cache holds {capacity} positions")
        ids = np.zeros((step.rows, 1), dtype=np.int64)
        ids[: len(tokens), 0] = tokens
        step.write("input_ids", ids)
        step.write("positions", self.lengths[:, None].copy())
        # the newest length + 1 positions of capacity + 1 are real, right-aligned
        columns = np.arange(capacity + 1)
        mask = (columns[None, :] >= capacity - self.lengths[:, None]).astype(np.int64)
        step.write("self_mask", mask)
        outputs = step.run()
        self.lengths += 1
        return outputs


class SlotCacheDecoder:
    """The translator's in-place step (`decoder_spec(in_place=True)`) over slots: every row
    has its own positions from 0 in its slot of the cache buffer, so a row can start in any
    slot between two steps while the others go on (its memory written into the slot, its
    length set to 0) and nothing is ever shifted, padded or rebuilt; what a slot held before
    lies beyond its length and is not read. A row that is not decoding is fed padding at
    position 0 (one memory position unmasked, so it stays finite)."""

    def __init__(self, step: StaticStep, capacity: int):
        if not step.in_place:
            raise ValueError("a slot cache needs a step that writes in place")
        self.step, self.capacity = step, capacity
        self.lengths = np.zeros(step.rows, dtype=np.int64)
        self.active = np.zeros(step.rows, dtype=bool)
        size = step.inputs["memory_mask"].shape()[1]
        self.memory_mask = np.zeros((step.rows, size), dtype=np.int64)
        self.memory_mask[:, 0] = 1
        self.memory = {
            name: np.zeros(value.shape(), _numpy_type(value.data_type()))
            for name, value in step.inputs.items()
            if name.startswith("encoder.")
        }

    def start(self, slot: int, memory: dict[str, np.ndarray], memory_mask: np.ndarray) -> None:
        """A new row in `slot`: its memory (keys/values (H, S, Dh) each, mask (S,)), written
        into that slot alone where the buffers are host memory."""
        length = len(memory_mask)
        if length > self.memory_mask.shape[1]:
            raise ValueError(f"{length} memory positions: the slots hold "
                             f"{self.memory_mask.shape[1]}")  # fmt: skip
        self.memory_mask[slot] = 0
        self.memory_mask[slot, :length] = memory_mask
        for name, array in memory.items():
            self.memory[name][slot] = 0
            self.memory[name][slot, :, :length] = array
            self.step.write_row(name, self.memory[name], slot)
        self.step.write_row("memory_mask", self.memory_mask, slot)
        self.lengths[slot], self.active[slot] = 0, True

    def stop(self, slot: int) -> None:
        self.active[slot] = False

    def forward(self, tokens: np.ndarray) -> dict[str, ort.OrtValue]:
        """tokens (rows,): the next token of every slot (ignored where none decodes) -> the
        step's outputs; every decoding row one position further."""
        if int(self.lengths[self.active].max(initial=0)) >= self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions")
        ids = np.where(self.active, tokens, 0)[:, None].astype(np.int64)
        self.step.write("input_ids", ids)
        self.step.write("positions", np.where(self.active, self.lengths, 0)[:, None])
        outputs = self.step.run()
        self.lengths[self.active] += 1
        return outputs


def _runs(slots: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every run of consecutive slots, in the order given."""
    breaks = np.flatnonzero(np.diff(slots) != 1) + 1
    bounds = [0, *breaks.tolist(), len(slots)]
    return list(itertools.pairwise(bounds))


def _allocate(device: str, shape, dtype, fill=None) -> ort.OrtValue:
    array = np.zeros(shape, dtype=dtype)
    if fill is not None:
        fill(array)
    return ort.OrtValue.ortvalue_from_numpy(array, device, 0)


def _shape(meta, sizes: dict[str, int]) -> list[int]:
    return [d if isinstance(d, int) else sizes[d] for d in meta.shape]


class Slots:
    """What a number of slots holds whatever its memory size: the ids and positions fed and
    the cache buffers (read and written in place), shared by its buckets of every memory
    size (a batch is in one of them at a time, so the cache never moves between them)."""

    def __init__(self, engine, slots: int):
        device, inputs = engine.device, {i.name: i for i in engine.decoder.get_inputs()}
        self.ids = _allocate(device, (slots, 1), np.int64)
        self.positions = _allocate(device, (slots, 1), np.int64)
        sizes, floats = {"batch": slots}, engine.float_dtype
        self.state = {
            s.input: _allocate(device, _shape(inputs[s.input], sizes), floats)
            for s in engine.states
        }


class Bucket:
    """The buffers of one bucket of the static step, (slots, memory size), allocated once:
    its slots' (`Slots`), the memory and its mask, the step's outputs; and a binding per
    way of running it."""

    def __init__(self, engine, slots: Slots, count: int, memory: int):
        self.slots, self.memory_size = count, memory
        device, inputs = engine.device, {i.name: i for i in engine.decoder.get_inputs()}
        self.ids, self.positions, self.state = slots.ids, slots.positions, slots.state
        # a free slot attends to one memory position, so that its numbers stay finite
        self.memory_mask = _allocate(device, (count, memory), np.int64,
                                     lambda a: a.__setitem__((slice(None), 0), 1))  # fmt: skip
        sizes = {"batch": count, "memory": memory}
        self.memory = {
            n: _allocate(device, _shape(inputs[n], sizes), engine.float_dtype)
            for n in engine.memory_names
        }
        self.outputs: dict[tuple, ort.OrtValue] = {}  # by (output name, k)
        self.bindings: dict[tuple, tuple] = {}  # (session, k) -> (binding, options, feeds, ..)


class StaticBatches:
    """An engine's static step (`OnnxEngine(cache="static")`): the in-place step with a fixed
    capacity, run over buffers allocated once per bucket: a number of slots (1, 2, 4, ...;
    the continuous batch pads its rows up to one) and a memory size (16, 32, ... up to the
    longest source; the batch's longest memory padded up to one), so that every run of a
    bucket has the same shapes at the same addresses: on CUDA each (bucket, step, k) is
    captured once as a CUDA graph (onnxruntime's `gpu_graph_id`) and replayed with one
    launch. Rows are written into a bucket's slots, and moved between buckets, by the
    version's gather graph writing straight into the slots' memory (its output bound to the
    slot's address), on the device where the buffers live; nothing is ever reallocated, so
    a graph stays valid as long as the engine. On the CPU the same code runs uncaptured."""

    def __init__(self, engine, memory: int, capture: bool, place=None):
        """`place`: the version's place op session (every memory tensor in one run), or
        None."""
        self.engine, self.memory, self.capture = engine, memory, capture
        self.place_op = place
        inputs = {i.name: i for i in engine.decoder.get_inputs()}
        first = engine.states[0]
        capacity = inputs[first.input].shape[first.time_axis]
        if not isinstance(capacity, int):
            raise ModelRepositoryError(f"{engine.variant} static step: its capacity is not fixed")
        self.capacity = capacity
        self.axes = engine.interface.growing_axes()  # a memory tensor's memory axis
        self.slot_sets: dict[int, Slots] = {}
        self.buckets: dict[tuple[int, int], Bucket] = {}  # by (slots, memory size)
        self._owner: dict[int, Bucket] = {}  # id of a bucket's memory mask -> bucket
        self._graphs = 0  # CUDA graph ids given

    def slots_for(self, rows: int) -> int:
        """The number of slots that holds `rows` rows: the next power of two."""
        return power_of_two(rows)

    def memory_for(self, length: int) -> int:
        """The memory size that holds `length` positions: the next power of two from
        MIN_MEMORY, at most the longest source."""
        if length > self.memory:
            raise ValueError(f"{length} memory positions: the static step holds {self.memory}")
        return min(max(MIN_MEMORY, power_of_two(length)), self.memory)

    def bucket(self, slots: int, memory: int | None = None) -> Bucket:
        """The buffers of the bucket (`slots`, `memory`; by default the longest source's),
        allocated on first use, then kept."""
        memory = self.memory if memory is None else memory
        bucket = self.buckets.get((slots, memory))
        if bucket is None:
            shared = self.slot_sets.get(slots) or self.slot_sets.setdefault(
                slots, Slots(self.engine, slots)
            )
            bucket = self.buckets[(slots, memory)] = Bucket(self.engine, shared, slots, memory)
            self._owner[id(bucket.memory_mask)] = bucket
        return bucket

    def owner(self, memory_mask) -> Bucket:
        """The bucket whose memory mask `memory_mask` is."""
        bucket = self._owner.get(id(memory_mask))
        if bucket is None:
            raise ValueError("a static step runs over the buffers of one of its buckets")
        return bucket

    # -- rows into slots ----------------------------------------------------------------------
    def fit(self, rows, target: ort.OrtValue):
        """`rows` (numpy or OrtValue) right-padded with zeros to `target`'s row shape."""
        shape, have = target.shape(), shape_of(rows)
        if any(h > s for h, s in zip(have[1:], shape[1:], strict=True)):
            raise ValueError(f"rows of shape {list(have[1:])} do not fit slots of {shape[1:]}")
        return self.engine.pad(rows, [have[0], *shape[1:]])

    def move(self, source, index: np.ndarray, target: ort.OrtValue, slots: np.ndarray) -> None:
        """Rows `index` of `source` (numpy or OrtValue, `target`'s row shape) into slots
        `slots` of `target`, in place: the gather graph writes each run of consecutive slots
        straight into their memory. Source and target may be the same buffer when the slots
        read and written differ."""
        index, slots = np.asarray(index, np.int64), np.asarray(slots, np.int64)
        if len(slots) == 0:
            return
        session = self.engine.ops["gather"][ORT_TYPES[target.data_type()]]
        for start, end in _runs(slots):
            binding = session.io_binding()
            if isinstance(source, np.ndarray):
                binding.bind_cpu_input("data", np.ascontiguousarray(source))
            else:
                binding.bind_ortvalue_input("data", source)
            binding.bind_cpu_input("indices", index[start:end].copy())
            self._bind_slots(binding, "output", target, int(slots[start]), end - start)
            session.run_with_iobinding(binding)

    def _bind_slots(self, binding, name: str, target: ort.OrtValue, slot: int, count: int):
        """Binds output `name` to `count` rows of `target` from row `slot` on, in place."""
        shape, dtype = target.shape(), np.dtype(ORT_TYPES[target.data_type()])
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        binding.bind_output(name, self.engine.device, 0, dtype, [count, *shape[1:]],
                            target.data_ptr() + slot * row)  # fmt: skip

    def move_memory(self, name: str, source, index: np.ndarray, target, slots: np.ndarray):
        """`move` for the memory tensor `name` between buckets of two memory sizes: rows
        `index` gathered, padded or cut on their memory axis to `target`'s (positions beyond
        every row's memory are padding), then written into `slots`."""
        if source.shape()[1:] == target.shape()[1:]:
            self.move(source, index, target, slots)
            return
        self.place(name, self.engine.take(source, index), target, slots)

    def place(self, name: str, rows, target, slots: np.ndarray) -> None:
        """The memory tensor `name`'s `rows` (all of them, any memory size not longer than
        what they use of it) into `slots` of `target`, padded or cut on the memory axis."""
        axis, size = self.axes[name], target.shape()[self.axes[name]]
        shape = shape_of(rows)
        if shape[axis] > size:
            rows = self.engine.narrow(rows, axis, 0, size)
        self.move(self.fit(rows, target), np.arange(shape[0]), target, slots)

    def write_mask(self, bucket: Bucket, mask: np.ndarray) -> None:
        """The bucket's memory mask written whole from `mask`, the batch's copy on the host:
        one copy to the device, where moving the rows that changed took a gather a run of
        slots."""
        if mask.shape != tuple(bucket.memory_mask.shape()):
            raise ValueError(f"a mask of {mask.shape} for a bucket of {bucket.memory_mask.shape()}")
        bucket.memory_mask.update_inplace(np.ascontiguousarray(mask, dtype=np.int64))

    # -- every tensor of a kind at once: the place op ------------------------------------------
    def place_memory(self, rows: dict, targets: dict, slots: np.ndarray) -> None:
        """`place` of every memory tensor: `rows` (by name, all of them) into `slots` of
        `targets` (by name), each padded on every axis to its target's; by the place op where
        it applies (`_placed`), else tensor by tensor."""
        if not self._placed(rows, np.arange(len(slots)), targets, slots):
            for name, tensor in rows.items():
                self.place(name, tensor, targets[name], slots)

    def move_memories(self, sources: dict, index: np.ndarray, targets: dict, slots) -> None:
        """`move_memory` of every memory tensor: rows `index` of each of `sources` (by name)
        into `slots` of `targets`; by the place op where it applies, else tensor by tensor."""
        if not self._placed(sources, index, targets, slots):
            for name, tensor in sources.items():
                self.move_memory(name, tensor, index, targets[name], slots)

    def move_states(self, sources: dict, index: np.ndarray, targets: dict, slots) -> None:
        """`move` of every state tensor (of one shape a row in source and target): by the
        place op where the model has as many memory tensors as states (a translator: keys
        and values a layer of each), else tensor by tensor."""
        if not self._placed(sources, index, targets, slots):
            for name, tensor in sources.items():
                self.move(tensor, index, targets[name], slots)

    def _placed(self, sources: dict, index: np.ndarray, targets: dict, slots) -> bool:
        """Rows `index` of every tensor of `sources` (by name; numpy or OrtValue), right-padded
        to its target's row shape, written into `slots` of `targets` (by name, the same
        names): one run of the version's place op a run of consecutive slots, its outputs
        bound to the slots' memory (source and target may be one buffer when the slots read
        and written differ). False, nothing done, where the version ships no place op, it
        takes another number of tensors, or a row is longer than its target's."""
        op = self.place_op
        if op is None or len(sources) != len(op.get_outputs()) or set(sources) != set(targets):
            return False
        shapes = [(shape_of(sources[n]), targets[n].shape()) for n in sources]
        for have, shape in shapes:
            if len(have) != len(shape) or any(
                h > t for h, t in zip(have[1:], shape[1:], strict=True)
            ):
                return False
        index, slots = np.asarray(index, np.int64), np.asarray(slots, np.int64)
        if len(slots) == 0:
            return True
        binding, kept = op.io_binding(), []  # kept: host arrays bound, alive until run
        for i, (name, (have, shape)) in enumerate(zip(sources, shapes, strict=True)):
            source = sources[name]
            if isinstance(source, np.ndarray):
                kept.append(np.ascontiguousarray(source))
                binding.bind_cpu_input(f"data_{i}", kept[-1])
            else:
                binding.bind_ortvalue_input(f"data_{i}", source)
            ends = [0, *(t - h for t, h in zip(shape[1:], have[1:], strict=True))]
            kept.append(np.array([0] * len(shape) + ends, dtype=np.int64))
            binding.bind_cpu_input(f"pads_{i}", kept[-1])
        for start, end in _runs(slots):
            kept.append(index[start:end].copy())
            binding.bind_cpu_input("indices", kept[-1])
            for i, name in enumerate(sources):
                self._bind_slots(binding, f"output_{i}", targets[name], int(slots[start]),
                                 end - start)  # fmt: skip
            op.run_with_iobinding(binding)
        return True

    # -- the step -----------------------------------------------------------------------------
    def _binding(self, bucket: Bucket, session: ort.InferenceSession, k: int | None):
        key = (id(session), k)
        made = bucket.bindings.get(key)
        if made is not None:
            return made
        engine, device = self.engine, self.engine.device
        binding = session.io_binding()
        feeds = {"input_ids": bucket.ids, "positions": bucket.positions,
                 "memory_mask": bucket.memory_mask, **bucket.memory, **bucket.state}  # fmt: skip
        if k is not None:  # the lean step's search: its bias kept at one address
            feeds["bias"] = ort.OrtValue.ortvalue_from_numpy(banned_bias((), engine.vocab),
                                                             device, 0)  # fmt: skip
            feeds["k"] = np.array([k], dtype=np.int64)
        for name, value in feeds.items():
            if isinstance(value, np.ndarray):  # k: read by TopK on the host
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        into = {s.output: s.input for s in engine.states}
        for o in session.get_outputs():
            if o.name in into:
                binding.bind_ortvalue_output(o.name, bucket.state[into[o.name]])
                continue
            value = bucket.outputs.get((o.name, k))
            if value is None:
                sizes = {"batch": bucket.slots, "memory": bucket.memory_size, "k": k}
                value = _allocate(device, _shape(o, sizes), ORT_TYPES[o.type])
                bucket.outputs[(o.name, k)] = value
            binding.bind_ortvalue_output(o.name, value)
        options = ort.RunOptions()
        if self.capture:
            options.add_run_config_entry("gpu_graph_id", str(self._graphs))
            self._graphs += 1
        # what a run returns: the outputs by name (the carried ones are the state's)
        returned = {o.name: bucket.outputs.get((o.name, k)) for o in session.get_outputs()}
        made = bucket.bindings[key] = (binding, options, feeds, returned, [()])
        return made

    def run(self, bucket: Bucket, session, tokens: np.ndarray, positions: np.ndarray,
            k: int | None = None, banned: tuple = ()) -> dict[str, ort.OrtValue]:  # fmt: skip
        """One step of every slot of `bucket` (tokens, positions (slots, 1)) -> the step's
        outputs by name (the bucket's buffers: read them before the next step)."""
        bucket.ids.update_inplace(np.ascontiguousarray(tokens, dtype=np.int64))
        bucket.positions.update_inplace(np.ascontiguousarray(positions, dtype=np.int64))
        binding, options, feeds, returned, last = self._binding(bucket, session, k)
        if k is not None and last[0] != banned:  # written in place, never rebound
            feeds["bias"].update_inplace(banned_bias(banned, self.engine.vocab))
            last[0] = banned
        session.run_with_iobinding(binding, options)
        return returned
