"""The inference batch of continuous batching: rows of many requests, decoded together.

Rows live in slots. What a slot holds is the model's declaration (`ModelInterface`): memory
tensors and state tensors by name, each with the one axis that may differ between rows (a
memory's length, a growing state's time axis) or none (a fixed-size state such as an LSTM's
(h, c)). The batch keeps the bookkeeping every way of holding rows shares (`SlotTable`: the
slot of each row, each slot's masks, length and input); how the tensors are held and moved is
the engine's row store (service.runtime.rows: numpy arrays written in place, tensors on a device
moved by helper graphs, or the static step's buckets).

Requests join between two steps: a growing state starts empty (its columns up to the batch's
current length are padding, self mask 0) and positions start at 0; a state the encoder
starts is written into the row. So a row's numbers do not depend on when it joined or which
slot it has. Moving cache rows costs as much as a decode step, so rows move as little as
possible: a row that leaves only frees its slot (a dead slot is still computed, its output
ignored), and a reorder that only drops or permutes rows moves nothing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.runtime.inference import Engine, Inference, searched
from service.runtime.rows import NewRows, RowStore, SlotTable, row_store
from service.runtime.search import SearchRequest
from service.runtime.tensors import EncoderOutput, Launch, shape_of


def _every_row(encoder: EncoderOutput, index: np.ndarray) -> bool:
    """Whether `index` is every row of `encoder` in order (a greedy admission's)."""
    count = shape_of(encoder.memory_mask)[0]
    return len(index) == count and bool(np.array_equal(index, np.arange(count)))


class ContinuousBatch(Inference):
    """Rows joined by `join`, advanced by `step`, kept, repeated or dropped by `reorder`."""

    def __init__(self, engine: Engine, store: RowStore | None = None):
        """`store`: how the rows are held; the engine's own by default."""
        self.engine = engine
        self.store = row_store(engine) if store is None else store
        self.table = SlotTable()
        self._next_input = 0

    @property
    def rows(self) -> int:
        return self.table.rows

    @property
    def slots(self) -> int:
        return self.table.slots

    @property
    def rebuilds(self) -> int:
        return self.store.rebuilds

    @property
    def state(self):
        return self.store.state

    @property
    def memory(self):
        return self.store.memory

    @property
    def lengths(self) -> np.ndarray:
        return self.table.lengths

    @property
    def alive(self) -> np.ndarray:
        return self.table.alive

    @property
    def cache_length(self) -> int:
        return self.table.cache_length

    @property
    def memory_length(self) -> int:
        return self.table.memory_length

    def join(self, encoder: EncoderOutput, sources: np.ndarray, reservation=None) -> None:
        """Adds rows decoding `sources` (rows of `encoder`), after the existing rows; in the
        slots of `reservation` where their memory was written there already (`place`)."""
        sources = np.asarray(sources, dtype=np.int64)
        inputs = self._next_input + sources
        self._next_input += int(sources.max()) + 1
        if reservation is not None and self.store.placed(self.table, reservation):
            mask = np.asarray(encoder.memory_mask)[sources]
            init = {n: self.engine.take(t, sources) for n, t in encoder.init.items()}
            state = self.engine.initial_state(EncoderOutput({}, mask, init), len(sources))
            self.store.join(self.table, NewRows({}, mask, state, inputs), reservation)
            return
        self.store.release(reservation)
        rows = self._rows(encoder, sources)
        state = self.engine.initial_state(rows, len(sources))
        self.store.join(
            self.table, NewRows(rows.memory, np.asarray(rows.memory_mask), state, inputs)
        )

    def _rows(self, encoder: EncoderOutput, sources: np.ndarray) -> EncoderOutput:
        if self.store.adopts_encoder_rows and _every_row(encoder, sources):
            return encoder  # every row in order (a greedy admission): nothing to gather
        return encoder.rows(self.engine.take, sources)

    def reserve(self, rows: int):
        """Free slots for `rows` joining rows, kept for them until they join, where the
        store can write their memory beside the steps (`place`); None elsewhere."""
        return self.store.reserve(self.table, rows)

    def place(self, reservation, sources: np.ndarray, encoder: EncoderOutput) -> None:
        """On the encoder thread: rows `sources` of `encoder` written into the reserved slots
        (nothing without a reservation)."""
        if reservation is not None:
            self.store.place(reservation, self._rows(encoder, sources))

    def release(self, reservation) -> None:
        """A reservation no row will use."""
        self.store.release(reservation)

    def _forward(self, tokens: np.ndarray, attention: bool, search=None):
        """One step of every slot (a dead slot is fed padding) -> the step's output, the
        search request as the step saw it, and the live slots (None: every slot)."""
        launch, search, alive = self._launch(tokens, attention, search)
        launch.run()
        return launch.output(), search, alive

    def _launch(self, tokens: np.ndarray, attention: bool, search=None, steps: int = 1):
        """`_forward` made ready: the store's launch instead of its output; with `steps`
        above 1, that many greedy steps back to back (the store's `launch_ahead`)."""
        self.store.prepare(self.table)
        table = self.table
        alive = None if table.identity else table.alive
        tokens, positions = table.fed(tokens)
        if alive is not None and search is not None and search.temperature is not None:
            temperature = np.ones(table.slots, dtype=np.float32)  # dead slots: any value
            temperature[alive] = search.temperature
            search = replace(search, temperature=temperature)
        if alive is not None and search is not None and search.controls:
            slots = alive.tolist()
            controls = {slots[row]: c for row, c in search.controls.items()}
            search = replace(search, controls=controls)
        if steps == 1:
            launch = self.store.launch(table, tokens, positions, attention, search)
            table.stepped(tokens.shape[1])
            return launch, search, alive
        launch = self.store.launch_ahead(table, tokens, positions, steps, search)
        if alive is not None:  # counted idle once by `fed`
            table.idle[table.dead()] += steps - 1
        table.stepped(steps)
        return launch, search, alive

    def search_step(self, tokens: np.ndarray, request: SearchRequest, steps: int = 1):
        launch = self.launch_search_step(tokens, request, steps)
        launch.run()
        return launch.output()

    def launch_search_step(
        self, tokens: np.ndarray, request: SearchRequest, steps: int = 1
    ) -> Launch:
        """`search_step` made ready: `run()` (which may go on another thread), then
        `output()` -> (candidates, attention) of the live rows. With `steps` above 1 (at most
        `steps_ahead`), that many greedy steps back to back, each fed the ids the one before
        chose: the candidates (rows, steps) are each step's best, no attention; every row
        takes every step, one that ended within them the caller's to drop."""
        launch, request, alive = self._launch(tokens, request.attention, request, steps)

        def output():
            out = launch.output()
            candidates, seen = searched(self.engine, out, request), out.attention
            if alive is None:
                return candidates, seen
            return candidates.rows(alive), None if seen is None else seen[alive]

        return Launch(launch.run, output, launch.recording)

    def steps_ahead(self, request: SearchRequest) -> int:
        """How many greedy steps of `request` may run back to back now (`search_step`'s
        `steps`; 1: one at a time, where the store cannot, or the search needs the host each
        step)."""
        if self.table.rows == 0:
            return 1
        return self.store.steps_ahead(self.table, request)

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out, _, alive = self._forward(tokens, True)
        logits, seen = self.engine.host(out.logits), out.attention
        if alive is None:
            return logits, seen
        return logits[alive], seen[alive]

    def rest(self) -> None:
        """Where no row is in the batch (it has stayed empty a while), memory its store keeps
        for the rows to come goes."""
        if self.table.rows == 0:
            self.store.rest()

    def reorder(self, index: np.ndarray) -> None:
        index = np.asarray(index, dtype=np.int64)
        if len(index) == 0:
            self.table.clear()
            self.store.clear()
            return
        if self.table.reorder_free(index):
            return
        slots = self.table.alive[index]
        first = np.zeros(len(slots), dtype=bool)
        first[np.unique(slots, return_index=True)[1]] = True
        self.store.repeat(self.table, slots, first)


def joined(engine: Engine, encoder: EncoderOutput, rows: int) -> ContinuousBatch:
    """A continuous batch of the `rows` rows of `encoder` (an `Inference` made as
    CachedInference is, for decodes of one batch through the served path)."""
    batch = ContinuousBatch(engine)
    batch.join(encoder, np.arange(rows))
    return batch
