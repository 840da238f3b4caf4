"""The gRPC contract in protos/: lint-clean, and its generated code as the service will use it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from google.protobuf.message import DecodeError
from helpers import ROOT

from service.wire.v1 import decoding_pb2, translation_pb2


def test_buf_lint_is_clean():
    buf = shutil.which("buf")
    assert buf, "buf is installed with the dev extra (PyPI buf-bin)"
    result = subprocess.run([buf, "lint"], cwd=ROOT / "protos", capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_translation_service_methods():
    service = translation_pb2.DESCRIPTOR.services_by_name["TranslationService"]
    methods = service.methods_by_name
    assert set(methods) == {"Translate", "TranslateStream", "Score"}
    assert methods["Translate"].output_type.name == "TranslateResponse"
    assert not methods["Translate"].server_streaming
    assert methods["TranslateStream"].server_streaming
    assert not methods["TranslateStream"].client_streaming
    assert methods["Score"].output_type.name == "ScoreResponse"
    assert not methods["Score"].server_streaming


def test_the_generated_package_keeps_the_wire_names():
    """The generated modules live in service.wire.v1, but every name on the wire is the
    proto package's: a client of attnserve.v1 sees no change."""
    from service.wire.v1 import caption_pb2

    assert translation_pb2.DESCRIPTOR.package == "attnserve.v1"
    services = {
        *translation_pb2.DESCRIPTOR.services_by_name.values(),
        *caption_pb2.DESCRIPTOR.services_by_name.values(),
    }
    assert {service.full_name for service in services} == {
        "attnserve.v1.TranslationService",
        "attnserve.v1.CaptionService",
    }
    assert translation_pb2.TranslateRequest.DESCRIPTOR.full_name == "attnserve.v1.TranslateRequest"
    assert decoding_pb2.DecodingOptions.DESCRIPTOR.full_name == "attnserve.v1.DecodingOptions"


def test_every_decoding_option_round_trips():
    options = decoding_pb2.DecodingOptions(
        beam_size=4,
        max_length=64,
        length_penalty=0.0,
        num_hypotheses=2,
        sampling=decoding_pb2.Sampling(temperature=0.7, top_k=5, top_p=0.9, seed=0),
        return_log_probs=True,
        return_alignment=True,
    )
    request = translation_pb2.TranslateRequest(
        texts=["hola"], utf8_texts=[b"adi\xc3\xb3s"], options=options
    )
    parsed = translation_pb2.TranslateRequest.FromString(request.SerializeToString())
    assert parsed == request
    # unset and explicit zero differ where the default is not zero
    assert parsed.options.HasField("length_penalty") and parsed.options.length_penalty == 0.0
    assert parsed.options.sampling.HasField("seed")
    assert not translation_pb2.TranslateRequest().options.HasField("length_penalty")


def test_invalid_utf8_cannot_travel_as_a_string_but_can_as_bytes():
    invalid = b"\xff\xfe"
    as_string = b"\x1a" + bytes([len(invalid)]) + invalid  # field 3 (texts), length-delimited
    as_bytes = b"\x22" + bytes([len(invalid)]) + invalid  # field 4 (utf8_texts)
    with pytest.raises(DecodeError):
        translation_pb2.TranslateRequest.FromString(as_string)
    assert translation_pb2.TranslateRequest.FromString(as_bytes).utf8_texts == [invalid]


# The translation contract as released before CaptionService: later contracts must stay wire-
# and source-compatible with it (buf's FILE rules).
TRANSLATION_CONTRACT = "79e7571c7329b4edc5c4e7486abefa392cf0af45"


def test_the_contract_is_backward_compatible_for_translation_clients():
    buf = shutil.which("buf")
    commit = f"{TRANSLATION_CONTRACT}^{{commit}}"
    present = subprocess.run(["git", "cat-file", "-e", commit], cwd=ROOT, capture_output=True)
    if present.returncode != 0:
        pytest.skip("this checkout has no history (a shallow clone)")
    against = f"{ROOT / '.git'}#ref={TRANSLATION_CONTRACT},subdir=protos"
    result = subprocess.run(
        [buf, "breaking", "--against", against],
        cwd=ROOT / "protos",
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_caption_service_methods_and_attention_maps():
    from service.wire.v1 import caption_pb2

    service = caption_pb2.DESCRIPTOR.services_by_name["CaptionService"]
    methods = service.methods_by_name
    assert set(methods) == {"Caption", "CaptionStream"}
    assert not methods["Caption"].server_streaming and methods["CaptionStream"].server_streaming
    maps = decoding_pb2.AttentionMaps(grid_height=2, grid_width=3, image_height=5, image_width=7)
    maps.tokens.add(token="a", weights=[1 / 6] * 6)
    hypothesis = decoding_pb2.Hypothesis(text="a", attention=maps)
    request = caption_pb2.CaptionRequest(images=[b"\x89PNG"], return_attention=True)
    assert caption_pb2.CaptionRequest.FromString(request.SerializeToString()) == request
    parsed = decoding_pb2.Hypothesis.FromString(hypothesis.SerializeToString())
    assert parsed.attention.tokens[0].weights[5] == pytest.approx(1 / 6)
