"""bench.overload runs short: capacity measured, then an open loop past it against the
latency budget, where what does not fit is refused and nothing fails otherwise."""

from __future__ import annotations

import json

import pytest

from bench import overload
from bench.lib.sentence_loads import DEADLINE


@pytest.mark.slow
def test_a_short_overload_refuses_what_does_not_fit_and_answers_the_rest(
    model_repository, tmp_path
):
    out = tmp_path / "overload.json"
    overload.main(
        [
            "--seconds",
            "3",
            "--clients",
            "8",
            "--workers",
            "1",
            "--factor",
            "3",
            "--repository",
            str(model_repository),
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    capacity, loaded = report["capacity"], report["overload"]
    assert capacity["codes"] == {"OK": capacity["calls"]} and capacity["throughput_rps"] > 0
    assert report["latency_budget_seconds"] == capacity["p99_s"]
    # three times the capacity: some calls refused, some answered, none failed otherwise
    assert set(loaded["codes"]) == {"OK", "RESOURCE_EXHAUSTED"}, loaded["codes"]
    assert 0 < loaded["admitted_fraction"] < 1
    assert loaded["refused_p99_s"] < DEADLINE
    assert set(report["peak_rss_overload_over_capacity"]) == {"front", "workers"}
    assert report["server_exit_code"] == 0
