"""bench.gpu's engine level: which engines it times, and which fp16 engine a goal takes."""

from __future__ import annotations

from bench.lib.engine_workers import EngineSpec, Runner, engine_specs
from bench.lib.gpu_goals import goals


def test_the_in_place_fp16_engine_is_timed_on_cuda_only_where_the_version_ships_it():
    names = [s.name for s in engine_specs("cuda", in_place=True)]
    assert names == ["ort-fp32", "ort-fp16", "ort-fp16-in-place", "torch-fp32"]
    spec = engine_specs("cuda", in_place=True)[2]
    assert spec.cache == "in_place" and spec.io_binding and spec.variant == "fp16"
    assert spec.label == "ORT CUDA fp16 + IO binding + cache in place"
    assert "ort-fp16-in-place" not in [s.name for s in engine_specs("cuda")]
    assert "ort-fp16-in-place" not in [s.name for s in engine_specs("cpu", in_place=True)]


def test_the_static_fp16_engine_is_timed_on_cuda_where_the_version_ships_its_step():
    names = [s.name for s in engine_specs("cuda", in_place=True, static=True)]
    assert names == [
        "ort-fp32",
        "ort-fp16",
        "ort-fp16-in-place",
        "ort-fp16-static",
        "ort-fp16-static-ahead",
        "torch-fp32",
    ]
    spec, ahead = engine_specs("cuda", static=True)[2:4]
    assert spec.cache == "static" and spec.io_binding and spec.variant == "fp16"
    assert spec.label == "ORT CUDA fp16 + IO binding + static step (CUDA graphs)"
    assert ahead.cache == "static" and ahead.ahead == 8 and spec.ahead == 1
    assert ahead.label == spec.label + ", 8 steps ahead"
    assert "ort-fp16-static" not in [s.name for s in engine_specs("cpu", static=True)]


def test_the_static_engine_decodes_as_the_in_place_one_its_buckets_bound_once(
    translator_repository,
):
    """The engine level's static engine (here on the CPU: the same buckets, no graphs) decodes
    a batch through the served path, token for token as the in-place cache, and its next
    decodes of the same batch reuse the buckets the first one made."""
    from bench.lib.engine_level import sources
    from service.runtime.repository import verify

    directory = str(translator_repository / "translator" / "1")
    ids = sources(verify(translator_repository / "translator" / "1").tokenizer_file, 12)

    def runner(cache: str, ahead: int = 1) -> Runner:
        spec = EngineSpec(cache, "onnx", "fp32", "cpu", True, 1, cache, ahead)
        return Runner(spec, directory, "")

    static, in_place, ahead = runner("static"), runner("in_place"), runner("static", 3)
    tokens = static.greedy(ids, 48)
    assert tokens == in_place.greedy(ids, 48) == ahead.greedy(ids, 48)
    # every row to the length, 3 steps back to back at a time: as one step at a time
    forced = static._decode(ids[:8], 1, 16, forced=True)[0]
    assert ahead._decode(ids[:8], 1, 16, forced=True)[0] == forced
    assert ahead.sample(ids[:8], 1, 16)["tokens"] == 8 * 16
    assert any(len(t) < 48 for t in tokens)  # some ended on their own, and were cut there
    first = static.sample(ids[:8], 1, 16)
    buckets = dict(static._store.buckets)
    second = static.sample(ids[:8], 1, 16)
    assert first["tokens"] == second["tokens"] == 8 * 16  # every row forced to the length
    # the static step's runs are timed too (not only the encoder's, which is apart)
    assert second["decode_s"] / 2 < second["runs_s"] < second["decode_s"]
    assert static._store.buckets.keys() == buckets.keys()
    assert all(static._store.buckets[key] is bucket for key, bucket in buckets.items())
    step = static.single_step(ids[0], 3)["seconds"]
    assert len(step) == 3 and min(step) > 0


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
