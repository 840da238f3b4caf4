"""bench.scaling: its ratios from pooled levels, and a short run against live servers."""

from __future__ import annotations

import json

import pytest

from bench import scaling


def _level(calls: int, seconds: float) -> dict:
    return {
        "latencies": [0.01 * (i + 1) for i in range(calls)],
        "failed": 0,
        "seconds": seconds,
        "cpu_s": {"front": 0.1, "workers": 0.5, "client": 0.05},
    }


def test_the_ratios_compare_the_most_workers_and_the_most_clients_with_their_goals():
    levels = {
        (1, 1, 16, ""): _level(100, 1.0),
        (1, 1, 64, ""): _level(90, 1.0),
        (2, 1, 16, ""): _level(170, 1.0),
        (2, 1, 64, ""): _level(150, 1.0),
    }
    report = scaling.summary(levels, [1, 2], [16, 64])
    assert report["ratios"] == {
        "2 workers / 1, 16 clients": 1.7,
        "2 workers / 1, 64 clients": 1.667,
        "64 clients / 16, 1 workers": 0.9,
        "64 clients / 16, 2 workers": 0.882,
    }
    assert report["goals"] == {
        "2 workers / 1, 16 clients >= 1.6": True,
        "2 workers / 1, 64 clients >= 1.6": True,
        "64 clients / 16, 1 workers >= 1.0": False,
        "64 clients / 16, 2 workers >= 1.0": False,
    }
    level = report["levels"]["1 workers, 16 clients"]
    assert level["requests_per_s"] == 100 and level["p50_s"] == pytest.approx(0.505)
    assert level["cpu_ms_per_call"] == {"front": 1.0, "workers": 5.0, "client": 0.5}


def test_a_server_that_answered_no_call_leaves_its_ratios_unmeasured_and_unmet():
    failed = {**_level(0, 1.0), "failed": 40}  # every call of the level failed
    levels = {
        (1, 1, 16, ""): failed,
        (1, 1, 64, ""): failed,
        (2, 1, 16, ""): _level(170, 1.0),
        (2, 1, 64, ""): _level(150, 1.0),
    }
    report = scaling.summary(levels, [1, 2], [16, 64])
    level = report["levels"]["1 workers, 16 clients"]
    assert level["requests_per_s"] == 0 and level["failed"] == 40 and level["p50_s"] is None
    assert report["ratios"]["2 workers / 1, 16 clients"] is None
    assert report["ratios"]["64 clients / 16, 1 workers"] is None
    assert report["ratios"]["64 clients / 16, 2 workers"] == 0.882
    assert report["goals"] == {
        "2 workers / 1, 16 clients >= 1.6": False,
        "2 workers / 1, 64 clients >= 1.6": False,
        "64 clients / 16, 1 workers >= 1.0": False,
        "64 clients / 16, 2 workers >= 1.0": False,
    }


def test_more_fronts_are_compared_at_the_most_workers_and_the_workers_at_one_front():
    levels = {
        (1, 1, 16, ""): _level(100, 1.0),
        (2, 1, 16, ""): _level(150, 1.0),
        (1, 2, 16, ""): _level(90, 1.0),
        (2, 2, 16, ""): _level(180, 1.0),
    }
    report = scaling.summary(levels, [1, 2], [16], [1, 2])
    assert report["ratios"] == {
        "2 workers / 1, 16 clients": 1.5,
        "2 fronts / 1, 2 workers, 16 clients": 1.2,
    }
    assert report["goals"] == {"2 workers / 1, 16 clients >= 1.6": False}
    assert report["levels"]["2 workers, 2 fronts, 16 clients"]["fronts"] == 2


def test_a_baseline_checkout_is_compared_at_every_server_and_client_count():
    levels = {
        (1, 1, 16, ""): _level(120, 1.0),
        (1, 1, 64, ""): _level(150, 1.0),
        (1, 1, 16, scaling.BASELINE): _level(100, 1.0),
        (1, 1, 64, scaling.BASELINE): _level(100, 1.0),
    }
    report = scaling.summary(levels, [1], [16, 64])
    assert report["ratios"]["this checkout / baseline, 1 workers, 16 clients"] == 1.2
    assert report["ratios"]["this checkout / baseline, 1 workers, 64 clients"] == 1.5
    assert report["levels"]["baseline: 1 workers, 64 clients"]["requests_per_s"] == 100
    assert report["ratios"]["64 clients / 16, 1 workers"] == 1.25  # this checkout's own


@pytest.mark.slow
def test_a_short_run_serves_every_level_without_a_failed_call(model_repository, tmp_path):
    out = tmp_path / "scaling.json"
    scaling.main(
        [
            "--workers",
            "1,2",
            "--clients",
            "2,4",
            "--seconds",
            "2",
            "--rounds",
            "1",
            "--repository",
            str(model_repository),
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert set(report["levels"]) == {f"{w} workers, {c} clients" for w in (1, 2) for c in (2, 4)}
    for level in report["levels"].values():
        assert level["calls"] > 0 and level["failed"] == 0
        assert level["cpu_ms_per_call"]["workers"] > 0
    assert len(report["ratios"]) == 4 and len(report["goals"]) == 4
    assert report["server_exit_codes"] == [0, 0]


@pytest.mark.slow
def test_two_fronts_serve_every_level_without_a_failed_call(model_repository, tmp_path):
    out = tmp_path / "scaling.json"
    scaling.main(
        [
            "--workers",
            "2",
            "--fronts",
            "1,2",
            "--clients",
            "4",
            "--channels",
            "8",
            "--seconds",
            "2",
            "--rounds",
            "1",
            "--repository",
            str(model_repository),
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert set(report["levels"]) == {"2 workers, 4 clients", "2 workers, 2 fronts, 4 clients"}
    for level in report["levels"].values():
        assert level["calls"] > 0 and level["failed"] == 0
        assert level["cpu_ms_per_call"]["front"] > 0
    assert list(report["ratios"]) == ["2 fronts / 1, 2 workers, 4 clients"]
    assert report["server_exit_codes"] == [0, 0]
