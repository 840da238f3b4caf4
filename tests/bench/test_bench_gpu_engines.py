"""bench.gpu's engine level: which engines it times, and which fp16 engine a goal takes."""

from __future__ import annotations

from bench.lib.engine_workers import engine_specs
from bench.lib.gpu_goals import goals


def test_the_in_place_fp16_engine_is_timed_on_cuda_only_where_the_version_ships_it():
    names = [s.name for s in engine_specs("cuda", in_place=True)]
    assert names == ["ort-fp32", "ort-fp16", "ort-fp16-in-place", "torch-fp32"]
    spec = engine_specs("cuda", in_place=True)[2]
    assert spec.cache == "in_place" and spec.io_binding and spec.variant == "fp16"
    assert spec.label == "ORT CUDA fp16 + IO binding + cache in place"
    assert "ort-fp16-in-place" not in [s.name for s in engine_specs("cuda")]
    assert "ort-fp16-in-place" not in [s.name for s in engine_specs("cpu", in_place=True)]


def _case(engine: str, batch: int, rate: float) -> dict:
    return {
        "engine": engine,
        "batch": batch,
        "beam": 1,
        "tokens_per_s": {"median": rate},
        "vs_torch": rate / 1000,
    }


def test_the_engine_goals_take_the_faster_fp16_engine_at_each_batch():
    cases = [
        _case("ort-fp16", 256, 300_000.0),
        _case("ort-fp16-in-place", 256, 450_000.0),
        _case("ort-fp16", 1024, 900_000.0),
        _case("ort-fp16-in-place", 1024, 800_000.0),
    ]
    rows = {g["goal"]: g for g in goals({"engine": {"cases": cases}})}
    at_256 = rows["engine fp16 greedy tokens/s at batch 256"]
    assert at_256["measured"] == 450_000.0 and at_256["status"] == "met"
    assert at_256["note"] == "ort-fp16-in-place"
    at_1024 = rows["engine fp16 greedy tokens/s at batch 1024"]
    assert at_1024["measured"] == 900_000.0 and at_1024["status"] == "missed"
    assert at_1024["note"] == "ort-fp16"
    ratio = rows["engine fp16 greedy / PyTorch eager tokens/s at batch 256"]
    assert ratio["measured"] == 450.0 and ratio["note"] == "ort-fp16-in-place"
