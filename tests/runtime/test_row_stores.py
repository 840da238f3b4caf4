"""The ways of holding a continuous batch's rows: `row_store` makes the one an engine names,
each follows the RowStore protocol, and a way an engine cannot hold is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from service.runtime.onnx_engine import OnnxEngine
from service.runtime.rows import STORES, DeviceRows, HostRows, StaticRows, row_store
from service.runtime.rows.store import RowStore

MEMBERS = [
    name
    for name in (*RowStore.__annotations__, *vars(RowStore))
    if not name.startswith("_") and name not in ("state", "memory")
]


@pytest.mark.parametrize(
    ("cache", "io_binding", "way", "kind", "adopts"),
    [
        ("in_place", False, "host", HostRows, False),
        ("growing", True, "device", DeviceRows, True),
        ("static", True, "static", StaticRows, True),
    ],
)
def test_each_engine_gets_the_store_it_names(tiny_translator, cache, io_binding, way, kind, adopts):
    _, version = tiny_translator
    engine = OnnxEngine(version, "fp32", cache=cache, io_binding=io_binding)
    assert engine.rows == way
    store = row_store(engine)
    assert type(store) is kind
    assert store.adopts_encoder_rows is adopts and store.rebuilds == 0
    assert store.state is None and store.memory is None  # nothing held yet
    for name in MEMBERS:
        assert hasattr(store, name), f"{kind.__name__} lacks {name}"
    assert row_store(engine) is not store  # a new store for every batch


def test_the_protocol_names_every_call_a_batch_makes():
    expected = {"clear", "reserve", "place", "placed", "release", "join", "prepare", "step"}
    assert expected | {"launch", "repeat", "adopts_encoder_rows", "rebuilds"} <= set(MEMBERS)
    assert set(STORES) == {"host", "device", "static"}


def test_an_unknown_way_or_a_static_store_without_a_static_step_is_refused():
    with pytest.raises(ValueError, match="no way of holding rows named 'disk'"):
        row_store(SimpleNamespace(rows="disk"))
    with pytest.raises(ValueError, match="need an engine's static step"):
        row_store(SimpleNamespace(rows="static", static_step=None))
