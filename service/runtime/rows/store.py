"""The protocol every way of holding a continuous batch's rows follows (service.runtime.rows)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from service.runtime.rows.table import NewRows, SlotTable
from service.runtime.search import SearchRequest
from service.runtime.tensors import EncoderOutput, Launch, StepOutput, Tensors


class RowStore(Protocol):
    adopts_encoder_rows: bool  # a greedy admission's encoder output joins without a copy
    rebuilds: int  # rebuilds (or moves between buckets) so far
    state: Tensors | None  # by name, (slots, ...)
    memory: Tensors | None  # by name, (slots, ...)

    def clear(self) -> None: ...

    def rest(self) -> None:
        """The batch has stayed empty a while: memory kept for the rows to come may go."""

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

    def steps_ahead(self, table: SlotTable, request: SearchRequest) -> int:
        """How many greedy steps of `request` `launch_ahead` may run back to back now (1:
        a step at a time)."""

    def launch_ahead(
        self,
        table: SlotTable,
        tokens: np.ndarray,
        positions: np.ndarray,
        steps: int,
        search: SearchRequest,
    ) -> Launch:
        """`steps` greedy steps back to back, each fed the ids the one before chose ->
        `output()`: a StepOutput whose candidates (slots, steps) are each step's best."""

    def repeat(self, table: SlotTable, slots: np.ndarray, first: np.ndarray) -> None: ...
