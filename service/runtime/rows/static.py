"""Rows held in the static step's buckets: buffers allocated once, so that on CUDA each
bucket's step is captured as a CUDA graph and replayed with one launch.

The static step (`OnnxEngine(cache="static")`) is the in-place step at a fixed capacity: every
input and output has a fixed shape for a given number of slots and memory size. So the rows
live in a bucket: a number of slots (1, 2, 4, ...; the rows padded up to it) and a memory
size (16, 32, ... up to the longest source; the longest row's memory padded up to it). Its
buffers (the slots' ids, positions and cache, shared by the buckets of one slot count; the
memory and its mask; the outputs) are allocated on first use and kept, and each (bucket,
step, k) has its binding, and on CUDA its captured graph (onnxruntime's `gpu_graph_id`):
nothing is ever reallocated, so a graph stays valid as long as the store.

Rows are written into a bucket's free slots, and moved between buckets, on the device where
the buffers live: the version's place op writes every memory tensor of a run of slots in one
run, padded on the way (else the gather graph a tensor at a time), its outputs bound to the
slots' addresses. A batch moves to a larger bucket when rows need more slots or memory, to a
smaller one when a quarter of its slots or fewer are live. On the CPU the same code runs
uncaptured.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import onnxruntime as ort

from service.runtime.onnx_runtime import (
    allocate,
    banned_bias,
    consecutive_runs,
    named_shape,
    numpy_type,
    power_of_two,
)
from service.runtime.rows.table import NewRows, SlotTable, extent
from service.runtime.search import Candidates, SearchRequest
from service.runtime.tensors import Launch, StepOutput, shape_of

MIN_MEMORY = 16  # the smallest memory size of the static step's buckets
CANDIDATES = ("ids", "log_probs")  # a lean step's search outputs


class SlotBuffers:
    """What a number of slots holds whatever its memory size: the ids and positions fed and
    the cache buffers (read and written in place), shared by its buckets of every memory
    size (a batch is in one of them at a time, so the cache never moves between them)."""

    def __init__(self, engine, slots: int):
        device, inputs = engine.device, {i.name: i for i in engine.decoder.get_inputs()}
        sizes, floats = {"batch": slots}, engine.float_dtype
        self.state = {
            s.input: allocate(device, named_shape(inputs[s.input], sizes), floats)
            for s in engine.states
        }


class Bucket:
    """The buffers of one bucket, (slots, memory size), allocated once: its slots', the
    memory and its mask, the step's outputs; and a binding per way of running it."""

    def __init__(self, engine, buffers: SlotBuffers, count: int, memory: int):
        self.slots, self.memory_size = count, memory
        device, inputs = engine.device, {i.name: i for i in engine.decoder.get_inputs()}
        self.state = buffers.state
        # every int64 input of a step in one buffer: the ids fed (slots,), their positions
        # (slots,) and the memory mask (slots, memory), each input bound to its part, so that
        # a step's inputs cross to the device in one copy
        self.fed = allocate(device, (count * (2 + memory),), np.int64)
        sizes = {"batch": count, "memory": memory}
        self.memory = {
            n: allocate(device, named_shape(inputs[n], sizes), engine.float_dtype)
            for n in engine.memory_names
        }
        self.outputs: dict[tuple, ort.OrtValue] = {}  # by (output name, k)
        self.bindings: dict[tuple, tuple] = {}  # (session, k) -> (binding, options, ...)


@dataclass
class Reservation:
    """Free slots of a bucket kept for an admission's rows; `placed` once their memory is
    written there."""

    bucket: Bucket
    slots: np.ndarray
    placed: bool = False


class StaticRows:
    # the encoder's rows are copied into the slots, never written to
    adopts_encoder_rows = True

    def __init__(self, engine):
        """`engine`: an OnnxEngine with cache "static" (its static step sessions, its helper
        graphs and place op, whether it captures)."""
        self.engine = engine
        self.memory_limit = engine.static_memory  # the longest source's positions
        self.capacity = engine.static_capacity
        self.axes = engine.interface.growing_axes()  # a memory tensor's memory axis
        self.slot_sets: dict[int, SlotBuffers] = {}
        self.buckets: dict[tuple[int, int], Bucket] = {}  # by (slots, memory size)
        self.rebuilds = 0
        # by a buffer's address: its dtype, row shape and bytes a row (buffers are kept)
        self._layouts: dict[int, tuple[np.dtype, list[int], int]] = {}
        self.clear()

    def clear(self) -> None:
        self.bucket: Bucket | None = None
        self.reserved: Reservation | None = None  # slots no other row may take meanwhile

    @property
    def state(self):
        return None if self.bucket is None else self.bucket.state

    @property
    def memory(self):
        return None if self.bucket is None else self.bucket.memory

    def slots_for(self, rows: int) -> int:
        """The number of slots that holds `rows` rows: the next power of two."""
        return power_of_two(rows)

    def memory_for(self, length: int) -> int:
        """The memory size that holds `length` positions: the next power of two from
        MIN_MEMORY, at most the longest source."""
        if length > self.memory_limit:
            limit = self.memory_limit
            raise ValueError(f"{length} memory positions: the static step holds {limit}")
        return min(max(MIN_MEMORY, power_of_two(length)), self.memory_limit)

    def bucket_of(self, slots: int, memory: int | None = None) -> Bucket:
        """The buffers of the bucket (`slots`, `memory`; by default the longest source's),
        allocated on first use, then kept."""
        memory = self.memory_limit if memory is None else memory
        bucket = self.buckets.get((slots, memory))
        if bucket is None:
            shared = self.slot_sets.get(slots) or self.slot_sets.setdefault(
                slots, SlotBuffers(self.engine, slots)
            )
            bucket = self.buckets[(slots, memory)] = Bucket(self.engine, shared, slots, memory)
        return bucket

    # -- the protocol -----------------------------------------------------------------------
    def reserve(self, table: SlotTable, rows: int) -> Reservation | None:
        """Free slots of the bucket kept for `rows` joining rows (first into a bucket of more
        slots, where too few are free). While they are kept the batch stays in its bucket,
        and a step computes them as any dead slot (what it reads there is not used)."""
        if self.bucket is None or self.reserved is not None:
            return None
        free = table.free()
        if len(free) < rows:  # the bucket of more slots the join would move to, now
            self._move(table, self.slots_for(table.rows + rows), self.bucket.memory_size)
            free = table.free()
        self.reserved = Reservation(self.bucket, free[:rows])
        return self.reserved

    def place(self, reservation: Reservation, rows) -> None:
        """From the encoder thread: `rows`' memory (an EncoderOutput of the joining rows)
        into the reserved slots, where it fits the bucket's memory size. The state is left
        to the join: a step writes every slot's state, dead ones included."""
        bucket = reservation.bucket
        if extent(np.asarray(rows.memory_mask)) > bucket.memory_size:
            return
        slots = reservation.slots
        self._place(rows.memory, np.arange(len(slots)), bucket.memory, slots, pad=True)
        reservation.placed = True

    def placed(self, table: SlotTable, reservation: Reservation) -> bool:
        return (
            reservation.placed
            and reservation is self.reserved
            and reservation.bucket is self.bucket
            and bool(table.dead()[reservation.slots].all())
        )

    def release(self, reservation: Reservation | None) -> None:
        if reservation is not None and reservation is self.reserved:
            self.reserved = None

    def join(self, table: SlotTable, new: NewRows, reservation=None) -> None:
        """New rows in free slots of the bucket; first into a bucket of more slots when too
        few are free, or of a larger memory when theirs is longer. Rows whose memory was
        placed ahead take their reserved slots, their state written here."""
        if reservation is not None:
            self.reserved = None
            self._write_state(new, reservation.slots)
            table.write(reservation.slots, new)
            return
        count = len(new)
        size = self.memory_for(self._memory_needed(table, extent(new.memory_mask)))
        free = table.free()
        if self.bucket is None or len(free) < count:
            memory = max(size, 0 if self.bucket is None else self.bucket.memory_size)
            self._move(table, self.slots_for(table.rows + count), memory)
            free = table.free()
        elif size > self.bucket.memory_size:
            self._move(table, table.slots, size)
        slots = free[:count]
        self._place(new.memory, np.arange(count), self.bucket.memory, slots, pad=True)
        self._write_state(new, slots)
        table.write(slots, new)

    def _write_state(self, new: NewRows, slots: np.ndarray) -> None:
        """The joining rows' initial state into `slots` (an empty one is nothing to write)."""
        for name, tensor in new.state.items():
            if 0 not in shape_of(tensor):
                target = self.bucket.state[name]
                self._gather(self.fit(tensor, target), np.arange(len(slots)), target, slots)

    def prepare(self, table: SlotTable) -> None:
        """A bucket four times too large (slots or memory) for the live rows: a smaller one,
        unless slots are kept for joining rows. The memory the rows use shrinks only when
        rows leave, so it is looked at then."""
        if self.reserved is not None:
            return
        slots = self.slots_for(table.rows) if 4 * table.rows <= table.slots else table.slots
        memory = self.bucket.memory_size
        if table.rows_left():
            size = self.memory_for(self._memory_needed(table))
            memory = size if 4 * size <= memory else memory
        if (slots, memory) != (table.slots, self.bucket.memory_size):
            self._move(table, slots, memory)

    def step(self, table: SlotTable, tokens, positions, attention: bool, search) -> StepOutput:
        launch = self.launch(table, tokens, positions, attention, search)
        launch.run()
        return launch.output()

    def launch(self, table: SlotTable, tokens, positions, attention: bool, search) -> Launch:
        """The static step over the bucket: the lean step with its search where no alignment
        is kept, one captured graph per bucket and k. Its inputs are written and its
        binding chosen here; `run` is onnxruntime's run alone."""
        bucket, engine = self.bucket, self.engine
        if shape_of(tokens) != (bucket.slots, 1):
            raise ValueError(f"a static step takes one token for each of its {bucket.slots} slots")
        if int(np.max(positions)) >= self.capacity:
            raise ValueError(f"the static cache holds {self.capacity} positions")
        lean = not attention and engine.lean_decoder is not None
        ranked = lean and search is not None and search.temperature is None
        request = search if ranked else SearchRequest()
        k = request.width(engine.vocab) if lean else None
        session = engine.lean_decoder if lean else engine.decoder
        # a binding's first run records its CUDA graph
        captures = bool(engine.capture) and (id(session), k) not in bucket.bindings
        if lean:
            banned = tuple(request.banned)
            run, out = self._ready(session, table, tokens, positions, k, banned)
        else:
            run, out = self._ready(session, table, tokens, positions)

        def output() -> StepOutput:
            # the bucket's output buffers are written again by the next step (on the CPU
            # their numpy() is a view of them): what leaves the step is copied
            found = None
            if ranked:
                found = Candidates(*(np.array(out[n].numpy()) for n in CANDIDATES))
            name = engine.interface.attention
            seen = np.array(out[name].numpy(), dtype=np.float32) if attention else None
            return StepOutput(out["logits"], bucket.state, seen, found)

        return Launch(run, output, captures)

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None:
        """Repeated rows copied into free slots of the bucket (every state tensor in one run
        a run of slots), or the rows into a bucket of more slots."""
        repeats = np.flatnonzero(~first)
        free = np.setdiff1d(np.arange(table.slots), slots[first])
        if self.reserved is not None:  # kept for joining rows
            free = np.setdiff1d(free, self.reserved.slots)
        if len(repeats) > len(free):
            self._move(table, self.slots_for(len(slots)), self.bucket.memory_size, slots)
            return
        targets = slots.copy()
        targets[repeats] = free[: len(repeats)]
        origins = slots[repeats]
        other = table.copy(origins, targets[repeats])
        self._place(self.bucket.state, origins, self.bucket.state, targets[repeats])
        if other.any():
            o, t = origins[other], targets[repeats][other]
            self._place(self.bucket.memory, o, self.bucket.memory, t)
        table.set_alive(targets)

    # -- moving rows ------------------------------------------------------------------------
    def _memory_needed(self, table: SlotTable, new: int = 0) -> int:
        """Memory positions the live rows use (at least `new`, a joining row's)."""
        return max(table.used_memory(), new, 1)

    def _move(self, table: SlotTable, slots: int, memory: int, order=None) -> None:
        """The batch into the bucket (`slots`, `memory`), on the device. Of as many slots:
        only the memory moves, every row keeps its slot (the cache buffers are the same).
        Else rows `order` of the slots (by default the live rows; may repeat) go to its
        first slots."""
        target, old = self.bucket_of(slots, memory), self.bucket
        if target is old:
            raise ValueError("rows move between two buckets, not within one")
        live = table.alive if order is None else np.asarray(order, dtype=np.int64)
        same = old is not None and old.slots == slots and order is None
        places = live if same else np.arange(len(live))  # the slots the rows take
        if old is not None and len(live):
            self._place(old.memory, live, target.memory, places, pad=True)
            if not same:
                self._place(old.state, live, target.state, places)
        self.bucket = target
        table.rehouse(live, places, slots, memory, keep_slots=same)
        self.rebuilds += 1

    def fit(self, rows, target: ort.OrtValue):
        """`rows` (numpy or OrtValue) right-padded with zeros to `target`'s row shape."""
        shape, have = target.shape(), shape_of(rows)
        if any(h > s for h, s in zip(have[1:], shape[1:], strict=True)):
            raise ValueError(f"rows of shape {list(have[1:])} do not fit slots of {shape[1:]}")
        return self.engine.pad(rows, [have[0], *shape[1:]])

    def _place(self, sources: dict, index, targets: dict, slots, pad: bool = False) -> None:
        """Rows `index` of every tensor of `sources` (by name) into `slots` of `targets` (by
        name): by the place op where it applies, else tensor by tensor (`pad`: memory
        tensors, padded or cut on their memory axis to the target's)."""
        if self._placed(sources, index, targets, slots):
            return
        for name, tensor in sources.items():
            if pad:
                self._move_memory(name, tensor, index, targets[name], slots)
            else:
                self._gather(tensor, index, targets[name], slots)

    def _gather(self, source, index, target: ort.OrtValue, slots) -> None:
        """Rows `index` of `source` (numpy or OrtValue, `target`'s row shape) into slots
        `slots` of `target`, in place: the gather graph writes each run of consecutive
        slots straight into their memory. Source and target may be the same buffer when the
        slots read and written differ."""
        index, slots = np.asarray(index, np.int64), np.asarray(slots, np.int64)
        if len(slots) == 0:
            return
        engine = self.engine
        session = engine.ops["gather"][numpy_type(target.data_type()).name]
        for start, end in consecutive_runs(slots):
            binding = session.io_binding()
            if isinstance(source, np.ndarray):
                binding.bind_cpu_input("data", np.ascontiguousarray(source))
            else:
                binding.bind_ortvalue_input("data", source)
            binding.bind_cpu_input("indices", index[start:end].copy())
            self._bind_rows(binding, "output", target, int(slots[start]), end - start)
            session.run_with_iobinding(binding)

    def _bind_rows(self, binding, name: str, target: ort.OrtValue, row: int, count: int):
        """Binds output `name` to `count` rows of `target` from row `row` on, in place."""
        start = target.data_ptr()
        layout = self._layouts.get(start)
        if layout is None:
            shape, dtype = target.shape(), numpy_type(target.data_type())
            size = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
            layout = self._layouts[start] = (dtype, shape[1:], size)
        dtype, tail, size = layout
        address = start + row * size
        binding.bind_output(name, self.engine.device, 0, dtype, [count, *tail], address)

    def _move_memory(self, name: str, source, index, target, slots) -> None:
        """`_gather` of the memory tensor `name`, its memory axis padded or cut to
        `target`'s (positions beyond every row's memory are padding)."""
        if shape_of(source)[1:] == tuple(target.shape()[1:]):
            self._gather(source, index, target, slots)
            return
        rows = source
        if len(index) != shape_of(source)[0] or not np.array_equal(index, np.arange(len(index))):
            rows = self.engine.take(source, np.asarray(index, np.int64))
        axis, size = self.axes[name], target.shape()[self.axes[name]]
        if shape_of(rows)[axis] > size:
            rows = self.engine.narrow(rows, axis, 0, size)
        count = shape_of(rows)[0]
        self._gather(self.fit(rows, target), np.arange(count), target, slots)

    def _placed(self, sources: dict, index, targets: dict, slots) -> bool:
        """Rows `index` of every tensor of `sources` (numpy or OrtValue), right-padded to its
        target's row shape, written into `slots` of `targets`: one run of the version's
        place op a run of consecutive slots, its outputs bound to the slots' memory. False,
        nothing done, where the version ships no place op, it takes another number of
        tensors, or a row is longer than its target's."""
        op = self.engine.place_op
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
        for start, end in consecutive_runs(slots):
            kept.append(index[start:end].copy())
            binding.bind_cpu_input("indices", kept[-1])
            for i, name in enumerate(sources):
                target, first = targets[name], int(slots[start])
                self._bind_rows(binding, f"output_{i}", target, first, end - start)
            op.run_with_iobinding(binding)
        return True

    # -- the step -----------------------------------------------------------------------------
    def _binding(self, session: ort.InferenceSession, k: int | None):
        bucket, key = self.bucket, (id(session), k)
        made = bucket.bindings.get(key)
        if made is not None:
            return made
        engine, device = self.engine, self.engine.device
        binding = session.io_binding()
        count, size, start = bucket.slots, np.dtype(np.int64).itemsize, bucket.fed.data_ptr()
        mask = [count, bucket.memory_size]
        for name, shape in (
            ("input_ids", [count, 1]),
            ("positions", [count, 1]),
            ("memory_mask", mask),
        ):
            binding.bind_input(name, device, 0, np.int64, shape, start)
            start += int(np.prod(shape)) * size
        feeds = {**bucket.memory, **bucket.state}
        if k is not None:  # the lean step's search: its bias kept at one address
            bias = banned_bias((), engine.vocab)
            feeds["bias"] = ort.OrtValue.ortvalue_from_numpy(bias, device, 0)
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
                value = allocate(device, named_shape(o, sizes), numpy_type(o.type))
                bucket.outputs[(o.name, k)] = value
            binding.bind_ortvalue_output(o.name, value)
        # no options where nothing is captured: onnxruntime looks up a graph id in options
        # given, and a missing one costs it a raised exception a run
        options = None
        if engine.capture:
            options = ort.RunOptions()
            options.add_run_config_entry("gpu_graph_id", str(next(engine.graph_ids)))
        # what a run returns: the outputs by name (the carried ones are the state's)
        returned = {o.name: bucket.outputs.get((o.name, k)) for o in session.get_outputs()}
        made = bucket.bindings[key] = (binding, options, feeds, returned, [()])
        return made

    def _ready(self, session, table, tokens, positions, k: int | None = None, banned=()):
        """One step of every slot of the bucket (tokens, positions (slots, 1), the table's
        memory mask) made ready -> its run, and the step's outputs by name (the bucket's
        buffers: read them after the run, before the next step)."""
        bucket = self.bucket
        count = bucket.slots
        fed = np.empty(count * (2 + bucket.memory_size), dtype=np.int64)
        fed[:count], fed[count : 2 * count] = tokens[:, 0], positions[:, 0]
        fed[2 * count :] = table.memory_mask.ravel()
        bucket.fed.update_inplace(fed)
        binding, options, feeds, returned, last = self._binding(session, k)
        if k is not None and last[0] != banned:  # written in place, never rebound
            feeds["bias"].update_inplace(banned_bias(banned, self.engine.vocab))
            last[0] = banned
        return partial(session.run_with_iobinding, binding, options), returned
