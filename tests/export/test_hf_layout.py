"""Hugging Face models' graphs built op by op (export.hf.layout through export.builder): the
built step's logits, cache and alignment are the family's own step module's (M2M100's
unpositioned padding id included), and what the builder cannot write is refused. Greedy
decodes through them: tests/export/test_hf_graphs.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import OrtModule, tiny_hf_families, tiny_m2m100, tiny_marian, tiny_mbart

from export.hf import graphs
from export.hf.layout import activation, hf_layout

pytest.importorskip("transformers")  # the hf extra, installed by ./dev.sh
FAMILIES = tiny_hf_families()


def _built(model, directory):
    paths = graphs.build_graphs(model, directory)
    spec = graphs.interface(model.config)
    encoder = OrtModule(paths["encoder"], spec.encoder.input_names)
    return encoder, OrtModule(paths["decoder"], spec.decoder.input_names)


@pytest.mark.parametrize("family", ["marian-swish", "m2m100", "mbart"])
def test_the_built_step_is_the_traced_step_with_a_padding_token_fed(family, tmp_path):
    """Teacher forcing through the built step and the family's step module (traced
    export's) with the padding id fed mid-decode (M2M100 gives it no position): the same
    logits, present keys and values, and alignment, a step at a time."""
    build, pad, eos, _ = FAMILIES[family]
    model = build()
    src_ids = torch.tensor([[5, 17, 33, 8, 61, eos], [44, 9, eos, pad, pad, pad]])
    src_mask = (src_ids != pad).long()
    start = model.config.decoder_start_token_id
    decoder_ids = torch.tensor([[start, 7, 12, pad, 30, 9], [start, 50, pad, 3, 9, 12]])
    reference_encoder, reference_step = graphs.modules(model)
    encoder, step = _built(model, tmp_path)
    with torch.no_grad():
        memory_mask, *cross = reference_encoder(src_ids, src_mask)
        built_mask, *built_cross = encoder(src_ids, src_mask)
        for ours, theirs in zip(built_cross, cross, strict=True):
            real = src_mask.bool()[:, None, :, None].expand_as(theirs)
            assert torch.allclose(ours[real], theirs[real], atol=1e-4, rtol=1e-4)
        past = [torch.zeros(2, 4, 0, 8) for _ in range(4)]
        built_past = list(past)
        for t in range(decoder_ids.shape[1]):
            feed = (decoder_ids[:, t : t + 1], torch.full((2, 1), t), torch.ones(2, t + 1).long())
            logits, *state = reference_step(*feed, *past, *cross, memory_mask)
            built_logits, *built_state = step(*feed, *built_past, *built_cross, built_mask)
            assert torch.allclose(built_logits, logits, atol=1e-4, rtol=1e-4), t
            for ours, theirs in zip(built_state, state, strict=True):
                assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), t
            past, built_past = state[:-1], built_state[:-1]


def test_what_the_builder_cannot_write_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match=r"activation 'gelu_new'.*with its graphs traced"):
        activation(SimpleNamespace(activation_function="gelu_new"))
    assert activation(SimpleNamespace(activation_function="silu")) == "swish"
    model = tiny_marian(decoder_attention_heads=2)
    with pytest.raises(ValueError, match="4 encoder heads and 2 decoder heads"):
        hf_layout(model, "marian")


def test_banned_tokens_and_the_logits_bias_make_one_bias():
    model = tiny_mbart()
    layout = hf_layout(model, "mbart", banned=[3, 5])
    expected = model.final_logits_bias.reshape(-1).clone()
    expected[[3, 5]] = float("-inf")
    assert torch.equal(layout.output_bias, expected)
    assert hf_layout(tiny_m2m100(), "m2m_100").output_bias is None  # none to add
    marian = hf_layout(tiny_marian(), "marian")
    assert not marian.pre_norm and marian.decoder.final_norm is None
    assert marian.alignment_layer == 1 and marian.capacity == 64
