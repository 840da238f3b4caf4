"""Request checks at the edge, and the mapping of error types to gRPC status codes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
from stand_in import REQUEST, servicer

from service.front.config import ServerConfig
from service.front.decoding import decoding_options
from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.front.servicer import Method
from service.front.status import status_code
from service.front.translate import source_texts, stream_source_text
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import InvalidArgument, ModelRepositoryError, NotFound, Unavailable
from service.runtime.kinds import Prepared
from service.runtime.requests import MAX_TEXT_CHARS, MAX_TEXTS
from service.wire.v1 import decoding_pb2, translation_pb2


def test_texts_and_utf8_texts_are_read_in_order():
    request = translation_pb2.TranslateRequest(texts=["hola"], utf8_texts=["adiós".encode()])
    assert source_texts(request) == ["hola", "adiós"]


def test_every_bad_text_is_named_in_one_error():
    request = translation_pb2.TranslateRequest(
        texts=["ok", "", "  \t ", "x" * (MAX_TEXT_CHARS + 1)], utf8_texts=[b"ok", b"caf\xe9"]
    )
    with pytest.raises(InvalidArgument) as error:
        source_texts(request)
    message = str(error.value)
    assert "texts[1]: empty" in message and "texts[2]: empty" in message
    assert f"texts[3]: {MAX_TEXT_CHARS + 1} characters" in message
    assert "utf8_texts[1]: invalid UTF-8 at byte 3" in message
    assert "texts[0]" not in message and "utf8_texts[0]" not in message


def test_no_text_and_too_many_texts_are_refused():
    with pytest.raises(InvalidArgument, match="at least one text"):
        source_texts(translation_pb2.TranslateRequest())
    with pytest.raises(InvalidArgument, match=f"at most {MAX_TEXTS}"):
        source_texts(translation_pb2.TranslateRequest(texts=["a"] * (MAX_TEXTS + 1)))


def test_stream_source_is_one_of_text_or_bytes():
    assert (
        stream_source_text(translation_pb2.TranslateStreamRequest(utf8_text=b"s\xc3\xad")) == "sí"
    )
    with pytest.raises(InvalidArgument, match="utf8_text: invalid UTF-8 at byte 0"):
        stream_source_text(translation_pb2.TranslateStreamRequest(utf8_text=b"\xff"))
    with pytest.raises(InvalidArgument, match="source: text or utf8_text is needed"):
        stream_source_text(translation_pb2.TranslateStreamRequest())


def test_unset_options_take_defaults_and_explicit_zeros_are_errors():
    options = decoding_options(decoding_pb2.DecodingOptions(), 512, default_max_length=200)
    assert (options.beam_size, options.max_length, options.length_penalty) == (1, 200, 1.0)
    assert options.num_hypotheses == 1 and not options.sampling and options.seed is None
    bad = decoding_pb2.DecodingOptions(beam_size=0, max_length=513, num_hypotheses=0)
    with pytest.raises(InvalidArgument, match=r"beam_size.*max_length must be in 1\.\.512"):
        decoding_options(bad, 512, default_max_length=200)
    with pytest.raises(InvalidArgument) as zero:  # one problem: min_length was never set
        decoding_options(decoding_pb2.DecodingOptions(max_length=0), 512, default_max_length=200)
    assert str(zero.value) == "max_length must be in 1..512, got 0"


def test_sampling_options_are_carried():
    message = decoding_pb2.DecodingOptions(
        sampling=decoding_pb2.Sampling(temperature=0.8, top_k=4, top_p=0.5, seed=0),
        num_hypotheses=3,
    )
    options = decoding_options(message, 512, 200)
    assert options.sampling and (options.top_k, options.top_p, options.seed) == (4, 0.5, 0)
    assert options.num_hypotheses == 3


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidArgument("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (NotFound("x"), grpc.StatusCode.NOT_FOUND),
        (Unavailable("x"), grpc.StatusCode.UNAVAILABLE),
        (ModelRepositoryError("x"), grpc.StatusCode.FAILED_PRECONDITION),
        (ValueError("x"), grpc.StatusCode.INTERNAL),
    ],
)
def test_error_types_map_to_status_codes(error, code):
    assert status_code(error) == code


@pytest.mark.parametrize("method", ["Translate", "TranslateStream"])
def test_a_fault_of_the_server_answers_internal_and_is_counted_so(method, caplog):
    """An exception of no service error type (a bug) ends the call INTERNAL, as the docs
    say, with its traceback in the log, and the duration is counted under INTERNAL. Before,
    gRPC answered UNKNOWN and the metric counted the call OK."""
    answered = []

    async def abort(code, details):
        answered.append((code, details))
        raise grpc.RpcError()  # what gRPC's abort does: the handler ends

    async def scenario():
        pool = WorkerPool([], Metrics(), 10)
        prepared = Prepared({"src_ids": np.zeros((1, 3), np.int64)}, DecodingOptions(), ["t"])
        translator = servicer(pool, prepared, ServerConfig())

        async def prepare(model, request):
            raise KeyError("a bug")

        translator.methods[method] = Method(prepare, None)
        context = SimpleNamespace(time_remaining=lambda: None, abort=abort)
        with pytest.raises(grpc.RpcError):
            if method == "Translate":
                await translator.unary(method, REQUEST, context)
            else:
                [_ async for _ in translator.stream(method, REQUEST, context)]
        return pool.metrics

    metrics = asyncio.run(scenario())
    assert answered == [(grpc.StatusCode.INTERNAL, _INTERNAL)]
    assert "KeyError: 'a bug'" in caplog.text
    durations = {
        sample.labels["code"]: sample.value
        for family in metrics.request_duration.collect()
        for sample in family.samples
        if sample.name.endswith("_count")
    }
    assert durations == {"INTERNAL": 1.0}


_INTERNAL = "internal error (KeyError); the server's log has its trace"


def test_a_call_is_labelled_with_the_model_its_languages_chose():
    """A call naming no model but its languages is served by the model that covers them; its
    metrics were labelled with the default model's name (read from the request's empty
    `model`), so another model's calls, their latency and their failures counted as the
    default's."""
    from service.front.state import Front
    from service.runtime.languages import Languages

    def served(source, target):
        return {
            "1": SimpleNamespace(languages=Languages(source, target), key="x/1", worker_key="x/1@0")
        }

    models = {
        "attnserve.v1.TranslationService": {
            "translator": served(("es",), ("en",)),
            "m2m100": served(("es", "en", "fr"), ("es", "en", "fr")),
        }
    }
    pool = SimpleNamespace(check_admission=lambda rows=0: None)
    front = Front(ServerConfig(default_translator="translator"), models, pool, Metrics())
    front.serving = True
    chosen = []

    async def prepare(model, request):
        chosen.append(model)
        return SimpleNamespace(inputs=0, keys=None)

    translator = servicer(WorkerPool([], front.metrics, 10), None, ServerConfig())
    translator.front = front
    translator.methods["Translate"] = Method(prepare, lambda model, prepared, results: "done")
    context = SimpleNamespace(time_remaining=lambda: None)
    request = SimpleNamespace(model="", version="", source_language="fr", target_language="en")
    assert asyncio.run(translator.unary("Translate", request, context)) == "done"
    assert chosen == [models["attnserve.v1.TranslationService"]["m2m100"]["1"]]
    registry = front.metrics.registry
    counted = {
        model: registry.get_sample_value(
            "attnserve_request_duration_seconds_count",
            {"model": model, "method": "Translate", "code": "OK"},
        )
        for model in ("translator", "m2m100")
    }
    assert counted == {"translator": None, "m2m100": 1.0}
    in_flight = {"model": "m2m100", "method": "Translate"}
    assert registry.get_sample_value("attnserve_requests_in_flight", in_flight) == 0
