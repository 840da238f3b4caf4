"""The translator's dimensions, saved beside its weights and rebuilt from them."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path


class _Saved:
    """Saving and rebuilding a frozen config dataclass from JSON, unknown fields refused."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config fields: {unknown}")
        return cls(**values)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path):
        return cls.from_dict(json.loads(path.read_text()))


@dataclass(frozen=True)
class TransformerConfig(_Saved):
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


PRESETS = {
    "base": TransformerConfig(),
    "tiny": TransformerConfig(
        vocab_size=512, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2
    ),
}


@dataclass(frozen=True)
class CaptionerConfig(_Saved):
    """A "Show, Attend and Tell" captioner: CNN grid encoder, LSTM decoder with soft attention."""

    vocab_size: int = 600  # word vocabulary of the captions, ids 0-3 as the translator's
    image_size: int = 96  # square RGB input, pixels
    channels: tuple[int, ...] = (32, 64, 128, 192)  # per CNN stage
    strides: tuple[int, ...] = (2, 2, 2, 2)  # per CNN stage: 2 halves the side, 1 keeps it
    embed_dim: int = 128  # word embedding
    hidden_dim: int = 384  # LSTM state h and c
    attention_dim: int = 192  # the additive attention's inner width
    dropout: float = 0.3  # before the output layer (training only)
    attention_regularisation: float = 1.0  # lambda of the doubly stochastic penalty
    max_length: int = 24  # longest caption in tokens, `</s>` included
    pixel_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)  # on [0, 1] pixels
    pixel_std: tuple[float, float, float] = (0.25, 0.25, 0.25)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", tuple(self.channels))
        object.__setattr__(self, "strides", tuple(self.strides))
        if len(self.strides) != len(self.channels) or set(self.strides) - {1, 2}:
            raise ValueError(f"strides {self.strides}: 1 or 2 for each of {self.channels}")
        object.__setattr__(self, "pixel_mean", tuple(self.pixel_mean))
        object.__setattr__(self, "pixel_std", tuple(self.pixel_std))
        if self.image_size % self.stride:
            raise ValueError(f"image_size {self.image_size} is not a multiple of {self.stride}")

    @property
    def stride(self) -> int:
        return math.prod(self.strides)

    @property
    def grid(self) -> int:
        """Side of the feature grid: grid x grid attention locations."""
        return self.image_size // self.stride

    @property
    def feature_dim(self) -> int:
        return self.channels[-1]


CAPTIONER_PRESETS = {
    # a 12 x 12 grid of 8-pixel cells for objects of 18-40 pixels (stride 8: the last stage keeps
    # the side), and 256 features for six artwork families
    "base": CaptionerConfig(channels=(32, 64, 128, 256), strides=(2, 2, 2, 1)),
    "tiny": CaptionerConfig(channels=(8, 8, 16, 16), embed_dim=16, hidden_dim=32, attention_dim=16),
}
