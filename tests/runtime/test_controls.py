"""Decoding controls (service.runtime.controls): each one's meaning, checked against a decode
by whole logits with the control applied by hand, on every path that searches a step (numpy
on the host, the search graph, the static step's lean search), and the same tokens on all."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from helpers import built_tiny_translator

from service.runtime.batch import joined
from service.runtime.batching import source_batch
from service.runtime.controls import LENGTH_MARGIN, Controls, InputControls, length_limit
from service.runtime.decoding import DecodingOptions, decode
from service.runtime.errors import InvalidArgument
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.search import RowControl, SearchRequest, controlled, log_softmax
from service.runtime.tokenizer import BOS_ID, EOS_ID, Tokenizer
from service.runtime.translation import score_ids

MAX_LENGTH = 24


def by_hand(engine, source: list[int], options: DecodingOptions, prefix=(), limit=None):
    """Greedy tokens (`</s>` kept) from each step's whole logits, every control applied here."""
    encoder = engine.encode(*source_batch([source], 512))
    inference = CachedInference(engine, encoder, 1)
    out: list[int] = []
    fed = BOS_ID
    for _ in range(limit or options.max_length):
        logits, _ = inference.step(np.array([[fed]], dtype=np.int64))
        x = logits[0].astype(np.float32)
        t = len(out)
        if t < len(prefix):
            fed = prefix[t]
        else:
            for token in set(out):
                p = options.repetition_penalty
                x[token] = x[token] * p if x[token] < 0 else x[token] / p
            if t < options.min_length:
                x[EOS_ID] = -np.inf
            for sequence in options.suppress:
                if len(sequence) == 1 or out[t - len(sequence) + 1 :] == list(sequence[:-1]):
                    x[sequence[-1]] = -np.inf
            n = options.no_repeat_ngram_size
            if n and t >= n - 1:
                for i in range(t - n + 1):
                    if out[i : i + n - 1] == out[t - n + 1 :]:
                        x[out[i + n - 1]] = -np.inf
            fed = int(np.argmax(x))
        out.append(fed)
        if fed == EOS_ID:
            break
    return out


def decoded(engine, sources, options, inputs=None, inference_type=CachedInference):
    src, mask = source_batch(sources, 512)
    inference = inference_type(engine, engine.encode(src, mask), len(sources))
    return decode(inference, len(sources), options, BOS_ID, EOS_ID, inputs=inputs)


def with_eos(h) -> list[int]:
    return h.tokens + [EOS_ID] * h.finished


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shipped_translator):
    """A tiny random translator (its outputs repeat themselves: every control has work) and
    a few sources."""
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    _, version = built_tiny_translator(directory, shipped_translator[1], 7, ("fp32", "fp16"))
    rng = np.random.default_rng(1)
    vocab = int(version.config["vocab_size"])
    return version, [list(rng.integers(4, vocab, size=n)) for n in (5, 9, 3, 12)]


def engines(version):
    """Every path a step's search takes, by name."""
    return {
        "host": OnnxEngine(version, "fp32", device_search=False),
        "search graph": OnnxEngine(version, "fp32", io_binding=True, device_search=True),
        "static step": OnnxEngine(version, "fp32", cache="static"),
    }


CONTROLS = {
    "min_length": DecodingOptions(max_length=MAX_LENGTH, min_length=15),
    "no_repeat_ngram_size": DecodingOptions(max_length=MAX_LENGTH, no_repeat_ngram_size=2),
    "repetition_penalty": DecodingOptions(max_length=MAX_LENGTH, repetition_penalty=3.0),
    "suppress": DecodingOptions(max_length=MAX_LENGTH, suppress=((10,), (11, 12))),
}


def test_without_controls_the_tiny_model_repeats_itself(tiny):
    """What the controls below change is there to change: repeats and short outputs."""
    version, sources = tiny
    engine = OnnxEngine(version, "fp32", device_search=False)
    plain = [by_hand(engine, s, DecodingOptions(max_length=MAX_LENGTH)) for s in sources]
    assert any(len(set(pairwise(o))) < len(o) - 1 for o in plain)


@pytest.mark.parametrize("name", list(CONTROLS))
def test_each_control_decodes_as_by_hand_on_every_path(tiny, name):
    version, sources = tiny
    options = CONTROLS[name]
    if name == "suppress":  # the tokens the plain decode likes most are the ones suppressed
        engine = OnnxEngine(version, "fp32", device_search=False)
        plain = [t for s in sources for t in by_hand(engine, s, DecodingOptions(max_length=8))]
        common = [int(t) for t in np.bincount(plain).argsort()[::-1] if t != EOS_ID]
        options = replace(options, suppress=((common[0],), (common[1], common[2])))
    every = engines(version)
    expected = [by_hand(every["host"], s, options) for s in sources]
    for path, engine in every.items():
        inference = joined if path == "static step" else CachedInference
        got = decoded(engine, sources, options, inference_type=inference)
        assert [with_eos(n[0]) for n in got] == expected, path


def test_a_target_prefix_starts_every_output_and_beam_and_sampling_keep_it(tiny):
    version, sources = tiny
    prefixes = ((20, 21, 22), (), (23,), (24, 25))
    inputs = InputControls(prefixes=prefixes)
    for options in (
        DecodingOptions(max_length=MAX_LENGTH),
        DecodingOptions(max_length=MAX_LENGTH, beam_size=3, num_hypotheses=2),
        # sharpened: the tiny random model's distribution is near flat, where two tokens'
        # probabilities within float32's error of numpy's and onnxruntime's can trade places
        # in the ranked candidates (and a draw then names the other); at 0.5 none do
        DecodingOptions(max_length=MAX_LENGTH, temperature=0.5, seed=3, num_hypotheses=2),
    ):
        results = {}
        for path, engine in engines(version).items():
            inference = joined if path == "static step" else CachedInference
            got = decoded(engine, sources, options, inputs, inference)
            for prefix, nbest in zip(prefixes, got, strict=True):
                assert all(h.tokens[: len(prefix)] == list(prefix) for h in nbest)
            results[path] = [[h.tokens for h in n] for n in got]
        assert results["host"] == results["search graph"] == results["static step"]
    engine = OnnxEngine(version, "fp32", device_search=False)
    greedy = decoded(engine, sources, DecodingOptions(max_length=MAX_LENGTH), inputs)
    for source, prefix, nbest in zip(sources, prefixes, greedy, strict=True):
        expected = by_hand(engine, source, DecodingOptions(max_length=MAX_LENGTH), prefix)
        assert with_eos(nbest[0]) == expected


@pytest.mark.parametrize(
    "options",
    [
        DecodingOptions(max_length=MAX_LENGTH, beam_size=4, num_hypotheses=2, min_length=12),
        DecodingOptions(max_length=MAX_LENGTH, beam_size=3, no_repeat_ngram_size=1),
        DecodingOptions(max_length=MAX_LENGTH, temperature=0.9, seed=4, repetition_penalty=2.0),
    ],
    ids=["beam min_length", "beam no repeat", "sampling penalty"],
)
def test_beam_and_sampling_keep_the_controls_and_every_path_agrees(tiny, options):
    version, sources = tiny
    results = {}
    for path, engine in engines(version).items():
        inference = joined if path == "static step" else CachedInference
        got = decoded(engine, sources, options, inference_type=inference)
        for nbest in got:
            for h in nbest:
                if options.min_length:
                    assert len(h.tokens) >= options.min_length
                if options.no_repeat_ngram_size == 1:
                    assert len(set(h.tokens)) == len(h.tokens)
        results[path] = [[(h.tokens, round(h.score, 4)) for h in n] for n in got]
    assert results["host"] == results["search graph"] == results["static step"]


def test_inputs_stop_at_their_own_step_limit(tiny):
    version, sources = tiny
    engine = OnnxEngine(version, "fp32", device_search=False)
    limits = tuple(length_limit(MAX_LENGTH, 0.5, len(s)) - LENGTH_MARGIN + 1 for s in sources)
    inputs = InputControls(max_lengths=limits)
    for options in (
        DecodingOptions(max_length=MAX_LENGTH),
        DecodingOptions(max_length=MAX_LENGTH, beam_size=3, num_hypotheses=3),
    ):
        free = decoded(engine, sources, options)
        got = decoded(engine, sources, options, inputs)
        for limit, bounded, unbounded in zip(limits, got, free, strict=True):
            assert all(len(with_eos(h)) <= limit for h in bounded)
            longest = max(len(with_eos(h)) for h in unbounded)
            if longest <= limit:  # never reached: the same decode
                assert [h.tokens for h in bounded] == [h.tokens for h in unbounded]
            else:
                assert max(len(with_eos(h)) for h in bounded) == limit


def test_the_length_limit_follows_the_ratio():
    assert length_limit(256, 2.0, 7) == 24
    assert length_limit(20, 2.0, 7) == 20
    assert length_limit(256, 0.0, 7) == 256


def test_row_controls_say_what_changes_and_nothing_when_nothing_does():
    options = DecodingOptions(min_length=2, no_repeat_ngram_size=2, suppress=((7,), (8, 9)))
    controls = Controls(options, InputControls(prefixes=((5, 6), ())), EOS_ID)
    first = controls.row(0, [])
    assert first.forced == 5 and EOS_ID in first.banned and 7 in first.banned
    row = controls.row(1, [4, 8, 4])  # ends with "4": "4 8" was seen; ends with no "8"
    assert set(row.banned.tolist()) == {7, 8}
    assert set(controls.row(1, [3, 8]).banned.tolist()) == {7, 9}
    plain = Controls(DecodingOptions(no_repeat_ngram_size=3), None, EOS_ID)
    assert plain.row(0, [1, 2]) is None and plain.row(0, [4, 5, 6, 4, 5]).banned.tolist() == [6]


def test_controlled_rows_are_penalised_banned_and_forced_as_documented():
    logits = np.array([[2.0, -1.0, 0.5, 3.0], [1.0, 1.0, 1.0, 1.0]], dtype=np.float32)
    penalised = RowControl(np.array([0, 1]), 2.0, np.array([3]))
    forced = RowControl(np.array([3]), 2.0, np.array([1]), forced=1)
    got = controlled(logits, [penalised, forced], SearchRequest(k=2))
    expected = log_softmax(np.array([[1.0, -2.0, 0.5, -np.inf]], dtype=np.float32))[0]
    assert got.ids[0].tolist() == [0, 2]
    np.testing.assert_allclose(got.log_probs[0], expected[[0, 2]], atol=1e-6)
    own = log_softmax(np.array([[1.0, 1.0, 1.0, 0.5]], dtype=np.float32))[0, 1]
    assert got.ids[1].tolist() == [1, 1] and got.log_probs[1, 1] == -np.inf
    assert got.log_probs[1, 0] == pytest.approx(own)


def test_bans_that_would_leave_a_row_no_token_yield_to_its_grammar():
    """A minimum length (or a suppressed word) banning the only tokens a grammar allows
    would leave the row nothing to produce (a distribution of NaN: a sampled job raised, a
    searched one wrote token 0): the grammar holds, the bans yield; a row with a token left
    keeps its bans."""
    logits = np.array([[2.0, -1.0, 0.5, 3.0], [2.0, -1.0, 0.5, 3.0]], dtype=np.float32)
    cornered = RowControl(banned=np.array([3]), allowed=np.array([3]))
    kept = RowControl(banned=np.array([3]), allowed=np.array([2, 3]))
    for temperature in (None, np.array([1.0, 1.0], dtype=np.float32)):
        got = controlled(logits, [cornered, kept], SearchRequest(k=1), temperature)
        assert got.ids[:, 0].tolist() == [3, 2]
        assert np.isfinite(got.log_probs[:, 0]).all()
        if temperature is not None:
            assert np.isfinite(got.scores[:, 0]).all()


def test_control_options_are_checked_and_every_bad_field_named():
    bad = DecodingOptions(
        max_length=10,
        min_length=10,
        no_repeat_ngram_size=11,
        repetition_penalty=0.0,
        max_length_ratio=-1.0,
    )
    with pytest.raises(InvalidArgument) as error:
        bad.validate(256)
    for field in ("min_length", "no_repeat_ngram_size", "repetition_penalty", "max_length_ratio"):
        assert field in str(error.value)


def test_served_defaults_bound_a_looping_input_near_its_length(exported_translator):
    """Out-of-distribution inputs (symbols, control characters, one word, repeats) end near
    their own length with the default ratio."""
    version = exported_translator[0]
    tokenizer = Tokenizer(version.tokenizer_file)
    engine = OnnxEngine(version, "fp32")
    texts = ["😺😺😺😺", "\x01\x02\x03 \x04", "gato", "no no no no no no no no", "%%%% #### @@@@"]
    from service.runtime.translation import translate_ids

    ids = tokenizer.encode_batch(texts)
    for source, nbest in zip(ids, translate_ids(engine, ids, DecodingOptions(), 512), strict=True):
        assert len(nbest[0].tokens) <= 2 * len(source) + LENGTH_MARGIN


@pytest.mark.parametrize("path", ["host", "search graph", "static step"])
def test_controlled_jobs_in_a_running_batch_decode_as_alone_beside_greedy_lanes(tiny, path):
    from service.worker.messages import Job, Result
    from service.worker.scheduler import Scheduler

    version, sources = tiny
    engine = engines(version)[path]
    plain = DecodingOptions(max_length=MAX_LENGTH)
    cases = [
        (plain, None),
        (CONTROLS["min_length"], None),
        (plain, InputControls(prefixes=((30, 31),))),
        (replace(CONTROLS["no_repeat_ngram_size"], beam_size=3), None),
        (plain, InputControls(max_lengths=(4,))),
        (CONTROLS["repetition_penalty"], InputControls(max_lengths=(9,), prefixes=((40,),))),
    ]
    jobs = []
    for i, (options, inputs) in enumerate(cases * 2):
        source = sources[i % len(sources)]
        src_ids, src_mask = source_batch([source], 512)
        job = Job(i, {"src_ids": src_ids, "src_mask": src_mask}, options, controls=inputs)
        jobs.append((job, source, options, inputs))
    scheduler = Scheduler(engine, max_rows=24)
    done, pending = {}, list(jobs)
    while pending or scheduler.busy:
        if pending:
            scheduler.submit(pending.pop(0)[0])
        scheduler.iterate()
        done.update({e.job_id: e for e in scheduler.events if isinstance(e, Result)})
        scheduler.events.clear()
    assert max(scheduler.stats.step_rows) > 4, "jobs must have shared steps"
    alone_type = joined if path == "static step" else CachedInference
    for job, source, options, inputs in jobs:
        alone = decoded(engine, [source], options, inputs, alone_type)
        got = [h.tokens for h in done[job.id].results[0]]
        assert got == [h.tokens for h in alone[0]], job.id


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_on_cuda_every_path_decodes_controls_as_the_host_reference(tiny, variant):
    """On CUDA, the search graph and the static step (fp16, its buckets replayed as CUDA
    graphs) give the tokens of their own engine's logits searched in numpy, every control
    on."""
    version, sources = tiny
    pairs = {
        "search graph": (
            OnnxEngine(version, variant, "cuda", device_search=True),
            OnnxEngine(version, variant, "cuda", device_search=False),
            CachedInference,
        )
    }
    if variant == "fp16":  # CUDA graphs take the float16 static step
        pairs["static step"] = (
            OnnxEngine(version, variant, "cuda", cache="static"),
            OnnxEngine(version, variant, "cuda", cache="static", device_search=False),
            joined,
        )
    inputs = InputControls(max_lengths=(20, 9, 24, 15), prefixes=((20, 21), (), (23,), ()))
    for options in (
        *CONTROLS.values(),
        DecodingOptions(max_length=MAX_LENGTH, beam_size=4, num_hypotheses=2, min_length=8),
        DecodingOptions(max_length=MAX_LENGTH, temperature=0.9, seed=2, no_repeat_ngram_size=2),
    ):
        for path, (device, host, inference) in pairs.items():
            assert device.device_search and not host.device_search
            expected = decoded(host, sources, options, inputs, inference)
            got = decoded(device, sources, options, inputs, inference)
            assert [[h.tokens for h in n] for n in got] == [
                [h.tokens for h in n] for n in expected
            ], (path, options)
            for prefix, nbest in zip(inputs.prefixes, got, strict=True):
                assert all(h.tokens[: len(prefix)] == list(prefix) for h in nbest)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_on_cuda_score_gives_the_cpu_engines_log_probabilities(tiny, variant):
    """Score's forced decode on the CUDA engine (its search graph on) keeps the log-probability
    of each forced token as the CPU engine of the same graphs does (within 5e-3 in fp32,
    whose CUDA matrix products run in TF32, and 5e-2 in fp16)."""
    version, sources = tiny
    cpu = OnnxEngine(version, variant, "cpu")
    cuda = OnnxEngine(version, variant, "cuda", device_search=True)
    options = DecodingOptions(max_length=MAX_LENGTH)
    targets = [h[0].tokens for h in decoded(cpu, sources, options)]
    targets += [t[::-1] for t in targets]  # scrambled: forced tokens the model would not pick
    both = sources + sources
    expected = score_ids(cpu, both, targets, 512)
    got = score_ids(cuda, both, targets, 512)
    bound = 5e-3 if variant == "fp32" else 5e-2  # fp32 on CUDA multiplies in TF32
    for target, want, have in zip(targets, expected, got, strict=True):
        assert len(have) == len(target) + 1  # its tokens and `</s>`
        np.testing.assert_allclose(have, want, atol=bound, rtol=0)


def test_given_tokens_and_the_end_at_the_limit_have_log_probability_zero():
    """A target language forced as generate forces it (`given`) and the `</s>` a model writes
    at the limit (`end_at_limit`) are the model's choice whatever it prefers, at
    log-probability 0; a forced prefix token after them keeps the model's own."""
    options = DecodingOptions(max_length=4, end_at_limit=True)
    inputs = InputControls(prefixes=((7, 9),), given=(1,))
    controls = Controls(options, inputs, EOS_ID)
    assert Controls.wanted(options, None) and not Controls.wanted(DecodingOptions(), None)
    first, second = controls.row(0, []), controls.row(0, [7])
    assert (first.forced, first.given) == (7, True)
    assert (second.forced, second.given) == (9, False)
    assert controls.row(0, [7, 9]) is None  # steps between: the model's own choice
    last = controls.row(0, [7, 9, 5])  # the 4th and last step
    assert (last.forced, last.given) == (EOS_ID, True)
    logits = np.random.default_rng(0).normal(size=(3, 12)).astype(np.float32)
    found = controlled(logits, [first, second, last], SearchRequest(k=2))
    assert found.ids[:, 0].tolist() == [7, 9, EOS_ID]
    assert found.log_probs[0, 0] == 0.0 and found.log_probs[2, 0] == 0.0
    assert found.log_probs[1, 0] == pytest.approx(log_softmax(logits[1:2])[0, 9])
    assert found.log_probs[1, 0] < 0


def test_a_decode_ended_at_the_limit_finishes_with_end():
    """end_at_limit: an output that reaches max_length ends with `</s>` (finished), one token
    shorter than without it."""
    from service.runtime.decoding import GreedySearch
    from service.runtime.search import Candidates

    def step(search):
        ids = np.tile(np.array([[5, EOS_ID]]), (search.rows, 1))
        return Candidates(ids, np.full((search.rows, 2), -0.5, np.float32))

    results = {}
    for end in (False, True):
        options = DecodingOptions(max_length=3, end_at_limit=end)
        search = GreedySearch(1, options, BOS_ID, EOS_ID)
        while not search.done:
            found = step(search)
            controls = search.row_controls()
            if controls:  # the last step: the host's search of the controlled row
                logits = np.full((1, 12), -5.0, np.float32)
                logits[0, 5] = 0.0
                found = controlled(logits, [controls[0]], SearchRequest(k=2))
            search.advance(found, None)
        results[end] = search.results()[0][0]
    assert results[False].tokens == [5, 5, 5] and not results[False].finished
    assert results[True].tokens == [5, 5] and results[True].finished
    assert results[True].token_log_probs[-1] == 0.0
