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
allocated once, replayed as CUDA graphs, over the engine's `static_step`). An engine names
its way (`Engine.rows`), and `row_store` makes it.
"""

from __future__ import annotations

from collections.abc import Callable

from service.runtime.inference import Engine
from service.runtime.rows.device import DeviceRows, HostRows
from service.runtime.rows.static import StaticRows
from service.runtime.rows.store import RowStore
from service.runtime.rows.table import NewRows, SlotTable


def _static(engine: Engine) -> StaticRows:
    if engine.static_step is None:
        raise ValueError("rows held in the static step's buckets need an engine's static step")
    return StaticRows(engine.static_step)


# each way by its name: what makes it over an engine
STORES: dict[str, Callable[[Engine], RowStore]] = {
    "host": HostRows,
    "device": DeviceRows,
    "static": _static,
}


def row_store(engine: Engine) -> RowStore:
    """A new holder of a continuous batch's rows over `engine`, the way it names."""
    if engine.rows not in STORES:
        raise ValueError(f"no way of holding rows named {engine.rows!r}: one of {list(STORES)}")
    return STORES[engine.rows](engine)


__all__ = [
    "STORES",
    "DeviceRows",
    "HostRows",
    "NewRows",
    "RowStore",
    "SlotTable",
    "StaticRows",
    "row_store",
]
