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

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class SearchRequest:
    """What a step's search must return for the rows of a batch."""

    k: int = 1  # candidates per row; 0: every vocabulary entry, in order
    temperature: np.ndarray | None = None  # (R,) float32 per row: candidates ranked after
    # log_softmax(log_probs / temperature), for sampling; None: ranked by log-probability
    attention: bool = True  # the step's cross-attention comes to the host
    banned: tuple[int, ...] = ()  # tokens never produced (their logit is -inf)
    # rows whose logits a decoding control changes at this step, by row: searched on the
    # host from their own logits (`controlled`), the other rows where the engine searches
    controls: dict[int, RowControl] = field(default_factory=dict)

    def width(self, vocab: int) -> int:
        """Candidates a row gets over a vocabulary of `vocab`."""
        return min(self.k or vocab, vocab)


CANDIDATES = ("ids", "log_probs")  # a lean step's search outputs: Candidates' first fields


@dataclass(frozen=True)
class Candidates:
    """The k best tokens of every row, best first."""

    ids: np.ndarray  # (R, k) int64
    log_probs: np.ndarray  # (R, k) float32, the model's log-probabilities of `ids`
    scores: np.ndarray | None = None  # (R, k) float32 after temperature (what ranked them)

    def rows(self, index) -> Candidates:
        scores = None if self.scores is None else self.scores[index]
        return Candidates(self.ids[index], self.log_probs[index], scores)


class RowControl(NamedTuple):
    """What decoding controls change in one row's logits at one step: the logits of
    `penalized` tokens divided by `penalty` when positive, multiplied when negative (a
    repetition penalty); `banned` tokens never produced; `forced` (a token, or -1) produced
    whatever the model prefers, with the log-probability the model gives it, or 0 where it is
    `given` (a token the model is handed, as `generate` forces a target language or `</s>`);
    where `allowed` is given, no token outside it is produced (an output grammar)."""

    penalized: np.ndarray = np.zeros(0, dtype=np.int64)
    penalty: float = 1.0
    banned: np.ndarray = np.zeros(0, dtype=np.int64)
    forced: int = -1
    given: bool = False
    allowed: np.ndarray | None = None


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


def controlled(
    logits: np.ndarray,
    controls: list[RowControl],
    request: SearchRequest,
    temperature: np.ndarray | None = None,
) -> Candidates:
    """The candidates of rows whose decoding controls change their logits (N, V): each
    row's logits penalized, narrowed to its allowed tokens and banned, then searched as
    `host_search` does (`temperature` (N,) their sampling temperatures, or None). A forced
    row's candidates are its forced token alone (every other column -inf), with the
    log-probability of the penalized logits (its bans do not apply to it), or 0 where it is
    given. Where a row's bans would leave it no token (a minimum length or suppressed words
    against the only tokens its grammar allows), its grammar alone narrows it: the grammar
    holds, the bans yield."""
    logits = np.array(logits, dtype=np.float32)
    forced = np.array([c.forced for c in controls], dtype=np.int64)
    for row, control in enumerate(controls):
        if control.penalty != 1.0 and len(control.penalized):
            x = logits[row, control.penalized]
            logits[row, control.penalized] = np.where(
                x < 0, x * control.penalty, x / control.penalty
            )
    penalized = logits.copy() if (forced >= 0).any() else logits
    for row, control in enumerate(controls):
        if control.allowed is not None:
            kept = logits[row, control.allowed]
            logits[row] = -np.inf
            logits[row, control.allowed] = kept
        if len(control.banned):
            narrowed = logits[row].copy()
            logits[row, control.banned] = -np.inf
            if not np.isfinite(logits[row]).any():
                logits[row] = narrowed
    narrowed = SearchRequest(request.k, temperature, request.attention, request.banned)
    found = host_search(logits, narrowed)
    ids, log_probs = found.ids.copy(), found.log_probs.copy()
    scores = None if found.scores is None else found.scores.copy()
    rows = np.flatnonzero(forced >= 0)
    if len(rows):
        chosen = forced[rows]
        own = log_softmax(penalized[rows])[np.arange(len(rows)), chosen]
        own[[controls[r].given for r in rows.tolist()]] = 0.0
        ids[rows] = chosen[:, None]
        log_probs[rows] = -np.inf
        log_probs[rows, 0] = own
        if scores is not None:
            scores[rows] = -np.inf
            scores[rows, 0] = 0.0
    return Candidates(ids, log_probs, scores)


def with_controls(engine, logits, request: SearchRequest, found: Candidates) -> Candidates:
    """`found`, the candidates of every row, with the rows `request.controls` names searched
    again on the host from their own logits (the engine's `take` and `host`: only those rows
    leave the device)."""
    if not request.controls:
        return found
    rows = np.fromiter(request.controls, dtype=np.int64, count=len(request.controls))
    own = engine.host(engine.take(logits, rows))
    temperature = None if request.temperature is None else request.temperature[rows]
    again = controlled(own, [request.controls[r] for r in rows.tolist()], request, temperature)
    ids, log_probs = found.ids.copy(), found.log_probs.copy()
    ids[rows], log_probs[rows] = again.ids, again.log_probs
    scores = None
    if found.scores is not None:
        scores = found.scores.copy()
        scores[rows] = again.scores
    return Candidates(ids, log_probs, scores)
