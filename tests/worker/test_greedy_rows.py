"""One-row greedy decodes held in lanes of preallocated arrays: each lane keeps its own tokens,
log-probabilities and step count, ends at `</s>` or at its own step limit, and the arrays widen
past their first width without losing what the lanes hold."""

from __future__ import annotations

import numpy as np
import pytest

from service.worker.greedy_rows import FIRST_WIDTH, GreedyRows

EOS = 2


def test_lanes_take_their_own_tokens_and_end_at_eos_or_their_limit():
    rows = GreedyRows(6, EOS)
    lanes = np.array([4, 1, 3])
    rows.start_many(lanes, np.array([10, 10, 2]), np.array([False, True, False]))
    assert rows.stream.tolist() == [False, True, False, False, False, False]
    ended = rows.advance(lanes, np.array([7, 8, 9]), np.array([-0.5, -0.25, -1.0]))
    assert ended.tolist() == [False, False, False]
    ended = rows.advance(lanes, np.array([EOS, 11, 12]), np.array([-0.1, -0.2, -0.3]))
    assert ended.tolist() == [True, False, True]  # </s>; running; its limit of 2 steps
    assert rows.steps[lanes].tolist() == [2, 2, 2]
    assert rows.best_tokens(1) == [8, 11]
    assert rows.best_tokens(4) == [7, EOS]

    finished = rows.hypothesis(4, length_penalty=1.0)
    assert finished.tokens == [7] and finished.finished  # </s> not among the tokens
    assert finished.token_log_probs == [-0.5, -0.1]  # its step counted
    assert finished.log_prob == pytest.approx(-0.6)
    assert finished.score == pytest.approx(-0.6 / 2)

    cut = rows.hypothesis(3, length_penalty=2.0)
    assert cut.tokens == [9, 12] and not cut.finished
    assert cut.score == pytest.approx(-1.3 / 2**2)


def test_a_restarted_lane_forgets_its_last_decode():
    rows = GreedyRows(2, EOS)
    rows.start_many(np.array([0]), np.array([5]), np.array([False]))
    for token in (5, 6, EOS):
        rows.advance(np.array([0]), np.array([token]), np.array([-1.0]))
    rows.start_many(np.array([0]), np.array([5]), np.array([False]))
    assert rows.best_tokens(0) == []
    empty = rows.hypothesis(0, 1.0)
    assert empty.tokens == [] and not empty.finished and empty.score == 0.0
    rows.advance(np.array([0]), np.array([9]), np.array([-2.0]))
    assert rows.best_tokens(0) == [9]


def test_the_arrays_widen_past_their_first_width_keeping_every_lane():
    rows = GreedyRows(3, EOS)
    steps = 2 * FIRST_WIDTH + 5
    lanes = np.array([0, 2])
    rows.start_many(lanes, np.array([steps, 3]), np.array([False, False]))
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 100, size=(steps, 2))
    log_probs = -rng.random((steps, 2))
    live = lanes
    for step in range(steps):
        ended = rows.advance(live, tokens[step, : len(live)], log_probs[step, : len(live)])
        live = live[~ended]
    assert rows.tokens.shape[1] >= steps
    assert rows.best_tokens(0) == tokens[:, 0].tolist()
    assert rows.best_tokens(2) == tokens[:3, 1].tolist()  # ended at its limit, kept as it was
    long = rows.hypothesis(0, 1.0)
    assert long.token_log_probs == pytest.approx(log_probs[:, 0].tolist())
    assert long.log_prob == pytest.approx(float(log_probs[:, 0].sum()))


def test_no_lanes_is_a_step_of_nothing():
    rows = GreedyRows(2, EOS)
    ended = rows.advance(np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([]))
    assert ended.shape == (0,)
    assert rows.steps.tolist() == [0, 0]
