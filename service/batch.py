"""The inference batch of continuous batching: rows of many requests, decoded together.

Rows live in slots. What a slot holds is the model's declaration (`ModelInterface`): memory
tensors and state tensors by name, each with the one axis that may differ between rows (a
memory's length, a growing state's time axis) or none (a fixed-size state such as an LSTM's
(h, c)). One bookkeeping serves every layout: rows are gathered on axis 0, joined with their
differing axis right-padded, narrowed on that axis; a fixed state is only gathered, joined
and copied with its rows.

Requests join between two steps: a growing state starts empty (its columns up to the batch's
current length are padding, self mask 0) and positions start at 0; a state the encoder
starts is written into the row. So a row's numbers do not depend on when it joined or which
slot it has. A cache written in place (`StateSpec.in_place`) has no shared time axis: every
slot's positions start at 0 in its own row of the buffer, what lies beyond a row's length is
never read, so a joining row only resets its length, and the buffer is treated as a
fixed-size state (gathered, joined, copied); the engine grows its capacity when a row needs
more, and a rebuild that finds it over four times what the live rows hold cuts it to twice.

Moving cache rows costs as much as a decode step, so rows move as little as possible:
- a row that leaves only frees its slot (a dead slot is still computed, its output ignored);
- a joining request takes dead slots when there are enough of them;
- beam reordering copies only the rows that are repeated into free slots, in place;
- the cache is rebuilt (live rows gathered, padding columns dropped, new rows appended) only
  when a request cannot reuse dead slots, when dead slots stay unused too long or are too
  many, or when columns that every live row masks pile up.
So a batch that never empties keeps a cache as long as its longest-lived row.

Writing rows into slots in place needs host (numpy) arrays. Other tensors (OrtValues on a
device with IO binding, torch tensors) take the same decisions but move rows with the
engine's operations (take, join, narrow), which run where the tensors live, so there a
joining request or a repeated beam row rebuilds. (Writing into dead slots on the GPU with a
ScatterND graph was measured slower than rebuilding: 287 against 390 single-sentence jobs/s
for one busy scheduler on an H100, docs/benchmarks-gpu.md; ScatterND copies the whole
tensor, and the dead slots it keeps are computed every step.) A reorder that only drops or
permutes rows moves nothing on any engine.

A static engine (`OnnxEngine(cache="static")`, service.static_step) fixes every shape: the
slots are a bucket of rows (1, 2, 4, ...) whose buffers it allocated once, the memory has
the longest source's size, the cache its fixed capacity. Rows are written into its slots,
and copied between them, by the engine (its gather graph writing into the slots' memory on
the device); a rebuild is a move to another bucket: a larger one when rows need more slots,
a smaller one when a quarter of the slots or fewer are live.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.batching import concat_padded
from service.inference import EncoderOutput, Engine, Inference, Tensors, shape_of, written
from service.search import SearchRequest

MIN_TRIM = 8  # padding columns worth dropping (and at least 1/8 of the length)
IDLE_STEPS = 16  # steps a dead slot may wait for a joining request before a rebuild


def _trim(mask: np.ndarray, leading: bool) -> int:
    """Columns of `mask` (rows, L) that no row uses: leading ones, or trailing ones."""
    used = np.flatnonzero(mask.any(axis=0))
    if leading:
        return int(used[0]) if len(used) else mask.shape[1]
    return mask.shape[1] - (int(used[-1]) + 1 if len(used) else 0)


def _every_row(encoder: EncoderOutput, index: np.ndarray) -> bool:
    """Whether `index` is every row of `encoder` in order (a greedy admission's)."""
    count = shape_of(encoder.memory_mask)[0]
    return len(index) == count and bool(np.array_equal(index, np.arange(count)))


def _extent(mask: np.ndarray) -> int:
    """Columns of `mask` (rows, L) up to the last any row uses."""
    return mask.shape[1] - _trim(mask, leading=False)


def _write_rows(tensor: np.ndarray, slots: np.ndarray, new: np.ndarray) -> None:
    """Rows `slots` of `tensor` take `new` over its own extent (the rest stays, masked)."""
    tensor[(slots, *map(slice, new.shape[1:]))] = new


def _fits(tensors: Tensors, new: Tensors) -> bool:
    return all(np.all(np.less_equal(new[n].shape[1:], tensors[n].shape[1:])) for n in tensors)


class ContinuousBatch(Inference):
    """Rows joined by `join`, advanced by `step`, kept, repeated or dropped by `reorder`."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.axes = engine.interface.growing_axes()  # by name: the axis rows may differ on
        states = engine.interface.states
        self.growing = [  # states on the batch's shared time axis (narrowed with it)
            s.input for s in states if s.time_axis is not None and not s.in_place
        ]
        # buffers written in place: their capacity axis (cut when a rebuild finds it mostly
        # beyond every live row's length)
        self.buffers = {s.input: s.time_axis for s in states if s.in_place}
        # an engine whose step runs over fixed buffers per bucket of slots (CUDA graphs)
        self.static = getattr(engine, "static", None)
        # rows are written into slots: numpy arrays in place, or by the static engine
        self.in_place = engine.host_tensors or self.static is not None
        self.rebuilds = 0
        self._clear()

    def _clear(self) -> None:
        self.state: Tensors | None = None  # by name (slots, ...): KV cache (slots, H, P, Dh)
        self.memory: Tensors | None = None  # by name (slots, ...): keys (slots, H, S, Dh)
        self.memory_mask = np.zeros((0, 0), dtype=np.int64)  # (slots, S)
        self.self_mask = np.zeros((0, 0), dtype=np.int64)  # (slots, P)
        self.lengths = np.zeros(0, dtype=np.int64)  # tokens fed per slot
        self.inputs = np.zeros(0, dtype=np.int64)  # the input a slot decodes
        self.idle = np.zeros(0, dtype=np.int64)  # steps a slot has been dead
        self.alive = np.zeros(0, dtype=np.int64)  # the slot of each row
        self._next_input = 0
        self._identity = True  # row i is in slot i, no slot is dead
        self._left = False  # rows left since the last look for padding columns
        self.bucket = None  # a static engine's buffers the slots are

    @property
    def rows(self) -> int:
        return len(self.alive)

    @property
    def slots(self) -> int:
        return len(self.lengths)

    @property
    def cache_length(self) -> int:
        return self.self_mask.shape[1]

    @property
    def memory_length(self) -> int:
        return self.memory_mask.shape[1]

    def _dead(self) -> np.ndarray:
        dead = np.ones(self.slots, dtype=bool)
        dead[self.alive] = False
        return dead

    # -- joining ----------------------------------------------------------------------------
    def join(self, encoder: EncoderOutput, sources: np.ndarray) -> None:
        """Adds rows decoding `sources` (rows of `encoder`), after the existing rows."""
        sources = np.asarray(sources, dtype=np.int64)
        if not self.engine.host_tensors and _every_row(encoder, sources):
            # every row in order (a greedy admission): nothing to gather first. Device
            # tensors are never written in place (the static step copies them into its
            # slots, a growing batch joins them into new tensors); host arrays adopted by
            # the batch are, so those are always taken (copied)
            rows = encoder
        else:
            rows = encoder.rows(self.engine.take, sources)
        new = (rows.memory, np.asarray(rows.memory_mask), self.engine.initial_state(rows,
               len(sources)), self._next_input + sources)  # fmt: skip
        self._next_input += int(sources.max()) + 1
        if self.static is not None:
            self._join_static(*new)
            return
        free = np.flatnonzero(self._dead())
        if self.slots == 0:
            self._adopt(*new)
        elif (
            self.in_place
            and len(free) >= len(sources)
            and new[1].shape[1] <= self.memory_length
            and _fits(self.memory, new[0])
            and _fits(self.state, new[2])
        ):
            self._reuse(free[: len(sources)], *new)
        else:
            self._rebuild(new)

    def _adopt(self, memory: Tensors, memory_mask: np.ndarray, state: Tensors, inputs) -> None:
        rows = len(inputs)
        self.memory, self.memory_mask, self.state = memory, memory_mask, state
        self.self_mask = np.zeros((rows, 0), dtype=np.int64)
        self.lengths = np.zeros(rows, dtype=np.int64)
        self.inputs, self.idle = inputs, np.zeros(rows, dtype=np.int64)
        self.alive, self._identity = np.arange(rows), True

    def _reuse(self, slots: np.ndarray, memory, memory_mask: np.ndarray, state, inputs) -> None:
        """New rows in dead slots: memory and state written in place (a growing state's past
        is masked instead; an empty one is nothing to write), by the static engine where
        it holds the buffers."""
        static, extent = self.static, _extent(memory_mask)
        if static is not None:  # padded or cut to the bucket's memory size
            static.place_memory(memory, self.memory, slots)
        else:
            for name, tensor in memory.items():
                _write_rows(self.memory[name], slots, tensor)
        for name, tensor in state.items():
            if 0 in shape_of(tensor):
                continue
            if static is None:
                _write_rows(self.state[name], slots, tensor)
            else:
                target = self.state[name]
                static.move(static.fit(tensor, target), np.arange(len(slots)), target, slots)
        self.memory_mask[slots] = 0
        self.memory_mask[slots, :extent] = memory_mask[:, :extent]
        if static is not None:
            static.write_mask(self.bucket, self.memory_mask)
        self.self_mask[slots] = 0
        self.lengths[slots], self.inputs[slots], self.idle[slots] = 0, inputs, 0
        self._set_alive(np.concatenate([self.alive, slots]))

    def _set_alive(self, alive: np.ndarray) -> None:
        """The slots of the rows, in row order."""
        self.alive = alive
        self._identity = self.slots == self.rows and np.array_equal(alive, np.arange(self.slots))

    def _rebuild(self, new=None) -> None:
        """Gathers the live rows into fresh tensors without padding columns, appending the
        rows of `new` (memory, memory mask, initial state, inputs) when given."""
        self.rebuilds += 1
        take, narrow, join = self.engine.take, self.engine.narrow, self.engine.join
        live, mask = self.alive, self.self_mask[self.alive]
        lead = _trim(mask, leading=True) if self.growing else 0
        tail = _trim(self.memory_mask[live], leading=False)
        length, memory = self.cache_length, self.memory_length - tail

        held = int(self.lengths[live].max(initial=0)) + 1  # positions the next step needs

        def rows(name: str, tensor, start: int, end: int, full: int):
            tensor, axis = take(tensor, live), self.axes[name]
            if name in self.buffers:  # every row from position 0: only the end is cut
                axis = self.buffers[name]
                start, end, full = 0, 2 * held, shape_of(tensor)[axis]
                if full <= 2 * end:
                    return tensor
            if axis is None or (start, end) == (0, full):
                return tensor
            return narrow(tensor, axis, start, end)

        self.state = {n: rows(n, t, lead, length, length) for n, t in self.state.items()}
        self.memory = {n: rows(n, t, 0, memory, self.memory_length) for n, t in self.memory.items()}
        self.self_mask = np.ascontiguousarray(mask[:, lead:])
        self.memory_mask = np.ascontiguousarray(self.memory_mask[live, :memory])
        self.lengths, self.inputs = self.lengths[live], self.inputs[live]
        if new is not None:
            memory, memory_mask, state, inputs = new
            self.state = {n: join(t, state[n]) for n, t in self.state.items()}
            self.memory = {n: join(t, memory[n]) for n, t in self.memory.items()}
            self.memory_mask = concat_padded([self.memory_mask, memory_mask])
            padding = np.zeros((len(inputs), self.cache_length), dtype=np.int64)
            self.self_mask = np.concatenate([self.self_mask, padding])
            self.lengths = np.concatenate([self.lengths, np.zeros(len(inputs), np.int64)])
            self.inputs = np.concatenate([self.inputs, inputs])
        self.idle = np.zeros(self.slots, dtype=np.int64)
        self.alive, self._identity, self._left = np.arange(self.slots), True, False

    # -- a static engine's buckets ----------------------------------------------------------
    def _memory_needed(self, new: int = 0) -> int:
        """Memory positions the live rows use (at least `new`, a joining row's)."""
        if self.rows == 0:
            return max(new, 1)
        return max(_extent(self.memory_mask[self.alive]), new, 1)

    def _join_static(self, memory, memory_mask: np.ndarray, state, inputs) -> None:
        """New rows in free slots of the bucket; first into a bucket of more slots when too
        few are free, or of a larger memory when theirs is longer."""
        static, count = self.static, len(inputs)
        size = static.memory_for(self._memory_needed(_extent(memory_mask)))
        free = np.flatnonzero(self._dead())
        if self.bucket is None or len(free) < count:
            self._move(static.slots_for(self.rows + count), max(size, self._memory_size()))
            free = np.flatnonzero(self._dead())
        elif size > self.bucket.memory_size:
            self._move(self.slots, size)
        self._reuse(free[:count], memory, memory_mask, state, inputs)

    def _memory_size(self) -> int:
        return 0 if self.bucket is None else self.bucket.memory_size

    def _move(self, slots: int, memory: int, order: np.ndarray | None = None) -> None:
        """The batch into the bucket (`slots`, `memory`), by the engine where the buffers
        live. Of as many slots: only the memory moves, every row keeps its slot (the cache
        buffers are the same). Else rows `order` of the slots (by default the live rows; may
        repeat) go to its first slots."""
        static, target, old = self.static, self.static.bucket(slots, memory), self.bucket
        if target is old:
            raise ValueError("rows move between two buckets, not within one")
        live = self.alive if order is None else np.asarray(order, dtype=np.int64)
        same = old is not None and old.slots == slots and order is None
        places = live if same else np.arange(len(live))  # the slots the rows take
        mask = np.zeros((slots, memory), dtype=np.int64)
        mask[:, 0] = 1  # a free slot attends to one memory position
        if old is not None and len(live):
            static.move_memories(old.memory, live, target.memory, places)
            if not same:
                static.move_states(old.state, live, target.state, places)
            kept = min(memory, old.memory_size)
            mask[places] = 0
            mask[places, :kept] = self.memory_mask[live, :kept]
        self.bucket, self.memory, self.state = target, target.memory, target.state
        self.memory_mask = mask
        static.write_mask(target, mask)
        self.rebuilds += 1
        if same:
            return
        lengths, inputs = np.zeros(slots, np.int64), np.zeros(slots, np.int64)
        if old is not None:
            lengths[places], inputs[places] = self.lengths[live], self.inputs[live]
        self.lengths, self.inputs = lengths, inputs
        self.self_mask = np.zeros((slots, 0), dtype=np.int64)  # the static step has none
        self.idle = np.zeros(slots, dtype=np.int64)
        self.alive, self._left = places, False
        self._identity = len(places) == slots

    def _shrink_static(self) -> None:
        """A bucket four times too large (slots or memory) for the live rows: a smaller one.
        The memory the rows use shrinks only when rows leave, so it is looked at then."""
        static, memory = self.static, self.bucket.memory_size
        slots = static.slots_for(self.rows) if 4 * self.rows <= self.slots else self.slots
        if self._left:
            self._left = False
            size = static.memory_for(self._memory_needed())
            memory = size if 4 * size <= memory else memory
        if (slots, memory) != (self.slots, self.bucket.memory_size):
            self._move(slots, memory)

    # -- stepping ---------------------------------------------------------------------------
    def _worth_rebuilding(self) -> bool:
        dead = self.slots - self.rows
        if dead and (3 * dead > self.slots or self.idle.max() >= IDLE_STEPS):
            return True
        if not self._left:  # padding columns appear only when rows leave
            return False
        self._left = False
        live_mask = self.self_mask[self.alive]
        lead = _trim(live_mask, leading=True)
        if lead >= max(MIN_TRIM, self.cache_length // 8):
            if self.growing:
                return True
            self.self_mask = np.ascontiguousarray(self.self_mask[:, lead:])  # no state to cut
        padding = _trim(self.memory_mask[self.alive], leading=False)
        return padding >= max(MIN_TRIM, self.memory_length // 8)

    def _forward(self, tokens: np.ndarray, attention: bool, search=None):
        """One step of every slot (a dead slot is fed padding): the engine's logits of every
        slot, the live rows' attention (or None), and the live slots (None: every slot)."""
        if self.static is not None:
            self._shrink_static()
        elif self._worth_rebuilding():
            self._rebuild()
        identity = self._identity
        dead = None if identity else self._dead()
        new = tokens.shape[1]
        if not identity:  # dead slots are fed padding; their outputs are dropped
            fed = np.zeros((self.slots, new), dtype=np.int64)
            fed[self.alive] = tokens
            tokens = fed
            self.idle[dead] += 1
        positions = self.lengths[:, None] + np.arange(new, dtype=np.int64)
        if not identity:
            positions[dead] = 0  # a dead slot's length may pass the model's last position
        if self.static is None:
            ones = np.ones((self.slots, new), np.int64)
            self.self_mask = np.concatenate([self.self_mask, ones], 1)
        mask = self.memory_mask if self.static is None else self.bucket.memory_mask
        encoder = EncoderOutput(self.memory, mask)
        logits, self.state, seen = self.engine.step(
            tokens, positions, self.self_mask, self.state, encoder, attention, search
        )
        self.lengths = self.lengths + new
        alive = None if identity else self.alive
        if seen is not None and alive is not None:
            seen = seen[alive]
        return logits, seen, alive

    def search_step(self, tokens: np.ndarray, request: SearchRequest):
        logits, seen, alive = self._forward(tokens, request.attention, request)
        if alive is not None and request.temperature is not None:  # dead slots: any value
            temperature = np.ones(self.slots, dtype=np.float32)
            temperature[alive] = request.temperature
            request = replace(request, temperature=temperature)
        candidates = self.engine.search(logits, request)
        return (candidates if alive is None else candidates.rows(alive)), seen

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, seen, alive = self._forward(tokens, True)
        logits = self.engine.host(logits)
        return (logits if alive is None else logits[alive]), seen

    # -- leaving and reordering -------------------------------------------------------------
    def reorder(self, index: np.ndarray) -> None:
        index = np.asarray(index, dtype=np.int64)
        if len(index) == 0:
            self._clear()
            return
        slots = self.alive[index]
        if len(slots) == 1 or np.all(np.diff(slots) > 0):  # rows leave, none repeats: free
            self._left |= len(slots) < self.rows
            self._identity &= len(slots) == self.rows
            self.alive = slots
            return
        first = np.zeros(len(slots), dtype=bool)
        first[np.unique(slots, return_index=True)[1]] = True
        repeats = np.flatnonzero(~first)
        if len(repeats) == 0:  # rows change order (and may leave), none repeats: free
            self._left |= len(slots) < self.rows
            self._identity = False
            self.alive = slots
            return
        free = np.setdiff1d(np.arange(self.slots), slots[first])
        if self.static is not None and len(repeats) > len(free):
            self._move(self.static.slots_for(len(slots)), self.bucket.memory_size, slots)
            return
        if not self.in_place or len(repeats) > len(free):
            self.alive = slots
            self._rebuild()  # gathers, repeated rows included
            return
        targets = slots.copy()
        targets[repeats] = free[: len(repeats)]
        self._copy_rows(slots[repeats], targets[repeats])
        self.idle[targets] = 0
        self._left |= len(targets) < self.rows
        self._set_alive(targets)

    def _copy_rows(self, origins: np.ndarray, targets: np.ndarray) -> None:
        """Copies slots `origins` to slots `targets` (disjoint) in place; the memory only
        where the input differs (beams of one input share theirs). A static engine copies
        whole rows within its buffers, where they live."""
        length, static = int(self.lengths[origins].max(initial=0)), self.static
        other = self.inputs[origins] != self.inputs[targets]
        o, t = origins[other], targets[other]
        if static is not None:  # every state (memory) tensor in one run a run of slots
            static.move_states(self.state, origins, self.state, targets)
            if other.any():
                static.move_memories(self.memory, o, self.memory, t)
        else:
            for name, tensor in self.state.items():
                # host buffers: only the positions the rows have written
                part = written(self.buffers[name], length)[1:] if name in self.buffers else ()
                tensor[(targets, *part)] = tensor[(origins, *part)]
            for tensor in self.memory.values() if other.any() else ():
                tensor[t] = tensor[o]
        if other.any():
            self.memory_mask[t] = self.memory_mask[o]
            if static is not None:
                static.write_mask(self.bucket, self.memory_mask)
        self.self_mask[targets] = self.self_mask[origins]
        self.lengths[targets] = self.lengths[origins]
        self.inputs[targets] = self.inputs[origins]


def joined(engine: Engine, encoder: EncoderOutput, rows: int) -> ContinuousBatch:
    """A continuous batch of the `rows` rows of `encoder` (an `Inference` made as
    CachedInference is, for decodes of one batch through the served path)."""
    batch = ContinuousBatch(engine)
    batch.join(encoder, np.arange(rows))
    return batch
