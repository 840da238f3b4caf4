"""Greedy steps run back to back on the device (`steps_ahead`): the static step's bucket
feeds each step the ids the one before chose, where they lie, so that the host looks at the
rows once every few steps. Every row must decode exactly as one step at a time (tokens,
log-probabilities, scores, where it ends), whether it ends at `</s>`, at its length limit or
between two looks; jobs join between two runs; a search or a sample in the batch brings it
back to one step at a time, a stream gets a run's tokens in one partial; and the runs stop
short of the cache's capacity and of the time a run may last."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import drain

from bench.lib.engine_workers import decode_runs
from service.runtime.batch import ContinuousBatch
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.search import SearchRequest
from service.runtime.tokenizer import Tokenizer
from service.worker.messages import Job, Partial, Result
from service.worker.scheduler import Scheduler

LONG = 60.0  # seconds a run may last: as long as steps_ahead allows, however slow the step


@pytest.fixture(scope="module")
def setup(exported_translator, test_sentences):
    version = exported_translator[0]
    engine = OnnxEngine(version, "fp32", io_binding=True, cache="static")
    assert engine.cache == "static"
    return engine, Tokenizer(version.tokenizer_file).encode_batch(test_sentences)


def _job(job_id: int, sources: list[list[int]], options: DecodingOptions, **kw) -> Job:
    src_ids, src_mask = source_batch(sources, 512)
    return Job(job_id, {"src_ids": src_ids, "src_mask": src_mask}, options, **kw)


def test_the_batch_steps_ahead_as_it_steps_one_step_at_a_time(setup):
    engine, sources = setup
    src = source_batch(sources[:12], 512)
    request = SearchRequest(1, None, False)

    def decode(window: int):
        batch = ContinuousBatch(engine)
        batch.join(engine.encode(*src), np.arange(12))
        return (*decode_runs(batch, engine.special_tokens.bos, request, 30, window), batch)

    one_ids, one_log_probs, _ = decode(1)
    for window in (3, 8):
        ids, log_probs, batch = decode(window)
        assert np.array_equal(ids, one_ids) and np.array_equal(log_probs, one_log_probs)
    batch.reorder(np.arange(1, 12))  # a row that leaves frees its slot: the next runs skip it
    assert batch.steps_ahead(request) == 8
    assert batch.steps_ahead(SearchRequest(4, None, False)) == 1  # a beam's search: one step
    assert batch.steps_ahead(SearchRequest(1, None, True)) == 1  # the attention kept
    lengths = batch.table.lengths
    lengths[0] = engine.static_step.capacity + 40  # row 0's slot, dead: fed position 0
    assert batch.steps_ahead(request) == 8
    lengths[batch.table.alive] = engine.static_step.capacity - 3  # three positions left
    assert batch.steps_ahead(request) == 3
    with pytest.raises(ValueError, match="back to back here: the static cache holds"):
        batch.search_step(np.zeros((11, 1), np.int64), request, 4)
    with pytest.raises(ValueError, match="back to back here: each step's ids are searched"):
        batch.search_step(np.zeros((11, 1), np.int64), SearchRequest(4, None, False), 2)


def test_greedy_jobs_decode_as_one_step_at_a_time_while_steps_run_ahead(setup):
    engine, sources = setup
    lengths = [24, 5, 40, 9, 17, 3, 31]  # some end at their limit, between two looks
    jobs = [
        _job(i, [s], DecodingOptions(max_length=lengths[i % len(lengths)]))
        for i, s in enumerate(sources[:14])
    ]
    jobs.append(_job(len(jobs), sources[:3], DecodingOptions(max_length=20)))  # three inputs
    results = {}
    for ahead in (1, 4):
        scheduler = Scheduler(engine, max_rows=16, steps_ahead=ahead, ahead_wait=LONG)
        results[ahead], rounds = drain(scheduler, jobs, every=2)
        steps = len(scheduler.stats.step_seconds)
        if ahead == 4:
            assert rounds < steps * 0.6, (rounds, steps)  # most rounds ran several steps
        assert scheduler.batch.rows == 0  # every row freed
    for job in jobs:
        alone, ahead = results[1][job.id].results, results[4][job.id].results
        for one, run in zip(alone, ahead, strict=True):
            assert [h.tokens for h in one] == [h.tokens for h in run], job.id
            assert [h.log_prob for h in one] == [h.log_prob for h in run]
            assert [h.score for h in one] == [h.score for h in run]
            assert [h.finished for h in one] == [h.finished for h in run]
        if job.inputs == 1:  # one token time each: a step's, whichever look brought it
            hypothesis, timings = ahead[0][0], results[4][job.id].timings
            assert len(timings.gaps) == len(hypothesis.tokens) + hypothesis.finished - 1
    ended = {len(r.results[0][0].tokens) for r in results[4].values()}
    assert 5 in ended and 3 in ended  # limits met within a run of four


def test_a_search_or_a_sample_in_the_batch_steps_one_step_at_a_time(setup):
    engine, sources = setup
    greedy = DecodingOptions(max_length=30)
    for other in (
        DecodingOptions(beam_size=3, max_length=30),
        DecodingOptions(temperature=0.7, top_k=10, seed=3, max_length=30),
    ):
        jobs = [_job(0, [sources[0]], greedy), _job(1, [sources[1]], other)]
        scheduler = Scheduler(engine, max_rows=8, steps_ahead=4, ahead_wait=LONG)
        scheduler.submit(jobs[0])
        scheduler.submit(jobs[1])
        shared = 0
        while scheduler.busy:
            before = len(scheduler.stats.step_seconds)
            scheduler.iterate()
            if len(scheduler.running) == 2:  # both running: never ahead
                assert len(scheduler.stats.step_seconds) - before <= 1
                shared += 1
            scheduler.events.clear()
        assert shared > 3


def test_a_stream_gets_the_tokens_of_a_run_in_one_partial(setup):
    engine, sources = setup
    options = DecodingOptions(max_length=30)
    scheduler = Scheduler(engine, max_rows=8, steps_ahead=4, ahead_wait=LONG)
    scheduler.submit(_job(0, [sources[2]], options, stream=True))
    scheduler.submit(_job(1, [sources[3]], options))
    partials, result, rounds = [], None, 0
    while scheduler.busy:
        scheduler.iterate()
        rounds += 1
        for event in scheduler.events:
            if isinstance(event, Partial) and event.job_id == 0:
                partials.append(event)
            elif isinstance(event, Result) and event.job_id == 0:
                result = event
        scheduler.events.clear()
    tokens = result.results[0][0].tokens
    assert rounds < len(tokens)  # runs ahead with the stream in the batch
    assert max(len(p.new) for p in partials) == 4  # a run's tokens in one partial
    streamed = []
    for partial in partials:  # each one after the tokens kept: the result's beginning
        assert partial.kept == len(streamed)
        streamed += partial.new
    assert streamed == tokens[: len(streamed)] and len(streamed) >= len(tokens) - 4
    alone = Scheduler(engine, max_rows=8)
    done, _ = drain(alone, [_job(0, [sources[2]], options)], every=1)
    assert done[0].results[0][0].tokens == tokens


def test_steps_ahead_is_one_or_more_and_other_stores_step_one_at_a_time(setup, exported_translator):
    engine, sources = setup
    with pytest.raises(ValueError, match="steps_ahead"):
        Scheduler(engine, steps_ahead=0)
    with pytest.raises(ValueError, match="ahead_wait"):
        Scheduler(engine, steps_ahead=4, ahead_wait=-1.0)
    in_place = OnnxEngine(exported_translator[0], "fp32")  # the CPU's cache written in place
    jobs = [_job(i, [s], DecodingOptions(max_length=12)) for i, s in enumerate(sources[:4])]
    scheduler = Scheduler(in_place, max_rows=8, steps_ahead=4, ahead_wait=LONG)
    done, rounds = drain(scheduler, jobs, every=1)
    assert len(done) == 4 and rounds >= len(scheduler.stats.step_seconds)


def test_a_run_ahead_lasts_at_most_the_time_given(setup):
    engine, sources = setup
    jobs = [_job(i, [s], DecodingOptions(max_length=30)) for i, s in enumerate(sources[:4])]
    runs = {}
    for wait in (0.0, LONG):
        scheduler = Scheduler(engine, max_rows=8, steps_ahead=8, ahead_wait=wait)
        for job in jobs:
            scheduler.submit(job)
        runs[wait] = []
        while scheduler.busy:
            before = len(scheduler.stats.step_seconds)
            scheduler.iterate()
            runs[wait].append(len(scheduler.stats.step_seconds) - before)
            scheduler.events.clear()
    assert set(runs[0.0]) == {1}  # no time to run ahead: one step at a time
    assert runs[LONG][0] == 1  # the first step: its pace not yet known
    assert max(runs[LONG]) == 8 and sum(runs[LONG]) == sum(runs[0.0])
