"""Languages at the edge (service.runtime.languages): names, a manifest's declared pairs, and
the identifier choosing among the languages served."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from service.runtime import languages
from service.runtime.languages import Languages, detect, edge_code, given_code


def test_a_manifest_declares_what_a_model_reads_and_writes():
    declared = Languages.from_manifest(
        {"languages": {"source": ["es", "fr"], "target": ["en", "fr"]}}
    )
    assert declared.pairs() == [("es", "en"), ("es", "fr"), ("fr", "en")]
    assert Languages.from_manifest({}) == Languages()  # a manifest that declares none
    assert Languages().pairs() == []


def test_names_fall_back_to_the_code():
    assert languages.name("es") == "Spanish"
    assert languages.name("xx") == "xx"


def test_detection_chooses_among_the_languages_served():
    ranked = detect("¿Dónde está la estación de tren? Quiero comprar un billete.", ["en", "es"])
    assert [code for code, _ in ranked] == ["es", "en"]
    assert ranked[0][1] > 0.9 and abs(sum(p for _, p in ranked) - 1) < 1e-6
    assert detect("Where is the train station? I want a ticket.", ["en", "es"])[0][0] == "en"
    # one language served: no guess needed; none the identifier knows: the first, unsure
    assert detect("whatever", ["es"]) == [("es", 1.0)]
    assert detect("whatever", ["xx", "yy"]) == [("xx", 0.0)]
    assert detect("whatever", []) == []


def test_a_multilingual_model_is_told_its_languages_by_tokens():
    """M2M100: the source's token before the source, the target's forced first; a
    multilingual Marian: the target's `>>xx<<` before the source; ours: none."""
    from service.runtime.languages import LanguageTokens, listed

    m2m100 = LanguageTokens.from_manifest(
        {"languages": {"tokens": {"es": 7, "fr": 9}, "source_token": True,
                       "target_token": "decoder"}}
    )  # fmt: skip
    assert m2m100.source_prefix("es", "fr") == [7]
    assert m2m100.decoder_prefix("fr") == (9,)
    marian = LanguageTokens.from_manifest(
        {"languages": {"tokens": {"de": 40}, "target_token": "source"}}
    )
    assert marian.source_prefix("en", "de") == [40] and marian.decoder_prefix("de") == ()
    ours = LanguageTokens.from_manifest({"languages": {"source": ["es"], "target": ["en"]}})
    assert ours.source_prefix("es", "en") == [] and ours.decoder_prefix("en") == ()
    assert Languages(("es",), ("en", "fr")).covers("", "fr")
    assert not Languages(("es",), ("en",)).covers("de", "en")
    assert listed(["a", "b"]) == "a, b"
    assert listed([str(i) for i in range(20)], 3) == "0, 1, 2, ... (20 in all)"


def test_a_code_as_a_client_gives_it_finds_the_one_it_means():
    known = ["en", "es", "zt", "spa_Latn"]
    assert given_code("ES", known) == "es" and given_code(" en ", known) == "en"
    assert given_code("pt-BR", ["pt"]) == "pt" and given_code("en_US", known) == "en"
    assert given_code("zh-Hant", known) == "zt" and given_code("SPA_LATN", known) == "spa_Latn"
    assert given_code("Auto", known) == "auto" and given_code("de-AT", known) == "de-at"
    # a code served as it is; an alias's language, never the language without the alias's
    # script; a script kept
    assert given_code("zh-CN", ["zh-CN", "zh"]) == "zh-CN" and given_code("zh-SG", ["zh"]) == "zh"
    assert given_code("zh-TW", ["en", "zh"]) == "zt" and given_code("sr-Latn", ["sr"]) == "sr-latn"
    assert edge_code("spa_Latn") == "es" and edge_code("zho_Hant") == "zt"
    assert edge_code("es") == "es" and edge_code("kin_Latn") == "kin_Latn"  # none it knows
    assert edge_code("es_XX") == "es" and edge_code("zh_CN") == "zh"  # mBART-50's
    assert edge_code("pt_BR") == "pt_BR"  # not mBART-50's: a region is not dropped here


def test_nllb_codes_are_detected_and_named_as_the_edge_names_them():
    among = ["eng_Latn", "fra_Latn", "spa_Latn"]
    assert detect("Bonjour tout le monde, comment allez-vous ?", among)[0][0] == "fra_Latn"
    assert detect("Hola", ["spa_Latn", "kin_Latn"]) == [("spa_Latn", 1.0)]  # one it knows
    assert languages.own_code("es", among) == "spa_Latn"
    assert languages.own_code("ES", among) == languages.own_code("spa_latn", among) == "spa_Latn"
    assert languages.own_code("de", among) == "de" and languages.own_code("", among) == ""
    assert languages.own_code("pt-BR", ["pt", "en"]) == "pt"
    assert languages.own_code("PT", ["pt", "por_Latn"]) == "pt"  # the model's own code first
    assert languages.own_code("zh-TW", ["zho_Hans"]) == "zh-TW"  # not read: said as given
    # the edge's code of what a client gives, among models' own codes
    assert languages.edge_given("spa_latn", among) == languages.edge_given("ES", among) == "es"
    assert languages.edge_given("zh-Hant", ["zho_Hant"]) == "zt"
    assert languages.edge_given("de", among) == "de"  # none of them: as given, compared


HTML = (
    '<div class="article-body container"><p style="font-weight:bold;text-align:center">El '
    'perro come pan.</p><a href="https://example.com/home/index.html" title="Go back home">'
    "Volver a casa</a></div>"
)


@pytest.mark.slow  # exports a small M2M100 model
def test_a_markup_texts_source_is_detected_by_its_words_not_its_markup(tmp_path):
    """A multilingual model told no source language detects it from what it translates:
    an HTML text's words, not its tags and attributes (English-looking names)."""
    pytest.importorskip("transformers")
    from helpers import m2m100_directory

    from export.hf.version import export_hf
    from service.front.config import ServerConfig
    from service.runtime.decoding import DecodingOptions
    from service.runtime.requests import TranslateRequest
    from service.runtime.translation import TranslationModel

    assert detect(HTML, ["en", "es"])[0][0] == "en"  # the markup read as words
    version = export_hf(m2m100_directory(tmp_path / "m2m100"), tmp_path, "m", variants=("fp32",))
    model = TranslationModel(version, ServerConfig())
    for text_format in ("html", "xml"):
        request = TranslateRequest(
            texts=(HTML, "<p>Hola.</p>"), fields=("texts[0]", "texts[1]"),
            options=DecodingOptions(), text_format=text_format, target_language="fr",
        )  # fmt: skip
        prepared = asyncio.run(model.prepare(request))
        assert prepared.sources.languages == ("es", "fr"), text_format


def test_a_long_code_a_model_lacks_is_named_in_a_short_message():
    """A code is echoed in its refusal as far as a message needs: a gRPC status message of
    more than 8 KiB reaches the client as RESOURCE_EXHAUSTED, not INVALID_ARGUMENT."""
    from types import SimpleNamespace

    from service.front.config import ServerConfig
    from service.front.registry import TRANSLATION_SERVICE
    from service.front.state import Front
    from service.runtime.errors import InvalidArgument
    from service.runtime.translation import TranslationModel

    code = "x" * 20_000
    model = SimpleNamespace(
        key="m2m100/1", languages=Languages(("en", "es"), ("en", "es")),
        language_tokens=languages.LanguageTokens({"en": 5, "es": 6}, True, "decoder"),
    )  # fmt: skip
    for source, target in ((code, "en"), ("es", code)):
        with pytest.raises(InvalidArgument) as refused:
            TranslationModel.resolve_languages(model, source, target, ["Hola."])
        assert "'xxxx" in str(refused.value) and "(20000 characters)" in str(refused.value)
        assert len(str(refused.value)) < 300
    front = Front(ServerConfig(), {TRANSLATION_SERVICE: {"m": {"1": model}}}, None, None)
    with pytest.raises(InvalidArgument, match=r"no served model") as refused:
        front.covering(TRANSLATION_SERVICE, "es", code)
    assert len(str(refused.value)) < 300


def test_iso_639_1_codes_reach_a_marians_three_letter_codes():
    """A multilingual Marian that names its targets by ISO 639-3 codes (OPUS-MT's `>>fra<<`)
    is reached by ISO 639-1's, as the edge names every language, and detects by them."""
    from types import SimpleNamespace

    from service.front.config import ServerConfig
    from service.front.registry import TRANSLATION_SERVICE
    from service.front.state import Front
    from service.runtime.translation import TranslationModel

    assert edge_code("fra") == "fr" and edge_code("cmn") == "zh" and edge_code("zho_Hant") == "zt"
    assert edge_code("ast") == "ast"  # M2M100's own code of a language without ISO 639-1's
    targets = ("deu", "fra", "spa")
    assert languages.own_code("FR", targets) == languages.own_code("fra", targets) == "fra"
    assert languages.edge_given("fra", targets) == languages.edge_given("fr-CA", targets) == "fr"
    model = SimpleNamespace(
        key="mul/1", languages=Languages(("eng",), targets),
        language_tokens=languages.LanguageTokens({"deu": 5, "fra": 6, "spa": 7}, False, "source"),
    )  # fmt: skip
    assert TranslationModel.resolve_languages(model, "en", "fr", ["Hi."]) == ("eng", "fra")
    front = Front(ServerConfig(), {TRANSLATION_SERVICE: {"mul": {"1": model}}}, None, None)
    assert front.covering(TRANSLATION_SERVICE, "en", "es") == "mul"
    assert detect("Bonjour tout le monde, comment allez-vous ?", targets)[0][0] == "fra"


@pytest.mark.slow  # exports a small multilingual Marian model
def test_a_text_that_names_its_own_target_tells_the_model_one(tmp_path):
    """A text that starts with a multilingual Marian's `>>xx<<`, sent with a target named,
    reaches the model with the named target's token alone, to translate and to score, and
    is held to the token limit as the model reads it: a text at the limit with its own code
    is taken to score as to translate, one past it refused by both."""
    pytest.importorskip("transformers")
    from helpers import marian_directory

    from export.hf.version import export_hf
    from service.front.config import ServerConfig
    from service.runtime.decoding import DecodingOptions
    from service.runtime.errors import InvalidArgument
    from service.runtime.requests import ScoreRequest, TranslateRequest
    from service.runtime.translation import TranslationModel

    directory = marian_directory(tmp_path / "marian", multilingual=True)
    model = TranslationModel(
        export_hf(directory, tmp_path, "mul", variants=("fp32",)), ServerConfig()
    )
    tokens = model.language_tokens.tokens
    plain = model.tokenizer.encode("Hola.")
    for code, target in ((">>fr<< ", "de"), (">>de<< ", "de"), ("", "fr")):
        request = TranslateRequest(
            texts=(code + "Hola.",), fields=("texts[0]",), options=DecodingOptions(),
            target_language=target,
        )  # fmt: skip
        prepared = asyncio.run(model.prepare(request))
        assert prepared.sources.token_ids[0] == [tokens[target], *plain], code
        scored = asyncio.run(
            model.prepare_score(ScoreRequest(((code + "Hola.", "Hallo."),), target_language=target))
        )
        assert list(scored.encoder_inputs["src_ids"][0][: len(plain) + 1]) == [
            tokens[target], *plain,
        ]  # fmt: skip
    text = ">>fr<< Hola amigo."
    at_limit = TranslationModel(
        model.version, ServerConfig(max_input_tokens=len(model.tokenizer.encode(text)))
    )
    translate = TranslateRequest(
        texts=(text,), fields=("texts[0]",), options=DecodingOptions(), target_language="de"
    )
    asyncio.run(at_limit.prepare(translate))
    asyncio.run(at_limit.prepare_score(ScoreRequest(((text, "Hallo."),), target_language="de")))
    longer = ">>fr<< Hola amigo mío."  # one sentence, longer
    with pytest.raises(InvalidArgument, match=r"texts\[0\]: \d+ tokens, at most"):
        asyncio.run(at_limit.prepare(replace(translate, texts=(longer,))))
    with pytest.raises(InvalidArgument, match=r"pairs\[0\]\.source: \d+ tokens, at most"):
        asyncio.run(
            at_limit.prepare_score(ScoreRequest(((longer, "Hallo."),), target_language="de"))
        )


@pytest.mark.slow  # exports a small M2M100 model
def test_a_target_prefix_leaves_a_step_after_the_forced_target_language(tmp_path):
    """M2M100's decoder is given its target language's token first: a target prefix is
    held to max_length - 2 tokens, so that the model writes at least one step of its own,
    and refused past that with INVALID_ARGUMENT's reason, as a prefix of any model is."""
    pytest.importorskip("transformers")
    from helpers import m2m100_directory

    from export.hf.version import export_hf
    from service.front.config import ServerConfig
    from service.runtime.decoding import DecodingOptions
    from service.runtime.errors import InvalidArgument
    from service.runtime.requests import TranslateRequest
    from service.runtime.translation import TranslationModel

    version = export_hf(m2m100_directory(tmp_path / "m2m100"), tmp_path, "m", variants=("fp32",))
    model = TranslationModel(version, ServerConfig())
    prefix = tuple(model.tokenizer.encode_target("the house is big"))
    request = TranslateRequest(
        texts=("Hola.",), fields=("texts[0]",), prefix=prefix,
        options=DecodingOptions(max_length=len(prefix) + 2), target_language="en",
    )  # fmt: skip
    prepared = asyncio.run(model.prepare(request))
    (forced,) = prepared.controls.prefixes
    assert forced == (model.language_tokens.tokens["en"], *prefix)
    assert len(forced) < prepared.options.max_length  # a step left to write `</s>`
    with pytest.raises(InvalidArgument, match=r"target_prefix: \d+ tokens, at most max_length - 2"):
        asyncio.run(
            model.prepare(replace(request, options=DecodingOptions(max_length=len(prefix) + 1)))
        )
