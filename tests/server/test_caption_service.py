"""CaptionService over real gRPC, beside TranslationService in the same server: outputs equal
to the PyTorch reference, attention maps, streaming, bad images, mixed load, a killed worker,
drain, health, reflection and metrics for both services."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import grpc
import numpy as np
import pytest
from helpers import LONG, LONG_TEXTS, handmade_png
from PIL import Image
from servers import rpc_error

from service import client
from service.front.registry import CAPTION_SERVICE, TRANSLATION_SERVICE
from service.runtime.decoding import DecodingOptions

SEARCHES = {
    "greedy": (DecodingOptions(max_length=24), {}),
    "beam4-nbest2": (
        DecodingOptions(beam_size=4, num_hypotheses=2, max_length=24),
        {"beam_size": 4, "num_hypotheses": 2},
    ),
}


def png(image: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "PNG", **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def scenes(captioner_data) -> np.ndarray:
    from models.caption_data import read_scenes

    return read_scenes(captioner_data, "test")[1][::61][:8]


@pytest.fixture(scope="module")
def reference():
    from helpers import SHIPPED_CAPTIONER

    from models.checkpoint import checkpoint_grammar, load_checkpoint
    from models.reference import reference_engine
    from service.runtime.grammar import Grammar

    model, tokenizer = load_checkpoint(SHIPPED_CAPTIONER)
    grammar = Grammar.from_manifest(checkpoint_grammar(SHIPPED_CAPTIONER, tokenizer))
    return reference_engine(model, grammar=grammar), tokenizer


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_captions_equal_the_pytorch_reference(
    server, scenes, reference, search, exported_captioner
):
    from service.runtime.captioning import caption_images

    options, fields = SEARCHES[search]
    response = client.caption(server.channel, [png(s) for s in scenes], timeout=60, **fields)
    engine, tokenizer = reference
    expected = caption_images(engine, scenes, options)
    assert (response.model, response.version) == ("captioner", exported_captioner[0].version)
    assert len(response.captions) == len(scenes)
    for caption, nbest in zip(response.captions, expected, strict=True):
        assert (caption.image_width, caption.image_height) == (96, 96)
        assert [list(h.tokens) for h in caption.hypotheses] == [
            tokenizer.pieces(h.tokens) for h in nbest
        ]
        assert [h.text for h in caption.hypotheses] == [tokenizer.decode(h.tokens) for h in nbest]
        for message, h in zip(caption.hypotheses, nbest, strict=True):
            assert message.score == pytest.approx(h.score, abs=1e-3)
            assert message.finished == h.finished
        assert not caption.hypotheses[0].HasField("attention")  # not asked for


def test_attention_maps_equal_the_reference_within_the_certificate_bound(
    server, scenes, reference, exported_captioner
):
    from service.runtime.captioning import caption_images

    bound = exported_captioner[1]["attention"]["bound"]
    side, _ = exported_captioner[0].manifest["preprocessor"]["grid"]  # the shipped 12 x 12
    wide = np.ascontiguousarray(np.repeat(scenes[:3], 2, axis=2))  # 96 x 192: sent as is
    response = client.caption(
        server.channel, [png(s) for s in wide], return_attention=True, timeout=60
    )
    engine, tokenizer = reference
    squeezed = [np.asarray(Image.fromarray(s).resize((96, 96), Image.BILINEAR)) for s in wide]
    expected = caption_images(engine, np.stack(squeezed), DecodingOptions(max_length=24))
    for caption, (h,) in zip(response.captions, expected, strict=True):
        message = caption.hypotheses[0]
        assert list(message.tokens) == tokenizer.pieces(h.tokens)
        maps = message.attention
        assert (maps.grid_height, maps.grid_width) == (side, side)
        assert (maps.image_width, maps.image_height) == (192, 96)
        assert [t.token for t in maps.tokens] == tokenizer.pieces(h.tokens) + ["</s>"]
        weights = client.attention_maps(maps)
        assert weights.shape == (len(h.tokens) + 1, side, side)
        assert weights.sum(axis=(1, 2)) == pytest.approx(1.0, abs=1e-4)
        reference_maps = h.alignment[: len(h.tokens) + 1].reshape(-1, side, side)
        assert np.abs(weights - reference_maps).max() <= bound


def test_caption_stream_grows_then_ends_with_the_unary_result(server, scenes):
    image = png(scenes[1])
    events = list(client.caption_stream(server.channel, image, beam_size=2, timeout=60))
    partials = [e.partial for e in events[:-1]]
    assert all(e.HasField("partial") for e in events[:-1]) and events[-1].HasField("result")
    steps = [p.steps for p in partials]  # one per step unless the client fell behind
    assert steps == sorted(set(steps)) and steps[0] >= 1 and partials
    unary = client.caption(server.channel, [image], beam_size=2, timeout=60)
    assert events[-1].result == unary
    assert partials[-1].text == unary.captions[0].hypotheses[0].text


def _cmyk_jpeg(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).convert("CMYK").save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def _animated(image: np.ndarray) -> bytes:
    frames = [Image.fromarray(image), Image.fromarray(255 - image)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "PNG", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


def _gif(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "GIF")
    return buffer.getvalue()


@pytest.mark.slow
def test_bad_images_are_refused_by_field_and_nothing_in_flight_is_affected(server, scenes):
    good = png(scenes[0])
    bad = {
        "not an image (PNG, JPEG or WebP expected)": b"this is text, not pixels",
        "unsupported format GIF": _gif(scenes[0]),
        "truncated or corrupt": good[: len(good) // 2],
        "bytes, at most": b"\x89PNG\r\n\x1a\n" + bytes(9 * 1024 * 1024),
        "20000 x 20000 pixels, at most": handmade_png(20000, 20000, 1, 0, bytes(2500)),
        "animated or multi-frame image (2 frames)": _animated(scenes[0]),
        "empty (no image bytes)": b"",
    }
    with ThreadPoolExecutor(2) as pool:
        translation = pool.submit(
            client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG
        )
        captions = pool.submit(client.caption, server.channel, [good] * 8, timeout=90, beam_size=4)
        for reason, data in bad.items():
            error = rpc_error(lambda d=data: client.caption(server.channel, [good, d], timeout=30))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, reason
            assert error.details().startswith("images[1]: ") and reason in error.details()
            error = rpc_error(lambda d=data: list(client.caption_stream(server.channel, d)))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details().startswith("image: ") and reason in error.details()
        two = rpc_error(lambda: client.caption(server.channel, [b"x", good, b""], timeout=30))
        assert "images[0]: not an image" in two.details() and "images[2]: empty" in two.details()
        assert len(translation.result(timeout=90).translations[0].hypotheses) == 16
        answers = captions.result(timeout=90).captions
    assert len({a.hypotheses[0].text for a in answers}) == 1 and len(answers) == 8
    # converted, as documented: CMYK, palette and 16-bit images are captioned
    palette = Image.fromarray(scenes[0]).convert("P", palette=Image.Palette.ADAPTIVE)
    buffer = io.BytesIO()
    palette.save(buffer, "PNG")
    gray16 = png(scenes[0][..., 0].astype(np.uint16) * 257)  # mode I;16
    for data in (_cmyk_jpeg(scenes[0]), buffer.getvalue(), gray16):
        response = client.caption(server.channel, [data], timeout=30)
        assert response.captions[0].hypotheses[0].text


def _out_of_range_images() -> dict[str, bytes]:
    """Images unlike any scene: tiny, CMYK, 16-bit, palette, huge, plain and noise."""
    rng = np.random.default_rng(5)
    noise = rng.integers(0, 256, (120, 80, 3), dtype=np.uint8)
    palette = io.BytesIO()
    Image.fromarray(noise).convert("P", palette=Image.Palette.ADAPTIVE).save(palette, "PNG")
    return {
        "1 x 1": png(np.full((1, 1, 3), (200, 30, 30), dtype=np.uint8)),
        "2 x 7": png(rng.integers(0, 256, (7, 2, 3), dtype=np.uint8)),
        "CMYK JPEG": _cmyk_jpeg(noise),
        "16-bit grey": png(rng.integers(0, 65536, (64, 64), dtype=np.uint16)),
        "palette": palette.getvalue(),
        "3000 x 2000": png(np.full((2000, 3000, 3), 240, dtype=np.uint8)),
        "black": png(np.zeros((96, 96, 3), dtype=np.uint8)),
        "white": png(np.full((96, 96, 3), 255, dtype=np.uint8)),
        "noise": png(noise),
    }


def test_every_caption_follows_the_caption_grammar_on_any_image(server, reference):
    """Images far from any scene get captions of the same form as the rest: whole patterns,
    never an article twice or a word twice in a row (the version's grammar holds every row)."""
    engine, tokenizer = reference
    images = _out_of_range_images()
    for options in ({}, {"beam_size": 4, "num_hypotheses": 4}):
        response = client.caption(server.channel, list(images.values()), timeout=90, **options)
        for name, answer in zip(images, response.captions, strict=True):
            for hypothesis in answer.hypotheses:
                words = hypothesis.text.split()
                assert engine.grammar.accepts(tokenizer.encode(hypothesis.text)), (name, words)
                assert all(a != b for a, b in pairwise(words)), (name, words)
                articles = [w in ("a", "an") for w in words]
                assert not any(a and b for a, b in pairwise(articles)), (name, words)


def test_mixed_translation_and_caption_load_answers_as_in_process(
    server, scenes, exported_translator, exported_captioner, test_sentences
):
    """Both services at once from 8 clients; every answer is the in-process decode."""
    from service.runtime.captioning import caption_images
    from service.runtime.onnx_engine import OnnxEngine
    from service.runtime.tokenizer import Tokenizer
    from service.runtime.translation import translate_ids

    translator = OnnxEngine(exported_translator[0])
    captioner = OnnxEngine(exported_captioner[0])
    tokenizer = Tokenizer(exported_translator[0].tokenizer_file)
    words = Tokenizer(exported_captioner[0].tokenizer_file)
    calls = []
    for i in range(16):
        options, fields = SEARCHES[sorted(SEARCHES)[i % 2]]
        if i % 2:
            texts = test_sentences[i % 6 : i % 6 + 2]
            options = DecodingOptions(**{**options.__dict__, "max_length": 160})
            calls.append(("translate", texts, fields, options))
        else:
            calls.append(("caption", scenes[i % 5 : i % 5 + 3], fields, options))

    def run(call):
        kind, inputs, fields, _ = call
        if kind == "translate":
            return client.translate(server.channel, inputs, timeout=120, **fields)
        return client.caption(server.channel, [png(s) for s in inputs], timeout=120, **fields)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(run, calls))
    for (kind, inputs, _, options), response in zip(calls, responses, strict=True):
        if kind == "translate":
            ids = tokenizer.encode_batch(list(inputs))
            expected = translate_ids(translator, ids, options, 512)
            got = [[list(h.tokens) for h in t.hypotheses] for t in response.translations]
            assert got == [[tokenizer.pieces(h.tokens) for h in n] for n in expected]
        else:
            expected = caption_images(captioner, np.stack(inputs), options)
            got = [[h.text for h in c.hypotheses] for c in response.captions]
            assert got == [[words.decode(h.tokens) for h in n] for n in expected]


def test_health_reflection_and_metrics_cover_both_services(server, scenes):
    import base64
    import json
    import shutil

    for service in ("", TRANSLATION_SERVICE, CAPTION_SERVICE):
        assert client.health(server.channel, service) == "SERVING"
    grpcurl = shutil.which("grpcurl")
    listed = subprocess.run(
        [grpcurl, "-plaintext", server.address, "list"], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert {TRANSLATION_SERVICE, CAPTION_SERVICE} <= set(listed)
    client.caption(server.channel, [png(scenes[0])], timeout=30)
    assert (
        server.value(
            "attnserve_model_info", model="captioner", kind="captioner", service=CAPTION_SERVICE
        )
        == 1
    )
    assert server.value("attnserve_model_info", model="translator", kind="transformer") == 1
    assert (
        server.value(
            "attnserve_request_duration_seconds_count",
            model="captioner",
            method="Caption",
            code="OK",
        )
        >= 1
    )
    assert (
        server.value(
            "attnserve_time_to_first_token_seconds_count", model="captioner", method="Caption"
        )
        >= 1
    )
    # a model of the other service is not found here, with a hint where it is
    error = rpc_error(lambda: client.translate(server.channel, ["Hola."], model="captioner"))
    assert error.code() == grpc.StatusCode.NOT_FOUND and CAPTION_SERVICE in error.details()
    data = {"images": [base64.b64encode(png(scenes[0])).decode()]}
    reply = subprocess.run(
        [
            grpcurl,
            "-plaintext",
            "-d",
            json.dumps(data),
            server.address,
            f"{CAPTION_SERVICE}/Caption",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(reply.stdout)["captions"][0]["hypotheses"][0]["text"]


@pytest.mark.slow
def test_a_worker_killed_while_both_models_are_busy(start_server, scenes):
    server = start_server("--workers", "2")
    before = set(server.worker_pids())
    image = png(scenes[0])
    expected = client.caption(server.channel, [image], timeout=30).captions[0]
    sampled = {"temperature": 1.0, "num_hypotheses": 8, "seed": 5}
    with ThreadPoolExecutor(6) as pool:
        translations = [
            pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG)
            for _ in range(2)
        ]
        server.wait_for(
            lambda: server.value("attnserve_batch_rows_in_use", model="translator") == 32,
            what="both workers busy",
        )
        captions = [
            pool.submit(client.caption, server.channel, [image] * 4, timeout=90, **sampled)
            for _ in range(4)
        ]
        server.wait_for(
            lambda: server.value("attnserve_batch_rows_in_use", model="captioner") > 0,
            what="captions running",
        )
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        results = [call.result(timeout=90) for call in translations + captions]
    # the killed worker's calls of both models were decoded again by the other worker: every
    # client has its whole answer
    assert [len(r.translations[0].hypotheses) for r in results[:2]] == [16, 16]
    assert [[len(c.hypotheses) for c in r.captions] for r in results[2:]] == [[8] * 4] * 4
    assert server.value("attnserve_retried_calls_total", model="translator") == 1
    again = client.caption(server.channel, [image], timeout=30).captions[0]
    assert again == expected
    server.wait_for(lambda: server.value("attnserve_workers_ready") == 2, 60, "restart")
    assert victim not in set(server.worker_pids())
    assert client.health(server.channel, CAPTION_SERVICE) == "SERVING"


@pytest.mark.slow
def test_drain_lets_calls_of_both_services_finish(start_server, scenes):
    server = start_server("--workers", "1", "--drain-seconds", "60")
    image = png(scenes[0])
    with ThreadPoolExecutor(2) as pool:
        translation = pool.submit(
            client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG
        )
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") > 0, what="running")
        caption = pool.submit(client.caption, server.channel, [image] * 16, timeout=90, beam_size=4)
        server.wait_for(
            lambda: server.value("attnserve_requests_in_flight", model="captioner") > 0,
            what="caption in flight",
        )
        server.process.send_signal(signal.SIGTERM)
        server.wait_for(
            lambda: client.health(server.channel, CAPTION_SERVICE, timeout=5) == "NOT_SERVING",
            what="drain",
        )
        error = rpc_error(lambda: client.caption(server.channel, [image], timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "draining" in error.details()
        assert len(caption.result(timeout=90).captions) == 16
        assert len(translation.result(timeout=90).translations) == 1
    assert server.process.wait(30) == 0


def test_command_line_captions_over_grpc(server):
    from helpers import ROOT

    scene = ROOT / "examples" / "scene.png"
    command = [sys.executable, "-m", "attnserve.cli", "caption", "--beam", "4"]
    done = subprocess.run(
        [*command, "--server", server.address, str(scene)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    unary = client.caption(server.channel, [scene.read_bytes()], beam_size=4, timeout=30)
    assert done.stdout.strip() == unary.captions[0].hypotheses[0].text
    assert done.stdout.strip() == "a triangular ruler to the left of a musical note"
