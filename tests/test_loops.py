"""The loop cut: with the length bound on (the default), a translation that starts to repeat
itself is cut where the loop begins, unless its source repeats itself as much."""

from __future__ import annotations

import numpy as np

from service.runtime.controls import LOOP_SPAN, loop_start
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.translation import loops_cut


def hypothesis(tokens: list[int], finished: bool = True) -> Hypothesis:
    steps = len(tokens) + finished
    log_probs = [-0.1 * (i + 1) for i in range(steps)]
    return Hypothesis(
        tokens=tokens,
        log_prob=sum(log_probs),
        score=sum(log_probs) / steps,
        token_log_probs=log_probs,
        alignment=np.arange(steps * 4, dtype=np.float32).reshape(steps, 4),
        finished=finished,
    )


def test_a_loop_starts_at_the_third_close_occurrence_of_a_trigram():
    assert loop_start([7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 9], [5, 6]) == 7
    assert loop_start([4, 4, 4, 4, 4], [5]) == 2
    assert loop_start([1, 2, 3, 1, 2, 3, 1, 2], [5]) is None  # twice and a part
    # three occurrences spread over a long text are not a loop
    far = [1, 2, 3] + [10 + i for i in range(LOOP_SPAN)]
    assert loop_start(far + far + [1, 2, 3], [5]) is None


def test_a_source_that_repeats_itself_keeps_its_repeats():
    assert loop_start([4, 4, 4, 4, 4], [8, 8, 8, 8, 8]) is None
    assert loop_start([4, 4, 4, 4, 4], [8, 8, 8, 8]) == 2  # the source's 3-gram twice


def test_the_cut_keeps_what_came_before_it_and_is_unfinished():
    h = hypothesis([7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 9])
    cut = h.without_loop([5, 6], length_penalty=1.0)
    assert cut.tokens == [7, 1, 2, 3, 1, 2, 3] and not cut.finished
    assert cut.token_log_probs == h.token_log_probs[:7]
    assert cut.log_prob == sum(h.token_log_probs[:7])
    assert cut.score == cut.log_prob / 7
    np.testing.assert_array_equal(cut.alignment, h.alignment[:7])
    whole = hypothesis([1, 2, 3])
    assert whole.without_loop([5], 1.0) is whole


def test_only_the_length_bound_turns_the_cut_on():
    looping = [[hypothesis([4, 4, 4, 4, 4])], [hypothesis([1, 2])]]
    cut = loops_cut(looping, [[5], [6]], DecodingOptions())
    assert [n[0].tokens for n in cut] == [[4, 4], [1, 2]]
    unbounded = loops_cut(looping, [[5], [6]], DecodingOptions(max_length_ratio=0.0))
    assert [n[0].tokens for n in unbounded] == [[4, 4, 4, 4, 4], [1, 2]]
