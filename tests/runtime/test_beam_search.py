"""BeamSearch against beam search written out per input, over a scripted model whose
log-probabilities come from a few exact values, so that equal scores (and so the tie order)
are common."""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest

from service.runtime.decoding import BeamSearch, DecodingOptions, Hypothesis, run
from service.runtime.search import Candidates

BOS, EOS, VOCAB, SPAN = 1, 2, 12, 5


def scripted(source: int, prefix: list[int], width: int):
    """The scripted model after `prefix` (tokens after `<s>`): `width` distinct tokens with
    their float32 log-probabilities, best first and equal ones by token (as the search graph
    orders them), and a cross-attention row."""
    rng = np.random.default_rng(zlib.crc32(repr((source, prefix)).encode()))
    tokens = rng.choice(np.arange(EOS, VOCAB), size=width, replace=False)
    log_probs = -rng.choice([0.25, 0.5, 0.75, 1.0, 1.5], size=width).astype(np.float32)
    order = np.lexsort((tokens, -log_probs))
    return tokens[order], log_probs[order], rng.random(SPAN).astype(np.float32)


class Scripted:
    """An Inference over the scripted model: it keeps each row's source and prefix."""

    def __init__(self, batch: int, width: int):
        self.rows = [(i, []) for i in range(batch)]
        self.width, self.fed = width, 0

    def search_step(self, tokens, request):
        assert request.k == self.width
        fed = tokens[:, 0].tolist() if self.fed else [None] * len(self.rows)  # `<s>` first
        assert self.fed or set(tokens[:, 0].tolist()) == {BOS}
        grown = zip(self.rows, fed, strict=True)
        self.rows = [(s, p if t is None else p + [t]) for (s, p), t in grown]
        self.fed += 1
        outs = [scripted(s, p, self.width) for s, p in self.rows]
        ids, log_probs, attention = (np.stack(x) for x in zip(*outs, strict=True))
        return Candidates(ids.astype(np.int64), log_probs), (
            attention if request.attention else None
        )

    def reorder(self, index):
        self.rows = [self.rows[i] for i in np.asarray(index).tolist()]


def _hypothesis(tokens, log_probs, attention, ended, penalty) -> Hypothesis:
    total = float(np.sum(log_probs, dtype=np.float64))
    return Hypothesis(
        tokens=tokens[:-1] if ended else list(tokens),
        log_prob=total,
        score=total / max(len(tokens), 1) ** penalty,
        token_log_probs=list(log_probs),
        alignment=np.stack(attention) if attention else None,
        finished=ended,
    )


def written_out(source: int, options: DecodingOptions, attention: bool):
    """One input's beam search: the n-best, and the best live hypothesis' tokens after each
    step while the input searches."""
    n, width = options.beam_size, 2 * options.beam_size
    live = [([], [], [], 0.0)]  # tokens, log-probs, attention rows, score
    finished, best_live = [], []
    for step in range(options.max_length):
        extensions = []
        for beam, (tokens, _, _, score) in enumerate(live):
            ids, lps, row = scripted(source, tokens, width)
            for token, log_prob in zip(ids.tolist(), lps, strict=True):
                extensions.append((score + float(log_prob), beam, token, float(log_prob), row))
        extensions.sort(key=lambda e: (-e[0], e[1], e[2]))
        kept = []
        for rank, (score, beam, token, log_prob, row) in enumerate(extensions[:width]):
            tokens, log_probs, seen, _ = live[beam]
            grown = (tokens + [token], log_probs + [log_prob], seen + [row] * attention, score)
            if token == EOS:
                if rank < n:
                    finished.append(_hypothesis(*grown[:3], True, options.length_penalty))
            elif len(kept) < n:
                kept.append(grown)
        live = kept
        if len(finished) >= n and not _may_improve(finished, live, step + 1, options):
            break
        best_live.append(live[0][0])
    else:
        finished += [_hypothesis(*h[:3], False, options.length_penalty) for h in live]
    return sorted(finished, key=lambda h: -h.score)[: options.num_hypotheses], best_live


def _may_improve(finished, live, steps: int, options: DecodingOptions) -> bool:
    """`generate`'s test of an input with `beam_size` finished hypotheses: whether its best
    live one, scored at its length (or at the limit, "never" with a penalty), beats the worst
    of its best `beam_size` finished ones; "full" never looks."""
    if options.beam_stop == "full":
        return False
    length = steps
    if options.beam_stop == "never" and options.length_penalty > 0:
        length = options.max_length
    worst = sorted(h.score for h in finished)[-options.beam_size]
    return live[0][3] / length**options.length_penalty > worst


def _same(a: Hypothesis, b: Hypothesis) -> None:
    assert (a.tokens, a.finished) == (b.tokens, b.finished)
    assert (a.log_prob, a.score, a.token_log_probs) == (b.log_prob, b.score, b.token_log_probs)
    if a.alignment is None or b.alignment is None:
        assert a.alignment is None and b.alignment is None
    else:
        np.testing.assert_array_equal(a.alignment, b.alignment)


@pytest.mark.parametrize(
    "batch, beam, max_length, nbest, penalty, attention",
    [
        (1, 2, 6, 1, 1.0, False),
        (5, 4, 9, 4, 1.0, True),
        (7, 3, 12, 2, 0.0, False),
        (3, 5, 4, 5, 2.0, True),
        (9, 2, 30, 2, 0.6, False),
    ],
)
def test_beam_search_is_beam_search_written_out_per_input(
    batch, beam, max_length, nbest, penalty, attention
):
    options = DecodingOptions(
        beam_size=beam, max_length=max_length, num_hypotheses=nbest, length_penalty=penalty
    )
    got = run(BeamSearch(batch, options, BOS, EOS), Scripted(batch, 2 * beam), attention)
    for source in range(batch):
        expected, _ = written_out(source, options, attention)
        assert len(got[source]) == len(expected) >= 1
        for a, b in zip(got[source], expected, strict=True):
            _same(a, b)


@pytest.mark.parametrize("stop", ["estimate", "never"])
@pytest.mark.parametrize(
    "batch, beam, max_length, penalty", [(6, 2, 12, 1.0), (5, 4, 9, 0.6), (4, 3, 14, 2.0)]
)
def test_an_input_stops_as_generate_stops_it(stop, batch, beam, max_length, penalty):
    """With `beam_stop` "estimate" (generate's early_stopping False) or "never", an input goes
    on past `beam_size` finished hypotheses while its best live one may still beat them."""
    options = DecodingOptions(
        beam_size=beam, max_length=max_length, num_hypotheses=beam, length_penalty=penalty,
        beam_stop=stop,
    )  # fmt: skip
    got = run(BeamSearch(batch, options, BOS, EOS), Scripted(batch, 2 * beam), False)
    full = replace(options, beam_stop="full")
    longer = 0
    for source in range(batch):
        expected, best_live = written_out(source, options, False)
        assert len(got[source]) == len(expected) >= 1
        for a, b in zip(got[source], expected, strict=True):
            _same(a, b)
        longer += len(best_live) > len(written_out(source, full, False)[1])
    assert longer  # some input searched longer than "full" lets it, or this shows nothing


def test_the_streamed_best_is_the_first_live_hypothesis_then_the_best_finished():
    options = DecodingOptions(beam_size=3, max_length=10, num_hypotheses=3)
    batch, width = 6, 6
    search, inference = BeamSearch(batch, options, BOS, EOS), Scripted(batch, width)
    outcomes = [written_out(source, options, False) for source in range(batch)]
    inference.reorder(search.sources)
    ended_early = 0
    while not search.done:
        rows = search.rows
        keep = search.advance(*inference.search_step(search.tokens, search.request(False)))
        for item, (nbest, best_live) in enumerate(outcomes):
            if item in search.active and search.rows:
                assert search.best_tokens(item) == best_live[search.steps - 1]
            elif len(best_live) < search.steps:  # done before max_length: its best finished
                ended_early += 1
                assert search.best_tokens(item) == max(nbest, key=lambda h: h.score).tokens
        if not search.done and not np.array_equal(keep, np.arange(rows)):
            inference.reorder(keep)
    assert ended_early  # the script ends some inputs early, or this checks nothing of them


def test_equal_scores_rank_by_beam_then_token():
    """Two beams whose extensions tie: the lower beam first, then the lower token."""
    options = DecodingOptions(beam_size=2, max_length=3, num_hypotheses=2)
    search = BeamSearch(1, options, BOS, EOS)
    first = Candidates(np.array([[7, 5, 9, 3], [7, 5, 9, 3]]), np.full((2, 4), -1.0, np.float32))
    search.advance(first, None)  # beam 0 only: 5 and 3 tie with 7 and 9; tokens 3 and 5 go on
    assert search.tokens[:, 0].tolist() == [3, 5]
    second = Candidates(np.array([[8, 4, 6, 10], [4, 8, 6, 10]]), np.full((2, 4), -0.5, np.float32))
    keep = search.advance(second, None)  # all tie: beam 0's 4 and 6, before beam 1's
    assert keep.tolist() == [0, 0] and search.tokens[:, 0].tolist() == [4, 6]
    assert search.best_tokens(0) == [3, 4]


def test_a_tie_at_the_edge_of_the_kept_candidates_ranks_by_token():
    """The 4th and 5th best extensions tie (beam 2 keeps 4); the row lists them against token
    order, so only the tie-break says which one is kept and, two `</s>` being ahead, goes on."""
    options = DecodingOptions(beam_size=2, max_length=5, num_hypotheses=2)
    search = BeamSearch(1, options, BOS, EOS)
    lps = np.array([[-1.0, -2.0, -3.0, -4.0]] * 2, np.float32)
    search.advance(Candidates(np.array([[3, 4, 5, 6]] * 2), lps), None)  # beams: 3 (-1), 4 (-2)
    ids = np.array([[EOS, 11, 13, 14], [EOS, 9, 5, 6]])
    lps = np.array([[-0.1, -0.2, -3.5, -4.0], [-0.05, -0.5, -0.5, -3.0]], np.float32)
    keep = search.advance(Candidates(ids, lps), None)
    # ranks: </s> (-1.1), 11 (-1.2), </s> (-2.05, past the best 2: dropped), then 9 and 5 (-2.5)
    assert keep.tolist() == [0, 1] and search.tokens[:, 0].tolist() == [11, 5]


def test_an_end_a_grammar_ruled_out_ends_nothing():
    """A row narrowed to fewer tokens than the candidates a beam needs (an output grammar)
    fills its k best with -inf ones in token order, `</s>` among them: such an `</s>`
    neither ends a hypothesis nor counts towards the `beam` finished that stop an input, and
    no -inf hypothesis is returned."""
    options = DecodingOptions(beam_size=2, max_length=4, num_hypotheses=2)
    search = BeamSearch(1, options, BOS, EOS)
    narrow = np.array([[9, EOS, 3, 4]] * 2)  # only 9 allowed; </s>, 3 and 4 are filler
    lps = np.array([[0.0, -np.inf, -np.inf, -np.inf]] * 2, np.float32)
    search.advance(Candidates(narrow, lps), None)
    assert search.ended.tolist() == [0] and search.rows == 2
    while not search.done:
        ids = np.array([[EOS, 5, 6, 7]] * search.rows)
        lps = np.tile(np.array([-0.1, -0.2, -0.3, -0.4], np.float32), (search.rows, 1))
        search.advance(Candidates(ids, lps), None)
    (nbest,) = search.results()
    assert nbest and all(np.isfinite(h.score) for h in nbest)
    assert all(h.tokens[0] == 9 for h in nbest)


def test_beam_searches_ranked_together_step_as_each_does_alone():
    """Beam searches of two beam sizes, one or several inputs each, between greedy ones, in
    one batch: ranked in one pass a beam size (`rank_together`), each ends as it does alone."""
    from service.runtime.decoding import GreedySearch, rank_together

    options = [DecodingOptions(beam_size=b, max_length=8, num_hypotheses=2) for b in (2, 3)]
    plan = [(0, 1), (None, 2), (1, 1), (0, 3), (1, 2), (0, 1), (None, 1), (1, 1)]

    def make(which, inputs):
        if which is None:
            return GreedySearch(inputs, DecodingOptions(max_length=8), BOS, EOS)
        return BeamSearch(inputs, options[which], BOS, EOS)

    searches = [make(w, i) for w, i in plan]
    alone = [make(w, i) for w, i in plan]
    firsts = np.cumsum([0] + [i for _, i in plan])
    sources = [list(range(firsts[j], firsts[j + 1])) for j in range(len(plan))]

    def candidates(search, own):  # the scripted model's, for each row of `search`
        rows = [
            scripted(own[s], p, 6)
            for s, p in zip(search.sources.tolist(), search.prefixes, strict=True)
        ]
        return Candidates(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))

    for group in (searches, alone):
        for s in group:
            s.prefixes = [[] for _ in range(s.rows)]
    grouped = 0
    while any(not s.done for s in searches):
        live = [(s, own) for s, own in zip(searches, sources, strict=True) if not s.done]
        parts = [candidates(s, own) for s, own in live]
        joined = Candidates(
            np.concatenate([c.ids for c in parts]), np.concatenate([c.log_probs for c in parts])
        )
        ranked = rank_together([s for s, _ in live], joined)
        grouped += sum(r is not None for r in ranked)
        for (s, _), chosen, own in zip(live, ranked, parts, strict=True):
            step = s.advance(own, None) if chosen is None else s.advance_ranked(chosen, None)
            _follow(s, step)
    for s, own in zip(alone, sources, strict=True):
        while not s.done:
            _follow(s, s.advance(candidates(s, own), None))
    assert grouped > len(plan)
    for a, b in zip(searches, alone, strict=True):
        for nbest_a, nbest_b in zip(a.results(), b.results(), strict=True):
            assert len(nbest_a) == len(nbest_b) >= 1
            for x, y in zip(nbest_a, nbest_b, strict=True):
                _same(x, y)


def _follow(search, keep) -> None:
    """Each row's prefix after a step: the kept rows' prefixes, with the token each is fed."""
    if search.done:
        return
    search.prefixes = [
        search.prefixes[i] + [t]
        for i, t in zip(keep.tolist(), search.tokens[:, 0].tolist(), strict=True)
    ]
