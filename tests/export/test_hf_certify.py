"""The certificate of Hugging Face models against `transformers` (export.hf.certify): a
small random Marian, M2M100, NLLB and mBART-50 model each, 200 Spanish test sentences,
greedy and beam 4."""

from __future__ import annotations

import pytest
from helpers import certificate_texts, marian_directory, nllb_directory

from export.hf.certify import MIN_TEXTS, certify_hf
from export.hf.version import export_hf
from service.front.config import certified_variants

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
