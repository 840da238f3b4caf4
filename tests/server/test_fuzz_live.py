"""Fuzzing a live server (hypothesis): random request messages and random bytes on every
method. Every answer has a status a client can act on (never UNKNOWN, INTERNAL or
UNAVAILABLE), the log holds no traceback and the server stays SERVING. The examples are
ATTNSERVE_FUZZ_EXAMPLES / 5 per property (docs/reliability.md, "Fuzzing")."""

from __future__ import annotations

import os

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service import client
from service.wire.v1 import caption_pb2, caption_pb2_grpc, decoding_pb2, translation_pb2

EXAMPLES = max(10, int(os.environ.get("ATTNSERVE_FUZZ_EXAMPLES", "300")) // 5)
LIVE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ACTIONABLE = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
METHODS = (
    "/attnserve.v1.TranslationService/Translate",
    "/attnserve.v1.TranslationService/TranslateStream",
    "/attnserve.v1.TranslationService/Score",
    "/attnserve.v1.CaptionService/Caption",
    "/attnserve.v1.CaptionService/CaptionStream",
)
uint32 = st.integers(0, 2**32 - 1)
small = st.integers(0, 40) | uint32
tiny = st.sampled_from([1e-40, 1e-30, 1e-6, 0.009, 0.01])  # a score under- or overflows
# words of both models (a caption's grammar among them) and markup with and without text
words = st.sampled_from(
    ["a", "an", "one", "two", "three", "cat", "the", "left", "ha ha ha ha ha", "Z3", "2"]
) | st.text(max_size=12)
markup = st.sampled_from(
    ["<p></p>", "<br>", "&nbsp;", "<!-- x -->", "<b> </b>", "<p>El gato <b>duerme</b>.</p>"]
)


@st.composite
def options(draw):
    message = decoding_pb2.DecodingOptions()
    for name, values in (("beam_size", small), ("max_length", small), ("num_hypotheses", small)):
        if draw(st.booleans()):
            setattr(message, name, draw(values))
    if draw(st.booleans()):
        message.length_penalty = draw(st.floats(width=32))
    if draw(st.booleans()):
        message.sampling.temperature = draw(st.floats(width=32) | tiny)
        message.sampling.top_k = draw(small)
        message.sampling.seed = draw(st.integers(0, 2**64 - 1))
    # the decoding controls, each alone and together (a grammar's bans included)
    for name in ("min_length", "no_repeat_ngram_size"):
        if draw(st.booleans()):
            setattr(message, name, draw(small))
    for name in ("repetition_penalty", "max_length_ratio"):
        if draw(st.booleans()):
            setattr(message, name, draw(st.floats(width=32) | tiny))
    if draw(st.booleans()):
        message.suppress.extend(draw(st.lists(words, max_size=6)))
    if draw(st.booleans()):
        message.target_prefix = draw(words)
    return message


def _code(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as error:
        assert "Traceback" not in (error.details() or "")
        return error.code()
    return grpc.StatusCode.OK


@LIVE
@given(
    st.lists(st.text(max_size=40) | markup, max_size=3),
    st.lists(st.binary(max_size=24), max_size=2),
    st.sampled_from(["", "translator", "captioner", "nope"]),
    st.sampled_from(["", "1", "2", "x"]),
    options(),
    st.sampled_from([0, 1, 2, 3, 7]),  # every text format and one past them
    st.booleans(),
)
def test_random_translate_requests_get_actionable_statuses(
    server, texts, raw, model, version, decoding, text_format, stream
):
    if stream:
        request = translation_pb2.TranslateStreamRequest(
            model=model,
            version=version,
            text=texts[0] if texts else "",
            options=decoding,
            text_format=text_format,
        )
        code = _code(lambda: list(server.stub.TranslateStream(request, timeout=5)))
    else:
        request = translation_pb2.TranslateRequest(
            model=model,
            version=version,
            texts=texts,
            utf8_texts=raw,
            options=decoding,
            text_format=text_format,
        )
        code = _code(lambda: server.stub.Translate(request, timeout=5))
    assert code in ACTIONABLE, code


@LIVE
@given(st.lists(st.binary(max_size=64), max_size=3), options(), st.booleans())
def test_random_caption_requests_get_actionable_statuses(server, images, decoding, attention):
    stub = caption_pb2_grpc.CaptionServiceStub(server.channel)
    request = caption_pb2.CaptionRequest(
        images=images, options=decoding, return_attention=attention
    )
    assert _code(lambda: stub.Caption(request, timeout=5)) in ACTIONABLE


@LIVE
@given(
    st.lists(st.tuples(st.text(max_size=40) | markup, words | st.text(max_size=40)), max_size=3),
    st.sampled_from(["", "translator", "captioner", "nope"]),
    st.sampled_from(["", "es", "en", "spa_Latn", "xx"]),
    st.sampled_from(["", "en", "es", "xx"]),
)
def test_random_score_requests_get_actionable_statuses(server, pairs, model, source, target):
    request = translation_pb2.ScoreRequest(
        model=model,
        pairs=[translation_pb2.ScorePair(source=s, target=t) for s, t in pairs],
        source_language=source,
        target_language=target,
    )
    assert _code(lambda: server.stub.Score(request, timeout=5)) in ACTIONABLE


@LIVE
@given(st.sampled_from(METHODS), st.binary(max_size=128))
def test_random_bytes_on_every_method_get_actionable_statuses(server, method, data):
    if method.endswith("Stream"):
        call = server.channel.unary_stream(method)
        code = _code(lambda: list(call(data, timeout=5)))
    else:
        code = _code(lambda: server.channel.unary_unary(method)(data, timeout=5))
    assert code in ACTIONABLE, code


def test_the_server_is_still_serving_after_the_fuzzing(server):
    assert client.health(server.channel) == "SERVING"
    assert "Traceback" not in server.log_file.read_text()
    answer = client.translate(server.channel, ["Dios es amor."], timeout=30)
    assert answer.translations[0].hypotheses[0].text
