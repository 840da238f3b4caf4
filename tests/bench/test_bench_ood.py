"""bench.ood: its input set is built by rule, and its loop count reads 3-grams."""

from __future__ import annotations

from bench.ood import inputs, repeated_trigram


def test_the_set_is_the_same_for_a_seed_and_covers_every_kind():
    first, again = inputs(), inputs()
    assert first == again and inputs(seed=1) != first
    assert {k: len(v) for k, v in first.items()} == dict.fromkeys(first, 40)
    assert all(any(ord(c) < 32 for c in text) for text in first["control characters"])
    assert all(len(set(text.split())) == 1 for text in first["repeated word"])


def test_a_trigram_counts_as_a_loop_at_its_third_occurrence():
    assert not repeated_trigram([1, 2, 3, 1, 2, 3, 1, 2])
    assert repeated_trigram([1, 2, 3, 1, 2, 3, 1, 2, 3])
    assert repeated_trigram([5, 5, 5, 5, 5])
    assert not repeated_trigram([5, 5, 5, 5])
