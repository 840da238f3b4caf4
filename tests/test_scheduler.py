"""The continuous-batching scheduler in process, on the exported translator (onnxruntime).

Requests that join a running batch at different steps, with different searches, must decode
exactly as they decode alone; leaving rows free their cache; limits hold.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.batching import source_batch
from service.decoding import DecodingOptions
from service.onnx_engine import OnnxEngine
from service.scheduler import Job, Scheduler
from service.tokenizer import Tokenizer
from service.translation import translate_ids

OPTIONS = [
    DecodingOptions(),
    DecodingOptions(beam_size=4),
    DecodingOptions(beam_size=3, num_hypotheses=2, max_length=12),
    DecodingOptions(temperature=0.8, top_k=20, num_hypotheses=2, seed=7),
]


@pytest.fixture(scope="module")
def version(exported_translator):
    return exported_translator[0]


@pytest.fixture(scope="module")
def sources(version, test_sentences) -> list[list[int]]:
    return Tokenizer(version.tokenizer_file).encode_batch(test_sentences)


def _job(job_id: int, ids: list[list[int]], options: DecodingOptions, **kw) -> Job:
    src_ids, src_mask = source_batch(ids, 512)
    return Job(job_id, {"src_ids": src_ids, "src_mask": src_mask}, options, **kw)


def _drain(scheduler: Scheduler, jobs: list[Job], every: int = 1) -> dict[int, tuple]:
    """Submits one job every `every` rounds; returns the final event of each job."""
    pending, done, rounds = list(jobs), {}, 0
    while pending or scheduler.busy:
        if pending and rounds % every == 0:
            scheduler.submit(pending.pop(0))
        scheduler.iterate()
        rounds += 1
        for event in scheduler.events:
            if event[0] in ("result", "error"):
                done[event[1]] = event
        scheduler.events.clear()
    return done


@pytest.mark.parametrize("io_binding", [False, True], ids=["numpy", "device-path"])
def test_requests_joining_a_running_batch_decode_as_they_do_alone(version, sources, io_binding):
    engine = OnnxEngine(version, "fp32", io_binding=io_binding)
    jobs = [_job(i, [s], OPTIONS[i % len(OPTIONS)]) for i, s in enumerate(sources)]
    jobs.append(_job(len(jobs), sources[:3], OPTIONS[1]))  # three texts in one request
    scheduler = Scheduler(engine, max_rows=24)
    done = _drain(scheduler, jobs, every=3)
    most_rows = max(scheduler.stats.step_rows)
    assert most_rows > 8, "requests must have shared steps"
    for job in jobs:
        ids = [s for s in (sources[:3] if job.inputs == 3 else [sources[job.id]])]
        alone = translate_ids(engine, ids, job.options, 512)
        event = done[job.id]
        assert event[0] == "result", event
        got = [[h.tokens for h in nbest] for nbest in event[2]]
        assert got == [[h.tokens for h in nbest] for nbest in alone], job.id
    assert scheduler.batch.rows == 0 and scheduler.batch.past is None  # everything freed


def test_request_level_batching_waits_for_the_batch_to_end(version, sources):
    engine = OnnxEngine(version, "fp32")
    scheduler = Scheduler(engine, max_rows=64, batching="request", window=0.0)
    jobs = [_job(i, [s], OPTIONS[0]) for i, s in enumerate(sources[:6])]
    admitted_at_step = {}
    pending, steps = list(jobs), 0
    while pending or scheduler.busy:
        if pending:
            scheduler.submit(pending.pop(0))
        scheduler.iterate()
        steps += 1
        for event in scheduler.events:
            if event[0] == "admitted":
                admitted_at_step[event[1]] = steps
        scheduler.events.clear()
    # the first request ran alone to its end before the others were admitted together
    assert admitted_at_step[0] == 1
    assert len({admitted_at_step[i] for i in range(1, 6)}) == 1
    assert admitted_at_step[1] > 3


def test_cancel_and_deadline_free_rows_at_the_next_step(version, sources):
    engine = OnnxEngine(version, "fp32")
    now = [100.0]
    scheduler = Scheduler(engine, max_rows=16, clock=lambda: now[0])
    long = DecodingOptions(temperature=5.0, max_length=400, seed=1)  # runs to max_length
    scheduler.submit(_job(1, [sources[0]], long))
    scheduler.submit(_job(2, [sources[1]], long, deadline=100.5))
    scheduler.submit(_job(3, [sources[2]], DecodingOptions(beam_size=4)))
    for _ in range(3):
        scheduler.iterate()
    assert scheduler.batch.rows == 6
    scheduler.cancel(1)
    now[0] = 101.0
    scheduler.iterate()
    assert scheduler.batch.rows == 4  # only the beam search is left
    errors = {e[1]: e[2] for e in scheduler.events if e[0] == "error"}
    assert errors == {1: "Cancelled", 2: "DeadlineExceeded"}


def test_waiting_requests_enter_only_when_rows_are_free(version, sources):
    engine = OnnxEngine(version, "fp32")
    scheduler = Scheduler(engine, max_rows=8)
    scheduler.submit(_job(1, [sources[0]], DecodingOptions(beam_size=8)))
    scheduler.submit(_job(2, [sources[1]], DecodingOptions()))
    scheduler.iterate()
    assert [j.id for j in scheduler.running] == [1] and len(scheduler.waiting) == 1
    scheduler.submit(_job(3, sources[:3], DecodingOptions(beam_size=4)))  # 12 rows: never fits
    errors = [e for e in scheduler.events if e[0] == "error"]
    assert errors and errors[0][1] == 3 and "12 batch rows" in errors[0][3]


def test_cache_of_a_batch_that_never_empties_stays_bounded(version, sources):
    """Requests keep arriving; compaction keeps the cache near the longest live row."""
    engine = OnnxEngine(version, "fp32")
    scheduler = Scheduler(engine, max_rows=16)
    options = DecodingOptions(max_length=20)
    longest = 0
    for i in range(60):
        scheduler.submit(_job(i, [sources[i % len(sources)]], options))
        scheduler.iterate()
        scheduler.iterate()
        longest = max(longest, scheduler.batch.cache_length)
        scheduler.events.clear()
    assert 20 <= longest <= 20 + 20 // 8 + 8  # without compaction it would pass 100
    assert np.all(scheduler.batch.lengths <= 20)
