"""A job's token times, as the scheduler reports them (the time to first token and the gaps
between tokens behind the latency metrics): every running job takes a token at every step, so
they are the times of the steps it lived through, kept once for all jobs and forgotten once no
running job needs them. And the scheduler's own time by phase, for the worker loop's."""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers import built_tiny_translator

from service.runtime.batch import ContinuousBatch
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.tensors import Launch
from service.worker import scheduler as scheduler_module
from service.worker.loop_clock import STEP_PHASES
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


class _SlowSteps(ContinuousBatch):
    """A batch whose every step's run takes STEP_SLEEP longer."""

    def launch_search_step(self, *args, **kw) -> Launch:
        launch = super().launch_search_step(*args, **kw)

        def run():
            time.sleep(STEP_SLEEP)
            launch.run()

        return launch._replace(run=run)


class _SlowEncoder:
    """An engine whose encoder takes ENCODER_SLEEP longer (delegating everything else)."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def encode(self, *inputs, **named):
        time.sleep(ENCODER_SLEEP)
        return self._engine.encode(*inputs, **named)


STEP_SLEEP, ENCODER_SLEEP = 0.004, 0.02


@pytest.mark.parametrize("threads", ["inline", "threads"])
def test_the_scheduler_s_phases_hold_its_runs_and_fit_in_its_rounds(engine, threads):
    """The loop's step phases (service.worker.loop_clock) as the scheduler measures them:
    a step's run (inline, or waited for on the step thread) holds each step's sleep, the
    encoder (inline, or waited for while no row runs) each admission's, and all of them fit
    within the scheduling rounds' own time; a take starts them again at 0."""
    slow = _SlowEncoder(engine)
    beside = threads == "threads"
    scheduler = Scheduler(
        slow, max_rows=8, batch=_SlowSteps(slow), encoder_thread=beside, step_thread=beside
    )
    rng = np.random.default_rng(5)
    jobs = []
    for i in range(6):
        src, mask = source_batch([list(rng.integers(4, 500, size=4 + i))], 64)
        options = DecodingOptions(max_length=5 + i)
        jobs.append(Job(i, {"src_ids": src, "src_mask": mask}, options))
    scheduler.take_phases()
    rounds, ended = 0.0, 0
    for admitted in (jobs[:3], jobs[3:]):  # two admissions, the second into an empty batch
        for job in admitted:
            scheduler.submit(job)
        while scheduler.busy:
            start = time.perf_counter()
            scheduler.iterate()
            rounds += time.perf_counter() - start
            ended += sum(isinstance(e, Result) for e in scheduler.events)
            scheduler.events.clear()
    scheduler.close()
    assert ended == len(jobs)
    steps = len(scheduler.stats.step_seconds)
    admissions = len(scheduler.stats.encoder_seconds)
    phases = scheduler.take_phases()
    assert set(phases) == set(STEP_PHASES)
    assert all(seconds > 0 for seconds in phases.values()), phases
    assert sum(phases.values()) <= rounds
    waited = 0.5 if beside else 1.0  # beside: the loop's own work overlaps part of a run
    assert phases["run"] >= waited * steps * STEP_SLEEP
    assert admissions >= 2 and phases["encoder"] >= 0.9 * admissions * ENCODER_SLEEP
    assert scheduler.take_phases() == dict.fromkeys(STEP_PHASES, 0.0)
