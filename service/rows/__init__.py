"""How a continuous batch holds its rows' memory and state tensors: one class per way.

Every way keeps the batch's `SlotTable` (which slot each row is in, the slots' masks,
lengths and inputs: host arrays) and owns its tensors, with the same four calls:
- `join(table, new)`: new rows after the existing ones;
- `prepare(table)`: before a step, a rebuild or a move where one is worth it;
- `step(table, tokens, positions, attention, search) -> StepOutput`: one step of every slot;
- `repeat(table, slots, first)`: rows kept in an order where some repeat (beams).
A reorder that only drops or permutes rows moves nothing on any of them.

The ways: `HostRows` (numpy arrays written in place), `DeviceRows` (the engine's tensors on
a device, moved by its helper graphs), `StaticRows` (the static step's buckets of buffers
allocated once, replayed as CUDA graphs). Each engine makes its own (`Engine.row_store`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from service.inference import StepOutput, Tensors
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

    def join(self, table: SlotTable, new: NewRows) -> None: ...

    def prepare(self, table: SlotTable) -> None: ...

    def step(
        self,
        table: SlotTable,
        tokens: np.ndarray,
        positions: np.ndarray,
        attention: bool,
        search: SearchRequest | None,
    ) -> StepOutput: ...

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None: ...


__all__ = ["DeviceRows", "HostRows", "NewRows", "RowStore", "SlotTable", "StaticRows"]
