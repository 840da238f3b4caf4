"""How a continuous batch holds its rows' memory and state tensors: one class per way.

Every way keeps the batch's `SlotTable` (which slot each row is in, the slots' masks,
lengths and inputs: host arrays) and owns its tensors, with the same calls:
- `join(table, new)`: new rows after the existing ones (`reserve` and `place` first, where
  the store writes a joining admission's memory beside the steps: the static step's);
- `prepare(table)`: before a step, a rebuild or a move where one is worth it;
- `step(table, tokens, positions, attention, search) -> StepOutput`: one step of every slot;
  `launch(...)` the same made ready, so that its run may go on another thread (the static
  step's run alone: onnxruntime's, which releases the GIL);
- `repeat(table, slots, first)`: rows kept in an order where some repeat (beams).
A reorder that only drops or permutes rows moves nothing on any of them.

The ways: `HostRows` (numpy arrays written in place), `DeviceRows` (the engine's tensors on
a device, moved by its helper graphs), `StaticRows` (the static step's buckets of buffers
allocated once, replayed as CUDA graphs). Each engine makes its own (`Engine.row_store`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from service.inference import EncoderOutput, Launch, StepOutput, Tensors
from service.rows.device import DeviceRows, HostRows
from service.rows.static import StaticRows
from service.rows.table import NewRows, SlotTable
from service.search import SearchRequest


class RowStore(Protocol):
    adopts_encoder_rows: bool  # a greedy admission's encoder output joins without a copy
    rebuilds: int  # rebuilds (or moves between buckets) so far
    state: Tensors | None  # by name, (slots, ...)
    memory: Tensors | None  # by name, (slots, ...)

    def clear(self) -> None: ...

    def reserve(self, table: SlotTable, rows: int) -> object | None:
        """Free slots kept for `rows` joining rows, whose memory `place` may write beside
        the steps; None where the store does not place ahead."""

    def place(self, reservation, rows: EncoderOutput) -> None:
        """From the encoder thread: the joining rows' memory into the reserved slots."""

    def placed(self, table: SlotTable, reservation) -> bool:
        """Whether `reservation`'s rows were placed and its slots are still theirs."""

    def release(self, reservation) -> None:
        """A reservation no row will use (None: nothing)."""

    def join(self, table: SlotTable, new: NewRows, reservation=None) -> None:
        """`new`'s rows after the existing ones (in `reservation`'s slots, their memory
        written already, where it is given)."""

    def prepare(self, table: SlotTable) -> None: ...

    def step(
        self,
        table: SlotTable,
        tokens: np.ndarray,
        positions: np.ndarray,
        attention: bool,
        search: SearchRequest | None,
    ) -> StepOutput: ...

    def launch(
        self,
        table: SlotTable,
        tokens: np.ndarray,
        positions: np.ndarray,
        attention: bool,
        search: SearchRequest | None,
    ) -> Launch: ...

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None: ...


__all__ = ["DeviceRows", "HostRows", "NewRows", "RowStore", "SlotTable", "StaticRows"]
