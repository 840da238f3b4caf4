"""One-row greedy decodes held in preallocated arrays, advanced together by numpy.

Most rows of a busy server are single inputs decoded greedily. Each is a lane of these arrays
(the scheduler's owner index of its request): the tokens and log-probabilities it produced so
far, its step count and its step limit. A step advances every lane of the batch's greedy rows
with a few vectorised operations, whatever their number; Python runs for a lane only when it
ends (its hypothesis is built) or streams. A lane decodes exactly as `GreedySearch` of one
row: the best candidate each step, ending at `</s>` or after `max_length` steps.
"""

from __future__ import annotations

import numpy as np

from service.runtime.decoding import Hypothesis

FIRST_WIDTH = 64  # steps the arrays hold at first; doubled when a lane needs more


class GreedyRows:
    def __init__(self, lanes: int, eos: int):
        self.eos = eos
        self.steps = np.zeros(lanes, dtype=np.int64)  # (lanes,) tokens produced
        self.max_length = np.zeros(lanes, dtype=np.int64)  # (lanes,) steps allowed
        self.stream = np.zeros(lanes, dtype=bool)  # (lanes,) a partial after every step
        self.tokens = np.zeros((lanes, FIRST_WIDTH), dtype=np.int64)  # (lanes, width)
        self.log_probs = np.zeros((lanes, FIRST_WIDTH), dtype=np.float64)  # (lanes, width)

    def start_many(self, lanes: np.ndarray, max_length: np.ndarray, stream: np.ndarray) -> None:
        """Lanes `lanes` (n,) start, each with its step limit and whether it streams."""
        self.steps[lanes], self.max_length[lanes], self.stream[lanes] = 0, max_length, stream

    def advance(self, lanes: np.ndarray, ids: np.ndarray, log_probs: np.ndarray) -> np.ndarray:
        """Lanes `lanes` (R,) take their rows' best candidates `ids`, `log_probs` (R,) ->
        (R,) bool, whether each lane ended (`</s>`, or its last step)."""
        steps = self.steps[lanes]
        if len(steps) and int(steps.max()) >= self.tokens.shape[1]:
            self._widen(2 * self.tokens.shape[1])
        self.tokens[lanes, steps] = ids
        self.log_probs[lanes, steps] = log_probs
        steps += 1
        self.steps[lanes] = steps
        return (ids == self.eos) | (steps >= self.max_length[lanes])

    def _widen(self, width: int) -> None:
        lanes, old = self.tokens.shape
        for name in ("tokens", "log_probs"):
            array = getattr(self, name)
            wider = np.zeros((lanes, width), dtype=array.dtype)
            wider[:, :old] = array
            setattr(self, name, wider)

    def hypothesis(self, lane: int, length_penalty: float) -> Hypothesis:
        """The lane's hypothesis, as `GreedySearch` builds it."""
        steps = int(self.steps[lane])
        tokens = self.tokens[lane, :steps].tolist()
        log_probs = self.log_probs[lane, :steps]
        ended = steps > 0 and tokens[-1] == self.eos
        total = float(log_probs.sum())  # np.sum's reduction, as GreedySearch's
        return Hypothesis(
            tokens=tokens[:-1] if ended else tokens,
            log_prob=total,
            score=total / max(steps, 1) ** length_penalty,
            token_log_probs=log_probs.tolist(),
            finished=ended,
        )

    def best_tokens(self, lane: int) -> list[int]:
        """The lane's tokens so far (a running lane has no `</s>`)."""
        return self.tokens[lane, : int(self.steps[lane])].tolist()
