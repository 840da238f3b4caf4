"""The Transformer itself: causality, masks, config and checkpoint round trips."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_transformer

from models.checkpoint import (
    CONFIG,
    WEIGHTS,
    UnreadableCheckpoint,
    load_checkpoint,
    save_checkpoint,
)
from models.config import PRESETS, TransformerConfig
from models.transformer import sinusoids


def _batch(vocab: int, batch: int = 3, src: int = 7, tgt: int = 6, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    src_ids = torch.randint(4, vocab, (batch, src), generator=generator)
    tgt_ids = torch.randint(4, vocab, (batch, tgt), generator=generator)
    return src_ids, torch.ones_like(src_ids), tgt_ids, torch.ones_like(tgt_ids)


@pytest.mark.parametrize("changed", [1, 3, 5])
def test_changing_a_future_token_changes_no_earlier_output(changed):
    model = tiny_transformer().double()
    src, src_mask, tgt, tgt_mask = _batch(model.config.vocab_size)
    with torch.no_grad():
        before = model(src, src_mask, tgt, tgt_mask)
        altered = tgt.clone()
        altered[:, changed] = (altered[:, changed] + 1) % model.config.vocab_size
        after = model(src, src_mask, altered, tgt_mask)
    torch.testing.assert_close(after[:, :changed], before[:, :changed], rtol=0, atol=1e-12)
    assert (after[:, changed:] - before[:, changed:]).abs().max() > 1e-3


def test_padding_in_source_and_target_changes_nothing_real():
    # float64: what is left is a leak through the masks, not float32 summation order
    model = tiny_transformer().double()
    src, src_mask, tgt, tgt_mask = _batch(model.config.vocab_size, batch=1)
    padded_src = torch.cat([src, torch.zeros(1, 4, dtype=torch.long)], 1)
    padded_src_mask = torch.cat([src_mask, torch.zeros(1, 4, dtype=torch.long)], 1)
    padded_tgt = torch.cat([tgt, torch.zeros(1, 3, dtype=torch.long)], 1)
    padded_tgt_mask = torch.cat([tgt_mask, torch.zeros(1, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        plain = model(src, src_mask, tgt, tgt_mask)
        padded = model(padded_src, padded_src_mask, padded_tgt, padded_tgt_mask)
    torch.testing.assert_close(padded[:, : tgt.shape[1]], plain, rtol=0, atol=1e-9)


def test_decode_step_with_several_new_tokens_equals_teacher_forcing():
    model = tiny_transformer().double()
    src, src_mask, tgt, tgt_mask = _batch(model.config.vocab_size)
    with torch.no_grad():
        full = model(src, src_mask, tgt, tgt_mask)  # (B, T, V)
        _, cross = model.encode(src, src_mask)
        positions = torch.arange(4).expand(3, 4)
        _, past, _ = model.decode_step(
            tgt[:, :4], positions, tgt_mask[:, :4], model.empty_cache(3), cross, src_mask
        )
        logits, present, attention = model.decode_step(
            tgt[:, 4:6], positions[:, :2] + 4, tgt_mask, past, cross, src_mask
        )
    torch.testing.assert_close(logits, full[:, 5], rtol=0, atol=1e-5)
    assert present[0][0].shape == (3, model.config.n_heads, 6, model.config.head_dim)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, dtype=torch.float64))


def test_sinusoids_concatenate_sin_and_cos_halves_from_the_offset():
    encoding = sinusoids(torch.tensor([0, 5]), dim=8, offset=1)  # (2, 8)
    torch.testing.assert_close(
        encoding[0, :4],
        torch.sin(torch.tensor([1.0, 0.0464159, 0.00215443, 0.0001])),
        atol=1e-5,
        rtol=0,
    )
    torch.testing.assert_close(encoding[1, 4], torch.cos(torch.tensor(6.0)))


def test_config_round_trip_and_validation(tmp_path):
    config = PRESETS["base"]
    config.save(tmp_path / "config.json")
    assert TransformerConfig.load(tmp_path / "config.json") == config
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        TransformerConfig(d_model=250, n_heads=4)
    with pytest.raises(ValueError, match=r"unknown config fields: \['depth'\]"):
        TransformerConfig.from_dict({**config.to_dict(), "depth": 3})


def test_checkpoint_round_trip_is_fp16_exact_and_strict(tmp_path, shipped_translator):
    model = tiny_transformer(vocab_size=shipped_translator[1].vocab_size)
    save_checkpoint(model, shipped_translator[1].model_file, tmp_path)
    loaded, tokenizer = load_checkpoint(tmp_path)
    assert tokenizer.vocab_size == model.config.vocab_size
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor.half().float(), rtol=0, atol=0)
    assert loaded.output.weight.data_ptr() == loaded.source_embedding.weight.data_ptr()

    config = json.loads((tmp_path / CONFIG).read_text())
    (tmp_path / CONFIG).write_text(json.dumps({**config, "d_ff": config["d_ff"] * 2}))
    with pytest.raises(UnreadableCheckpoint, match=r"size mismatch"):
        load_checkpoint(tmp_path)
    (tmp_path / CONFIG).write_text(json.dumps(config))
    (tmp_path / WEIGHTS).write_bytes(b"")
    with pytest.raises(UnreadableCheckpoint, match=str(tmp_path)):  # safetensors' own error
        load_checkpoint(tmp_path)


def test_shipped_checkpoint_is_small_and_matches_its_tokenizer(shipped_translator):
    from helpers import SHIPPED_TRANSLATOR

    model, tokenizer = shipped_translator
    assert (SHIPPED_TRANSLATOR / WEIGHTS).stat().st_size <= 25 * 2**20
    assert model.config.vocab_size == tokenizer.vocab_size
    assert not model.training
