"""Whole-decode parity between two engines: identical decodes counted, a divergence explained as
a near-tie only where the reference itself barely told the two tokens apart; the quality a
variant loses against its baseline; attention compared where the tokens agree."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_sources, tiny_transformer

from export.decode_parity import (
    NEAR_TIE,
    DecodeReport,
    ParityInputs,
    attention_difference,
    caption_quality_loss,
    compare_decodes,
    decode_all,
    encode_one,
    quality_loss,
)
from models.reference import reference_engine
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.tokenizer import Tokenizer

OPTIONS = DecodingOptions(max_length=10)


@pytest.fixture(scope="module")
def engines():
    return reference_engine(tiny_transformer(seed=0)), reference_engine(tiny_transformer(seed=5))


@pytest.fixture(scope="module")
def sources():
    return random_sources(512, [4, 9, 2, 6], seed=3)


def test_decodes_are_in_input_order_and_the_best_of_each(engines, sources):
    engine, _ = engines
    best = decode_all(engine, sources, OPTIONS, 512, batch=3)
    alone = [decode_all(engine, [s], OPTIONS, 512)[0] for s in sources]
    assert [h.tokens for h in best] == [h.tokens for h in alone]
    assert all(isinstance(h, Hypothesis) and len(h.tokens) <= OPTIONS.max_length for h in best)
    encoder = encode_one(engine, sources[1], 512)
    assert encoder.memory_mask.shape == (1, len(sources[1]) + 1)


def test_an_engine_against_itself_is_identical_throughout(engines, sources):
    engine, _ = engines
    report = compare_decodes(engine, engine, sources, OPTIONS, 512, "fp32 greedy")
    assert (report.identical, report.sentences) == (4, 4) and report.passed
    assert report.to_dict() == {
        "setting": "fp32 greedy",
        "sentences": 4,
        "identical": 4,
        "near_ties": [],
        "divergences": [],
        "divergence_count": 0,
        "passed": True,
    }


def test_another_model_s_decodes_are_divergences_with_where_they_part(engines, sources):
    reference, other = engines
    report = compare_decodes(reference, other, sources, OPTIONS, 512, "other")
    assert not report.passed and report.divergences
    assert report.identical + len(report.divergences) + len(report.near_ties) == 4
    for entry in report.divergences:
        assert set(entry) == {"sentence", "step", "margin", "score_difference"}
        assert entry["margin"] >= NEAR_TIE and entry["score_difference"] >= NEAR_TIE
        assert 0 <= entry["step"] <= OPTIONS.max_length


def test_a_difference_with_the_same_score_is_a_near_tie(engines, sources):
    engine, _ = engines
    expected = decode_all(engine, sources, OPTIONS, 512)
    actual = list(expected)
    swapped = expected[0]
    actual[0] = Hypothesis(
        tokens=[swapped.tokens[0] + 1, *swapped.tokens[1:]],
        log_prob=swapped.log_prob,
        score=swapped.score + NEAR_TIE / 10,
        token_log_probs=[],
        finished=swapped.finished,
    )
    report = compare_decodes(engine, engine, sources, OPTIONS, 512, "tie", expected, actual)
    assert report.passed and report.identical == 3
    (tie,) = report.near_ties
    assert tie["sentence"] == 0 and tie["step"] == 0


def test_a_report_keeps_ten_divergences_and_counts_them_all():
    report = DecodeReport("s", 30, divergences=[{"sentence": i} for i in range(12)])
    as_dict = report.to_dict()
    assert len(as_dict["divergences"]) == 10 and as_dict["divergence_count"] == 12
    assert not as_dict["passed"]


def _hypothesis(tokens, alignment=None) -> Hypothesis:
    return Hypothesis(tokens=tokens, log_prob=-1.0, score=-1.0, alignment=alignment)


@pytest.fixture(scope="module")
def tokenizer():
    from helpers import SHIPPED_TRANSLATOR

    return Tokenizer(SHIPPED_TRANSLATOR / "tokenizer.model")


def test_the_quality_lost_is_the_baseline_s_score_less_the_variant_s(tokenizer):
    references = ["God is love.", "The house is red."]
    baseline = [_hypothesis(tokenizer.encode(r)) for r in references]
    same = quality_loss(tokenizer, references, baseline, baseline)
    assert same["bleu_loss"] == same["chrf_loss"] == 0.0 and same["identical_share"] == 1.0
    assert same["baseline"] == same["variant"] == {"bleu": 100.0, "chrf": 100.0}
    worse = [baseline[0], _hypothesis(tokenizer.encode("A house is blue."))]
    lost = quality_loss(tokenizer, references, baseline, worse)
    assert lost["bleu_loss"] > 0 and lost["chrf_loss"] > 0
    assert lost["identical_share"] == 0.5
    assert lost["bleu_loss"] == round(100.0 - lost["variant"]["bleu"], 2)
    assert lost["bleu_signature"].startswith("nrefs:1|")


def test_the_caption_quality_lost_is_exact_match_points_and_cider(tokenizer):
    references = ["a fish at the bottom right", "a red car in the middle"]
    baseline = [_hypothesis(tokenizer.encode(r)) for r in references]
    worse = [baseline[0], _hypothesis(tokenizer.encode("a blue car in the middle"))]
    lost = caption_quality_loss(tokenizer, references, baseline, worse)
    assert lost["exact_match_loss"] == 50.0  # one caption of two, in points
    assert lost["cider_loss"] > 0 and lost["identical_share"] == 0.5
    assert lost["baseline"]["exact_match"] == 1.0 and lost["variant"]["exact_match"] == 0.5


def test_attention_is_compared_only_where_the_tokens_agree():
    a = np.zeros((3, 4))
    expected = [_hypothesis([5, 6], a), _hypothesis([7], a), _hypothesis([8], a)]
    actual = [
        _hypothesis([5, 6], a + 0.01),
        _hypothesis([9], a + 5.0),  # other tokens: not compared
        _hypothesis([8], a - 0.03),
    ]
    difference = attention_difference(expected, actual)
    assert difference["compared"] == 2
    assert difference["max_abs"] == pytest.approx(0.03)
    assert attention_difference([], []) == {"compared": 0, "max_abs": 0.0}


def test_the_int8_claim_is_on_these_inputs_unless_others_are_given(engines, sources):
    engine, _ = engines
    greedy = decode_all(engine, sources, OPTIONS, 512)
    same = ParityInputs(sources, ["r"] * 4)
    assert same.int8_claim(engine, greedy, OPTIONS, 512) == (sources, ["r"] * 4, greedy)
    others = sources[:2]
    apart = ParityInputs(sources, ["r"] * 4, {"bible": 4}, int8=(others, ["a", "b"]))
    inputs, references, fp32 = apart.int8_claim(engine, greedy, OPTIONS, 512)
    assert inputs is others and references == ["a", "b"]
    assert [h.tokens for h in fp32] == [h.tokens for h in greedy[:2]]  # decoded afresh
