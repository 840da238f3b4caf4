"""The decode benchmark in quick mode on a tiny random checkpoint: the shape of its report.

Timings are not asserted, only that every engine ran every case it should and that every goal
is judged. The CTranslate2 engines run only when ctranslate2 can be imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers import run_bench

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from bench.decode import BEAMS, ENGINES, THREAD_CHECK  # noqa: E402
from models.checkpoint import save_checkpoint  # noqa: E402
from models.config import TransformerConfig  # noqa: E402
from models.transformer import Transformer  # noqa: E402
from service.tokenizer import Tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "models" / "checkpoints" / "translator" / "tokenizer.model"
HAS_CTRANSLATE2 = importlib.util.find_spec("ctranslate2") is not None
SENTENCES = [
    "El perro duerme junto a la puerta de la casa.",
    "¿Dónde está la estación de tren?",
    "Mañana lloverá en las montañas del norte.",
]
QUICK_BATCHES, QUICK_LENGTHS = (1, 2), (4, 8)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines() -> list[str]:
    return [name for name, (kind, *_) in ENGINES.items() if HAS_CTRANSLATE2 or kind != "ct2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, engines) -> tuple[dict, str]:
    """(report, markdown) of `python -m bench.decode --quick --json` on a tiny checkpoint."""
    tmp = tmp_path_factory.mktemp("bench_decode")
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=Tokenizer(TOKENIZER).vocab_size,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
    )
    save_checkpoint(Transformer(config), TOKENIZER, tmp / "checkpoint")
    (tmp / "sources.es").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    arguments = ["--checkpoint", str(tmp / "checkpoint"), "--sources", str(tmp / "sources.es")]
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


def test_ctranslate2_runs_and_is_compared_with_pytorch(run):
    pytest.importorskip("ctranslate2")
    report, _ = run
    parity = report["parity"]["ct2-float32"]
    assert parity["sentences"] == max(QUICK_BATCHES)
    assert 0 <= parity["identical"] <= parity["sentences"]
    goals = {goal["goal"] for goal in report["goals"]}
    for batch in QUICK_BATCHES:
        assert f"onnx-fp32 / ct2-float32 tokens/s, batch {batch}" in goals
        assert f"onnx-int8 / ct2-int8 tokens/s, batch {batch}" in goals
