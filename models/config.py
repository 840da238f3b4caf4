"""The translator's dimensions, saved beside its weights and rebuilt from them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class TransformerConfig:
    """A pre-norm Transformer encoder-decoder ("Attention Is All You Need", pre-norm variant)."""

    vocab_size: int = 8000  # joint SentencePiece vocabulary, ids 0-3 are <blank> <s> </s> <unk>
    d_model: int = 256  # width of every residual stream
    n_heads: int = 4  # attention heads; d_model / n_heads is the head width
    d_ff: int = 1024  # inner width of the position-wise feed-forward network
    encoder_layers: int = 4
    decoder_layers: int = 3  # fewer than the encoder: the decoder runs once per token
    dropout: float = 0.1  # on attention weights, sublayer outputs and embeddings (training only)
    share_embeddings: bool = True  # one matrix for source and target embeddings (joint vocab)
    tie_output: bool = True  # output projection = target embedding (transposed)
    # Sinusoid position of token t is computed at t + position_offset; CTranslate2 starts at 1
    # for the layout it generates itself, so 1 lets it load these weights unchanged.
    position_offset: int = 1
    max_length: int = 512  # longest source or target the model is trained and served for
    cross_attention_layer: int = -1  # which decoder layer's cross-attention is returned

    def __post_init__(self) -> None:
        problems = []
        if self.d_model % self.n_heads:
            problems.append(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.d_model % 2:
            problems.append(f"d_model {self.d_model} must be even (sin and cos halves)")
        if not -self.decoder_layers <= self.cross_attention_layer < self.decoder_layers:
            problems.append(f"cross_attention_layer {self.cross_attention_layer} out of range")
        if self.tie_output and not self.share_embeddings:
            problems.append("tie_output needs share_embeddings in this layout")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TransformerConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config fields: {unknown}")
        return cls(**values)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> TransformerConfig:
        return cls.from_dict(json.loads(path.read_text()))


PRESETS = {
    "base": TransformerConfig(),
    "tiny": TransformerConfig(
        vocab_size=512, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2
    ),
}
