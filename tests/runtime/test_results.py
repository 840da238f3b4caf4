"""What the runtime answers: frozen values, token counts that add up."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from service.runtime.results import (
    Alignment,
    Caption,
    CaptionResult,
    TextHypothesis,
    TokenCounts,
    total,
)


def test_token_counts_add_field_by_field():
    a, b = TokenCounts(3, 5), TokenCounts(input_tokens=7, output_tokens=1)
    assert a + b == TokenCounts(10, 6)
    assert a + TokenCounts() == a
    assert (a.input_tokens, a.output_tokens) == (3, 5)  # adding made a new value


def test_total_sums_counts_and_is_zero_for_none():
    assert total([]) == TokenCounts(0, 0)
    assert total([TokenCounts(1, 2), TokenCounts(3, 4), TokenCounts(5, 6)]) == TokenCounts(9, 12)


def test_results_are_frozen_and_compare_by_value():
    hypothesis = TextHypothesis("hi", -1.0, -2.0, ("▁hi",), True)
    assert hypothesis.token_log_probs == () and hypothesis.alignment is None
    assert hypothesis.attention is None
    with pytest.raises(FrozenInstanceError):
        hypothesis.text = "ho"  # type: ignore[misc]
    caption = Caption((hypothesis,), TokenCounts(36, 1), 640, 480)
    result = CaptionResult("captioner", "1", (caption,), total([caption.token_counts]))
    again = CaptionResult(
        "captioner",
        "1",
        (Caption((hypothesis,), TokenCounts(36, 1), 640, 480),),
        result.token_counts,
    )
    assert result == again and hash(result) == hash(again)
    alignment = Alignment(("▁a", "</s>"), ("▁b",), (0.25, 0.75))
    assert alignment != Alignment(("▁a", "</s>"), ("▁b",), (0.75, 0.25))
