"""A job's token times, as the scheduler reports them (the time to first token and the gaps
between tokens behind the latency metrics): every running job takes a token at every step, so
they are the times of the steps it lived through, kept once for all jobs and forgotten once no
running job needs them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import built_tiny_translator

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.worker import scheduler as scheduler_module
from service.worker.messages import Job, Result
from service.worker.scheduler import Scheduler


@pytest.fixture(scope="module")
def engine(tmp_path_factory, shipped_translator):
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    _, version = built_tiny_translator(directory, shipped_translator[1], 5, ("fp32",))
    return OnnxEngine(version, "fp32")


@pytest.mark.parametrize("keep_times", [4096, 3])  # 3: old step times forgotten every 3 steps
def test_token_times_are_the_steps_each_job_lived_through(engine, monkeypatch, keep_times):
    monkeypatch.setattr(scheduler_module, "KEEP_TIMES", keep_times)
    now = [0.0]
    scheduler = Scheduler(engine, max_rows=8, clock=lambda: now[0])
    rng = np.random.default_rng(3)
    # (round submitted, max_length, beam): staggered, one-row greedy and beam jobs
    plan = [(0, 9, 1), (0, 4, 1), (2, 12, 2), (3, 6, 1), (5, 15, 1), (9, 3, 1), (9, 20, 1)]
    rounds: list[float] = []  # the clock during each scheduling round, distinct gaps
    submitted_in: dict[int, int] = {}
    results: dict[int, Result] = {}
    for r in range(200):
        now[0] = float(r * r) / 7.0
        for i, (when, length, beam) in enumerate(plan):
            if when == r:
                ids = list(rng.integers(4, 500, size=3 + i))
                src, mask = source_batch([ids], 64)
                options = DecodingOptions(max_length=length, beam_size=beam)
                scheduler.submit(Job(i, {"src_ids": src, "src_mask": mask}, options))
                submitted_in[i] = r
        if not scheduler.busy and len(results) == len(plan):
            break
        scheduler.iterate()
        rounds.append(now[0])
        results.update((e.job_id, e) for e in scheduler.events if isinstance(e, Result))
        scheduler.events.clear()
    assert set(results) == set(range(len(plan)))
    for i, result in results.items():
        timings = result.timings
        first = rounds.index(timings.admitted_at)  # admitted and first stepped in one round
        assert first >= submitted_in[i]
        steps = rounds.index(timings.finished_at) - first + 1
        assert 1 <= steps <= plan[i][1]
        assert timings.first_token_at == rounds[first]
        expected = np.diff(rounds[first : first + steps]).tolist()
        assert timings.gaps == expected  # the same float subtractions: exact
        assert sum(timings.gaps) == pytest.approx(timings.finished_at - timings.first_token_at)
    assert scheduler._times_from + len(scheduler._times) == scheduler._steps
    if keep_times < scheduler._steps:  # some times forgotten: none a job still needed
        assert scheduler._times_from > 0
