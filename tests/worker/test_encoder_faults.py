"""An admission's encoder run that raises: the fault is told apart by running each request on
its own. A request whose own input the encoder refuses fails alone with Internal, and every
other job in flight (running, or admitted in the same round) decodes as alone; a passing
fault fails nothing; a fault that recurs whatever the input (an input encoded before fails
too) is raised, so that the worker ends and its calls go to another."""

from __future__ import annotations

import time

import pytest
from helpers import RefusingEncoder, drain, tiny_transformer

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.translation import translate_ids
from service.worker.messages import Failure, Job
from service.worker.scheduler import Scheduler

SHORT = [[6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17]]
LONG = list(range(20, 60))  # 40 tokens: past what the encoder takes
GREEDY = DecodingOptions(max_length=12)
BEAM = DecodingOptions(beam_size=3, max_length=12)


@pytest.fixture(scope="module")
def engine():
    from models.reference import TorchEngine

    return TorchEngine(tiny_transformer(seed=3))


def _job(job_id: int, source: list[int], options: DecodingOptions = GREEDY) -> Job:
    src_ids, src_mask = source_batch([source], 512)
    return Job(job_id, {"src_ids": src_ids, "src_mask": src_mask}, options)


def _alone(engine, source: list[int], options: DecodingOptions) -> list[list[int]]:
    (hypotheses,) = translate_ids(engine, [source], options, 512)
    return [h.tokens for h in hypotheses]


@pytest.mark.parametrize("encoder_thread", [False, True], ids=["inline", "encoder-thread"])
def test_a_request_whose_input_the_encoder_refuses_fails_alone(engine, encoder_thread):
    refusing = RefusingEncoder(engine, longest=16)
    scheduler = Scheduler(refusing, max_rows=16, encoder_thread=encoder_thread)
    scheduler.submit(_job(0, SHORT[0]))
    scheduler.submit(_job(1, SHORT[1], BEAM))
    scheduler.iterate()
    scheduler.iterate()  # both running
    assert scheduler.batch.rows == 4
    # one admission round: the long source pads the batch's run past what the encoder takes
    scheduler.submit(_job(2, LONG))
    scheduler.submit(_job(3, SHORT[2], BEAM))
    src_ids, src_mask = source_batch([SHORT[2], SHORT[0]], 512)  # two inputs in one job
    scheduler.submit(Job(4, {"src_ids": src_ids, "src_mask": src_mask}, GREEDY))
    done = drain(scheduler, [])[0]
    assert isinstance(done[2], Failure) and done[2].kind == "Internal"
    assert done[2].message.startswith("the encoder failed on this request's input: Runtime")
    assert "16 by 41" in done[2].message
    for job_id, source, options in [(0, SHORT[0], GREEDY), (1, SHORT[1], BEAM)]:
        assert [h.tokens for h in done[job_id].results[0]] == _alone(engine, source, options)
    assert [h.tokens for h in done[3].results[0]] == _alone(engine, SHORT[2], BEAM)
    together = translate_ids(engine, [SHORT[2], SHORT[0]], GREEDY, 512)
    assert [[h.tokens for h in n] for n in done[4].results] == [
        [h.tokens for h in n] for n in together
    ]
    assert scheduler.batch.rows == 0 and not scheduler.busy and not scheduler._requests
    # the next admission runs as one again, and its rows decode as alone
    assert _drain_one(scheduler, refusing, SHORT[1]) == _alone(engine, SHORT[1], GREEDY)


def _drain_one(scheduler: Scheduler, refusing: RefusingEncoder, source: list[int]):
    """One greedy job decoded -> its hypotheses' tokens; its encoder ran once."""
    runs = refusing.runs
    scheduler.submit(_job(9, source))
    (result,) = drain(scheduler, [])[0].values()
    assert refusing.runs == runs + 1
    return [h.tokens for h in result.results[0]]


def test_a_passing_encoder_fault_fails_nothing(engine):
    """The admission's run fails once; each request's own run succeeds."""
    refusing = RefusingEncoder(engine, longest=64, refusals=1)
    scheduler = Scheduler(refusing, max_rows=16)
    scheduler.submit(_job(0, SHORT[0]))
    scheduler.submit(_job(1, SHORT[1], BEAM))
    done = drain(scheduler, [])[0]
    assert refusing.runs == 3  # the admission's, then each request's own
    assert [h.tokens for h in done[0].results[0]] == _alone(engine, SHORT[0], GREEDY)
    assert [h.tokens for h in done[1].results[0]] == _alone(engine, SHORT[1], BEAM)


def test_requests_whose_inputs_are_all_refused_fail_alone(engine):
    """Every request of the admission fails on its own, but an input encoded before still
    runs: the inputs are at fault, not the session; the scheduler goes on."""
    refusing = RefusingEncoder(engine, longest=16)
    scheduler = Scheduler(refusing, max_rows=16)
    assert _drain_one(scheduler, refusing, SHORT[0]) == _alone(engine, SHORT[0], GREEDY)
    scheduler.submit(_job(1, LONG))
    scheduler.submit(_job(2, LONG[:30]))
    done = drain(scheduler, [])[0]
    assert [(e.job_id, type(e), e.kind) for e in done.values()] == [
        (1, Failure, "Internal"),
        (2, Failure, "Internal"),
    ]
    assert not scheduler.busy and not scheduler._requests
    assert _drain_one(scheduler, refusing, SHORT[1]) == _alone(engine, SHORT[1], GREEDY)


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("encoder_thread", [False, True], ids=["inline", "encoder-thread"])
def test_an_encoder_fault_whatever_the_input_is_raised(engine, encoder_thread, jobs):
    """Every request fails on its own, and so does an input encoded before: the session's
    fault, raised (the worker ends, and the front sends its calls to another)."""
    refusing = RefusingEncoder(engine, longest=64)
    scheduler = Scheduler(refusing, max_rows=16, encoder_thread=encoder_thread)
    _drain_one(scheduler, refusing, SHORT[2])
    refusing.refusals, runs = -1, refusing.runs
    for job_id in range(jobs):
        scheduler.submit(_job(job_id, SHORT[job_id]))
    with pytest.raises(RuntimeError, match="device fault"):
        drain(scheduler, [])
    assert refusing.runs == runs + 1 + jobs + 1  # the admission's, each job's own, the probe


def test_a_scheduler_that_never_encoded_cannot_tell_and_raises(engine):
    """No input is known to encode (a served worker's golden set always is): raised."""
    scheduler = Scheduler(RefusingEncoder(engine, longest=16), max_rows=16)
    scheduler.submit(_job(0, LONG))
    with pytest.raises(RuntimeError, match="16 by 41"):
        drain(scheduler, [])


class _SlowRefusing(RefusingEncoder):
    """A RefusingEncoder whose every run, refused or not, takes `seconds`."""

    def __init__(self, engine, longest: int, seconds: float):
        super().__init__(engine, longest)
        self.seconds = seconds

    def encode(self, *inputs, **named):
        time.sleep(self.seconds)
        return super().encode(*inputs, **named)


def test_the_runs_apart_and_the_probe_count_as_the_encoder_s_time(engine):
    """Each request's own run and the probe are encoder runs: the loop's `encoder` phase
    (attnserve_worker_loop_seconds_total) holds them. Those that raised went to `admit`, so
    a worker refusing inputs looked busy admitting, not encoding."""
    slow = _SlowRefusing(engine, longest=16, seconds=0.05)
    scheduler = Scheduler(slow, max_rows=16)
    _drain_one(scheduler, slow, SHORT[0])
    scheduler.take_phases()
    scheduler.submit(_job(1, LONG))
    scheduler.submit(_job(2, LONG[:30]))
    runs = slow.runs
    done = drain(scheduler, [])[0]
    assert [e.kind for e in done.values()] == ["Internal", "Internal"]
    assert slow.runs == runs + 4  # the admission's, each request's own, the probe
    phases = scheduler.take_phases()
    assert phases["encoder"] >= 4 * slow.seconds
    assert phases["admit"] < slow.seconds
