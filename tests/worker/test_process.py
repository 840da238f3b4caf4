"""A worker process's main function and loop, in this process: it reports ready (or why it
could not load), answers the front's messages with reports of its scheduler's events and
measurements, answers what it still holds when told to stop, and ends quietly when the front
is gone; Ctrl-C and SIGTERM sent to the process group do not end it."""

from __future__ import annotations

import json
import signal
import threading
import time
from multiprocessing import Pipe

import pytest
from helpers import RefusingEncoder, broken_version, tiny_transformer

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.translation import translate_ids
from service.worker import process
from service.worker.loop_clock import PHASES
from service.worker.messages import (
    Admitted,
    Cancel,
    Failed,
    Failure,
    Job,
    Last,
    Load,
    Loaded,
    Partial,
    Ready,
    Report,
    Result,
    Stats,
    Stop,
    Submit,
    Unload,
)
from service.worker.process import run_worker
from service.worker.scheduler import Scheduler
from service.worker.settings import WorkerSettings

KEY = "tiny/1"
SOURCE = [6, 7, 8, 9]


@pytest.fixture
def signals():
    """The test process's own SIGINT and SIGTERM handlers, put back after the worker's."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def loaded(monkeypatch):
    """The worker's loading replaced by one scheduler over a tiny random translator."""
    from models.reference import TorchEngine

    schedulers = {KEY: Scheduler(TorchEngine(tiny_transformer(seed=3)), max_rows=8)}
    info = {"pid": 0, "models": {KEY: {"kind": "transformer"}}}
    monkeypatch.setattr(process, "load", lambda settings: (schedulers, info))
    return schedulers, info


def _job(job_id: int, max_length: int, source: list[int] = SOURCE) -> Job:
    src_ids, src_mask = source_batch([source], 512)
    return Job(
        job_id, {"src_ids": src_ids, "src_mask": src_mask}, DecodingOptions(max_length=max_length)
    )


def _serve(worker, the_front) -> None:
    """The worker's main function run here, while `the_front` plays the front on a thread of
    its own, until both have ended."""
    thread = threading.Thread(target=the_front)
    thread.start()
    run_worker(worker, WorkerSettings(index=0, models=()))
    thread.join(10)
    assert not thread.is_alive()


def test_a_worker_that_cannot_load_says_why_and_ignores_the_group_s_signals(signals, tmp_path):
    front, worker = Pipe()
    settings = WorkerSettings(
        index=3, models=(("tiny/2", broken_version(tmp_path)),), variants=(("tiny/2", "fp32"),)
    )
    run_worker(worker, settings)
    failed = front.recv()
    assert isinstance(failed, Failed)
    assert failed.message.startswith("worker 3: NoSuchFile: ") and "encoder.onnx" in failed.message
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_worker_skips_a_version_whose_directory_was_replaced_since_it_was_verified(
    tmp_path, signals
):
    """A worker (re)started after its version's directory was renamed over would load the
    new files under the manifest the front verified (its tokenizer, limits, special tokens):
    it skips that version before reading a graph (this one has none) and reports ready with
    why, instead of failing its start while the front drains that content's calls."""
    version = broken_version(tmp_path)
    manifest = {**version.manifest, "limits": {"max_output_tokens": 2}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    front, worker = Pipe()
    settings = WorkerSettings(
        index=0, models=(("tiny/2", version),), variants=(("tiny/2", "fp32"),)
    )
    front.send(Stop())  # read once it is ready
    run_worker(worker, settings)
    ready = front.recv()
    assert isinstance(ready, Ready), ready
    assert ready.info["models"] == {}
    assert "replaced since it was verified" in ready.info["skipped"]["tiny/2"]


def test_a_job_is_answered_with_its_events_and_the_measurements_then_stop_ends_it(signals, loaded):
    schedulers, info = loaded
    front, worker = Pipe()
    received: list = []

    def the_front():
        try:
            received.append(front.recv())  # Ready
            front.send(Cancel("other/9", 5))  # a model not served: ignored
            front.send(Submit(KEY, _job(1, max_length=7)))
            while not any(isinstance(e, Last) for m in received[1:] for e in m.events):
                assert front.poll(30)
                received.append(front.recv())
        finally:
            front.send(Stop())

    _serve(worker, the_front)
    assert received[0] == Ready(info)
    reports = received[1:]
    assert reports and all(isinstance(r, Report) and r.key == KEY for r in reports)
    events = [e for r in reports for e in r.events]
    assert isinstance(events[0], Admitted)
    (result,) = [e for e in events if isinstance(e, Result)]
    (alone,) = translate_ids(schedulers[KEY].engine, [SOURCE], DecodingOptions(max_length=7), 512)
    assert result.job_id == 1 and result.results[0][0].tokens == alone[0].tokens
    stats = [r.stats for r in reports if r.stats is not None]
    assert all(isinstance(s, Stats) for s in stats)
    assert sum(len(s.step_seconds) for s in stats) >= 1  # the parent gets the measurements
    assert sum(s.tokens for s in stats) >= 1
    loop = {p: sum(s.loop_seconds.get(p, 0.0) for s in stats) for p in PHASES}
    assert all(set(s.loop_seconds) in (set(), set(PHASES)) for s in stats)
    assert all(seconds >= 0 for seconds in loop.values())
    # the steps ran on the loop's thread, measured there: its inputs, runs, outputs, encoder
    assert all(loop[p] > 0 for p in ("admit", "encoder", "prepare", "run", "outputs"))
    assert loop["run"] > loop["outputs"]


def test_a_stream_s_reports_carry_measurements_at_most_every_stats_every_and_at_its_end(
    signals, loaded
):
    """A streamed job's partials go out a step at a time; the measurements go with them only
    every STATS_EVERY (each a front's work to observe), and with the report that ends the
    job, which holds every step not yet sent: a call's metrics are in when it returns."""
    front, worker = Pipe()
    reports: list[tuple[float, Report]] = []
    job = Job(**{**_job(1, max_length=60).__dict__, "stream": True})

    def the_front():
        try:
            front.recv()  # Ready
            front.send(Submit(KEY, job))
            while not any(isinstance(e, Last) for _, r in reports for e in r.events):
                assert front.poll(30)
                reports.append((time.monotonic(), front.recv()))
        finally:
            front.send(Stop())

    _serve(worker, the_front)
    partial = [r for _, r in reports if any(isinstance(e, Partial) for e in r.events)]
    measured = [r for _, r in reports if r.stats is not None]
    (result,) = [e for _, r in reports for e in r.events if isinstance(e, Result)]
    assert reports[-1][1].stats is not None  # the report of the Result measures
    steps = len(result.results[0][0].token_log_probs)
    assert sum(len(r.stats.step_seconds) for r in measured) == steps  # every step, once
    assert len(partial) >= steps - 1  # a partial a step (the last may go with the result)
    elapsed = reports[-1][0] - reports[0][0]
    assert len(measured) <= elapsed / process.STATS_EVERY + 2, (len(measured), elapsed)


def test_stop_answers_every_job_still_held(signals, loaded):
    front, worker = Pipe()
    front.send(Submit(KEY, _job(2, max_length=200)))
    front.send(Stop())  # read in the same round as the job: it never gets a step
    run_worker(worker, WorkerSettings(index=0, models=()))
    assert isinstance(front.recv(), Ready)
    report = front.recv()
    assert report.key == KEY and report.stats is None
    (failure,) = report.events
    assert (failure.job_id, failure.kind) == (2, "Unavailable")
    assert failure.message.startswith("the worker stopped before the decode finished")
    assert not front.poll(0.2)  # nothing after


def test_the_front_gone_ends_the_worker_quietly(signals, loaded):
    schedulers, _ = loaded
    front, worker = Pipe()

    def the_front():
        front.recv()  # Ready
        front.close()

    _serve(worker, the_front)  # returns, raises nothing
    assert not schedulers[KEY].busy


def test_an_idle_worker_reports_its_idle_time_as_it_passes(signals, loaded):
    """The metric's rate reads idle while no job comes, not a jump once one does: an idle
    worker wakes every STATS_EVERY and sends its loop's seconds."""
    front, worker = Pipe()
    idle: list[float] = []

    def the_front():
        try:
            front.recv()  # Ready
            deadline = time.monotonic() + 0.6
            while time.monotonic() < deadline:
                if front.poll(0.05):
                    report = front.recv()
                    assert isinstance(report, Report) and not report.events
                    idle.append(report.stats.loop_seconds["idle"])
        finally:
            front.send(Stop())

    _serve(worker, the_front)
    assert len(idle) >= 3  # about one every STATS_EVERY
    assert 0.3 < sum(idle) < 0.7 and max(idle) < 3 * process.STATS_EVERY


def test_a_version_unloaded_with_jobs_in_flight_answers_them(signals, loaded):
    """An Unload while a job runs (a retired version's calls cut at its drain): the job
    is answered Unavailable, not left waiting for an event that never comes."""
    front, worker = Pipe()
    failures: list[Failure] = []

    def the_front():
        front.recv()  # Ready
        front.send(Submit(KEY, _job(3, max_length=200)))
        while not any(isinstance(e, Admitted) for e in front.recv().events):
            pass
        front.send(Unload(KEY))
        while not failures and front.poll(5):
            failures.extend(e for e in front.recv().events if isinstance(e, Failure))
        front.send(Stop())

    _serve(worker, the_front)
    assert [(f.job_id, f.kind) for f in failures] == [(3, "Unavailable")]
    assert failures[0].message.startswith(f"model version {KEY} was unloaded before")


def test_a_worker_serves_its_versions_while_it_loads_another(signals, loaded, exported_translator):
    """A Load (a version published while serving) runs beside the loop: jobs sent after it
    are answered before the version, checked over its golden set, is."""
    version, _ = exported_translator
    front, worker = Pipe()
    answered: list = []

    def the_front():
        try:
            front.recv()  # Ready
            front.send(Load("translator/1", version, "fp32"))
            for job_id in (20, 21, 22):
                front.send(Submit(KEY, _job(job_id, max_length=8)))
            while not answered or answered[-1] != "translator/1":
                assert front.poll(120)
                message = front.recv()
                if isinstance(message, Loaded):
                    answered.append(message.key)
                else:
                    answered.extend(e.job_id for e in message.events if isinstance(e, Result))
        finally:
            front.send(Stop())

    _serve(worker, the_front)
    assert sorted(answered[:3]) == [20, 21, 22] and answered[3:] == ["translator/1"]


def test_a_job_whose_input_the_encoder_refuses_fails_alone_the_worker_goes_on(signals, loaded):
    """The encoder refuses one job's input (an onnxruntime error) while another job runs: that
    job is answered Internal, the running one decodes to its end as alone, and the worker
    serves on until it is stopped (it used to end, taking every job in flight with it)."""
    schedulers, _ = loaded
    engine = schedulers[KEY].engine
    schedulers[KEY] = Scheduler(RefusingEncoder(engine, longest=16), max_rows=8)
    front, worker = Pipe()
    events: list = []

    def the_front():
        try:
            front.recv()  # Ready
            front.send(Submit(KEY, _job(1, max_length=200)))
            while not any(isinstance(e, Admitted) for e in front.recv().events):
                pass
            front.send(Submit(KEY, _job(2, max_length=7, source=list(range(6, 46)))))
            while sum(isinstance(e, Last) for e in events) < 2 and front.poll(30):
                events.extend(front.recv().events)
        finally:
            front.send(Stop())

    _serve(worker, the_front)  # returns: the worker ran until it was stopped
    ended = {e.job_id: e for e in events if isinstance(e, Last)}
    assert isinstance(ended[2], Failure) and ended[2].kind == "Internal"
    assert "the encoder failed on this request's input" in ended[2].message
    # the job's 200 steps (no controls: the front's length limit by the source is not set)
    options = DecodingOptions(max_length=200, max_length_ratio=0.0)
    (alone,) = translate_ids(engine, [SOURCE], options, 512)
    assert isinstance(ended[1], Result) and ended[1].results[0][0].tokens == alone[0].tokens
