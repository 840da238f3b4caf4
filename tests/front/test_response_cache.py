"""The front's response cache: keys, LRU bounds by entries and bytes, sampling rules."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from stand_in import CONTEXT, REQUEST, StandInWorker, servicer

from service.front.cache import ResponseCache, _size
from service.front.config import ServerConfig
from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.kinds import Prepared
from service.worker.settings import WorkerSettings


class _Model:
    """What the cache reads of a served model: nothing but its identity."""


GREEDY = DecodingOptions()


def _prepared(keys, options=GREEDY, alignment=False) -> Prepared:
    ids = np.zeros((len(keys), 3), np.int64)
    fields = [f"texts[{i}]" for i in range(len(keys))]
    return Prepared({"src_ids": ids}, options, fields, keep_alignment=alignment, keys=keys)


def _nbest(n: int = 3) -> list[Hypothesis]:
    return [Hypothesis(tokens=list(range(n)), log_prob=-1.0, score=-1.0)]


def test_the_same_input_options_and_model_meet_the_same_entry():
    cache, model = ResponseCache(10, 1 << 20), _Model()
    first, second = cache.keys(model, _prepared([b"a", b"b"]))
    cache.put(first, _nbest())
    again = cache.keys(model, _prepared([b"a"]))[0]
    assert cache.get(again, "m") == _nbest() and cache.get(second, "m") is None
    other_options = cache.keys(model, _prepared([b"a"], DecodingOptions(beam_size=4)))[0]
    with_alignment = cache.keys(model, _prepared([b"a"], alignment=True))[0]
    other_model = cache.keys(_Model(), _prepared([b"a"]))[0]  # a version loaded again
    assert all(cache.get(k, "m") is None for k in (other_options, with_alignment, other_model))


def test_unseeded_sampling_is_never_cached_and_seeded_is():
    cache, model = ResponseCache(10, 1 << 20), _Model()
    unseeded = DecodingOptions(temperature=0.8)
    assert cache.keys(model, _prepared([b"a"], unseeded)) == [None]
    seeded = DecodingOptions(temperature=0.8, seed=3)
    assert cache.keys(model, _prepared([b"a"], seeded))[0] is not None
    assert ResponseCache(0, 1 << 20).keys(model, _prepared([b"a"])) == [None]  # off
    assert ResponseCache(10, 0).keys(model, _prepared([b"a"])) == [None]


def test_the_least_recently_used_entries_go_first_by_count_and_by_bytes():
    cache, model = ResponseCache(2, 1 << 20), _Model()
    a, b, c = cache.keys(model, _prepared([b"a", b"b", b"c"]))
    cache.put(a, _nbest())
    cache.put(b, _nbest())
    assert cache.get(a, "m") is not None  # a is now the most recent
    cache.put(c, _nbest())
    assert cache.get(b, "m") is None and cache.get(a, "m") and cache.get(c, "m")
    keys = cache.keys(model, _prepared([b"x", b"y", b"z", b"big"]))
    entry = _size(keys[0], _nbest(2))
    small = ResponseCache(100, 2 * entry + entry // 2)  # room for two entries, not three
    keys = small.keys(model, _prepared([b"x", b"y", b"z", b"big"]))
    for key in keys[:3]:
        small.put(key, _nbest(2))
    assert len(small.entries) == 2 and small.bytes <= small.max_bytes
    small.put(keys[3], _nbest(10_000))  # larger than the whole cache: not kept
    assert small.get(keys[3], "m") is None and len(small.entries) == 2


def test_the_byte_bound_holds_for_what_the_entries_really_take():
    """Entries as the front keeps them (hypotheses unpickled from a worker: lists of Python
    ints and floats; keys with their input's bytes): the memory they take, measured, stays
    within the bound."""
    import pickle
    import tracemalloc

    rng = np.random.default_rng(0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache, model = ResponseCache(10**9, 1 << 20), _Model()
        options = DecodingOptions(beam_size=4, num_hypotheses=4)
        for _ in range(3_000):
            source = rng.integers(300, 32_000, 30).astype(np.int32).tobytes()
            (key,) = cache.keys(model, _prepared([source], options))
            nbest = [
                Hypothesis(
                    tokens=rng.integers(300, 32_000, 30).tolist(),
                    log_prob=-1.0,
                    score=-1.0,
                    token_log_probs=rng.random(31).tolist(),
                )
                for _ in range(4)
            ]
            cache.put(key, pickle.loads(pickle.dumps(nbest)))
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.bytes <= cache.max_bytes and len(cache.entries) < 3_000  # it evicted
    assert taken <= cache.max_bytes, taken


@pytest.mark.slow
def test_the_byte_bound_holds_for_the_suppressed_words_an_entry_holds():
    """A request's options are held by its entries' keys, suppressed token sequences with
    them: one-sentence requests that each suppress 256 phrases stay within the bound too.
    Before, those sequences were not counted and 300 such entries took 50 times the bound."""
    import tracemalloc

    rng = np.random.default_rng(0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache, model = ResponseCache(10**9, 1 << 20), _Model()
        for _ in range(300):
            suppress = tuple(tuple(rng.integers(300, 32_000, 16).tolist()) for _ in range(256))
            source = rng.integers(300, 32_000, 30).astype(np.int32).tobytes()
            (key,) = cache.keys(model, _prepared([source], DecodingOptions(suppress=suppress)))
            cache.put(key, [Hypothesis(rng.integers(300, 32_000, 30).tolist(), -1.0, -1.0)])
        del suppress, key
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.bytes <= cache.max_bytes and len(cache.entries) < 300  # it evicted
    assert taken <= cache.max_bytes, taken


@pytest.mark.parametrize("method", ["Translate", "TranslateStream"])
def test_an_input_repeated_in_a_call_is_decoded_once_and_counted_once(method):
    """A text whose first sentence comes again: the repeat is decoded once and counted one
    miss, by a unary call as by a stream (whose partials come only before inputs still being
    decoded). Before, a stream decoded each copy and counted a miss for each."""

    async def scenario():
        metrics = Metrics()
        pool = WorkerPool([WorkerSettings(index=0, models=())], metrics, 100)
        worker = StandInWorker(pool)
        prepared = _prepared([b"a", b"b", b"a"])
        translator = servicer(pool, prepared, ServerConfig())
        if method == "Translate":
            events = [await translator.unary(method, REQUEST, CONTEXT)]
        else:
            events = [e async for e in translator.stream(method, REQUEST, CONTEXT)]
        misses = metrics.registry.get_sample_value(
            "attnserve_response_cache_misses_total", {"model": "unknown"}
        )
        return events, worker.jobs, misses

    events, jobs, misses = asyncio.run(scenario())
    assert [job.inputs for job in jobs] == ([2] if method == "Translate" else [1, 1])
    assert misses == 2
    *partials, result = events
    if method == "TranslateStream":
        first, second = (job.id for job in jobs)
        assert partials == [("partial", [first])]
        assert result == [first, second, first]
    else:
        assert not partials and result == [jobs[0].id] * 3  # one job of both inputs


@pytest.mark.parametrize("method", ["Translate", "TranslateStream"])
@pytest.mark.parametrize("inputs", [1, 2])
def test_a_call_refused_before_its_decode_counts_no_miss(method, inputs):
    """Misses count inputs decoded for want of an entry: a call refused once its inputs were
    looked up (hypotheses that need more rows than a batch has) decodes nothing and counts
    none. Before, each of its inputs counted a miss."""

    async def scenario():
        metrics = Metrics()
        pool = WorkerPool([WorkerSettings(index=0, models=())], metrics, 100)
        worker = StandInWorker(pool)
        options = DecodingOptions(beam_size=4)
        prepared = _prepared([b"a", b"b"][:inputs], options)
        translator = servicer(pool, prepared, ServerConfig(max_batch_rows=2))
        with pytest.raises(AssertionError, match="INVALID_ARGUMENT: options: 4 hypotheses"):
            if method == "Translate":
                await translator.unary(method, REQUEST, CONTEXT)
            else:
                [e async for e in translator.stream(method, REQUEST, CONTEXT)]
        misses = metrics.registry.get_sample_value(
            "attnserve_response_cache_misses_total", {"model": "unknown"}
        )
        return worker.jobs, misses

    jobs, misses = asyncio.run(scenario())
    assert jobs == [] and not misses
