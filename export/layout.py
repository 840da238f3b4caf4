"""An encoder-decoder Transformer's weights as export.builder writes them, whoever's model
they come from: one layout per stack (embedding, positions, layers, norms) and what differs
between families as data (norms before or after each sublayer, the activation, a bias on the
logits). `translator_layout` reads our own translator's; export.hf.layout reads a Hugging Face
model's (Marian, M2M100 and NLLB, mBART-50).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from models.transformer import Transformer, sinusoids

ACTIVATIONS = ("relu", "gelu", "swish")  # what the builder writes (export.builder._Writer)


@dataclass(frozen=True)
class Attention:
    """One attention's projections (each x @ weight.T + bias, as nn.Linear computes)."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    out: nn.Linear


@dataclass(frozen=True)
class Layer:
    """One layer: self-attention, cross-attention (decoder layers only) and the feed-forward,
    each with its layer norm (before it where the layout is pre-norm, after its residual add
    where it is post-norm)."""

    self_attn: Attention
    self_norm: nn.LayerNorm
    ff_in: nn.Linear
    ff_out: nn.Linear
    ff_norm: nn.LayerNorm
    cross_attn: Attention | None = None
    cross_norm: nn.LayerNorm | None = None

    @property
    def norms(self) -> list[nn.LayerNorm]:
        """Its sublayers' norms, in the order the sublayers run."""
        cross = [] if self.cross_norm is None else [self.cross_norm]
        return [self.self_norm, *cross, self.ff_norm]


@dataclass(frozen=True)
class Stack:
    """The encoder's or the decoder's: token embedding (vocab, D) already scaled, position
    table (positions, D) indexed from position 0, and the layers."""

    embedding: Tensor  # (vocab, D)
    positions: Tensor  # (positions, D)
    layers: list[Layer]
    final_norm: nn.LayerNorm | None = None  # after the last layer
    embedding_norm: nn.LayerNorm | None = None  # over the embedded tokens (mBART)
    # where set, a token of this id adds no position (M2M100's padding row of zeros)
    unpositioned: int | None = None


@dataclass(frozen=True)
class TransformerLayout:
    """Everything the builder reads of an encoder-decoder Transformer."""

    heads: int
    encoder: Stack
    decoder: Stack
    output: Tensor  # (vocab, D): logits = h @ output.T (+ output_bias)
    capacity: int  # the longest output: the static step's cache
    alignment_layer: int  # the decoder layer whose cross-attention the step returns
    pre_norm: bool = True  # norms before each sublayer, else after its residual add
    activation: str = "relu"  # of ACTIVATIONS
    output_bias: Tensor | None = None  # (vocab,)

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r}: the builder writes {ACTIVATIONS}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of {self.heads} heads")

    @property
    def d_model(self) -> int:
        return int(self.output.shape[1])

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def vocab(self) -> int:
        return int(self.output.shape[0])


def _attention(attention) -> Attention:
    return Attention(attention.query, attention.key, attention.value, attention.out)


def translator_layout(model: Transformer) -> TransformerLayout:
    """Our own translator's: pre-norm, ReLU, sinusoids with the config's offset, no bias on
    its logits."""
    c = model.config
    scale = math.sqrt(c.d_model)
    table = sinusoids(torch.arange(c.max_length + 1), c.d_model, c.position_offset)
    encoder = Stack(
        model.source_embedding.weight * scale,
        table,
        [
            Layer(_attention(x.self_attn), x.self_attn_norm, x.ff[0], x.ff[3], x.ff_norm)
            for x in model.encoder_layers
        ],
        final_norm=model.encoder_norm,
    )
    decoder = Stack(
        model.target_embedding.weight * scale,
        table,
        [
            Layer(
                _attention(x.self_attn),
                x.self_attn_norm,
                x.ff[0],
                x.ff[3],
                x.ff_norm,
                cross_attn=_attention(x.cross_attn),
                cross_norm=x.cross_attn_norm,
            )
            for x in model.decoder_layers
        ],
        final_norm=model.decoder_norm,
    )
    return TransformerLayout(
        heads=c.n_heads,
        encoder=encoder,
        decoder=decoder,
        output=model.output.weight,
        capacity=c.max_length,
        alignment_layer=c.cross_attention_layer % c.decoder_layers,
    )
