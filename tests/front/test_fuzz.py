"""Property-based fuzzing (hypothesis) of what the front does with a client's bytes, in
process: request parsing and validation, the tokenizer, image decoding. Each answer is a
result or an InvalidArgument, never another exception. ATTNSERVE_FUZZ_EXAMPLES sets the
examples per property (CI runs a short pass; docs/reliability.md gives the long one)."""

from __future__ import annotations

import contextlib
import io
import math
import os
import unicodedata

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from models.shipped import SHIPPED_TRANSLATOR
from service.front.translate import translate_request, translate_stream_request
from service.runtime.errors import InvalidArgument
from service.runtime.images import ImageLimits, decode_image
from service.runtime.requests import MAX_TEXT_CHARS
from service.runtime.tokenizer import visible
from service.wire.v1 import caption_pb2, decoding_pb2, translation_pb2

EXAMPLES = int(os.environ.get("ATTNSERVE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT, DEFAULT = 256, 128  # the model's max length and the server's default, as served

uint32 = st.integers(0, 2**32 - 1)
floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
texts = st.text(max_size=64) | st.text(max_size=MAX_TEXT_CHARS + 8, alphabet="ab ")


@st.composite
def options(draw) -> decoding_pb2.DecodingOptions:
    message = decoding_pb2.DecodingOptions()
    for name, values in (
        ("beam_size", uint32),
        ("max_length", uint32),
        ("length_penalty", floats),
        ("num_hypotheses", uint32),
    ):
        if draw(st.booleans()):
            setattr(message, name, draw(values))
    if draw(st.booleans()):
        message.sampling.temperature = draw(floats)
        message.sampling.top_k = draw(uint32)
        if draw(st.booleans()):
            message.sampling.top_p = draw(floats)
        if draw(st.booleans()):
            message.sampling.seed = draw(st.integers(0, 2**64 - 1))
    return message


def _valid_options(result) -> None:
    assert result.beam_size >= 1 and 1 <= result.max_length <= LIMIT
    assert 0.0 <= result.length_penalty <= 10.0 and not math.isnan(result.temperature)


@FUZZ
@given(st.lists(texts, max_size=4), st.lists(st.binary(max_size=64), max_size=3), options())
def test_a_translate_request_is_served_or_refused_with_invalid_argument(strings, raw, opts):
    request = translation_pb2.TranslateRequest(texts=strings, utf8_texts=raw, options=opts)
    try:
        sources, decoding = translate_request(request, LIMIT, DEFAULT)
    except InvalidArgument as error:
        assert str(error)  # a message naming what was wrong
        return
    assert len(sources) == len(strings) + len(raw) >= 1
    assert all(s.strip() and len(s) <= MAX_TEXT_CHARS for s in sources)
    _valid_options(decoding)


@FUZZ
@given(st.binary(max_size=256))
def test_bytes_off_the_wire_parse_or_fail_as_decode_errors(data):
    for message_class, check in (
        (translation_pb2.TranslateRequest, translate_request),
        (translation_pb2.TranslateStreamRequest, translate_stream_request),
    ):
        try:
            request = message_class.FromString(data)
        except DecodeError:
            continue  # the server answers INVALID_ARGUMENT (service.front.servicer._parser)
        with contextlib.suppress(InvalidArgument):
            check(request, LIMIT, DEFAULT)
    with contextlib.suppress(DecodeError):
        caption_pb2.CaptionRequest.FromString(data)


@pytest.fixture(scope="module")
def tokenizer():

    from service.runtime.tokenizer import Tokenizer

    return Tokenizer(SHIPPED_TRANSLATOR / "tokenizer.model")


@FUZZ
@given(st.text(max_size=200))
def test_the_tokenizer_takes_any_text_and_gives_back_its_words(tokenizer, text):
    ids = tokenizer.encode(text)
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    # byte fallback: nothing is lost but runs of white space, which SentencePiece folds, and
    # what a tokenizer does not read (tokenizer.INVISIBLE)
    folded = " ".join(unicodedata.normalize("NFC", visible(text)).split())
    assert " ".join(tokenizer.decode(ids).split()) == folded


def _encoded(fmt: str, size: tuple[int, int], mode: str) -> bytes:
    buffer = io.BytesIO()
    image = Image.new(mode, size, 0 if mode in ("L", "P") else (200, 30, 30))
    image.save(buffer, fmt)
    return buffer.getvalue()


SEEDS = [
    _encoded(fmt, size, mode)
    for fmt, mode in (("PNG", "RGB"), ("PNG", "P"), ("JPEG", "RGB"), ("WEBP", "RGB"))
    for size in ((1, 1), (17, 9))
]
LIMITS = ImageLimits(max_bytes=1 << 16, max_pixels=1 << 16)


@st.composite
def mutated_images(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(("flip", "cut", "insert")))
        if action == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif action == "cut":
            del data[at : at + draw(st.integers(1, 64))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        if not data:
            break
    return bytes(data)


# found by this fuzzing: a WebP header of 15,871 x 16,258 pixels made Pillow's WebP plugin
# raise DecompressionBombError, which the front did not turn into INVALID_ARGUMENT
HUGE_WEBP = (
    b"RIFF:\x00\x00\x00WEBPVP8 .\x00\x00\x00\xb0\x01\x00\x9d\x01*\xff\xbd\x82\xff\xdd"
    b"\x82\xff\xdd\x82\xff[\x00\x00"
)


@FUZZ
@given(mutated_images() | st.binary(max_size=512))
@example(HUGE_WEBP)
def test_image_bytes_decode_or_are_refused_with_invalid_argument(data):
    try:
        image = decode_image(data, "images[0]", LIMITS)
    except InvalidArgument as error:
        assert str(error).startswith("images[0]: ")
        return
    assert image.pixels.dtype == np.uint8 and image.pixels.shape == (image.height, image.width, 3)
    assert image.width * image.height <= LIMITS.max_pixels


def test_a_webp_header_beyond_pillows_own_limit_is_refused():
    with pytest.raises(InvalidArgument, match="too many pixels"):
        decode_image(HUGE_WEBP, "images[0]", ImageLimits())
