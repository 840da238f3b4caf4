"""An output grammar: the token sequences a model version may produce, enforced while decoding.

A model version can ship one in its manifest (`grammar`): a list of patterns, each a sequence
of slot names, and for every slot the phrases (token id sequences) that may fill it. An output
is in the language when it is one pattern's slots filled in order, one phrase each. The
captioner ships the grammar of its captions ("a cat to the left of a dog", "two bananas on the
right"), so that on any image, however far from what it was trained on, it writes a caption
of the same form: never an article twice, never a word twice in a row, never a name cut off.

Decoding asks `next_tokens(history, end)`: the tokens that may come next after the tokens
produced so far, `</s>` among them where the output may end there. The phrases of a slot are
a trie; a state is the set of (pattern, slot, trie node) a prefix can be at, found lazily and
remembered, so a step costs a walk of the row's few tokens through dictionaries. A history
outside the language (a forced prefix that leaves it) is not constrained further:
`next_tokens` returns None.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_Position = tuple[int, int, int]  # (pattern, slot index in it, trie node of the slot's set)
_State = frozenset[_Position]


class _Trie:
    """The phrases of one slot: node 0 is the root; `ends` the nodes where a phrase ends."""

    def __init__(self, phrases: Sequence[Sequence[int]]):
        self.children: list[dict[int, int]] = [{}]
        self.ends: set[int] = set()
        for phrase in phrases:
            if not phrase:
                raise ValueError("a grammar phrase is empty")
            node = 0
            for token in phrase:
                node = self.children[node].setdefault(int(token), len(self.children))
                if node == len(self.children):
                    self.children.append({})
            self.ends.add(node)


class Grammar:
    """The language of `patterns` (lists of slot names) over `slots` (name -> phrases)."""

    def __init__(
        self, patterns: Sequence[Sequence[str]], slots: dict[str, Sequence[Sequence[int]]]
    ):
        if not patterns or any(not p for p in patterns):
            raise ValueError("a grammar needs at least one pattern, none empty")
        unknown = sorted({s for p in patterns for s in p} - set(slots))
        if unknown:
            raise ValueError(f"grammar patterns name unknown slots: {', '.join(unknown)}")
        self.patterns = [list(p) for p in patterns]
        self.tries = {name: _Trie(phrases) for name, phrases in slots.items()}
        self.start: _State = frozenset((p, 0, 0) for p in range(len(self.patterns)))
        self._next: dict[tuple[_State, int], _State] = {}
        self._allowed: dict[_State, tuple[np.ndarray, bool]] = {}
        self._with_end: dict[tuple[_State, int], np.ndarray] = {}

    @classmethod
    def from_manifest(cls, values: dict | None) -> Grammar | None:
        """The grammar a manifest's `grammar` field describes (None: the version has none)."""
        if not values:
            return None
        return cls(values["patterns"], values["slots"])

    def _trie(self, position: _Position) -> _Trie:
        pattern, slot, _ = position
        return self.tries[self.patterns[pattern][slot]]

    def _done(self, position: _Position) -> bool:
        return position[1] == len(self.patterns[position[0]])

    def step(self, state: _State, token: int) -> _State:
        """The state after `token` (empty: the token leaves the language)."""
        key = (state, token)
        found = self._next.get(key)
        if found is None:
            positions = set()
            for position in state:
                if self._done(position):
                    continue
                pattern, slot, node = position
                trie = self._trie(position)
                child = trie.children[node].get(token)
                if child is None:
                    continue
                if trie.children[child]:
                    positions.add((pattern, slot, child))  # a longer phrase goes on
                if child in trie.ends:
                    positions.add((pattern, slot + 1, 0))  # the slot is filled
            found = self._next[key] = frozenset(positions)
        return found

    def state(self, history: Sequence[int]) -> _State:
        """The state after `history` (empty where it left the language)."""
        state = self.start
        for token in history:
            state = self.step(state, token)
            if not state:
                break
        return state

    def allowed_in(self, state: _State) -> tuple[np.ndarray, bool]:
        """(the tokens that may follow, sorted int64; whether the output may end) at `state`."""
        found = self._allowed.get(state)
        if found is None:
            tokens: set[int] = set()
            final = False
            for position in state:
                if self._done(position):
                    final = True
                else:
                    tokens.update(self._trie(position).children[position[2]])
            found = self._allowed[state] = (np.array(sorted(tokens), dtype=np.int64), final)
        return found

    def next_tokens(self, history: Sequence[int], end: int) -> np.ndarray | None:
        """The tokens that may follow `history`, `end` (`</s>`) among them where the output
        may end there; None outside the language. Kept per state: a decode step asks it of
        every row."""
        state = self.state(history)
        if not state:
            return None
        key = (state, end)
        found = self._with_end.get(key)
        if found is None:
            tokens, may_end = self.allowed_in(state)
            found = self._with_end[key] = np.append(tokens, end) if may_end else tokens
        return found

    def accepts(self, tokens: Sequence[int]) -> bool:
        """Whether `tokens` (without `</s>`) is a whole output of the language."""
        state = self.state(tokens)
        return bool(state) and self.allowed_in(state)[1]
