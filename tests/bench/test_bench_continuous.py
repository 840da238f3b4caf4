"""bench.continuous on the exported translator: the scheduler's continuous batch with the
cache written in place and with the cache growing, side by side."""

from __future__ import annotations

import json

import pytest

from bench import continuous


@pytest.mark.slow
def test_the_continuous_batch_benchmark_compares_both_caches(exported_translator, capsys, tmp_path):
    version, _ = exported_translator
    markdown = tmp_path / "continuous.md"
    arguments = ["--quick", "--json", "--repository", str(version.directory)]
    assert continuous.main([*arguments, "--rows", "4", "--markdown", str(markdown)]) == 0
    report = json.loads(capsys.readouterr().out)
    (case,) = report["cases"]
    assert (case["variant"], case["beam"]) == ("fp32", 1)
    assert case["requests"] == report["settings"]["requests"] == 12
    assert case["identical"] == 12  # fp32: the two caches decode the same tokens
    rates = case["tokens_per_s"]
    assert rates["in_place"] > 0 and rates["growing"] > 0
    assert case["in_place_over_growing"] == pytest.approx(rates["in_place"] / rates["growing"])
    # 12 requests through 4 rows: requests joined a running batch, and the in-place cache
    # (no shared time axis) never rebuilds more than the growing one
    assert case["rebuilds"]["in_place"] <= case["rebuilds"]["growing"]
    assert "| fp32 | 1 |" in markdown.read_text()


@pytest.mark.slow
def test_the_benchmark_runs_the_device_path_with_io_binding(exported_translator, capsys, tmp_path):
    version, _ = exported_translator
    markdown = tmp_path / "continuous.md"
    arguments = ["--quick", "--json", "--io-binding", "--static", "--markdown", str(markdown)]
    assert continuous.main([*arguments, "--repository", str(version.directory), "--rows", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["io_binding"] and report["settings"]["device"] == "cpu"
    (case,) = report["cases"]
    assert case["identical"] == 12  # both caches through IO binding, the same tokens
    assert case["tokens_per_s"]["in_place"] > 0 and case["tokens_per_s"]["growing"] > 0
    # the static step's buckets, uncaptured on the CPU: the in-place step's tokens
    assert case["static_identical_to_in_place"] == 12 and not case["static_captured"]
    rates = case["tokens_per_s"]
    assert case["static_over_growing"] == pytest.approx(rates["static"] / rates["growing"])
    assert case["rebuilds"]["static"] >= 1  # 12 requests through buckets of up to 4 rows
    assert "| static / growing |" in markdown.read_text()
