"""Decoding strategies over the PyTorch engine, on the shipped model and a random one."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_sources, tiny_transformer

from models.reference import TorchEngine
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions, decode
from service.runtime.errors import InvalidArgument
from service.runtime.inference import CachedInference, UncachedInference
from service.runtime.search import host_search, log_softmax
from service.runtime.tokenizer import BOS_ID, EOS_ID


class Recording:
    """Wraps an Inference and keeps every step's logits (its search runs on the host)."""

    def __init__(self, inner):
        self.inner, self.logits = inner, []

    def step(self, tokens):
        logits, attention = self.inner.step(tokens)
        self.logits.append(logits.copy())
        return logits, attention

    def search_step(self, tokens, request):
        logits, attention = self.step(tokens)
        return host_search(logits, request), attention if request.attention else None

    def reorder(self, index):
        self.inner.reorder(index)


def _sources(request, kind: str):
    """(engine, token id lists, max_length) for the shipped model or a tiny random one."""
    if kind == "shipped":
        from models.corpus import read_split

        model, tokenizer = request.getfixturevalue("shipped_translator")
        texts, _ = read_split(request.getfixturevalue("translator_data"), "test")
        texts = texts[:6]  # the first test lines, one or two sentences each, decoded whole
        return TorchEngine(model), tokenizer.encode_batch(texts), 48
    model = tiny_transformer().double()  # amplified weights: float64 keeps 1e-5 meaningful
    return TorchEngine(model), random_sources(model.config.vocab_size, [3, 9, 1, 14, 6]), 24


def _decode(engine, sources, options, inference_type=CachedInference, record=False):
    src, mask = source_batch(sources, 512)
    inference = inference_type(engine, engine.encode(src, mask), len(sources))
    if record:
        inference = Recording(inference)
    return decode(inference, len(sources), options, BOS_ID, EOS_ID), inference


@pytest.fixture(params=["shipped", "tiny"])
def case(request):
    return _sources(request, request.param)


def test_cached_decoding_equals_full_recomputation(case):
    engine, sources, max_length = case
    options = DecodingOptions(max_length=max_length)
    for row in sources:  # one row at a time: steps line up one to one
        cached, a = _decode(engine, [row], options, CachedInference, record=True)
        uncached, b = _decode(engine, [row], options, UncachedInference, record=True)
        assert cached[0][0].tokens == uncached[0][0].tokens
        assert len(a.logits) == len(b.logits) > 0
        for x, y in zip(a.logits, b.logits, strict=True):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-5)


def test_a_row_decodes_the_same_alone_and_in_a_padded_batch(case):
    engine, sources, max_length = case
    for options in (
        DecodingOptions(max_length=max_length),
        DecodingOptions(beam_size=3, max_length=max_length),
    ):
        batched, _ = _decode(engine, sources, options)
        for row, together in zip(sources, batched, strict=True):
            alone, _ = _decode(engine, [row], options)
            assert alone[0][0].tokens == together[0].tokens
            assert alone[0][0].score == pytest.approx(together[0].score, abs=1e-4)


def test_beam_size_one_equals_greedy(case):
    engine, sources, max_length = case
    greedy, _ = _decode(engine, sources, DecodingOptions(max_length=max_length))
    beam, _ = _decode(engine, sources, DecodingOptions(beam_size=1, max_length=max_length))
    from service.runtime.decoding import BeamSearch, GreedySearch, run

    src, mask = source_batch(sources, 512)
    options = DecodingOptions(max_length=max_length)
    forced, plain = (
        run(
            search(len(sources), options, BOS_ID, EOS_ID),
            CachedInference(engine, engine.encode(src, mask), len(sources)),
        )
        for search in (BeamSearch, GreedySearch)
    )
    for g, b, f, p in zip(greedy, beam, forced, plain, strict=True):
        assert g[0].tokens == b[0].tokens == f[0].tokens == p[0].tokens
        assert f[0].score == pytest.approx(p[0].score, abs=1e-5)
        np.testing.assert_allclose(f[0].token_log_probs, p[0].token_log_probs, atol=1e-5)


def test_nbest_is_sorted_distinct_and_complete(case):
    engine, sources, max_length = case
    options = DecodingOptions(beam_size=4, num_hypotheses=4, max_length=max_length)
    results, _ = _decode(engine, sources, options)
    for nbest in results:
        assert len(nbest) == 4
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 4
        for h in nbest:
            assert h.log_prob == pytest.approx(sum(h.token_log_probs), abs=1e-4)
            steps = len(h.tokens) + int(h.finished)
            assert h.alignment.shape[0] == len(h.token_log_probs) == steps
            assert h.finished or steps == max_length  # unfinished only when cut at the limit
            np.testing.assert_allclose(h.alignment.sum(-1), 1.0, atol=1e-4)


def test_beam_search_finds_at_least_the_greedy_score(case):
    engine, sources, max_length = case
    greedy, _ = _decode(engine, sources, DecodingOptions(max_length=max_length, length_penalty=0))
    beam, _ = _decode(
        engine, sources, DecodingOptions(beam_size=4, max_length=max_length, length_penalty=0)
    )
    assert sum(b[0].score >= g[0].score - 1e-4 for g, b in zip(greedy, beam, strict=True)) >= (
        len(sources) - 1
    )


def test_max_length_ends_hypotheses_without_eos():
    model = tiny_transformer()
    engine = TorchEngine(model)
    results, _ = _decode(
        engine,
        random_sources(model.config.vocab_size, [5, 8]),
        DecodingOptions(beam_size=2, max_length=3, num_hypotheses=2),
    )
    for nbest in results:
        for h in nbest:
            assert len(h.token_log_probs) <= 3
            assert h.finished or len(h.tokens) == 3


def test_options_report_every_bad_field_at_once():
    options = DecodingOptions(beam_size=0, max_length=5000, num_hypotheses=3)
    with pytest.raises(InvalidArgument, match=r"beam_size.*max_length.*num_hypotheses"):
        options.validate(max_length_limit=512)


def _sample(engine, sources, max_length, **sampling):
    options = DecodingOptions(max_length=max_length, **sampling)
    return [[h.tokens for h in nbest] for nbest in _decode(engine, sources, options)[0]]


def test_sampling_is_reproducible_by_seed_and_varies_without_it(case):
    engine, sources, max_length = case
    first = _sample(engine, sources, max_length, temperature=1.5, num_hypotheses=3, seed=7)
    again = _sample(engine, sources, max_length, temperature=1.5, num_hypotheses=3, seed=7)
    other = _sample(engine, sources, max_length, temperature=1.5, num_hypotheses=3, seed=8)
    assert first == again
    assert first != other
    assert all(len(samples) == 3 for samples in first)


@pytest.mark.parametrize("sampling", [{"top_k": 1}, {"top_p": 1e-6}, {"temperature": 1e-4}])
def test_sampling_narrowed_to_one_token_is_greedy(case, sampling):
    engine, sources, max_length = case
    greedy = _sample(engine, sources, max_length)
    narrowed = _sample(engine, sources, max_length, **{"temperature": 1.0, "seed": 1, **sampling})
    assert narrowed == greedy


def test_sampled_log_probs_are_the_models_own(case):
    engine, sources, max_length = case
    options = DecodingOptions(max_length=max_length, temperature=3.0, seed=3)
    sample = _decode(engine, sources[:1], options)[0][0][0]
    src, mask = source_batch(sources[:1], 512)
    prefix = [BOS_ID]
    # tokens exclude the final `</s>` step, so zip stops before it
    for token, log_prob in zip(sample.tokens, sample.token_log_probs, strict=False):
        inference = UncachedInference(engine, engine.encode(src, mask), 1)
        logits, _ = inference.step(np.asarray([prefix], dtype=np.int64))
        assert log_softmax(logits)[0, token] == pytest.approx(log_prob, abs=1e-4)
        prefix.append(token)
    assert len(prefix) > 3  # the sample was long enough to check several steps


def test_sampling_options_are_checked():
    with pytest.raises(InvalidArgument, match=r"top_p must be in \(0, 1\].*needs beam_size 1"):
        DecodingOptions(temperature=1.0, top_p=0.0, beam_size=2).validate(512)
    for temperature in (-1.0, 1e-40, 0.009, 101.0):
        with pytest.raises(InvalidArgument, match=r"temperature must be 0 \(no sampling\)"):
            DecodingOptions(temperature=temperature).validate(512)
    DecodingOptions(temperature=0.01).validate(512)  # the least accepted


@pytest.mark.parametrize("max_length", [3, 50, 150])
def test_greedy_lanes_advance_as_greedy_searches(max_length):
    """Lanes of GreedyRows (the scheduler's path for one-row greedy jobs, advanced together)
    give each row the hypothesis GreedySearch gives it: tokens, log-probabilities, score and
    end, lanes ending at other steps (an `</s>`, or max_length past the arrays' first width)."""
    from service.runtime.decoding import GreedySearch
    from service.runtime.search import Candidates
    from service.worker.greedy_rows import GreedyRows

    options = DecodingOptions(beam_size=1, max_length=max_length)
    rng = np.random.default_rng(4)
    rows = 5
    searches = [GreedySearch(1, options, BOS_ID, EOS_ID) for _ in range(rows)]
    lanes = GreedyRows(8, EOS_ID)
    owner = np.array([7, 0, 3, 5, 1])  # lanes in no particular order
    lanes.start_many(owner, np.full(rows, max_length), np.zeros(rows, bool))
    ends_at = [7, 90, 2, 200, 40]  # the step each row's </s> comes, if it gets that far
    live, step = np.arange(rows), 0
    while len(live):
        ids = np.array([EOS_ID if step == ends_at[r] else int(rng.integers(4, 100)) for r in live])
        log_probs = (-rng.random(len(live))).astype(np.float32)
        ended = lanes.advance(owner[live], ids, log_probs)
        for i, r in enumerate(live.tolist()):
            candidates = Candidates(ids[i : i + 1, None], log_probs[i : i + 1, None])
            kept = searches[r].advance(candidates, None)
            assert bool(ended[i]) == (len(kept) == 0)
        live, step = live[~ended], step + 1
    for r in range(rows):
        (expected,) = searches[r].results()[0]
        got = lanes.hypothesis(int(owner[r]), options.length_penalty)
        assert got.tokens == expected.tokens and got.finished == expected.finished
        assert got.token_log_probs == expected.token_log_probs
        assert (got.log_prob, got.score) == (expected.log_prob, expected.score)


def test_an_input_s_samples_do_not_depend_on_the_inputs_beside_it(exported_translator):
    """ "The same seed, input and version give the same samples": an input sampled alone,
    after another input or before two, with one sample or three, gives the same ones (a
    server cuts a request into jobs as its rows allow, and caches each input's answer)."""
    from service.runtime.onnx_engine import OnnxEngine
    from service.runtime.tokenizer import Tokenizer
    from service.runtime.translation import translate_ids

    version = exported_translator[0]
    engine = OnnxEngine(version, "fp32")
    a, b, c = Tokenizer(version.tokenizer_file).encode_batch(
        ["El gato duerme en la casa.", "Hola.", "Buenos días, señor."]
    )
    for n in (1, 3):
        options = DecodingOptions(temperature=1.0, seed=7, num_hypotheses=n, max_length=24)

        def samples(batch, at, options=options):
            nbest = translate_ids(engine, batch, options, 512)[at]
            return sorted((h.tokens, round(h.log_prob, 4)) for h in nbest)

        alone = samples([a], 0)
        assert samples([b, a], 1) == alone and samples([a, b, c], 0) == alone
        assert samples([c, b, a], 2) == alone


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (3, 1.0), (0, 0.6), (5, 0.8)])
def test_the_sampled_draw_is_generator_choice_row_by_row(top_k, top_p):
    """All rows drawn at once give what numpy's Generator.choice(len(p), p=p) gives row by row
    with the same seed: the same samples for a seed as before the draw was vectorised."""
    from service.runtime.decoding import sampler
    from service.runtime.search import Candidates

    rng = np.random.default_rng(11)
    scores = np.sort(np.log(rng.dirichlet(np.ones(40), size=64)).astype(np.float32), axis=1)
    candidates = Candidates(np.zeros((64, 40), np.int64), scores[:, ::-1], scores[:, ::-1])
    options = DecodingOptions(temperature=1.0, top_k=top_k, top_p=top_p, seed=5)
    choose, reference = sampler(options), np.random.default_rng(5)
    for _ in range(3):  # the generator's state carries on between steps alike
        got = choose(candidates)
        probs = np.exp(candidates.scores)
        keep = np.ones_like(probs, dtype=bool)
        if top_k:
            keep[:, top_k:] = False
        if top_p < 1.0:
            keep &= np.cumsum(probs, axis=1) - probs < top_p
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=1, keepdims=True)
        expected = [reference.choice(len(p), p=p) for p in probs]
        assert got.tolist() == expected
        assert len(set(expected)) > 1  # the draw is not one column everywhere
