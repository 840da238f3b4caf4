"""Rows held as the engine's own tensors (OrtValues on a device with IO binding, torch
tensors), moved only by the engine's operations (take, join, narrow), which run where the
tensors live.

Such tensors are not written in place, so a joining request, or a repeated beam row, makes a
rebuild: the live rows gathered into fresh tensors without padding columns, the new rows
appended. A row that leaves only frees its slot; the batch is rebuilt when dead slots stay
unused too long or are too many, or when columns that every live row masks pile up (rows
are not written into dead slots: ScatterND, the graph that could, copies the whole tensor,
docs/benchmarks-gpu.md). A cache written in place
(`StateSpec.in_place`) has no shared time axis: every row's positions start at 0 in its own
row of the buffer, so a joining row only resets its length; a rebuild that finds the buffer
over four times what the live rows hold cuts it to twice.
"""

from __future__ import annotations

import numpy as np

from service.runtime.inference import Engine
from service.runtime.onnx_runtime import consecutive_runs
from service.runtime.rows.arenas import Arenas
from service.runtime.rows.table import NewRows, SlotTable
from service.runtime.tensors import (
    EncoderOutput,
    Launch,
    StepOutput,
    Tensors,
    grown_capacity,
    launched,
    shape_of,
    written,
)


class DeviceRows:
    # a joining greedy admission's encoder rows are taken as they are (never written to)
    adopts_encoder_rows = True

    def __init__(self, engine: Engine):
        self.engine = engine
        self.axes = engine.interface.growing_axes()  # by name: the axis rows may differ on
        states = engine.interface.states
        self.growing = [  # states on the batch's shared time axis (narrowed with it)
            s.input for s in states if s.time_axis is not None and not s.in_place
        ]
        # buffers written in place: their capacity axis
        self.buffers = {s.input: s.time_axis for s in states if s.in_place}
        self.rebuilds = 0
        self.clear()

    def clear(self) -> None:
        self.state: Tensors | None = None  # by name (slots, ...): KV cache (slots, H, P, Dh)
        self.memory: Tensors | None = None  # by name (slots, ...): keys (slots, H, S, Dh)

    def rest(self) -> None:
        """Nothing is kept for rows to come: the tensors went as the batch emptied."""

    # -- the protocol -----------------------------------------------------------------------
    def reserve(self, table: SlotTable, rows: int) -> None:
        """Rows join by a rebuild here: no slot is kept for them ahead."""
        return None

    def placed(self, table: SlotTable, reservation) -> bool:
        return False

    def place(self, reservation, rows) -> None:
        raise ValueError("rows held as the engine's tensors are not placed ahead")

    def release(self, reservation) -> None:
        pass

    def join(self, table: SlotTable, new: NewRows, reservation=None) -> None:
        if table.slots == 0:
            self._adopt(table, new)
        else:
            self._rebuild(table, new)

    def prepare(self, table: SlotTable) -> None:
        """Before a step: a rebuild where it is worth one."""
        if table.worth_compacting(bool(self.growing)):
            self._rebuild(table)

    def launch(self, table: SlotTable, tokens, positions, attention: bool, search) -> Launch:
        """The step whole, run where `run` is called (it cannot be split here)."""
        return launched(self.step, table, tokens, positions, attention, search)

    def steps_ahead(self, table: SlotTable, request) -> int:
        """One: the next step's tokens go through the host."""
        return 1

    def launch_ahead(self, table: SlotTable, tokens, positions, steps: int, search) -> Launch:
        raise ValueError("rows held as the engine's tensors step one step at a time")

    def step(self, table: SlotTable, tokens, positions, attention: bool, search) -> StepOutput:
        """One step of every slot (tokens, positions (slots, N))."""
        table.extend_self_mask(tokens.shape[1])
        encoder = EncoderOutput(self.memory, table.memory_mask)
        out = self.engine.step(
            tokens, positions, table.self_mask, self.state, encoder, attention, search
        )
        self.state = out.state
        return out

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None:
        """Rows `slots` (the slot of each row kept, in order; a slot repeats where `first`
        is False): gathered by a rebuild."""
        table.set_alive(slots)
        self._rebuild(table)

    # -- moving rows ------------------------------------------------------------------------
    def _adopt(self, table: SlotTable, new: NewRows) -> None:
        self.memory, self.state = new.memory, new.state
        table.adopt(new)

    def _rebuild(self, table: SlotTable, new: NewRows | None = None) -> None:
        """The live rows gathered without padding columns (`_cut`), `new`'s rows appended
        when given (`_moved`: into fresh tensors here)."""
        self.rebuilds += 1
        live = table.alive
        lead, tail = table.padding()
        lead = lead if self.growing else 0
        length, memory = table.cache_length, table.memory_length - tail
        held = int(table.lengths[live].max(initial=0)) + 1  # positions the next step needs
        states, memories = ({}, {}) if new is None else (new.state, new.memory)  # joining

        def moved(kind: str, tensors: Tensors, joining: Tensors, start: int, end: int):
            cut = self._cut
            return {
                n: self._moved((kind, n), t, live, cut(n, t, start, end, held), joining.get(n))
                for n, t in tensors.items()
            }

        self.state = moved("state", self.state, states, lead, length)
        self.memory = moved("memory", self.memory, memories, 0, memory)
        table.compact(lead, memory, new)

    def _cut(self, name: str, tensor, start: int, end: int, held: int):
        """(axis, start, end): the positions of `name` a rebuild keeps, those from `start`
        to `end` on its growing axis (a buffer written in place: every row's from position
        0, cut to twice the `held` positions once it holds over four times that); None
        where it keeps them all."""
        axis = self.axes[name]
        if name in self.buffers:
            axis, start, end = self.buffers[name], 0, 2 * held
            if shape_of(tensor)[axis] <= 2 * end:
                return None
        if axis is None or (start, end) == (0, shape_of(tensor)[axis]):
            return None
        return axis, start, end

    def _moved(self, key, tensor, live: np.ndarray, cut, joining=None):
        """Rows `live` of `tensor` (`key`'s), cut to `cut` (`_cut`), `joining`'s rows after
        them where given: fresh tensors, by the engine's operations."""
        engine = self.engine
        tensor = engine.take(tensor, live)
        if cut is not None:
            tensor = engine.narrow(tensor, *cut)
        return tensor if joining is None else engine.join(tensor, joining)


def _fits(tensors: Tensors, new: Tensors) -> bool:
    return all(np.all(np.less_equal(new[n].shape[1:], tensors[n].shape[1:])) for n in tensors)


def _write_rows(tensor: np.ndarray, slots: np.ndarray, new: np.ndarray) -> None:
    """Rows `slots` of `tensor` take `new` over its own extent (the rest stays, masked)."""
    tensor[(slots, *map(slice, new.shape[1:]))] = new


class HostRows(DeviceRows):
    """Rows held as numpy arrays (an engine on the host, without IO binding): written into
    slots in place. A joining request takes dead slots where there are enough of them, and
    slots added after the last where the arrays have room (a growing state's past is masked
    instead of written; an empty one is nothing to write); beam reordering copies only the
    rows that are repeated into free slots; rows are rebuilt as a device batch's are only
    where that cannot be done. So a batch that never empties keeps a cache as long as its
    longest-lived row. Every array lives in memory the batch keeps (`Arenas`): a rebuild
    writes into the memory it used before, and leaves room for rows to join."""

    # the batch writes rows into the arrays it holds: a joining admission's are copies
    adopts_encoder_rows = False

    def __init__(self, engine: Engine):
        self.arenas = Arenas()  # kept when the batch empties (until it rests): reused
        super().__init__(engine)

    def rest(self) -> None:
        """The memory the rows were kept in goes; the next rows fault in their own."""
        self.arenas = Arenas()

    def join(self, table: SlotTable, new: NewRows, reservation=None) -> None:
        if table.slots == 0:
            self._adopt(table, new)
            return
        fits = (
            new.memory_mask.shape[1] <= table.memory_length
            and _fits(self.memory, new.memory)
            and _fits(self.state, new.state)
        )
        short = len(new) - (table.slots - table.rows)  # slots to add after the last
        if not fits or (short > 0 and not self._grow(table, short)):
            self._rebuild(table, new)
            return
        slots = table.free()[: len(new)]
        for name, tensor in new.memory.items():
            _write_rows(self.memory[name], slots, tensor)
        for name, tensor in new.state.items():
            if 0 not in shape_of(tensor):
                _write_rows(self.state[name], slots, tensor)
        table.write(slots, new)

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None:
        """Repeated rows copied into free slots in place, where there are enough or the
        arrays have room for more."""
        repeats = np.flatnonzero(~first)
        short = len(repeats) - (table.slots - int(first.sum()))
        if short > 0 and not self._grow(table, short):
            super().repeat(table, slots, first)
            return
        free = np.setdiff1d(np.arange(table.slots), slots[first])
        targets = slots.copy()
        targets[repeats] = free[: len(repeats)]
        origins = slots[repeats]
        length = int(table.lengths[origins].max(initial=0))
        other = table.copy(origins, targets[repeats])
        for name, tensor in self.state.items():
            # only the positions the rows have written
            part = written(self.buffers[name], length)[1:] if name in self.buffers else ()
            tensor[(targets[repeats], *part)] = tensor[(origins, *part)]
        if other.any():
            o, t = origins[other], targets[repeats][other]
            for tensor in self.memory.values():
                tensor[t] = tensor[o]
        table.set_alive(targets)

    def step(self, table: SlotTable, tokens, positions, attention: bool, search) -> StepOutput:
        """One step of every slot; a buffer written in place that the step's positions
        outgrow is grown first, as the engine would grow it, into the batch's memory."""
        if self.buffers:
            self._hold_positions(int(positions.max(initial=0)) + 1)
        return super().step(table, tokens, positions, attention, search)

    # -- moving rows ------------------------------------------------------------------------
    def _held(self) -> dict:
        """Every tensor by its key in the arenas."""
        return {("state", n): t for n, t in self.state.items()} | {
            ("memory", n): t for n, t in self.memory.items()
        }

    def _grow(self, table: SlotTable, extra: int) -> bool:
        """`extra` dead slots added after the last, in place; False (nothing done) where an
        array has no room for them."""
        rows, held = table.slots + extra, self._held()
        if not all(self.arenas.room(key, t, rows) for key, t in held.items()):
            return False
        self.state = {n: self.arenas.extend(("state", n), t, rows) for n, t in self.state.items()}
        self.memory = {
            n: self.arenas.extend(("memory", n), t, rows) for n, t in self.memory.items()
        }
        table.grow(extra)
        return True

    def _hold_positions(self, needed: int) -> None:
        """Every buffer written in place holds at least `needed` positions: one that holds
        fewer is moved into `grown_capacity` positions (what lies past a row's own
        positions is never read)."""
        for name, axis in self.buffers.items():
            tensor = self.state[name]
            if tensor.shape[axis] >= needed:
                continue
            shape = list(tensor.shape)
            shape[axis] = grown_capacity(shape[axis], needed)
            grown = self.arenas.fresh(("state", name), tuple(shape), tensor.dtype, tensor)
            grown[tuple(map(slice, tensor.shape))] = tensor
            self.state[name] = grown

    def _adopt(self, table: SlotTable, new: NewRows) -> None:
        every = np.arange(len(new))
        self.state = {n: self._moved(("state", n), t, every, None) for n, t in new.state.items()}
        self.memory = {n: self._moved(("memory", n), t, every, None) for n, t in new.memory.items()}
        table.adopt(new)

    def _moved(self, key, tensor: np.ndarray, live: np.ndarray, cut, joining=None):
        """Rows `live` of `tensor` cut to `cut`, then `joining`'s (where given), every other
        axis as long as the longer of the two, in `key`'s memory that `tensor` is not in."""
        rows = tensor
        if cut is not None:
            axis, start, end = cut
            rows = tensor[(slice(None),) * axis + (slice(start, end),)]
        shape = rows.shape[1:]
        if joining is not None:
            shape = tuple(max(a, b) for a, b in zip(shape, joining.shape[1:], strict=True))
        count = len(live) + (0 if joining is None else len(joining))
        out = self.arenas.fresh(key, (count, *shape), rows.dtype, tensor)
        within = tuple(map(slice, rows.shape[1:]))
        runs = consecutive_runs(live) if len(live) else []
        for start, end in runs:  # slices copied: nothing gathered twice
            first = int(live[start])
            out[(slice(start, end), *within)] = rows[first : first + end - start]
        if joining is not None:
            out[(slice(len(live), count), *map(slice, joining.shape[1:]))] = joining
        return out
