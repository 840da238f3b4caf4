"""The captioning kind: pixels as the encoder graph takes them, images decoded and checked at
the edge, captions with their token counts and attention maps, and the in-process pipeline
batch by batch."""

from __future__ import annotations

import asyncio
import io
import shutil
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
from helpers import SHIPPED_CAPTIONER
from PIL import Image

from export.repository import special_tokens
from service.front.config import ServerConfig
from service.runtime.captioning import (
    MAX_IMAGES,
    CaptionModel,
    caption_batches,
    caption_images,
    check_images,
    pixels,
    resize,
)
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.errors import InvalidArgument
from service.runtime.kinds import Prepared, served_model
from service.runtime.repository import TOKENIZER, verify, write_manifest
from service.runtime.requests import CaptionRequest
from service.runtime.results import TokenCounts

SIDE, GRID = 32, (2, 3)


def png(width: int, height: int, seed: int = 0, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    channels = len(mode)
    array = rng.integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(array.squeeze(-1) if channels == 1 else array, mode).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    """A captioner version's manifest (no graphs: the kind reads only its manifest, its
    tokenizer and its golden images)."""
    directory = tmp_path_factory.mktemp("captioner") / "cap" / "1"
    directory.mkdir(parents=True)
    shutil.copy(SHIPPED_CAPTIONER / "tokenizer.model", directory / TOKENIZER)
    (directory / "golden.png").write_bytes(png(50, 20, seed=3))
    manifest = {
        "model": {"name": "cap", "version": "1", "kind": "captioner", "config": {}},
        "graphs": {},
        "special_tokens": special_tokens(),
        "limits": {"max_output_tokens": 24},
        "preprocessor": {"size": [SIDE, SIDE], "grid": list(GRID)},
        "tokenizer": TOKENIZER,
    }
    write_manifest(directory, manifest)
    return verify(directory)


@pytest.fixture(scope="module")
def model(version) -> CaptionModel:
    config = replace(ServerConfig(), max_output_length=20, default_max_length=300)
    made = served_model(version, config)
    assert isinstance(made, CaptionModel)
    return made


def test_pixels_are_channels_first_in_zero_to_one():
    images = np.zeros((2, 4, 5, 3), np.uint8)
    images[0, :, :, 1] = 255
    images[1, 0, 0] = (51, 102, 0)
    out = pixels(images)
    assert out.shape == (2, 3, 4, 5) and out.dtype == np.float32 and out.flags.c_contiguous
    assert out[0, 1].min() == 1.0 and out[0, 0].max() == 0.0
    np.testing.assert_allclose(out[1, :, 0, 0], [0.2, 0.4, 0.0])
    with pytest.raises(ValueError, match=r"\(B, H, W, 3\) RGB"):
        pixels(np.zeros((4, 5, 3), np.uint8))
    with pytest.raises(ValueError, match="RGB"):
        pixels(np.zeros((1, 4, 5, 4), np.uint8))


def test_the_count_of_images_is_checked():
    problems: list[str] = []
    check_images([], problems)
    check_images([b"x"] * (MAX_IMAGES + 1), problems)
    check_images([b"x"] * MAX_IMAGES, problems)
    assert problems == [
        "images: at least one image is needed",
        f"images: {MAX_IMAGES + 1} images, at most {MAX_IMAGES} in one request",
    ]


def test_resize_squeezes_any_image_to_an_rgb_square():
    gray = Image.open(io.BytesIO(png(40, 10, mode="L")))
    square = resize(gray, 16)
    assert square.shape == (16, 16, 3) and square.dtype == np.uint8
    assert (square[..., 0] == square[..., 1]).all()  # gray stays gray in RGB
    rgba = Image.open(io.BytesIO(png(9, 30, mode="RGBA")))
    assert resize(rgba, 8).shape == (8, 8, 3)


def test_the_served_model_reads_its_limits_and_grid(model):
    assert model.kind == "captioner" and model.key == "cap/1"
    assert (model.side, model.grid) == (SIDE, GRID)
    assert model.max_output_length == 20  # the server's limit, under the model's 24
    assert model.default_max_length == 20  # at most the limit


def test_images_are_prepared_with_their_sizes_keys_and_prefix(model):
    request = CaptionRequest(
        (png(50, 20, seed=1), png(30, 60, seed=2), png(50, 20, seed=1)),
        ("images[0]", "images[1]", "images[2]"),
        DecodingOptions(max_length=10),
        prefix=(7, 8),
        return_attention=True,
    )
    prepared = asyncio.run(model.prepare(request))
    batch = prepared.encoder_inputs["pixels"]
    assert batch.shape == (3, 3, SIDE, SIDE) and batch.min() >= 0 and batch.max() <= 1
    assert prepared.sources == [(50, 20), (30, 60), (50, 20)]
    assert prepared.keys[0] == prepared.keys[2] != prepared.keys[1]  # by the pixels fed
    assert prepared.controls.prefixes == ((7, 8),) * 3
    assert prepared.keep_alignment and not prepared.keep_log_probs
    bad = CaptionRequest((png(8, 8), b"not an image"), ("image", "images[1]"), DecodingOptions())
    with pytest.raises(InvalidArgument, match=r"images\[1\]"):
        asyncio.run(model.prepare(bad))


def test_a_request_holds_one_full_size_image_at_a_time(model):
    side = 1024  # (1024, 1024, 3) uint8: 3 MiB decoded, a few kB encoded
    out = io.BytesIO()
    Image.new("RGB", (side, side), (10, 200, 30)).save(out, "PNG")
    count, full = 8, side * side * 3
    request = CaptionRequest((out.getvalue(),) * count, ("image",) * count, DecodingOptions())
    tracemalloc.start()
    try:
        prepared = asyncio.run(model.prepare(request))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert prepared.encoder_inputs["pixels"].shape == (count, 3, SIDE, SIDE)
    assert prepared.sources == [(side, side)] * count
    assert peak < 4 * full, f"{peak / full:.1f} full-size images held at once"  # one, copied


def test_a_response_counts_tokens_and_gives_attention_maps_when_asked(model):
    eos = model.special_tokens.eos
    cells = GRID[0] * GRID[1]
    weights = np.random.default_rng(0).random((4, cells + 2))  # padded memory positions too
    finished = Hypothesis([10, 11, 12], -3.0, -1.0, [-1.0] * 4, weights, finished=True)
    cut = Hypothesis([13], -0.5, -0.5, [-0.5], weights[:1], finished=False)
    prepared = Prepared({}, DecodingOptions(), ["image", "images[1]"], keep_alignment=True)
    prepared.sources = [(640, 480), (10, 20)]
    result = model.response(prepared, [[finished], [cut]])
    assert (result.model, result.version) == ("cap", "1")
    first, second = result.captions
    assert (first.image_width, first.image_height) == (640, 480)
    assert first.token_counts == TokenCounts(cells, 3)
    assert result.token_counts == TokenCounts(2 * cells, 4)
    maps = first.hypotheses[0].attention
    assert (maps.grid_height, maps.grid_width, maps.image_width) == (*GRID, 640)
    assert [t.token for t in maps.tokens] == model.tokenizer.pieces([10, 11, 12, eos])
    np.testing.assert_allclose(maps.tokens[1].weights, weights[1, :cells])
    assert len(second.hypotheses[0].attention.tokens) == 1  # no `</s>` row: not finished
    assert first.hypotheses[0].token_log_probs == ()  # not asked for
    prepared.keep_alignment = False
    assert model.response(prepared, [[finished], [cut]]).captions[0].hypotheses[0].attention is None


def test_a_partial_caption_and_a_golden_entrys_inputs(model, version):
    partial = model.partial(Prepared({}, DecodingOptions(), ["image"]), [10, 11], 5)
    assert partial.steps == 5 and partial.tokens == tuple(model.tokenizer.pieces([10, 11]))
    assert partial.text == model.tokenizer.decode([10, 11])
    inputs = CaptionModel.golden_inputs(version, {"image": "golden.png"})
    assert inputs["pixels"].shape == (1, 3, SIDE, SIDE)
    source = np.asarray(Image.open(version.directory / "golden.png").convert("RGB"))
    np.testing.assert_allclose(inputs["pixels"][0].mean(), source.mean() / 255, atol=0.02)


def test_caption_batches_decode_as_one_batch_of_each_chunk():
    import torch

    from models.captioner import Captioner
    from models.config import CAPTIONER_PRESETS
    from models.reference import reference_engine

    torch.manual_seed(3)
    engine = reference_engine(Captioner(CAPTIONER_PRESETS["tiny"]).eval())
    images = np.random.default_rng(5).integers(0, 256, size=(5, 96, 96, 3), dtype=np.uint8)
    options = DecodingOptions(beam_size=2, num_hypotheses=2, max_length=6)
    batched = caption_batches(engine, images, options, batch_size=2)
    assert len(batched) == 5 and all(len(n) == 2 for n in batched)
    chunks = [caption_images(engine, images[i : i + 2], options) for i in (0, 2, 4)]
    expected = [n for chunk in chunks for n in chunk]
    assert [[h.tokens for h in n] for n in batched] == [[h.tokens for h in n] for n in expected]
