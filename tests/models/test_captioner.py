"""The captioner model: shapes, attention, the explicit state, decoding through the shared
strategies, the shipped checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import SHIPPED_CAPTIONER

from models.captioner import Captioner, attention_penalty
from models.checkpoint import checkpoint_kind, load_checkpoint, save_checkpoint
from models.config import CAPTIONER_PRESETS, CaptionerConfig
from models.reference import reference_engine
from service.runtime.captioning import caption_images
from service.runtime.decoding import DecodingOptions
from service.runtime.inference import CachedInference
from service.runtime.tokenizer import BOS_ID, EOS_ID


def tiny_captioner(seed: int = 0) -> Captioner:
    torch.manual_seed(seed)
    model = Captioner(CAPTIONER_PRESETS["tiny"]).eval()
    with torch.no_grad():  # outputs far from uniform
        for name, parameter in model.named_parameters():
            if "output" in name or "attention" in name:
                parameter.mul_(4.0)
    return model


def _images(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(batch, 96, 96, 3), dtype=np.uint8)


def test_config_checks_and_round_trips(tmp_path):
    with pytest.raises(ValueError, match="not a multiple of 16"):
        CaptionerConfig(image_size=100)
    config = CAPTIONER_PRESETS["tiny"]
    config.save(tmp_path / "config.json")
    assert CaptionerConfig.load(tmp_path / "config.json") == config
    assert (config.grid, config.stride) == (6, 16)
    finer = CaptionerConfig(strides=(2, 2, 2, 1))
    assert (finer.grid, finer.stride) == (12, 8)
    with pytest.raises(ValueError, match="strides"):
        CaptionerConfig(strides=(2, 2, 3, 1))
    with pytest.raises(ValueError, match="unknown config fields"):
        CaptionerConfig.from_dict({**config.to_dict(), "layers": 3})


def test_shapes_and_attention_sums_to_one():
    model, config = tiny_captioner(), CAPTIONER_PRESETS["tiny"]
    pixels = torch.rand(3, 3, 96, 96)
    grid, projection, mask, (h, c) = model.encode(pixels)
    assert grid.shape == (3, 36, config.feature_dim)
    assert projection.shape == (3, 36, config.attention_dim)
    assert mask.dtype == torch.long and bool(mask.all())
    assert h.shape == c.shape == (3, config.hidden_dim)
    logits, (h2, c2), weights = model.decode_step(
        torch.tensor([[BOS_ID]] * 3), (h, c), grid, projection, mask
    )
    assert logits.shape == (3, config.vocab_size) and h2.shape == h.shape
    assert weights.shape == (3, 36)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))
    assert not torch.equal(h2, h) and not torch.equal(c2, c)


def test_masked_locations_get_no_attention():
    model = tiny_captioner()
    with torch.no_grad():
        grid, projection, mask, state = model.encode(torch.rand(2, 3, 96, 96))
        mask[1, 30:] = 0
        tokens = torch.tensor([BOS_ID, BOS_ID])
        _, _, weights = model.decode_step(tokens, state, grid, projection, mask)
    assert float(weights[1, 30:].sum()) == 0.0 and float(weights[0, 30:].sum()) > 0


def test_step_by_step_equals_teacher_forcing():
    model = tiny_captioner()
    pixels, tokens = torch.rand(2, 3, 96, 96), torch.randint(4, 600, (2, 7))
    with torch.no_grad():
        forced_logits, forced_attention = model(pixels, tokens)
        grid, projection, mask, state = model.encode(pixels)
        for t in range(tokens.shape[1]):
            logits, state, weights = model.decode_step(
                tokens[:, t : t + 1], state, grid, projection, mask
            )
            torch.testing.assert_close(logits, forced_logits[:, t], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(weights, forced_attention[:, t], rtol=1e-5, atol=1e-6)


def test_the_doubly_stochastic_penalty():
    uniform = torch.full((2, 36, 36), 1 / 36)  # 36 steps, each spread evenly: sums to 1
    assert float(attention_penalty(uniform, torch.ones(2, 36))) == pytest.approx(0, abs=1e-9)
    peaked = torch.zeros(1, 4, 36)
    peaked[:, :, 0] = 1.0  # four steps on one location: ((1 - 4)^2 + 35 * 1) / 36
    assert float(attention_penalty(peaked, torch.ones(1, 4))) == pytest.approx((9 + 35) / 36)
    masked = torch.tensor([[1.0, 1, 0, 0]])  # two real steps: ((1 - 2)^2 + 35) / 36
    assert float(attention_penalty(peaked, masked)) == pytest.approx(1.0)


def test_beam_search_of_one_beam_is_greedy_search():
    from service.runtime.captioning import pixels
    from service.runtime.decoding import BeamSearch, GreedySearch, run

    engine = reference_engine(tiny_captioner())
    images, options = _images(5), DecodingOptions(beam_size=1, max_length=12)

    def decode(search_type):
        inference = CachedInference(engine, engine.encode(pixels(images)), len(images))
        return run(search_type(len(images), options, BOS_ID, EOS_ID), inference)

    greedy, beam = decode(GreedySearch), decode(BeamSearch)
    assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]
    assert [g[0].score for g in greedy] == pytest.approx([b[0].score for b in beam])
    assert all(len(g[0].tokens) > 0 for g in greedy)


def test_nbest_is_ranked_with_an_attention_map_per_step():
    engine = reference_engine(tiny_captioner())
    beams = caption_images(
        engine, _images(4), DecodingOptions(beam_size=4, max_length=12, num_hypotheses=3)
    )
    for hypotheses in beams:
        assert len(hypotheses) == 3
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
        for h in hypotheses:
            assert h.alignment.shape == (len(h.token_log_probs), 36)
            np.testing.assert_allclose(h.alignment.sum(-1), 1.0, rtol=1e-5)


def test_a_row_decodes_the_same_alone_and_in_a_batch():
    engine = reference_engine(tiny_captioner())
    images = _images(6, seed=1)
    options = DecodingOptions(beam_size=3, max_length=10, num_hypotheses=2)
    batched = caption_images(engine, images, options)
    for i in (0, 4):
        alone = caption_images(engine, images[i : i + 1], options)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]


def test_sampling_is_reproducible_with_a_seed():
    engine = reference_engine(tiny_captioner())
    options = DecodingOptions(temperature=1.0, seed=7, max_length=8, num_hypotheses=3)
    first = caption_images(engine, _images(2), options)
    again = caption_images(engine, _images(2), options)
    assert [[h.tokens for h in n] for n in first] == [[h.tokens for h in n] for n in again]


def test_the_state_is_reordered_with_its_rows():
    engine = reference_engine(tiny_captioner())
    from service.runtime.captioning import pixels

    encoder = engine.encode(pixels(_images(3)))
    inference = CachedInference(engine, encoder, 3)
    inference.step(np.full((3, 1), BOS_ID))
    inference.reorder(np.array([2, 2, 0]))
    logits, _ = inference.step(np.array([[5], [5], [5]]))
    alone = CachedInference(engine, engine.encode(pixels(_images(3)[2:3])), 1)
    alone.step(np.full((1, 1), BOS_ID))
    expected, _ = alone.step(np.array([[5]]))
    np.testing.assert_allclose(logits[0], expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits[1], expected[0], rtol=1e-5, atol=1e-5)


def test_checkpoint_round_trip_keeps_the_kind(tmp_path):
    from models.tokenizer import train_tokenizer

    model = tiny_captioner()
    words = [f"w{i}" for i in range(CAPTIONER_PRESETS["tiny"].vocab_size - 4)]
    tokenizer = train_tokenizer(words, tmp_path / "tok.model", len(words) + 4, "word")
    save_checkpoint(model, tokenizer.model_file, tmp_path / "ckpt")
    assert checkpoint_kind(tmp_path / "ckpt") == "captioner"
    loaded, _ = load_checkpoint(tmp_path / "ckpt")
    assert isinstance(loaded, Captioner)
    pixels = torch.rand(1, 3, 96, 96)
    with torch.no_grad():
        expected = model.half().float().encode(pixels)[0]  # stored in fp16
        torch.testing.assert_close(loaded.encode(pixels)[0], expected)


def test_the_shipped_captioner_is_small_and_loads():
    weights = SHIPPED_CAPTIONER / "model.safetensors"
    assert weights.stat().st_size <= 10 * 2**20
    model, tokenizer = load_checkpoint(SHIPPED_CAPTIONER)
    assert isinstance(model, Captioner)
    assert tokenizer.vocab_size == model.config.vocab_size
    assert tokenizer.decode(tokenizer.encode("a red apple at the top")) == "a red apple at the top"
