"""bench.hf_speed: the tokenizer's vocabulary and the sources it builds, the summary's check
that every engine wrote the same length, and a quick run on a tiny random Marian in which
every engine writes 4 tokens a source, our fp32 engine (over the version's graphs built and
traced) and CTranslate2 float32 the very tokens of transformers' `generate`, and every ratio
is a positive finite number. Timings are not asserted."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict

import pytest

pytest.importorskip("transformers")  # the hf extra
pytest.importorskip("ctranslate2")  # the bench extra
pytest.importorskip("onnxruntime")

from bench import hf_speed


def _pieces(tmp_path, size: int = 80) -> list:
    lines = (hf_speed.TRANSLATOR_DATA / "test.es").read_text(encoding="utf-8").splitlines()
    hf_speed.train_pieces(lines[:200], tmp_path / "source", size)
    return [tmp_path / "source.model"]


def test_the_vocabulary_has_opus_mts_layout_and_refuses_what_does_not_fit(tmp_path):
    files = _pieces(tmp_path)
    pieces = hf_speed.vocabulary(files, 120)
    assert sorted(pieces.values()) == list(range(120))
    assert (pieces["</s>"], pieces["<unk>"], pieces["<pad>"]) == (0, 1, 119)
    assert "▁made0" in pieces and "▁de" in pieces  # made-up pieces after SentencePiece's own
    with pytest.raises(ValueError, match="81 pieces do not fit a vocabulary of 81"):
        hf_speed.vocabulary(files, 81)


def test_sources_are_the_same_random_ids_ending_in_the_end_token():
    sources = hf_speed.random_sources(32, 400, seed=3)
    assert sources == hf_speed.random_sources(32, 400, seed=3)
    assert sources != hf_speed.random_sources(32, 400, seed=4)
    low, high = hf_speed.SOURCE_LENGTHS
    assert {len(s) - 1 for s in sources} <= set(range(low, high + 1))
    assert [len(s) for s in sources] == sorted(len(s) for s in sources)
    assert all(s[-1] == hf_speed.EOS and min(s[:-1]) >= 2 and max(s) < 399 for s in sources)


def _timings(seconds: float) -> list[hf_speed.Timing]:
    return [hf_speed.Timing(seconds * k, 0.1 * k, 0.0) for k in (1, 3, 2)]


def test_the_summary_voids_a_run_whose_engines_wrote_other_lengths():
    tokens = {
        "ours-fp32": {1: [[5, 6, 7], [8, 9, 9]]},
        "transformers-fp32": {1: [[5, 6, 7], [8, 9, 4]]},
    }
    timings = {"ours-fp32": {1: _timings(1.0)}, "transformers-fp32": {1: _timings(4.0)}}
    report = hf_speed.summary(timings, tokens, [1], 3)
    ours = report["cases"]["ours-fp32"][1]
    assert report["same_length"] and ours["seconds"] == 2.0 and ours["tokens_per_s"] == 3.0
    assert ours["others_cpus"] == pytest.approx(0.1) and ours["stolen_cpus"] == 0.0
    assert ours["identical_to_reference"] == 1
    (row,) = report["ratios"]  # the other ratios' engines did not run
    assert (row["fast"], row["slow"], row["ratio"], row["met"]) == (
        "ours-fp32",
        "transformers-fp32",
        4.0,
        True,
    )
    tokens["transformers-fp32"][1][1].append(4)
    assert not hf_speed.summary(timings, tokens, [1], 3)["same_length"]


def test_a_workdir_is_reused_only_for_the_same_model_seed_and_engines(tmp_path):
    made = {"model": asdict(hf_speed.TINY), "seed": 0, "kinds": ["ct2", "transformers"]}
    files = {"ct2": str(tmp_path / "ct2"), "version": None}
    (tmp_path / hf_speed.PREPARED).write_text(json.dumps({**made, **files}))
    paths = hf_speed.prepared(tmp_path, hf_speed.TINY, ["ct2-int8", "transformers-fp32"], 0)
    assert paths == hf_speed.Paths(tmp_path / "marian", tmp_path / "ct2", None)
    assert hf_speed.prepared(tmp_path, hf_speed.TINY, ["ct2-int8"], 1) is None
    assert hf_speed.prepared(tmp_path, hf_speed.OPUS_MT, ["ct2-int8"], 0) is None
    assert hf_speed.prepared(tmp_path, hf_speed.TINY, ["ours-fp32"], 0) is None
    assert hf_speed.prepared(tmp_path / "elsewhere", hf_speed.TINY, ["ct2-int8"], 0) is None
    made["kinds"] += ["onnx", "onnx-traced"]
    files |= {"version": str(tmp_path / "built"), "traced": str(tmp_path / "traced")}
    (tmp_path / hf_speed.PREPARED).write_text(json.dumps({**made, **files}))
    paths = hf_speed.prepared(tmp_path, hf_speed.TINY, ["ours-int8", "ours-traced-int8"], 0)
    assert (paths.version, paths.traced) == (tmp_path / "built", tmp_path / "traced")


def test_waiting_for_a_quiet_machine_ends_when_it_is_quiet_or_after_the_patience():
    start = time.monotonic()
    hf_speed.wait_for_quiet(max_others=-1.0, patience=1.5)  # never that quiet
    assert 1.5 <= time.monotonic() - start < 3.5
    start = time.monotonic()
    hf_speed.wait_for_quiet(max_others=float(os.cpu_count()) + 1, patience=60.0)
    assert time.monotonic() - start < 3.0  # a second's sample


def test_unknown_engines_are_refused(capsys):
    with pytest.raises(SystemExit):
        hf_speed.arguments(["--engines", "ours-fp32,marian-cpp"])
    assert "unknown engines ['marian-cpp']" in capsys.readouterr().err


@pytest.mark.slow
def test_a_quick_run_writes_equal_lengths_and_transformers_tokens(tmp_path):
    figures, table = tmp_path / "figures.json", tmp_path / "table.md"
    arguments = ["--quick", "--json", str(figures), "--markdown", str(table)]
    assert hf_speed.main([*arguments, "--workdir", str(tmp_path / "work")]) == 0
    report = json.loads(figures.read_text())
    assert report["same_length"] and report["settings"]["batches"] == [1, 2]
    cases = report["cases"]
    assert sorted(cases) == sorted(hf_speed.ENGINES)
    for name, by_batch in cases.items():
        for batch, case in by_batch.items():
            assert case["lengths"] == [4] and case["tokens"] == 4 * 4, (name, batch)
            if name in ("ours-fp32", "ours-traced-fp32", "ct2-float32"):
                assert case["identical_to_reference"] == 4, (name, batch)
    assert len(report["ratios"]) == 2 * len(hf_speed.RATIOS)
    assert all(math.isfinite(r["ratio"]) and r["ratio"] > 0 for r in report["ratios"])
    assert "| ours-fp32 / transformers-fp32 | 2 |" in table.read_text()
    assert sorted(report["peak_memory_mb"]) == sorted(hf_speed.ENGINES)
    assert all(mb > 50 for mb in report["peak_memory_mb"].values())  # an interpreter at least
