"""Decoding controls: what a request asks of its outputs beyond the search itself.

Request-wide (`DecodingOptions`): a minimum length, no repeated n-gram, a repetition
penalty, suppressed token sequences and a length bound relative to the input. Per input
(`InputControls`): its step limit (the length bound applied to its length) and a forced start
(a target prefix; forcing a whole output scores it). Model-wide: the output grammar a version
ships (`service.runtime.grammar`), which narrows every row to the tokens that may come next.
A model may end every output at the limit with `</s>` (`DecodingOptions.end_at_limit`, as
`generate`'s forced_eos_token_id).

Every control is a change to one row's logits at one step (`search.RowControl`), worked out
here from what the row produced so far. A row no control touches at a step costs nothing: the
engine searches it where its logits are (on a GPU, on the device); only the touched rows'
logits come to the host, where they are changed and searched (`search.controlled`), so every
engine and path decodes a controlled row by the same numpy reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from service.runtime.grammar import Grammar
from service.runtime.search import RowControl

LENGTH_MARGIN = 10  # steps allowed beyond max_length_ratio x the input's tokens
_NONE = np.zeros(0, dtype=np.int64)


def with_grammar(inputs: InputControls | None, grammar: Grammar | None) -> InputControls | None:
    """`inputs` with the model's output grammar (unchanged where it has none)."""
    if grammar is None:
        return inputs
    return InputControls(grammar=grammar) if inputs is None else replace(inputs, grammar=grammar)


@dataclass(frozen=True)
class InputControls:
    """What differs between the inputs of one decode: each one's step limit (None: the
    options' max_length for every input), forced first tokens (None: none), and how many of
    those the model is given (None: none): a given token (a multilingual model's target
    language) has log-probability 0, as `generate` forces it, the others the model's own.
    `grammar`: the model's output grammar, the same for every input (None: none)."""

    max_lengths: tuple[int, ...] | None = None
    prefixes: tuple[tuple[int, ...], ...] | None = None
    given: tuple[int, ...] | None = None
    grammar: Grammar | None = None

    def subset(self, indices: list[int]) -> InputControls:
        def pick(values):
            return None if values is None else tuple(values[i] for i in indices)

        return InputControls(
            pick(self.max_lengths), pick(self.prefixes), pick(self.given), self.grammar
        )

    @property
    def forced(self) -> bool:
        return self.prefixes is not None and any(self.prefixes)


def length_limit(max_length: int, ratio: float, input_tokens: int) -> int:
    """An input's step limit: `max_length`, and at most ratio x its tokens plus the margin
    (a ratio of 0 bounds nothing)."""
    if ratio <= 0:
        return max_length
    return max(1, min(max_length, int(ratio * input_tokens) + LENGTH_MARGIN))


class Controls:
    """The row controls of one decode's options and inputs."""

    def __init__(self, options, inputs: InputControls | None, eos: int):
        self.eos, self.min_length = eos, options.min_length
        self.ngram, self.penalty = options.no_repeat_ngram_size, options.repetition_penalty
        self.always = np.array([s[0] for s in options.suppress if len(s) == 1], dtype=np.int64)
        self.sequences = [list(s) for s in options.suppress if len(s) > 1]
        self.prefixes = inputs.prefixes if inputs is not None and inputs.forced else None
        self.given = inputs.given if self.prefixes is not None else None
        self.grammar = None if inputs is None else inputs.grammar
        # the last step writes `</s>`, given (generate's forced_eos_token_id)
        self.end_step = options.max_length - 1 if options.end_at_limit else -1

    @staticmethod
    def wanted(options, inputs: InputControls | None) -> bool:
        """Whether `options` and `inputs` change any row's logits."""
        return bool(
            options.min_length
            or options.no_repeat_ngram_size
            or options.repetition_penalty != 1.0
            or options.suppress
            or options.end_at_limit
            or (inputs is not None and (inputs.forced or inputs.grammar is not None))
        )

    def rows(self, items: list[int], histories: list[list[int]]) -> dict[int, RowControl]:
        """The controls of rows decoding `items` that produced `histories`, by row (only
        the rows a control changes)."""
        controls = {}
        for row, (item, history) in enumerate(zip(items, histories, strict=True)):
            control = self.row(item, history)
            if control is not None:
                controls[row] = control
        return controls

    def row(self, item: int, history: list[int]) -> RowControl | None:
        """The control of a row of input `item` that produced `history` (None: nothing
        changes its logits at this step)."""
        steps = len(history)
        forced, given = -1, False
        if self.prefixes is not None and steps < len(prefix := self.prefixes[item]):
            forced = prefix[steps]
            given = self.given is not None and steps < self.given[item]
        elif steps == self.end_step:
            forced, given = self.eos, True
        banned = [self.eos] if steps < self.min_length else []
        for sequence in self.sequences:
            start = steps - len(sequence) + 1
            if start >= 0 and history[start:] == sequence[:-1]:
                banned.append(sequence[-1])
        n = self.ngram
        if n and steps >= n - 1:
            last = history[steps - n + 1 :]
            for i in range(steps - n + 1):
                if history[i : i + n - 1] == last:
                    banned.append(history[i + n - 1])
        penalized = _NONE
        if self.penalty != 1.0 and history:
            penalized = np.unique(np.asarray(history, dtype=np.int64))
        allowed = None
        if self.grammar is not None and forced < 0:
            allowed = self.grammar.next_tokens(history, self.eos)
        if (
            forced < 0
            and allowed is None
            and not banned
            and not len(self.always)
            and not len(penalized)
        ):
            return None
        if banned:
            banned_tokens = np.unique(np.concatenate([self.always, banned]).astype(np.int64))
        else:
            banned_tokens = self.always
        return RowControl(penalized, self.penalty, banned_tokens, forced, given, allowed)


LOOP_NGRAM = 3  # a loop: one n-gram of this many tokens ...
LOOP_TIMES = 3  # ... this many times ...
LOOP_SPAN = 8 * LOOP_NGRAM  # ... its occurrences within this many tokens


def loop_start(tokens: Sequence[int], source: Sequence[int], kept: int = 0) -> int | None:
    """Where an output starts to loop: the start of the LOOP_TIMES-th occurrence of one
    n-gram of LOOP_NGRAM tokens within LOOP_SPAN tokens, among the tokens after the first
    `kept` (a forced prefix, which stays whole); None where it does not, or where the source
    itself repeats an n-gram that often (a translation of repeated words repeats them too)."""
    if _first_loop(source) is not None:
        return None
    found = _first_loop(tokens[kept:])
    return None if found is None else kept + found


def _first_loop(tokens: Sequence[int]) -> int | None:
    if len(tokens) - len(set(tokens)) < LOOP_TIMES - 1:  # no token comes LOOP_TIMES times
        return None
    seen: dict[tuple[int, ...], list[int]] = {}
    for i in range(len(tokens) - LOOP_NGRAM + 1):
        starts = seen.setdefault(tuple(tokens[i : i + LOOP_NGRAM]), [])
        starts.append(i)
        if len(starts) >= LOOP_TIMES and i - starts[-LOOP_TIMES] < LOOP_SPAN:
            return i
    return None
