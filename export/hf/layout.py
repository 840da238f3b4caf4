"""A Hugging Face translation model's weights as export.builder writes them (export.layout):
BART's family, whose layers share their modules' names (`self_attn`, `encoder_attn`, `fc1`,
`fc2` and a norm for each). What a family does differently, as its step modules compute it
(export.hf.marian, export.hf.m2m100, export.hf.mbart):

    marian   post-norm, no final norms; embeddings scaled by the stack, sinusoids from
             position 0; the final logits bias
    m2m_100  pre-norm with final norms (M2M100, NLLB); embeddings scaled by their module,
             sinusoids counted from the padding id plus one, a padding token positioned at
             the padding row (zeros)
    mbart    pre-norm with final norms, a norm over the embeddings; learned positions two
             rows on; the final logits bias

The step returns the last decoder layer's cross-attention, as the traced step does. Tokens
`generate` never writes (bad_words_ids) are -inf in the logits' bias.
"""

from __future__ import annotations

import torch

from export.hf import m2m100, mbart
from export.layout import Attention, Layer, Stack, TransformerLayout
from service.runtime.onnx_runtime import banned_bias

# the config's activation_function -> what export.builder writes
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
POST_NORM = ("marian",)


def activation(config) -> str:
    """The builder's name of the model's activation; ValueError for one it does not write."""
    name = config.activation_function
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation {name!r}: the graphs built op by op write {sorted(ACTIVATIONS)} "
            "(export it with its graphs traced)"
        )
    return ACTIVATIONS[name]


def _attention(module) -> Attention:
    return Attention(module.q_proj, module.k_proj, module.v_proj, module.out_proj)


def _layer(layer, cross: bool) -> Layer:
    return Layer(
        _attention(layer.self_attn),
        layer.self_attn_layer_norm,
        layer.fc1,
        layer.fc2,
        layer.final_layer_norm,
        cross_attn=_attention(layer.encoder_attn) if cross else None,
        cross_norm=layer.encoder_attn_layer_norm if cross else None,
    )


def _embedding(stack) -> torch.Tensor:
    """The stack's token embedding (vocab, D), scaled as the stack scales it: inside the
    module (M2M100's and mBART's) or by the stack (Marian's)."""
    tokens = stack.embed_tokens
    scale = getattr(tokens, "embed_scale", None)
    if scale is None:
        scale = getattr(stack, "embed_scale", 1.0)
    return tokens.weight * float(scale)


def _positions(family: str, table, rows: int) -> tuple[torch.Tensor, int | None]:
    """(the position table from position 0, the id a token adds no position for) of a
    stack's position module, at least `rows` rows."""
    if family == "m2m_100":
        return m2m100.position_table(table, rows), table.padding_idx
    if family == "mbart":
        return mbart.position_table(table), None
    return table.weight, None


def _stack(family: str, stack, rows: int, cross: bool) -> Stack:
    positions, unpositioned = _positions(family, stack.embed_positions, rows)
    return Stack(
        embedding=_embedding(stack),
        positions=positions,
        layers=[_layer(layer, cross) for layer in stack.layers],
        final_norm=getattr(stack, "layer_norm", None),
        embedding_norm=getattr(stack, "layernorm_embedding", None),
        unpositioned=unpositioned,
    )


def hf_layout(model, family: str, banned=()) -> TransformerLayout:
    """The layout of `model` (float32, eval mode) of `family` (export.hf.graphs'
    architectures); its logits -inf at `banned`."""
    config = model.config
    if config.encoder_attention_heads != config.decoder_attention_heads:
        raise ValueError(
            f"{config.encoder_attention_heads} encoder heads and "
            f"{config.decoder_attention_heads} decoder heads: the graphs built op by op take "
            "one number (export it with its graphs traced)"
        )
    rows = int(config.max_position_embeddings)
    bias = getattr(model, "final_logits_bias", None)  # (1, vocab): Marian's, mBART's
    if banned:  # -inf where generate never writes
        ban = torch.from_numpy(banned_bias(banned, config.vocab_size))
        bias = ban if bias is None else bias + ban
    inner = model.model
    return TransformerLayout(
        heads=config.decoder_attention_heads,
        encoder=_stack(family, inner.encoder, rows, cross=False),
        decoder=_stack(family, inner.decoder, rows, cross=True),
        output=model.lm_head.weight,
        capacity=rows,
        alignment_layer=config.decoder_layers - 1,
        pre_norm=family not in POST_NORM,
        activation=activation(config),
        output_bias=None if bias is None else bias.reshape(-1),
    )
