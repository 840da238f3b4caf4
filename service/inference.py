"""The seam between decoding strategies and a model engine (PyTorch, onnxruntime, ...).

An `Engine` runs the two graphs of the decode-step contract and knows its own tensor type.
An `Inference` holds one batch of rows between steps: their cache, positions and self mask.
Decoding strategies see only `Inference.step` and `Inference.reorder`, numpy in and out, so
every engine decodes by the same algorithm.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

Tensor = Any  # the engine's own tensor type (torch.Tensor, numpy array, OrtValue)
# Memory and state travel in pairs, rows on axis 0: a decoder layer's keys and values
# (B, H, L, Dh); the captioner's grid and its attention projection (B, L, D|A); an LSTM's
# (h, c) (B, Hd). What each pair is, and which have a growing time axis, the model's
# `service.graphs.ModelInterface` declares.
KeyValues = list[tuple[Tensor, Tensor]]


@dataclass
class EncoderOutput:
    """What the decoder needs from the encoder, once per request."""

    cross: KeyValues  # the memory every step reads (translator: keys and values per layer)
    memory_mask: Tensor  # (B, S), 1 where the memory position is real
    state: KeyValues | None = None  # the initial state, when the encoder gives one ((h, c))


class Engine(Protocol):
    """Runs the model; all arrays crossing this interface are numpy except the engine's cache."""

    def encode(self, *inputs: np.ndarray, **named: np.ndarray) -> EncoderOutput:
        """The encoder graph's inputs in declared order or by name (translator: src_ids,
        src_mask (B, S) int64; captioner: pixels (B, 3, H, W) float32) -> memory and initial
        state."""

    def initial_state(self, encoder: EncoderOutput, batch: int) -> KeyValues:
        """The state of `batch` rows before the first step: the encoder's, else empty (past
        keys and values of length 0)."""

    def empty_past(self, batch: int) -> KeyValues:
        """Past keys and values of length 0 for `batch` rows (a growing state; the continuous
        batch joins rows with it)."""

    def step(
        self,
        input_ids: np.ndarray,
        positions: np.ndarray,
        self_mask: np.ndarray,
        past: KeyValues,
        encoder: EncoderOutput,
    ) -> tuple[np.ndarray, KeyValues, np.ndarray]:
        """input_ids, positions (B, N) int64; self_mask (B, P + N) -> logits (B, V) float32,
        the next state (present keys/values (B, H, P + N, Dh)), cross-attention (B, S)
        float32. A model without positions or masks in its step ignores them."""

    def take(self, tensor: Tensor, index: np.ndarray) -> Tensor:
        """Rows `index` of `tensor` along the batch axis (may repeat or drop rows)."""


class Inference(ABC):
    """A batch of rows being decoded; rows can be reordered, repeated or dropped between steps."""

    @abstractmethod
    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """tokens (B, N) new tokens for every row -> logits (B, V), cross-attention (B, S)."""

    @abstractmethod
    def reorder(self, index: np.ndarray) -> None:
        """Keeps rows `index` (int64, any length) in that order."""


class CachedInference(Inference):
    """Feeds only the new tokens and carries the keys/values of the past from step to step."""

    def __init__(self, engine: Engine, encoder: EncoderOutput, batch: int):
        self.engine, self.encoder, self.encoded = engine, encoder, encoder
        self.sources = np.arange(batch)  # the encoder row each row decodes
        self.past = engine.initial_state(encoder, batch)
        self.lengths = np.zeros(batch, dtype=np.int64)  # tokens seen per row
        self.self_mask = np.zeros((batch, 0), dtype=np.int64)  # (B, P)

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        batch, new = tokens.shape
        positions = self.lengths[:, None] + np.arange(new, dtype=np.int64)  # (B, N)
        self.self_mask = np.concatenate([self.self_mask, np.ones((batch, new), np.int64)], 1)
        logits, self.past, cross = self.engine.step(
            tokens, positions, self.self_mask, self.past, self.encoder
        )
        self.lengths = self.lengths + new
        return logits, cross

    def reorder(self, index: np.ndarray) -> None:
        take = self.engine.take
        self.past = [(take(a, index), take(b, index)) for a, b in self.past]
        sources = self.sources[index]
        # Beams of one input share its encoder rows: reordering beams leaves them as they are,
        # so they are gathered (from the encoder's own output) only when the inputs change.
        if not np.array_equal(sources, self.sources):
            self.encoder = EncoderOutput(
                cross=[(take(a, sources), take(b, sources)) for a, b in self.encoded.cross],
                memory_mask=take(self.encoded.memory_mask, sources),
            )
            self.sources = sources
        self.lengths = self.lengths[index]
        self.self_mask = self.self_mask[index]


class UncachedInference(CachedInference):
    """Recomputes every position at every step: the reference the cache is checked against."""

    def __init__(self, engine: Engine, encoder: EncoderOutput, batch: int):
        super().__init__(engine, encoder, batch)
        self.tokens = np.zeros((batch, 0), dtype=np.int64)  # (B, T) everything fed so far

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.tokens = np.concatenate([self.tokens, tokens], axis=1)
        batch, total = self.tokens.shape
        positions = np.broadcast_to(np.arange(total, dtype=np.int64), (batch, total))
        mask = np.ones((batch, total), dtype=np.int64)
        past = self.engine.initial_state(self.encoder, batch)
        logits, _, cross = self.engine.step(self.tokens, positions, mask, past, self.encoder)
        return logits, cross

    def reorder(self, index: np.ndarray) -> None:
        super().reorder(index)
        self.tokens = self.tokens[index]
