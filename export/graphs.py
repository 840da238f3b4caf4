"""torch modules whose forward is exactly one graph of the decode-step contract.

Their positional inputs and outputs follow `service.runtime.graphs` order, flat (no nested tuples),
so the exporter can name them from the declaration.
"""

from __future__ import annotations

from torch import Tensor, nn

from models.captioner import Captioner
from models.transformer import KeyValue, Transformer


def flatten(pairs: list[KeyValue]) -> list[Tensor]:
    return [tensor for pair in pairs for tensor in pair]


def pairs(tensors: tuple[Tensor, ...]) -> list[KeyValue]:
    return [(tensors[i], tensors[i + 1]) for i in range(0, len(tensors), 2)]


class EncoderGraph(nn.Module):
    """(src_ids, src_mask) -> (memory_mask, encoder.{i}.key, encoder.{i}.value, ...)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, ...]:
        _, cross = self.model.encode(src_ids, src_mask)
        return (src_mask, *flatten(cross))


class DecoderStepGraph(nn.Module):
    """(input_ids, positions, self_mask, past..., encoder..., memory_mask)
    -> (logits, present..., cross_attention)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers

    def forward(self, input_ids: Tensor, positions: Tensor, self_mask: Tensor, *rest: Tensor):
        n = 2 * self.layers
        past, cross, memory_mask = pairs(rest[:n]), pairs(rest[n : 2 * n]), rest[2 * n]
        logits, present, attention = self.model.decode_step(
            input_ids, positions, self_mask, past, cross, memory_mask
        )
        return (logits, *flatten(present), attention)


class CaptionEncoderGraph(nn.Module):
    """pixels (B, 3, H, W) in [0, 1] -> (memory_mask, grid, grid_projection, init.h, init.c)."""

    def __init__(self, model: Captioner):
        super().__init__()
        self.model = model

    def forward(self, pixels: Tensor) -> tuple[Tensor, ...]:
        grid, projection, mask, (h, c) = self.model.encode(pixels)
        return mask, grid, projection, h, c


class CaptionStepGraph(nn.Module):
    """(input_ids, past.h, past.c, grid, grid_projection, memory_mask)
    -> (logits, present.h, present.c, cross_attention)."""

    def __init__(self, model: Captioner):
        super().__init__()
        self.model = model

    def forward(self, input_ids, h, c, grid, projection, memory_mask) -> tuple[Tensor, ...]:
        logits, (h, c), weights = self.model.decode_step(
            input_ids, (h, c), grid, projection, memory_mask
        )
        return logits, h, c, weights
