"""The decode benchmark in quick mode on a tiny random translator and the shipped captioner:
the shape of its report.

Timings are not asserted, only that every engine ran every case it should, that the numbers
agree with each other, and that every goal is judged. The CTranslate2 engines run only when
ctranslate2 can be imported.
"""

from __future__ import annotations

import importlib.util

import pytest
from helpers import run_bench, tiny_translator_checkpoint

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from bench.decode import BEAMS, CAPTION_ENGINES, ENGINES, THREAD_CHECK

HAS_CTRANSLATE2 = importlib.util.find_spec("ctranslate2") is not None
SENTENCES = [
    "El perro duerme junto a la puerta de la casa.",
    "¿Dónde está la estación de tren?",
    "Mañana lloverá en las montañas del norte.",
]
QUICK_BATCHES, QUICK_LENGTHS = (1, 2), (4, 8)
QUICK_CAPTION_BATCHES = (1, 2)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines() -> list[str]:
    return [name for name, (kind, *_) in ENGINES.items() if HAS_CTRANSLATE2 or kind != "ct2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, engines, captioner_data) -> tuple[dict, str]:
    """(report, markdown) of `python -m bench.decode --quick --json` on a tiny translator and
    the shipped captioner (both exported by the benchmark)."""
    tmp = tmp_path_factory.mktemp("bench_decode")
    tiny_translator_checkpoint(tmp / "checkpoint")
    (tmp / "sources.es").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    arguments = ["--checkpoint", str(tmp / "checkpoint"), "--sources", str(tmp / "sources.es")]
    arguments += ["--captioner-data", str(captioner_data)]
    return run_bench(
        "bench.decode", [*arguments, "--engines", ",".join(engines)], tmp / "decode.md", 900
    )


def _expected_cases(name: str) -> set[tuple[int, int, int]]:
    cases = {(b, k, n) for b in QUICK_BATCHES for k in BEAMS for n in QUICK_LENGTHS}
    if name == "torch-uncached":
        return {c for c in cases if c[0] == 1}
    if name == THREAD_CHECK:
        return {c for c in cases if c[1] == 1 and c[2] == QUICK_LENGTHS[1]}
    return cases


def test_report_records_the_machine_settings_and_model(run):
    report, _ = run
    assert {"machine", "settings", "model", "parity", "engines", "ratios", "goals"} <= set(report)
    machine = report["machine"]
    assert machine["copy_bandwidth_gb_s"] > 0 and machine["matmul_gflop_s"] > 0
    assert "OPENBLAS_CORETYPE" in machine["environment"]
    settings = report["settings"]
    assert settings["batches"] == list(QUICK_BATCHES)
    assert settings["lengths"] == list(QUICK_LENGTHS)
    assert settings["rounds"] == 1 and settings["warmup"] == 1
    model = report["model"]
    assert model["config"]["d_model"] == 32
    assert model["step_bytes_fp32"] > model["step_bytes_int8"] > 0 and model["step_flops"] > 0


def test_every_engine_reports_every_case_with_positive_numbers(run, engines):
    report, markdown = run
    assert list(report["engines"]) == engines
    for name, engine in report["engines"].items():
        assert engine["threads"] == (2 if name == THREAD_CHECK else 1)
        assert engine["peak_rss_mb"] > 0 and engine["library"]
        cases = {(c["batch"], c["beam"], c["length"]): c for c in engine["cases"]}
        assert set(cases) == _expected_cases(name), name
        for (batch, _, length), case in cases.items():
            assert case["tokens"] == batch * length
            for key in ("tokens_per_s", "ms_per_step", "decode_ms"):
                spread = case[key]
                assert 0 < spread["min"] <= spread["median"] <= spread["max"], (name, key)
            assert case["encoder_ms"]["median"] >= 0
            assert case["bound_ms_per_step"] > 0 and case["bound_fraction"] > 0
        assert f"| {name} |" in markdown


def test_goals_are_judged_and_ratios_reported(run):
    report, markdown = run
    goals = report["goals"]
    assert goals
    for goal in goals:
        assert isinstance(goal["met"], bool)
        assert goal["ratio"] > 0 and goal["target"] > 0 and goal["compare"] in ("<=", ">=")
        assert goal["goal"] in report["ratios"] and goal["goal"] in markdown
    texts = " ".join(goal["goal"] for goal in goals)
    assert "onnx-fp32 / torch-cached" in texts and "onnx-fp32 decode ms" in texts
    assert any(k.startswith("torch-uncached decode ms") and v for k, v in report["ratios"].items())
    assert any(k.startswith(THREAD_CHECK) and v for k, v in report["ratios"].items())
    for batch in QUICK_BATCHES:  # the lean step against the full one, side by side
        for ours in ("onnx-fp32-built", "onnx-int8-built"):
            assert report["ratios"][f"{ours} / {ours}-full-step tokens/s, batch {batch}"] > 0
            assert report["ratios"][f"{ours} / {ours}-growing tokens/s, batch {batch}"] > 0
    assert report["parity"]["onnx-fp32-built-full-step"]["identical"] == max(QUICK_BATCHES)
    assert report["parity"]["onnx-fp32-built-growing"]["identical"] == max(QUICK_BATCHES)


def test_ctranslate2_runs_and_is_compared_with_pytorch(run):
    pytest.importorskip("ctranslate2")
    report, _ = run
    parity = report["parity"]["ct2-float32"]
    assert parity["sentences"] == max(QUICK_BATCHES)
    assert 0 <= parity["identical"] <= parity["sentences"]
    goals = {goal["goal"] for goal in report["goals"]}
    for batch in QUICK_BATCHES:  # the served engines are judged, the traced ones reported
        assert report["ratios"][f"onnx-fp32 / ct2-float32 tokens/s, batch {batch}"] > 0
        assert report["ratios"][f"onnx-int8 / ct2-int8 tokens/s, batch {batch}"] > 0
        assert f"onnx-fp32-built / ct2-float32 tokens/s, batch {batch}" in goals
        assert f"onnx-int8-built / ct2-int8 tokens/s, batch {batch}" in goals
    small, large = min(QUICK_BATCHES), max(QUICK_BATCHES)
    target = {g["goal"]: g["target"] for g in report["goals"]}
    assert target[f"onnx-fp32-built / ct2-float32 tokens/s, batch {small}"] == 1.2
    assert target[f"onnx-int8-built / ct2-int8 tokens/s, batch {large}"] == 1.0
    assert target[f"onnx-int8-built / onnx-fp32-built tokens/s, batch {large}"] == 1.5
    bound = f"onnx-int8-built ms/step over the weight-read bound, batch {small} greedy (median)"
    assert target[bound] == 2.0
    assert report["parity"]["onnx-fp32-built"]["identical"] == max(QUICK_BATCHES)  # as traced


def test_captioner_reports_every_engine_and_case_with_consistent_numbers(run):
    report, markdown = run
    part = report["captioner"]
    assert {"settings", "model", "parity", "engines", "ratios", "goals"} <= set(part)
    settings, max_length = part["settings"], part["model"]["config"]["max_length"]
    assert settings["batches"] == list(QUICK_CAPTION_BATCHES)
    assert settings["images"] == max(QUICK_CAPTION_BATCHES)
    assert settings["max_length"] == max_length and settings["rounds"] == 1
    assert list(part["engines"]) == list(CAPTION_ENGINES) == settings["engines"]
    for name, engine in part["engines"].items():
        assert engine["threads"] == 1 and engine["peak_rss_mb"] > 0 and engine["library"]
        cases = {(c["batch"], c["beam"]): c for c in engine["cases"]}
        assert set(cases) == {(b, k) for b in QUICK_CAPTION_BATCHES for k in BEAMS}, name
        for (batch, _), case in cases.items():
            assert case["captions"] == batch and case["max_length"] == max_length
            assert 0 < case["tokens"] <= batch * max_length
            assert 0 < case["steps"] <= max_length
            for key in ("captions_per_s", "ms_per_caption", "ms_per_step", "decode_ms"):
                spread = case[key]
                assert 0 < spread["min"] <= spread["median"] <= spread["max"], (name, key)
            assert case["encoder_ms"]["median"] > 0
            # one round: the time per caption is the inverse of the rate
            rate, each = case["captions_per_s"]["median"], case["ms_per_caption"]["median"]
            assert rate * each == pytest.approx(1000.0)
        assert f"| {name} | " in markdown
    greedy = {n: e["cases"][0] for n, e in part["engines"].items()}  # batch 1, greedy
    assert greedy["onnx-fp32"]["tokens"] == greedy["torch-cached"]["tokens"]


def test_captioner_greedy_parity_counts_every_image(run):
    report, markdown = run
    part = report["captioner"]
    images = part["settings"]["images"]
    assert set(part["parity"]) == set(CAPTION_ENGINES) - {"torch-cached"}
    for name, parity in part["parity"].items():
        assert parity["images"] == images and 0 <= parity["identical"] <= images
        same = f"{parity['identical']}/{images} images"
        assert f"- {name} greedy captions identical to PyTorch: {same}" in markdown
    assert part["parity"]["onnx-fp32"]["identical"] == images  # the export is certified


def test_captioner_goals_are_judged_and_ratios_reported(run):
    report, markdown = run
    part = report["captioner"]
    small = min(QUICK_CAPTION_BATCHES)
    texts = [goal["goal"] for goal in part["goals"]]
    assert texts == [
        f"captioner onnx-fp32 / torch-cached captions/s, batch {small} greedy",
        f"captioner onnx-fp32 / torch-cached captions/s, batch {small} beam 4",
    ]
    for goal in part["goals"]:
        assert isinstance(goal["met"], bool) and goal["compare"] == ">=" and goal["target"] == 3
        assert goal["met"] == (goal["ratio"] >= 3)
        assert part["ratios"][goal["goal"]] == goal["ratio"] > 0 and goal["goal"] in markdown
    expected = len(QUICK_CAPTION_BATCHES) * len(BEAMS) * 4  # fp32 and int8, traced and built
    assert len(part["ratios"]) == expected and all(v > 0 for v in part["ratios"].values())
    assert not set(part["ratios"]) & set(report["ratios"])  # the translator's are apart
