"""bench.cluster: its two goals from pooled levels (Ray's throughput over the local pool's at
the most clients, its p50 above the local pool's at one client)."""

from __future__ import annotations

from bench import cluster


def _level(latencies_ms: list[float], seconds: float, failed: int = 0) -> dict:
    return {"latencies": [ms / 1000 for ms in latencies_ms], "failed": failed, "s": seconds}


def test_the_goals_compare_ray_with_the_local_pool_side_by_side():
    levels = {
        ("local", 1): _level([20.0] * 50, 1.0),
        ("local", 64): _level([150.0] * 300, 1.0),
        ("ray", 1): _level([21.5] * 47, 1.0),
        ("ray", 64): _level([160.0] * 270, 1.0, failed=2),
    }
    report = cluster.summary(levels, [1, 64])
    assert report["levels"]["ray"]["64"]["sentences_per_s"] == 270.0
    assert report["throughput_ratio"] == {
        "clients": 64,
        "ray_over_local": 0.9,
        "goal": 0.85,
        "met": True,
    }
    assert report["p50_above_ms"] == {
        "clients": 1,
        "ray_minus_local": 1.5,
        "goal": 2.0,
        "met": True,
    }
    assert report["failed"] == 2


def test_a_slow_or_thin_cluster_misses_its_goals():
    levels = {
        ("local", 1): _level([20.0] * 50, 1.0),
        ("local", 64): _level([150.0] * 300, 1.0),
        ("ray", 1): _level([52.0] * 19, 1.0),
        ("ray", 64): _level([200.0] * 240, 1.0),
    }
    report = cluster.summary(levels, [1, 64])
    assert (
        not report["throughput_ratio"]["met"]
        and report["throughput_ratio"]["ray_over_local"] == 0.8
    )
    assert not report["p50_above_ms"]["met"] and report["p50_above_ms"]["ray_minus_local"] == 32.0


def test_a_server_that_answered_nothing_leaves_its_goals_unmeasured_and_unmet():
    levels = {
        ("local", 1): _level([], 1.0, failed=30),  # every call failed
        ("local", 64): _level([], 1.0, failed=400),
        ("ray", 1): _level([21.5] * 47, 1.0),
        ("ray", 64): _level([160.0] * 270, 1.0),
    }
    report = cluster.summary(levels, [1, 64])
    assert report["levels"]["local"]["64"] == {
        "sentences_per_s": 0.0,
        "p50_ms": None,
        "p99_ms": None,
        "failed": 400,
    }
    assert report["throughput_ratio"]["ray_over_local"] is None
    assert report["p50_above_ms"]["ray_minus_local"] is None
    assert not report["throughput_ratio"]["met"] and not report["p50_above_ms"]["met"]
    assert report["failed"] == 430
