"""The seam between decoding strategies and a model engine (PyTorch, onnxruntime, ...).

An `Engine` runs the two graphs of the decode-step contract and knows its own tensor type.
What the graphs carry between steps is named by the model's `service.runtime.graphs.ModelInterface`:
memory tensors (the encoder's, read by every step) and state tensors (read and returned by
every step), each in a dict by its decoder input name. An `Inference` holds one batch of
rows between steps: their state, positions and self mask. Decoding strategies see only
`Inference.search_step` and `Inference.reorder`, numpy in and out, so every engine decodes by
the same algorithm.

A step's logits stay the engine's tensor: `Engine.search` turns them into the few candidates a
row needs (service.runtime.search), where they are, and only those come to the host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

import numpy as np

from service.runtime.grammar import Grammar
from service.runtime.graphs import ModelInterface, SpecialTokens
from service.runtime.search import Candidates, SearchRequest, log_softmax, with_controls
from service.runtime.tensors import EncoderOutput, StepOutput, Tensor, Tensors, take_written

if TYPE_CHECKING:  # onnxruntime's: not imported by an engine of another library
    from service.runtime.static_step import StaticStep


def searched(engine: Engine, out: StepOutput, request: SearchRequest) -> Candidates:
    """The candidates `request` asks for of a step's output: those the step found, else
    the engine's search of its logits; the rows a decoding control changes searched again
    from their own logits."""
    found = out.candidates
    if found is None:
        found = engine.search(out.logits, request)
    return with_controls(engine, out.logits, request, found)


class Engine(Protocol):
    """Runs the model; all arrays crossing this interface are numpy except the engine's memory
    and state tensors."""

    interface: ModelInterface  # names and axes of memory and state
    special_tokens: SpecialTokens
    rows: str  # how a continuous batch holds rows over it: a key of service.runtime.rows.STORES
    # how its step carries the key/value cache: "growing", "in_place", "static" or "none"
    # (a golden set's expected tokens are per cache)
    cache: str
    static_step: StaticStep | None  # what the static step's row store runs (rows "static")
    grammar: Grammar | None  # the version's output grammar, enforced on every row (None: none)

    def encode(self, *inputs: np.ndarray, **named: np.ndarray) -> EncoderOutput:
        """The encoder graph's inputs in declared order or by name (translator: src_ids,
        src_mask (B, S) int64; captioner: pixels (B, 3, H, W) float32) -> memory and the
        states it starts."""

    def initial_state(self, encoder: EncoderOutput, batch: int) -> Tensors:
        """The state of `batch` rows (those of `encoder`) before their first step: what the
        encoder starts, else empty on the time axis (past keys and values of length 0)."""

    def step(
        self,
        input_ids: np.ndarray,
        positions: np.ndarray,
        self_mask: np.ndarray,
        state: Tensors,
        encoder: EncoderOutput,
        attention: bool = True,
        search: SearchRequest | None = None,
    ) -> StepOutput:
        """input_ids, positions (B, N) int64; self_mask (B, P + N) -> the step's output, its
        attention None unless `attention`. A model without positions or masks in its step
        ignores them. `search`: the search these logits are for (an engine may answer it
        within the step: the output's candidates)."""

    def search(self, logits: Tensor, request: SearchRequest) -> Candidates:
        """A step's logits -> the candidates `request` asks for (on the host)."""

    def host(self, logits: Tensor) -> np.ndarray:
        """A step's logits as a float32 numpy array."""

    def take(self, tensor: Tensor, index: np.ndarray) -> Tensor:
        """Rows `index` of `tensor` along the batch axis (may repeat or drop rows)."""

    def join(self, a: Tensor, b: Tensor) -> Tensor:
        """Rows of `a`, then rows of `b`; every other axis of the shorter right-padded with
        zeros."""

    def narrow(self, tensor: Tensor, axis: int, start: int, end: int) -> Tensor:
        """Positions start..end of `axis`."""


class Inference(ABC):
    """A batch of rows being decoded; rows can be reordered, repeated or dropped between steps."""

    @abstractmethod
    def search_step(
        self, tokens: np.ndarray, request: SearchRequest
    ) -> tuple[Candidates, np.ndarray | None]:
        """tokens (B, N) new tokens for every row -> the candidates `request` asks for, and
        the attention (B, S) if it asks for it (else None)."""

    @abstractmethod
    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """tokens (B, N) -> the whole logits (B, V) float32 and attention (B, S) on the host
        (checks and tools; decoding uses `search_step`)."""

    @abstractmethod
    def reorder(self, index: np.ndarray) -> None:
        """Keeps rows `index` (int64, any length) in that order."""


class CachedInference(Inference):
    """Feeds only the new tokens and carries the state (the keys/values of the past) from step
    to step."""

    def __init__(self, engine: Engine, encoder: EncoderOutput, batch: int):
        self.engine, self.encoder, self.encoded = engine, encoder, encoder
        self.sources = np.arange(batch)  # the encoder row each row decodes
        # buffers written in place (by name: their positions' axis), moved without what
        # lies beyond the rows' lengths
        self.buffers = {s.input: s.time_axis for s in engine.interface.states if s.in_place}
        self.state = engine.initial_state(encoder, batch)
        self.lengths = np.zeros(batch, dtype=np.int64)  # tokens seen per row
        self.self_mask = np.zeros((batch, 0), dtype=np.int64)  # (B, P)

    def _forward(self, tokens: np.ndarray, attention: bool, search=None):
        batch, new = tokens.shape
        positions = self.lengths[:, None] + np.arange(new, dtype=np.int64)  # (B, N)
        self.self_mask = np.concatenate([self.self_mask, np.ones((batch, new), np.int64)], 1)
        out = self.engine.step(
            tokens, positions, self.self_mask, self.state, self.encoder, attention, search
        )
        self.state = out.state
        self.lengths = self.lengths + new
        return out

    def search_step(self, tokens, request):
        out = self._forward(tokens, request.attention, request)
        return searched(self.engine, out, request), out.attention

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = self._forward(tokens, True)
        return self.engine.host(out.logits), out.attention

    def reorder(self, index: np.ndarray) -> None:
        take, length = self.engine.take, int(self.lengths.max(initial=0))
        self.state = {
            name: take_written(t, index, self.buffers[name], length)
            if name in self.buffers and isinstance(t, np.ndarray)
            else take(t, index)
            for name, t in self.state.items()
        }
        sources = self.sources[index]
        # Beams of one input share its encoder rows: reordering beams leaves them as they are,
        # so they are gathered (from the encoder's own output) only when the inputs change.
        if not np.array_equal(sources, self.sources):
            self.encoder = self.encoded.rows(take, sources)
            self.sources = sources
        self.lengths = self.lengths[index]
        self.self_mask = self.self_mask[index]


class UncachedInference(CachedInference):
    """Recomputes every position at every step: the reference the cache is checked against
    (for a model whose state is a cache of the past: a recurrent state has no uncached form)."""

    def __init__(self, engine: Engine, encoder: EncoderOutput, batch: int):
        super().__init__(engine, encoder, batch)
        self.tokens = np.zeros((batch, 0), dtype=np.int64)  # (B, T) everything fed so far

    def _forward(self, tokens: np.ndarray, attention: bool, search=None):
        self.tokens = np.concatenate([self.tokens, tokens], axis=1)
        batch, total = self.tokens.shape
        positions = np.broadcast_to(np.arange(total, dtype=np.int64), (batch, total))
        mask = np.ones((batch, total), dtype=np.int64)
        state = self.engine.initial_state(self.encoder, batch)
        return self.engine.step(
            self.tokens, positions, mask, state, self.encoder, attention, search
        )

    def reorder(self, index: np.ndarray) -> None:
        super().reorder(index)
        self.tokens = self.tokens[index]


def parting_margin(
    engine: Engine, encoder: EncoderOutput, expected: list[int], got: list[int]
) -> tuple[int, float]:
    """(step, margin) of two decodes of one input (tokens, `</s>` left out) that differ: the
    first step where their tokens part (`</s>` where one has ended), and how close `engine`
    ranks those two tokens there, |log p(a) - log p(b)|, fed `<s>` and the shared prefix one
    token a step on one row of `encoder` (which every model's step accepts)."""
    pairs = enumerate(zip(expected, got, strict=False))
    step = next((t for t, (x, y) in pairs if x != y), min(len(expected), len(got)))
    eos = engine.special_tokens.eos
    ours = expected[step] if step < len(expected) else eos
    theirs = got[step] if step < len(got) else eos
    inference = CachedInference(engine, encoder, 1)
    for token in [engine.special_tokens.bos, *expected[:step]]:
        logits, _ = inference.step(np.asarray([[token]], dtype=np.int64))
    log_probs = log_softmax(logits)[0]
    return step, float(abs(log_probs[ours] - log_probs[theirs]))
