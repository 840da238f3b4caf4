"""The part of a decoding step that reads every vocabulary entry: log-softmax, a token filter
and the k best candidates of each row.

A decoding strategy never needs the whole distribution: greedy search needs a row's best token,
beam search its 2 x beam best, sampling the tokens its top-k / top-p filter can keep. So the
step's search is cut in two:
- `SearchRequest` -> `Candidates` (this module): per row, the k best tokens (best first; equal
  log-probabilities in token order), their log-probabilities and, when sampling, their
  log-probabilities after temperature. An engine computes them where its logits are: the
  onnxruntime engine in a small graph beside the decoder step (export.ops `search`), so on a
  GPU only (rows, k) numbers cross to the host; `host_search` is the numpy reference that graph
  is proven equal to, and the path of engines without one.
- per-hypothesis bookkeeping over those k candidates (service.runtime.decoding): beams, n-best,
  finished rows, length penalty, the seeded draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SearchRequest:
    """What a step's search must return for the rows of a batch."""

    k: int = 1  # candidates per row; 0: every vocabulary entry, in order
    temperature: np.ndarray | None = None  # (R,) float32 per row: candidates ranked after
    # log_softmax(log_probs / temperature), for sampling; None: ranked by log-probability
    attention: bool = True  # the step's cross-attention comes to the host
    banned: tuple[int, ...] = ()  # tokens never produced (their logit is -inf)

    def width(self, vocab: int) -> int:
        """Candidates a row gets over a vocabulary of `vocab`."""
        return min(self.k or vocab, vocab)


@dataclass(frozen=True)
class Candidates:
    """The k best tokens of every row, best first."""

    ids: np.ndarray  # (R, k) int64
    log_probs: np.ndarray  # (R, k) float32, the model's log-probabilities of `ids`
    scores: np.ndarray | None = None  # (R, k) float32 after temperature (what ranked them)

    def rows(self, index) -> Candidates:
        scores = None if self.scores is None else self.scores[index]
        return Candidates(self.ids[index], self.log_probs[index], scores)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(B, V) float -> (B, V) float32 log-probabilities."""
    logits = logits.astype(np.float32, copy=False)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """(R, V) -> (R, k) int64 indices of the k largest values of each row, largest first; equal
    values in index order (as ONNX TopK orders them), at the k-th boundary too."""
    vocab = values.shape[1]
    if k >= vocab:
        return np.argsort(-values, axis=1, kind="stable").astype(np.int64, copy=False)
    if k == 1:
        return values.argmax(axis=1).astype(np.int64)[:, None]
    ids = np.argpartition(-values, k - 1, axis=1)[:, :k]
    chosen = np.take_along_axis(values, ids, 1)
    threshold = chosen.min(axis=1, keepdims=True)  # the k-th largest
    tied = np.flatnonzero((values >= threshold).sum(axis=1) > k)  # more than k reach it
    if len(tied):  # which of the equal values at the boundary are in: the first by index
        v, t = values[tied], threshold[tied]
        need = k - (v > t).sum(axis=1, keepdims=True)
        keep = (v > t) | ((v == t) & (np.cumsum(v == t, axis=1) <= need))
        ids[tied] = np.nonzero(keep)[1].reshape(len(tied), k)
        chosen[tied] = np.take_along_axis(v, ids[tied], 1)
    order = np.lexsort((ids, -chosen), axis=1)
    return np.take_along_axis(ids, order, 1).astype(np.int64, copy=False)


def host_search(logits: np.ndarray, request: SearchRequest) -> Candidates:
    """The numpy reference of the search graph: (R, V) logits -> candidates."""
    logits = np.asarray(logits, dtype=np.float32)
    if request.banned:
        logits = logits.copy()
        logits[:, list(request.banned)] = -np.inf
    log_probs = log_softmax(logits)
    k = request.width(logits.shape[1])
    if request.temperature is None:
        ids = top_k(log_probs, k)
        return Candidates(ids, np.take_along_axis(log_probs, ids, 1))
    temperature = np.asarray(request.temperature, dtype=np.float32)[:, None]
    scaled = log_softmax(log_probs / temperature)
    ids = top_k(scaled, k)
    return Candidates(
        ids, np.take_along_axis(log_probs, ids, 1), np.take_along_axis(scaled, ids, 1)
    )
