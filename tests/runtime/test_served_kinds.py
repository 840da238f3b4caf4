"""Model kinds: the class of each manifest kind, what every served model reads from its
manifest, a prepared request narrowed to some inputs, hypotheses as a client reads them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from service.front.config import ServerConfig
from service.runtime.captioning import CaptionModel
from service.runtime.controls import InputControls
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.errors import ModelRepositoryError
from service.runtime.kinds import MODULES, Prepared, ServedModel, kind_class, served_model
from service.runtime.repository import ModelVersion
from service.runtime.results import Alignment
from service.runtime.translation import TranslationModel


def test_each_kind_has_its_class_and_an_unknown_one_is_refused():
    assert kind_class("transformer") is TranslationModel
    assert kind_class("captioner") is CaptionModel
    assert set(MODULES) == {"transformer", "captioner"}
    for kind in MODULES:
        assert issubclass(kind_class(kind), ServedModel) and kind_class(kind).kind == kind
    with pytest.raises(ModelRepositoryError, match=r"unknown model kind 'speech' \(served kinds"):
        kind_class("speech")
    with pytest.raises(ModelRepositoryError, match="unknown model kind None"):
        served_model(ModelVersion(None, {"model": {"name": "x"}}), ServerConfig())


def test_a_prepared_request_is_narrowed_to_some_inputs():
    ids = np.arange(12).reshape(4, 3)
    prepared = Prepared(
        {"src_ids": ids, "src_mask": ids > 2},
        DecodingOptions(beam_size=2),
        ["texts[0]", "texts[1]", "texts[2]", "texts[3]"],
        keep_log_probs=True,
        sources="whole",
        keys=[b"a", b"b", b"c", b"d"],
        controls=InputControls(max_lengths=(5, 6, 7, 8)),
    )
    assert prepared.inputs == 4
    part = prepared.subset([3, 1])
    assert part.inputs == 2 and part.fields == ["texts[3]", "texts[1]"]
    np.testing.assert_array_equal(part.encoder_inputs["src_ids"], ids[[3, 1]])
    np.testing.assert_array_equal(part.encoder_inputs["src_mask"], (ids > 2)[[3, 1]])
    assert part.keys == [b"d", b"b"] and part.controls.max_lengths == (8, 6)
    assert part.sources == "whole" and part.options is prepared.options
    assert part.keep_log_probs and not part.keep_alignment
    bare = Prepared({"pixels": np.zeros((2, 1))}, DecodingOptions(), ["a", "b"])
    assert bare.subset([1]).keys is None and bare.subset([1]).controls is None


def test_a_served_model_takes_its_limits_from_the_manifest_and_the_server(tiny_translator):
    _, version = tiny_translator
    limit = version.manifest["limits"]["max_output_tokens"]
    model = served_model(version, ServerConfig())
    assert isinstance(model, TranslationModel) and model.key == "tiny/1"
    assert model.max_output_length == limit
    assert model.default_max_length == min(ServerConfig().default_max_length, limit)
    config = replace(ServerConfig(), max_output_length=40, default_max_length=100)
    capped = served_model(version, config)
    assert (capped.max_output_length, capped.default_max_length) == (40, 40)
    above = served_model(version, replace(ServerConfig(), max_output_length=limit + 5))
    assert above.max_output_length == limit
    assert model.special_tokens.eos == version.manifest["special_tokens"]["eos"]["id"]


def test_a_hypothesis_is_given_as_pieces_and_text_with_what_was_asked(tiny_translator):
    _, version = tiny_translator
    model = served_model(version, ServerConfig())
    tokens = model.tokenizer.encode("hola mundo")
    h = Hypothesis(tokens, -2.5, -1.25, [-0.5] * (len(tokens) + 1), None, finished=True)
    plain = model.hypothesis(h, log_probs=False)
    assert plain.text == model.tokenizer.decode(tokens) == "hola mundo"
    assert plain.tokens == tuple(model.tokenizer.pieces(tokens))
    assert (plain.score, plain.log_prob, plain.finished) == (-1.25, -2.5, True)
    assert plain.token_log_probs == () and plain.alignment is None
    alignment = Alignment(("▁a",), ("▁b",), (1.0,))
    full = model.hypothesis(h, log_probs=True, text="HOLA", alignment=alignment)
    assert full.text == "HOLA" and full.alignment is alignment
    assert full.token_log_probs == tuple(h.token_log_probs)


def test_a_text_of_one_sentence_keeps_what_surrounds_it_as_a_text_of_several(tiny_translator):
    """The white space before and after a text's sentences comes back as it was, whether the
    text holds one sentence or several, and each sentence's target span indexes the
    translated text (a file's runs are cut back by these spans); a stream's partials are
    prefixes of its result."""
    import asyncio

    from service.front.translate import parse_translate, parse_translate_stream
    from service.wire.v1 import translation_pb2

    _, version = tiny_translator
    model = served_model(version, ServerConfig())
    hello = model.tokenizer.encode_target("Hello.")
    none = translation_pb2.SENTENCE_SPLITTING_NONE
    for text, splitting in (("  Hola.  ", 0), ("\nHola.\n", 0), ("  Hola.\n", none)):
        request = translation_pb2.TranslateRequest(texts=[text], sentence_splitting=splitting)
        prepared = asyncio.run(model.prepare(parse_translate(request, model)))
        h = Hypothesis(hello, -1.0, -0.5, [-0.1] * (len(hello) + 1), None, finished=True)
        (translation,) = model.response(prepared, [[h]]).translations
        written = translation.hypotheses[0].text
        assert written == text.replace("Hola.", "Hello."), (text, written)
        (span,) = translation.sentences
        assert text[span.source_start : span.source_end] == "Hola."
        assert written[span.target_start : span.target_end] == "Hello."
        stream = translation_pb2.TranslateStreamRequest(text=text, sentence_splitting=splitting)
        prepared = asyncio.run(model.prepare(parse_translate_stream(stream, model)))
        partial = model.partial(prepared, hello[:1], 1).text
        assert written.startswith(partial) and partial.strip(), (text, partial)
