"""The certificate of Hugging Face models against `transformers` (export.hf.certify): a
small random Marian, M2M100, NLLB and mBART-50 model each, 200 Spanish test sentences,
greedy and beam 4."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import certificate_texts, marian_directory, nllb_directory

from export.graph_files import SHARED
from export.hf.certify import (
    GRAPH_TEXTS,
    HALF_BOUND,
    MIN_TEXTS,
    certify_hf,
    forward_passes,
    generated,
    golden_texts,
    half_claim,
)
from export.hf.version import export_hf, load
from service.front.config import certified_variants
from service.runtime.decoding import DecodingOptions

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family", ["marian", "m2m100", "nllb", "mbart"])
def test_both_families_decode_as_generate(hf_models, family):
    _, version, certificate = hf_models[family]
    assert certificate["passed"], certificate
    assert certificate["texts"] == MIN_TEXTS
    assert certificate["tokenizer"]["identical"] == MIN_TEXTS
    assert certificate["graphs"]["fp32"]["passed"]
    assert certificate["rows"]["identical"] == certificate["rows"]["decodes"]
    greedy, beam = certificate["decodes"]
    assert (greedy["search"], beam["search"]) == ("greedy", "beam 4")
    for claim in (greedy, beam):
        assert claim["decodes"] == MIN_TEXTS
        assert claim["identical"] + len(claim["near_ties"]) == MIN_TEXTS
        assert claim["identical"] >= MIN_TEXTS - 2, claim  # near ties are rare
    assert version.manifest["parity"] == certificate
    assert len(version.golden()) >= 4  # the worker's start-up check


@pytest.mark.parametrize("family", ["marian", "m2m100", "nllb", "mbart"])
def test_int8_is_certified_on_its_own(hf_models, family):
    """int8 is measured against fp32 and is a certified variant only where its claim holds
    (on random weights, with no margins between tokens, it loses far more than the bound)."""
    _, version, certificate = hf_models[family]
    claim = certificate["int8_vs_fp32"]
    assert {"bleu_loss", "chrf_loss", "identical_share"} <= set(claim)
    assert certificate["graphs"]["int8"]["passed"] == claim["passed"]
    assert ("int8" in certified_variants(version.manifest)) == claim["passed"]
    assert "fp32" in certified_variants(version.manifest)


def test_fp16_is_certified_only_where_its_graphs_are_the_models(hf_models, tmp_path):
    """fp16's claim passes on the fp16 graphs of the model and fails on the same weights,
    each where another weight was (every value in range: no overflow to catch it)."""
    directory, _, _ = hf_models["m2m100"]
    version = export_hf(directory, tmp_path, "m2m100", variants=("fp32", "fp16"))
    model, tokenizer = load(directory)
    texts, languages = certificate_texts(version)[:GRAPH_TEXTS], ("es", "en")
    options = DecodingOptions(max_length=24, max_length_ratio=0.0)
    theirs = generated(model, tokenizer, texts, languages, options)
    passes = forward_passes(model, tokenizer, texts, theirs, languages)
    given = (version, model, tokenizer, passes, texts, texts, theirs, languages, options)
    claim, decodes = half_claim(*given)
    assert claim["passed"], claim
    assert claim["greedy"]["identical"] + len(claim["greedy"]["near_ties"]) == GRAPH_TEXTS
    assert len(decodes) == GRAPH_TEXTS
    weights = version.directory / "fp16" / SHARED
    np.fromfile(weights, np.float16)[::-1].tofile(weights)
    broken, _ = half_claim(*given)
    assert not broken["passed"], broken
    assert broken["max_abs"] > HALF_BOUND.atol and broken["max_rel"] > HALF_BOUND.rtol


def test_the_golden_set_is_decoded_from_texts_clear_of_near_ties():
    """fp16 is checked at a server's start against fp32's golden tokens: their texts are the
    first whose every variant decodes as `generate` does."""
    texts, theirs = [f"text {i}" for i in range(8)], [[i, 5] for i in range(8)]
    fp32 = [list(t) for t in theirs]
    fp32[0] = [0, 6]  # a near tie in fp32
    half = [list(t) for t in theirs]
    half[2] = half[3] = [9]
    assert golden_texts(texts, theirs, fp32, half) == ["text 1", "text 4", "text 5", "text 6"]
    assert golden_texts(texts, theirs, fp32, None) == ["text 1", "text 2", "text 3", "text 4"]
    assert golden_texts(texts[:5], theirs[:5], fp32[:5], half[:5]) == texts[:4]  # too few


def test_too_few_texts_are_refused(hf_models):
    directory, version, _ = hf_models["m2m100"]
    with pytest.raises(ValueError, match=f"at least {MIN_TEXTS}"):
        certify_hf(version, directory, ["hola"] * 10, ("es", "en"))


def test_a_multilingual_marian_is_certified_with_its_targets_code(tmp_path):
    """A multilingual Marian's own tokenizer and generate read the target's `>>xx<<` before
    each text, as the served path puts its token before the source: held to that, the
    version's ids and decodes are the model's."""
    directory = marian_directory(tmp_path / "marian", multilingual=True)
    version = export_hf(directory, tmp_path / "repository", "mul", variants=("fp32",))
    certificate = certify_hf(version, directory, certificate_texts(version), ("", "fr"))
    assert certificate["tokenizer"]["identical"] == MIN_TEXTS, certificate["tokenizer"]
    assert certificate["passed"], certificate


def test_texts_are_certified_as_the_server_reads_them(tmp_path):
    """The server strips a text's ends before it tokenizes it; NLLB's own tokenizer makes a
    piece of a trailing space. A texts file whose lines end in spaces or tabs is certified
    on the texts as served, so its claims hold."""
    directory = nllb_directory(tmp_path / "nllb")
    version = export_hf(directory, tmp_path / "repository", "nllb", variants=("fp32",))
    texts = [t + " \t"[i % 2] for i, t in enumerate(certificate_texts(version))]
    certificate = certify_hf(version, directory, texts, ("spa_Latn", "eng_Latn"))
    assert certificate["tokenizer"]["identical"] == MIN_TEXTS, certificate["tokenizer"]
    assert certificate["passed"], certificate
