"""Rows held in the static step's buckets: buffers allocated once, so that on CUDA each
bucket's step is captured as a CUDA graph and replayed with one launch.

The static step (service.runtime.static_step) is the in-place step at a fixed capacity: every
input and output has a fixed shape for a given number of slots and memory size. So the rows
live in a bucket (service.runtime.rows.buckets): a number of slots (1, 2, 4, ...; the rows
padded up to it) and a memory size (16, 32, ... up to the longest source; the longest row's
memory padded up to it). Its buffers (the slots' ids, positions and cache, shared by the
buckets of one slot count; the memory and its mask; the outputs) are allocated on first use
and kept, and each (bucket, form of the step, k) has its binding, and on CUDA its captured
graph (onnxruntime's `gpu_graph_id`): nothing is ever reallocated, so a graph stays valid as
long as the store.

Rows are written into a bucket's free slots, and moved between buckets, on the device where
the buffers live (service.runtime.rows.slots). A batch moves to a larger bucket when rows
need more slots or memory, to a smaller one when a quarter of its slots or fewer are live.
On the CPU the same code runs uncaptured.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from service.runtime.onnx_runtime import banned_bias, power_of_two
from service.runtime.rows.buckets import MAX_AHEAD, Bucket, BucketBinding, SlotBuffers
from service.runtime.rows.slots import SlotWriter
from service.runtime.rows.table import NewRows, SlotTable, extent
from service.runtime.search import Candidates, SearchRequest
from service.runtime.static_step import StaticStep, StepGraph
from service.runtime.tensors import Launch, Recordings, StepOutput, shape_of

MIN_MEMORY = 16  # the smallest memory size of the static step's buckets


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

    def __init__(self, step: StaticStep):
        """`step`: the engine's static step (its graphs, what its buffers are sized by,
        whether it captures); shared with every other store over that engine."""
        self.step = step
        self.memory_limit = step.memory_limit  # the longest source's positions
        self.capacity = step.capacity
        self.writer = SlotWriter(step)
        self.slot_sets: dict[int, SlotBuffers] = {}
        self.buckets: dict[tuple[int, int], Bucket] = {}  # by (slots, memory size)
        self.rebuilds = 0
        self.clear()

    def clear(self) -> None:
        self.bucket: Bucket | None = None
        self.reserved: Reservation | None = None  # slots no other row may take meanwhile

    def rest(self) -> None:
        """The buckets stay: each is allocated once, its step captured over it."""

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
                slots, SlotBuffers(self.step, slots)
            )
            bucket = self.buckets[(slots, memory)] = Bucket(self.step, shared, slots, memory)
        return bucket

    def fit(self, rows, target):
        """`rows` (numpy or OrtValue) right-padded with zeros to `target`'s row shape."""
        return self.writer.fit(rows, target)

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
        index = np.arange(len(slots))
        self.writer.place(rows.memory, index, bucket.memory_buffers, slots, pad=True)
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
        targets = self.bucket.memory_buffers
        self.writer.place(new.memory, np.arange(count), targets, slots, pad=True)
        self._write_state(new, slots)
        table.write(slots, new)

    def _write_state(self, new: NewRows, slots: np.ndarray) -> None:
        """The joining rows' initial state into `slots` (an empty one is nothing to write)."""
        writer = self.writer
        for name, tensor in new.state.items():
            if 0 not in shape_of(tensor):
                target = self.bucket.state_buffers[name]
                rows = writer.fit(tensor, target.value)
                writer.gather(rows, np.arange(len(slots)), target, slots)

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
        is kept, one captured graph per bucket, form and k. Its inputs are written and its
        binding chosen here; `run` is onnxruntime's run alone."""
        bucket, step = self.bucket, self.step
        if shape_of(tokens) != (bucket.slots, 1):
            raise ValueError(f"a static step takes one token for each of its {bucket.slots} slots")
        if int(np.max(positions)) >= self.capacity:
            raise ValueError(f"the static cache holds {self.capacity} positions")
        graph = step.graph_of(lean=not attention)
        lean = graph is StepGraph.LEAN
        ranked = lean and search is not None and search.temperature is None
        request = search if ranked else SearchRequest()
        k = request.width(step.vocab) if lean else None
        bucket.write_fed(tokens, positions, table.memory_mask)
        bound = bucket.binding(step, graph, k)
        if lean:
            self._ban(bound, tuple(request.banned))
        out = bound.outputs

        def output() -> StepOutput:
            # the bucket's output buffers are written again by the next step (on the CPU
            # their numpy() is a view of them): what leaves the step is copied
            found = bound.candidates.read() if ranked else None
            name = step.interface.attention
            seen = np.array(out[name].numpy(), dtype=np.float32) if attention else None
            return StepOutput(out["logits"], bucket.state, seen, found)

        run = partial(step.graphs[graph].run_with_iobinding, bound.binding, bound.options)
        return Launch(run, output, bound.recording)

    def steps_ahead(self, table: SlotTable, request: SearchRequest) -> int:
        """How many greedy steps of `request` may run back to back from the rows' present
        positions (`launch_ahead`): none but one where the step must be searched on the host
        (a temperature, controls, the attention kept, more than one candidate) or the lean
        step is not shipped, else as many as the cache's capacity leaves room for."""
        if not self._greedy_lean(request):
            return 1
        # the live rows' (a dead slot is fed position 0, whatever its length says)
        longest = int(table.lengths[table.alive].max(initial=0))
        return max(1, min(MAX_AHEAD, self.capacity - longest))

    def _greedy_lean(self, request: SearchRequest) -> bool:
        """Whether `request` is one best id a row, searched within the lean step of a
        bucket: what steps run back to back need."""
        greedy = request.temperature is None and not request.controls and not request.attention
        lean = self.step.graph_of(lean=True) is StepGraph.LEAN and self.bucket is not None
        return greedy and lean and request.width(self.step.vocab) == 1

    def launch_ahead(
        self, table: SlotTable, tokens, positions, steps: int, search: SearchRequest
    ) -> Launch:
        """`steps` greedy steps of every slot back to back on the device, each fed the ids
        the one before chose (`Bucket.ahead`); `run` runs them all, `output` gives each
        step's best candidate as the columns of one Candidates (slots, steps), the step
        output's. Every slot runs every step: a row that ends within them is dropped after,
        by the scheduler."""
        # a greedy search, and room in the cache (`positions`: the live rows' lengths, a dead
        # slot's 0), as `steps_ahead` found it
        cannot = f"{steps} steps cannot run back to back here"
        if steps > 1 and not self._greedy_lean(search):
            raise ValueError(f"{cannot}: each step's ids are searched on the host")
        if int(positions.max()) + steps > self.capacity:
            raise ValueError(f"{cannot}: the static cache holds {self.capacity} positions")
        bucket, step = self.bucket, self.step
        if shape_of(tokens) != (bucket.slots, 1):
            raise ValueError(f"a static step takes one token for each of its {bucket.slots} slots")
        bound = bucket.ahead(step, steps)
        bucket.write_fed(tokens, positions, table.memory_mask)
        bucket.write_ahead(positions, steps)
        self._ban(bound[0], tuple(search.banned))  # its bias is every step's
        session = step.graphs[StepGraph.LEAN]
        recording = None
        if step.capture:
            recording = Recordings([each.recording for each in bound])

        def run() -> None:
            # the steps but the last queued on the device without a wait, each after the one
            # before on its stream; every one waited for where a graph is recorded
            records = recording is not None and not recording.here()
            for each in bound[:-1]:
                options = each.options if records else each.unsynced or each.options
                session.run_with_iobinding(each.binding, options)
            session.run_with_iobinding(bound[-1].binding, bound[-1].options)

        def output() -> StepOutput:
            found = [each.candidates.read() for each in bound]
            ids = np.concatenate([c.ids for c in found], axis=1)
            steps = Candidates(ids, np.concatenate([c.log_probs for c in found], axis=1))
            return StepOutput(None, bucket.state, None, steps)

        return Launch(run, output, recording)

    def _ban(self, bound: BucketBinding, banned: tuple[int, ...]) -> None:
        """The lean step's bias set to ban `banned`: written in place, never rebound."""
        if bound.banned != banned:
            bound.bias.update_inplace(banned_bias(banned, self.step.vocab))
            bound.banned = banned

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None:
        """Repeated rows copied into free slots of the bucket (every state tensor in one run,
        as a row's memory: `SlotWriter.place`), or the rows into a bucket of more slots."""
        repeats = np.flatnonzero(~first)
        free = np.setdiff1d(np.arange(table.slots), slots[first])
        if self.reserved is not None:  # kept for joining rows
            free = np.setdiff1d(free, self.reserved.slots)
        if len(repeats) > len(free):
            self._move(table, self.slots_for(len(slots)), self.bucket.memory_size, slots)
            return
        targets = slots.copy()
        targets[repeats] = free[: len(repeats)]
        origins, bucket, writer = slots[repeats], self.bucket, self.writer
        other = table.copy(origins, targets[repeats])
        writer.place(bucket.state, origins, bucket.state_buffers, targets[repeats])
        if other.any():
            o, t = origins[other], targets[repeats][other]
            writer.place(bucket.memory, o, bucket.memory_buffers, t)
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
            writer = self.writer
            writer.place(old.memory, live, target.memory_buffers, places, pad=True)
            if not same:
                writer.place(old.state, live, target.state_buffers, places)
        self.bucket = target
        table.rehouse(live, places, slots, memory, keep_slots=same)
        self.rebuilds += 1
