"""bench.search on the exported translator: the search alone, and the step with each search
(the numpy search, the search graph after the lean step, the search folded into it)."""

from __future__ import annotations

import pytest

from bench.search import search_alone, step_with_search
from service.runtime.onnx_engine import OnnxEngine


@pytest.mark.slow
def test_the_search_benchmark_times_every_variant_side_by_side(exported_translator):
    version, _ = exported_translator
    rows = step_with_search(version, "cpu", (1, 4), 0.05)
    assert [row["batch"] for row in rows] == [1, 4]
    for row in rows:
        assert min(row["graph_ms"], row["numpy_ms"], row["folded_ms"]) > 0
        assert row["folded_over_graph"] == pytest.approx(row["graph_ms"] / row["folded_ms"])
        assert row["saved"] == pytest.approx(1 - row["graph_ms"] / row["numpy_ms"])
    alone = search_alone(OnnxEngine(version, "fp32"), (1,), 0.05)
    assert sorted(row["k"] for row in alone) == [1, 8]
    assert all(row["graph_ms"] > 0 and row["numpy_ms"] > 0 for row in alone)
