"""Scoring translations: sacreBLEU's BLEU and chrF with their signatures, and Apertium's
spa-eng baseline, one line out for each text in."""

from __future__ import annotations

import pytest

from models.evaluate import APERTIUM_PACKAGES, apertium_translate, corpus_scores
from models.packages import missing_debian_packages

REFERENCES = ["God is love.", "The house is red.", "The dog eats bread."]


def test_identical_translations_score_full_marks():
    scores = corpus_scores(REFERENCES, REFERENCES)
    assert scores["bleu"] == scores["chrf"] == 100.0
    assert scores["sentences"] == 3
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|")
    assert "tok:13a" in scores["bleu_signature"] and "nc:6" in scores["chrf_signature"]


def test_worse_translations_score_lower_and_are_rounded():
    close = corpus_scores(["God is love.", "The house is blue.", "The dog eats bread."], REFERENCES)
    far = corpus_scores(["Love.", "A cat.", "Nothing at all."], REFERENCES)
    assert 0 <= far["bleu"] < close["bleu"] < 100
    assert 0 <= far["chrf"] < close["chrf"] < 100
    for value in (close["bleu"], close["chrf"]):
        assert value == round(value, 2)


def test_a_count_mismatch_is_refused():
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        corpus_scores(REFERENCES[:2], REFERENCES)


@pytest.mark.skipif(
    bool(missing_debian_packages(APERTIUM_PACKAGES)), reason="Apertium spa-eng is not installed"
)
def test_apertium_gives_one_line_for_each_text():
    texts = ["La casa es roja.", "El gato es\nnegro.", "El perro come."]
    lines = apertium_translate(texts)
    assert len(lines) == 3  # the newline inside a text did not split it
    assert lines[0] == "The house is red."
    assert lines[1] == "The cat is black."
    assert lines[2] == "The dog eats."
