"""Output grammars (service.runtime.grammar): the language of patterns over slots of phrases,
what may follow a prefix, and the decoding control that holds every row to it."""

from __future__ import annotations

import numpy as np
import pytest

from service.runtime.controls import Controls, InputControls, with_grammar
from service.runtime.decoding import DecodingOptions
from service.runtime.grammar import Grammar
from service.runtime.search import SearchRequest, controlled

EOS = 2
# words as ids: a 10, an 11, cat 20, hot 21, dog 22, apple 23, at 30, top 31, above 40, and 50
GRAMMAR = Grammar(
    [["thing", "where"], ["thing", "relation", "thing"], ["thing", "and", "thing"]],
    {
        "thing": [[10, 20], [10, 21], [10, 21, 22], [11, 23]],  # a hot / a hot dog: a prefix
        "where": [[30, 31]],
        "relation": [[40]],
        "and": [[50]],
    },
)


END = 2  # </s>


def allowed(history):
    """(the tokens that may follow `history` but </s>, whether </s> may), None outside."""
    found = GRAMMAR.next_tokens(history, END)
    return None if found is None else ([t for t in found.tolist() if t != END], END in found)


def test_what_may_follow_a_prefix_and_where_it_may_end():
    assert allowed([]) == ([10, 11], False)
    assert allowed([10]) == ([20, 21], False)  # "a" never before "apple", "an" only before it
    assert allowed([11]) == ([23], False)
    assert allowed([10, 20]) == ([30, 40, 50], False)
    assert allowed([10, 21]) == ([22, 30, 40, 50], False)  # "a hot" or "a hot dog" goes on
    assert allowed([10, 21, 40, 10, 21]) == ([22], True)  # a whole output, or a longer name
    assert allowed([10, 20, 30, 31]) == ([], True)  # only </s> after a whole pattern


def test_accepts_whole_outputs_only():
    assert GRAMMAR.accepts([10, 20, 30, 31])
    assert GRAMMAR.accepts([10, 21, 22, 50, 11, 23])
    assert not GRAMMAR.accepts([10, 20])  # cut short
    assert not GRAMMAR.accepts([10, 10, 20, 30, 31])  # an article twice
    assert not GRAMMAR.accepts([10, 23, 30, 31])  # "a apple"
    assert not GRAMMAR.accepts([10, 20, 30, 31, 2])


def test_a_history_outside_the_language_is_not_constrained():
    assert allowed([10, 10]) is None
    assert allowed([99]) is None


def test_a_grammar_is_checked_when_made():
    with pytest.raises(ValueError, match="unknown slots: where"):
        Grammar([["thing", "where"]], {"thing": [[1]]})
    with pytest.raises(ValueError, match="empty"):
        Grammar([["thing"]], {"thing": [[]]})
    with pytest.raises(ValueError, match="at least one pattern"):
        Grammar([], {"thing": [[1]]})
    assert Grammar.from_manifest(None) is None
    made = Grammar.from_manifest({"patterns": [["x"]], "slots": {"x": [[5, 6]]}})
    assert made.accepts([5, 6]) and not made.accepts([5])


def test_the_control_narrows_each_row_to_what_may_follow():
    inputs = with_grammar(None, GRAMMAR)
    controls = Controls(DecodingOptions(beam_size=1), inputs, EOS)
    assert Controls.wanted(DecodingOptions(beam_size=1), inputs)
    rows = controls.rows([0, 0, 0], [[], [10, 21], [10, 20, 30, 31]])
    assert rows[0].allowed.tolist() == [10, 11]
    assert rows[1].allowed.tolist() == [22, 30, 40, 50]
    assert rows[2].allowed.tolist() == [EOS]
    # a row the grammar no longer holds (a forced prefix took it out) is left alone
    assert controls.row(0, [10, 10]) is None


def test_a_forced_prefix_is_taken_as_given_and_the_grammar_holds_after_it():
    inputs = with_grammar(InputControls(prefixes=((11, 23),)), GRAMMAR)
    controls = Controls(DecodingOptions(beam_size=1), inputs, EOS)
    assert controls.row(0, []).forced == 11 and controls.row(0, []).allowed is None
    assert controls.row(0, [11, 23]).allowed.tolist() == [30, 40, 50]
    assert inputs.subset([0]).grammar is GRAMMAR


def test_controlled_search_never_leaves_the_allowed_tokens():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 64)).astype(np.float32)
    logits[:, 10] = 50.0  # the model's favourite everywhere: "a"
    controls = Controls(DecodingOptions(beam_size=4), with_grammar(None, GRAMMAR), EOS)
    rows = controls.rows([0, 0, 0], [[10], [10, 21], [10, 20, 30, 31]])
    found = controlled(logits, [rows[r] for r in range(3)], SearchRequest(k=8))
    finite = [set(found.ids[r][np.isfinite(found.log_probs[r])].tolist()) for r in range(3)]
    assert finite == [{20, 21}, {22, 30, 40, 50}, {EOS}]
    # log-probabilities over the allowed tokens alone: they sum to 1 where k covers them
    kept = [np.exp(found.log_probs[r][np.isfinite(found.log_probs[r])]).sum() for r in range(3)]
    assert np.allclose(kept, 1.0, atol=1e-5)
