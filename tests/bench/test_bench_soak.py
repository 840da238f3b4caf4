"""bench.soak runs short: a server under mixed load, sampled, stopped, with no error."""

from __future__ import annotations

import pytest

from bench import soak


@pytest.mark.slow
def test_a_short_soak_has_no_error_and_samples_every_process(model_repository, tmp_path):
    args = soak._arguments(
        [
            "--minutes",
            "0.4",
            "--clients",
            "4",
            "--workers",
            "1",
            "--sample-seconds",
            "2",
            "--repository",
            str(model_repository),
            "--json",
            str(tmp_path / "soak.json"),
        ]
    )
    report = soak.soak(args)
    assert report["errors"] == 0, report["calls"]
    assert set(report["calls"]) == {"unary", "stream", "beam", "caption"}
    assert all(codes.get("OK", 0) > 0 for codes in report["calls"].values())
    assert report["samples"] >= 8 and report["server_exit_code"] == 0
    last = report["last"]
    assert last["front"]["rss_kb"] > 0 and last["workers"]["rss_kb"] > 0
    assert last["workers"]["count"] >= 1 and last["front"]["fds"] > 0
    assert set(report["growth_after_warmup"]) == {
        f"{p}_{m}" for p in ("front", "workers") for m in ("rss_kb", "fds")
    }


def test_growth_is_measured_after_the_warm_up():
    def at(t, rss):
        entry = {"rss_kb": rss, "fds": 10}
        return {"t": t, "front": entry, "workers": entry}

    samples = [at(0, 50), at(1, 100), at(2, 100), at(3, 100), at(4, 104), at(5, 104), at(6, 104)]
    grew = soak.growth(samples, warmup=1.0)
    assert grew["front_rss_kb"] == pytest.approx(0.04) and grew["front_fds"] == 0.0
