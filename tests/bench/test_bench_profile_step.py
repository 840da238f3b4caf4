"""bench.profile_step: its categories, how kernels are put in their runs, perf's report read,
and a quick run on a tiny random translator (onnxruntime alone: perf may not sample here)."""

from __future__ import annotations

import pytest
from helpers import run_bench, tiny_translator_checkpoint

from bench import profile_step

SENTENCES = ["El perro duerme junto a la puerta.", "¿Dónde está la estación de tren?"]


def test_kernels_fall_in_their_categories_the_output_projection_by_its_node():
    category = profile_step.category
    assert category("DynamicQuantizeMatMul", "/MatMul_26_quant", "/MatMul_211") == "int8 matmuls"
    assert category("MatMulNBits", "/MatMul_26_Q8", "/MatMul_211") == "int8 matmuls"
    assert category("MatMul", "/MatMul_26", "/MatMul_211") == "fp32 matmuls"
    assert category("DynamicQuantizeMatMul", "/MatMul_211_quant", "/MatMul_211") == (
        "output projection"
    )
    assert category("GroupQueryAttention", "/GroupQueryAttention_35", None) == (
        "self-attention and cache"
    )
    assert category("MultiHeadAttention", "/MultiHeadAttention_54", None) == "cross-attention"
    assert category("LayerNormalization", "/LayerNormalization_4", None) == "layer norms"
    assert category("Reshape", "search/top/grid", None) == "search"  # the search's own nodes
    assert category("TopK", "TopK_3", None) == "search"
    assert category("Squeeze", "/Squeeze_3", None) == profile_step.OTHER


def test_ctranslate2_functions_fall_in_their_categories():
    ct2 = profile_step.ct2_category
    library = "libctranslate2-a7a60d30.so.4.8.5"
    assert ct2("mkl_blas_avx512_sinternal_gemm_s8u8s32_kernel_b0_amx", library) == "int8 matmuls"
    assert ct2("ctranslate2::cpu::quantize_s8<(ctranslate2::cpu::CpuIsa)2>", library) == (
        "int8 matmuls"
    )
    assert ct2("mkl_blas_avx512_xsgemv", library) == "fp32 matmuls"
    assert ct2("ctranslate2::ops::TopK::compute<(ctranslate2::Device)0, float, int>", library) == (
        "search"
    )
    assert ct2("ctranslate2::cpu::softmax<(ctranslate2::cpu::CpuIsa)2>(float const*)", library) == (
        "softmax"
    )
    assert ct2("ctranslate2::cpu::layer_norm<(ctranslate2::cpu::CpuIsa)2>", library) == (
        "layer norms"
    )
    assert ct2("__memmove_avx512_unaligned_erms", "libc.so.6") == "copies"
    assert ct2("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0") == "host"
    assert ct2("0x00000000011ced84", library) == profile_step.OTHER


def test_kernels_are_put_in_the_run_they_ran_in():
    def kernel(ts, dur, op):
        return {"cat": "Node", "name": f"n{ts}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op}}  # fmt: skip

    events = [
        {"cat": "Session", "name": "model_run", "ts": 100, "dur": 50},
        kernel(110, 10, "MatMul"),
        kernel(130, 5, "TopK"),
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 30},
        kernel(205, 20, "MatMul"),
        kernel(90, 3, "Cast"),  # before every run (a session's start): in none
    ]
    runs = profile_step._runs(events)
    assert [r["us"] for r in runs] == [50, 30]
    assert runs[0]["kernels"] == [("MatMul", "n110", 10), ("TopK", "n130", 5)]
    assert runs[1]["kernels"] == [("MatMul", "n205", 20)]


def test_perf_report_lines_are_read_with_share_library_and_symbol(tmp_path, monkeypatch):
    text = """# Overhead  Shared Object  Symbol
#
    17.79%  libctranslate2-a7a60d30.so.4.8.5  [.] mkl_blas_avx512_xsgemv
     2.56%  [kernel.kallsyms]                 [k] exc_page_fault
     0.61%  libc.so.6                         [.] _int_malloc
"""

    class Done:
        stdout = text

    monkeypatch.setattr(profile_step.subprocess, "run", lambda *a, **k: Done())
    rows = profile_step._perf_report(tmp_path / "perf.data")
    assert rows == [
        (17.79, "libctranslate2-a7a60d30.so.4.8.5", "mkl_blas_avx512_xsgemv"),
        (2.56, "[kernel.kallsyms]", "exc_page_fault"),
        (0.61, "libc.so.6", "_int_malloc"),
    ]


@pytest.mark.slow
def test_a_quick_profile_accounts_for_every_step(tmp_path):
    pytest.importorskip("torch")
    tiny_translator_checkpoint(tmp_path / "checkpoint")
    sources = tmp_path / "sources.es"
    sources.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    arguments = ["--checkpoint", str(tmp_path / "checkpoint"), "--sources", str(sources)]
    report, text = run_bench(
        "bench.profile_step", [*arguments, "--no-ct2"], tmp_path / "profile.md", 600
    )
    cases = report["cases"]
    assert {(c["variant"], c["batch"], c["beam"]) for c in cases} == {
        (v, b, k) for v in ("fp32", "int8") for b in (1, 2) for k in (1, 2)
    }
    for case in cases:
        ours = case["ours"]
        assert ours["steps_per_call"] == case["length"]  # `</s>` suppressed: every step
        parts = ours["us_per_step"]
        # the categories add up to the whole call over its steps
        assert sum(parts.values()) == pytest.approx(ours["step_us"], rel=1e-6)
        assert parts["search"] > 0 and parts["layer norms"] > 0
        assert parts[profile_step.ENCODER] > 0 and ours["unprofiled_step_us"] > 0
        matmuls = "int8 matmuls" if case["variant"] == "int8" else "fp32 matmuls"
        assert parts[matmuls] > 0 and parts["output projection"] > 0
        assert "ct2" not in case
    assert text.count("| whole call over its steps |") == len(cases)
    assert text.count("| the same, no profiler |") == len(cases)
