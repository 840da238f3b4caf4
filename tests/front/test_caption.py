"""CaptionService at the edge: request messages checked into the captioner's typed request (one
error naming every problem), and the captioner's results made response and stream messages,
attention maps only when asked for."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from helpers import SHIPPED_CAPTIONER
from PIL import Image

from service.front.caption import (
    METHODS,
    CaptionServicer,
    parse_caption,
    parse_caption_stream,
    partial_message,
)
from service.front.config import ServerConfig
from service.runtime.captioning import CaptionModel
from service.runtime.decoding import Hypothesis
from service.runtime.errors import InvalidArgument
from service.runtime.repository import ModelVersion
from service.runtime.results import PartialText
from service.wire.v1 import caption_pb2, decoding_pb2

GRID = 12  # the shipped captioner's: 96 pixels over strides 2, 2, 2, 1
MAX_OUTPUT = 24
EOS = 2


@pytest.fixture(scope="module")
def model() -> CaptionModel:
    """The shipped captioner's tokenizer behind a manifest of its kind (no graphs are read)."""
    pieces = [("pad", "<blank>"), ("bos", "<s>"), ("eos", "</s>"), ("unk", "<unk>")]
    manifest = {
        "model": {"name": "captioner", "version": "4", "kind": "captioner"},
        "tokenizer": "tokenizer.model",
        "special_tokens": {n: {"id": i, "piece": p} for i, (n, p) in enumerate(pieces)},
        "limits": {"max_output_tokens": MAX_OUTPUT},
        "preprocessor": {"type": "image", "size": [96, 96], "grid": [GRID, GRID]},
    }
    return CaptionModel(ModelVersion(SHIPPED_CAPTIONER, manifest), ServerConfig())


def png(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def test_a_request_becomes_the_typed_request_with_the_model_s_defaults(model):
    message = caption_pb2.CaptionRequest(
        images=[b"first", b"second"],
        options=decoding_pb2.DecodingOptions(
            beam_size=3, target_prefix="a red", return_log_probs=True
        ),
        return_attention=True,
    )
    request = parse_caption(message, model)
    assert request.images == (b"first", b"second")  # still encoded: decoded on the pool
    assert request.fields == ("images[0]", "images[1]")
    assert request.options.beam_size == 3
    assert request.options.max_length == MAX_OUTPUT  # the default, within the model's limit
    assert request.prefix == tuple(model.tokenizer.encode("a red")) and request.prefix
    assert request.return_log_probs and request.return_attention


def test_a_stream_request_is_its_one_image():
    message = caption_pb2.CaptionStreamRequest(image=b"only")
    request = parse_caption_stream(message, _plain_model())
    assert (request.images, request.fields) == ((b"only",), ("image",))
    assert request.prefix == () and not request.return_attention


def _plain_model():
    """What parsing reads of a model: its tokenizer and its limits."""
    from types import SimpleNamespace

    from service.runtime.tokenizer import Tokenizer

    tokenizer = Tokenizer(SHIPPED_CAPTIONER / "tokenizer.model")
    return SimpleNamespace(tokenizer=tokenizer, max_output_length=20, default_max_length=10)


def test_every_problem_of_a_request_is_named_in_one_error(model):
    long_prefix = " ".join(["red"] * 40)
    message = caption_pb2.CaptionRequest(
        options=decoding_pb2.DecodingOptions(beam_size=0, target_prefix=long_prefix)
    )
    with pytest.raises(InvalidArgument) as error:
        parse_caption(message, model)
    text = str(error.value)
    assert "images: at least one image is needed" in text
    assert "beam_size" in text
    bad_prefix = caption_pb2.CaptionRequest(
        images=[b"x"], options=decoding_pb2.DecodingOptions(target_prefix=long_prefix)
    )
    with pytest.raises(InvalidArgument, match=r"target_prefix: \d+ tokens, at most max_length"):
        parse_caption(bad_prefix, model)
    too_many = caption_pb2.CaptionRequest(images=[b"x"] * 65)
    with pytest.raises(InvalidArgument, match="65 images, at most 64"):
        parse_caption(too_many, model)


def _hypothesis(tokens: list[int], finished: bool) -> Hypothesis:
    steps = len(tokens) + finished
    attention = np.random.default_rng(len(tokens)).random((steps, GRID * GRID))
    return Hypothesis(
        tokens=tokens,
        log_prob=-1.5,
        score=-0.5,
        token_log_probs=[-0.5] * steps,
        alignment=attention / attention.sum(axis=1, keepdims=True),
        finished=finished,
    )


def test_a_caption_call_answers_every_image_with_its_size_counts_and_attention(model):
    message = caption_pb2.CaptionRequest(
        images=[png(40, 30), png(17, 64, seed=1)],
        options=decoding_pb2.DecodingOptions(num_hypotheses=2, beam_size=2),
        return_attention=True,
    )
    method = METHODS["Caption"]
    prepared = asyncio.run(method.prepare(model, message))
    assert prepared.encoder_inputs["pixels"].shape == (2, 3, 96, 96)
    red = model.tokenizer.encode("a fish at the bottom right")
    results = [
        [_hypothesis(red, True), _hypothesis(red[:2], False)],
        [_hypothesis(red[:1], True), _hypothesis([], True)],
    ]
    response = method.respond(model, prepared, results)
    assert isinstance(response, caption_pb2.CaptionResponse)
    assert (response.model, response.version) == ("captioner", "4")
    sizes = [(c.image_width, c.image_height) for c in response.captions]
    assert sizes == [(40, 30), (17, 64)]
    outputs = [sum(len(h.tokens) for h in n) for n in results]
    for caption, output in zip(response.captions, outputs, strict=True):
        assert caption.token_counts.input_tokens == GRID * GRID
        assert caption.token_counts.output_tokens == output
    assert response.token_counts.output_tokens == sum(outputs)
    assert response.token_counts.input_tokens == 2 * GRID * GRID
    first = response.captions[0].hypotheses[0]
    assert first.text == "a fish at the bottom right" and first.finished
    assert not first.token_log_probs  # not asked for
    maps = first.attention
    assert (maps.grid_height, maps.grid_width) == (GRID, GRID)
    assert (maps.image_width, maps.image_height) == (40, 30)
    assert [t.token for t in maps.tokens] == [*model.tokenizer.pieces(red), "</s>"]
    np.testing.assert_allclose(maps.tokens[0].weights, results[0][0].alignment[0], rtol=1e-6)
    cut = response.captions[0].hypotheses[1].attention
    assert len(cut.tokens) == 2  # unfinished: no map for an `</s>` it never produced


def test_without_return_attention_no_maps_are_sent(model):
    message = caption_pb2.CaptionRequest(
        images=[png(8, 8)], options=decoding_pb2.DecodingOptions(return_log_probs=True)
    )
    method = METHODS["Caption"]
    prepared = asyncio.run(method.prepare(model, message))
    response = method.respond(model, prepared, [[_hypothesis([40, 41], True)]])
    (hypothesis,) = response.captions[0].hypotheses
    assert not hypothesis.HasField("attention")
    assert list(hypothesis.token_log_probs) == [-0.5, -0.5, -0.5]


def test_a_stream_sends_partials_then_the_result_of_its_image(model):
    method = METHODS["CaptionStream"]
    message = caption_pb2.CaptionStreamRequest(image=png(20, 10))
    prepared = asyncio.run(method.prepare(model, message))
    assert prepared.fields == ["image"]
    last = method.respond(model, prepared, [[_hypothesis([40, 41], True)]])
    assert last.WhichOneof("event") == "result"
    assert last.result.captions[0].image_width == 20
    tokens = model.tokenizer.encode("a fire engine to the left of a sari")
    partial = method.partial(model.partial(prepared, tokens, steps=5))
    assert partial.WhichOneof("event") == "partial"
    assert partial.partial.text == "a fire engine to the left of a sari"
    assert list(partial.partial.tokens) == model.tokenizer.pieces(tokens)
    assert partial.partial.steps == 5
    assert METHODS["Caption"].partial is None  # a unary call sends no partials


def test_a_partial_message_carries_the_text_its_pieces_and_the_steps():
    message = partial_message(PartialText("a cat", ("▁a", "▁cat"), 3))
    assert message.partial == caption_pb2.PartialCaption(
        text="a cat", tokens=["▁a", "▁cat"], steps=3
    )


def test_the_captioner_is_served_under_the_service_its_proto_declares():
    declared = caption_pb2.DESCRIPTOR.services_by_name["CaptionService"]
    assert CaptionModel.service == declared.full_name == CaptionServicer.service
    assert CaptionServicer.file is caption_pb2.DESCRIPTOR
    assert set(CaptionServicer.methods) == set(declared.methods_by_name)
