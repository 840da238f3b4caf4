"""A Transformer's layout (export.layout), which export.builder writes graphs from: our own
translator's read from its modules, and what a layout refuses."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import tiny_transformer

from export.builder import build_decoder, build_encoder
from export.layout import TransformerLayout, translator_layout


def _run(graph, feed: dict) -> dict:
    session = ort.InferenceSession(graph.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed), strict=True))


def test_a_translator_with_its_own_target_embedding_is_written_with_it():
    """The decoder embeds with the target embedding, the encoder with the source one: a
    model whose two differ (and whose output projection is a third matrix) steps as PyTorch."""
    model = tiny_transformer(share_embeddings=False, tie_output=False)
    assert not torch.equal(model.source_embedding.weight, model.target_embedding.weight)
    layout = translator_layout(model)
    rng = np.random.default_rng(0)
    src = rng.integers(4, model.config.vocab_size, (2, 7))
    mask = np.ones_like(src)
    mask[1, 5:] = 0
    encoded = _run(build_encoder(layout), {"src_ids": src, "src_mask": mask})
    with torch.no_grad():
        _, cross = model.encode(torch.from_numpy(src), torch.from_numpy(mask))
    for i, (key, value) in enumerate(cross):
        real = mask.astype(bool)[:, None, :, None].repeat(key.shape[1], 1)
        real = np.broadcast_to(real, key.shape)
        assert np.allclose(encoded[f"encoder.{i}.key"][real], key.numpy()[real], atol=1e-4)
        assert np.allclose(encoded[f"encoder.{i}.value"][real], value.numpy()[real], atol=1e-4)
    heads, head_dim = model.config.n_heads, model.config.head_dim
    layers = model.config.decoder_layers
    ids = rng.integers(4, model.config.vocab_size, (2, 1))
    feed = {
        "input_ids": ids, "positions": np.zeros((2, 1), np.int64),
        "self_mask": np.ones((2, 1), np.int64), "memory_mask": mask,
        **{f"past_key_values.{i}.{p}": np.zeros((2, heads, 0, head_dim), np.float32)
           for i in range(layers) for p in ("key", "value")},
        **{k: v for k, v in encoded.items() if k.startswith("encoder.")},
    }  # fmt: skip
    stepped = _run(build_decoder(layout), feed)
    with torch.no_grad():
        past = [(torch.zeros(2, heads, 0, head_dim),) * 2 for _ in range(layers)]
        hidden, _, _ = model.decode(
            torch.from_numpy(ids), torch.zeros(2, 1, dtype=torch.long),
            torch.ones(2, 1, dtype=torch.long), past, cross, torch.from_numpy(mask),
        )  # fmt: skip
        expected = model.output(hidden[:, -1]).numpy()
    assert np.allclose(stepped["logits"], expected, atol=1e-3, rtol=1e-4)


def test_the_translators_layout_is_pre_norm_relu_its_alignment_layer_named():
    model = tiny_transformer(decoder_layers=3, cross_attention_layer=1)
    layout = translator_layout(model)
    assert layout.pre_norm and layout.activation == "relu" and layout.output_bias is None
    assert layout.alignment_layer == 1 and layout.capacity == model.config.max_length
    assert (layout.vocab, layout.d_model, layout.head_dim) == (
        model.config.vocab_size, model.config.d_model, model.config.head_dim,
    )  # fmt: skip
    norms = layout.decoder.layers[0].norms
    assert norms == [model.decoder_layers[0].self_attn_norm,
                     model.decoder_layers[0].cross_attn_norm,
                     model.decoder_layers[0].ff_norm]  # fmt: skip
    assert len(layout.encoder.layers[0].norms) == 2  # no cross-attention


def test_a_layout_refuses_what_the_builder_cannot_write():
    layout = translator_layout(tiny_transformer())
    fields = {f: getattr(layout, f) for f in TransformerLayout.__dataclass_fields__}
    with pytest.raises(ValueError, match=r"activation 'tanh': the builder writes"):
        TransformerLayout(**{**fields, "activation": "tanh"})
    with pytest.raises(ValueError, match="not a multiple of 5 heads"):
        TransformerLayout(**{**fields, "heads": 5})
