"""The front processes a worker answers: jobs go to their model's scheduler and their events back
to the front that sent them; fronts connect on the worker's socket with its key; a front that
goes away has its jobs cancelled and lets go of its models, and the last front to let go of a
model version unloads it. A version is loaded beside the loop (between two steps on CUDA)
and served by the fronts that still hold it when its load ends."""

from __future__ import annotations

import tempfile
import time
from multiprocessing import Pipe
from multiprocessing.connection import AuthenticationError, Client
from pathlib import Path

import pytest
from helpers import broken_version, tiny_transformer

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.worker.fronts import Fronts
from service.worker.messages import (
    Failure,
    Job,
    Load,
    Loaded,
    NotLoaded,
    Ready,
    Report,
    Result,
    Submit,
)
from service.worker.scheduler import Scheduler
from service.worker.settings import WorkerSettings

KEY = "tiny/1"


@pytest.fixture(scope="module")
def engine():
    from models.reference import TorchEngine

    return TorchEngine(tiny_transformer(seed=1))


def _job(job_id: int, max_length: int = 6) -> Job:
    src_ids, src_mask = source_batch([[5, 9, 14]], 512)
    options = DecodingOptions(max_length=max_length)
    return Job(job_id, {"src_ids": src_ids, "src_mask": src_mask}, options)


def _received(link, timeout: float = 10.0):
    assert link.poll(timeout), "nothing came"
    return link.recv()


def _load_answer(fronts: Fronts, front, timeout: float = 120.0):
    """The answer to a Load: the loop's wait, which takes a load's outcome, run until it
    comes."""
    deadline = time.monotonic() + timeout
    while not front.poll(0.02):
        assert time.monotonic() < deadline, "no answer came"
        fronts.wait(0.02)
    return front.recv()


def _finish(scheduler: Scheduler) -> list:
    events = []
    for _ in range(200):
        if not scheduler.busy:
            break
        scheduler.iterate()
    events, scheduler.events = scheduler.events, []
    return events


def _accepted(fronts: Fronts) -> None:
    """Waits for the connection just made: the accepting thread wakes the loop's wait."""
    for _ in range(50):
        fronts.wait(0.1)
        if len(fronts.links) == 2:
            return


@pytest.fixture
def one_front(engine):
    front, worker_end = Pipe()
    scheduler = Scheduler(engine, max_rows=8)
    info = {"pid": 1, "models": {KEY: {"kind": "transformer"}}}
    fronts = Fronts(worker_end, {KEY: scheduler}, info, WorkerSettings(index=0, models=()))
    yield fronts, front, scheduler
    fronts.close()


@pytest.fixture
def two_fronts(engine):
    """Fronts listening on a socket (a short path: Unix socket names are short), and a second
    front connected to it."""
    with tempfile.TemporaryDirectory(prefix="w") as directory:
        socket = str(Path(directory) / "s")
        settings = WorkerSettings(index=0, models=(), socket=socket, authkey=b"key")
        front, worker_end = Pipe()
        scheduler = Scheduler(engine, max_rows=8)
        info = {"pid": 1, "models": {KEY: {"kind": "transformer"}}}
        fronts = Fronts(worker_end, {KEY: scheduler}, info, settings)
        try:
            with pytest.raises(AuthenticationError):
                Client(socket, "AF_UNIX", authkey=b"wrong")
            other = Client(socket, "AF_UNIX", authkey=b"key")
            _accepted(fronts)
            yield fronts, front, other, scheduler
        finally:
            fronts.close()


def test_the_parent_s_jobs_go_to_their_scheduler_and_every_event_back_to_it(one_front):
    fronts, _, scheduler = one_front
    assert fronts.route([]) == {}
    fronts.submit(fronts.parent, Submit(KEY, _job(1)))
    assert [r.id for r in scheduler.waiting] == [1]
    assert fronts.owner == {}  # the parent's jobs are not kept apart
    events = _finish(scheduler)
    assert isinstance(events[-1], Result) and events[-1].job_id == 1
    assert fronts.route(events) == {fronts.parent: events}


def test_a_job_for_a_model_not_loaded_is_answered_unavailable(one_front):
    fronts, front, scheduler = one_front
    fronts.submit(fronts.parent, Submit("gone/3", _job(2)))
    report = _received(front)
    assert isinstance(report, Report) and report.key == "gone/3"
    (failure,) = report.events
    assert (failure.job_id, failure.kind) == (2, "Unavailable")
    assert "gone/3 is not loaded" in failure.message
    assert not scheduler.waiting


def test_loading_a_version_already_loaded_answers_at_once(one_front):
    fronts, front, scheduler = one_front
    fronts.load(fronts.parent, Load(KEY, None, "fp32"), WorkerSettings(index=0, models=()))
    assert _received(front) == Loaded(KEY, {"kind": "transformer"})
    assert fronts.schedulers[KEY] is scheduler


def test_a_version_that_cannot_load_is_refused_and_the_others_stay(one_front, tmp_path):
    fronts, front, _ = one_front
    broken = broken_version(tmp_path)  # its graphs missing from its directory
    fronts.load(fronts.parent, Load("tiny/2", broken, "fp32"), WorkerSettings(index=0, models=()))
    refused = _load_answer(fronts, front)
    assert isinstance(refused, NotLoaded) and refused.key == "tiny/2"
    assert refused.message.startswith("NoSuchFile: ") and "encoder.onnx" in refused.message
    assert set(fronts.schedulers) == {KEY} and set(fronts.info["models"]) == {KEY}


def test_a_version_loads_beside_the_loop_and_is_served_once_checked(one_front, exported_translator):
    fronts, front, scheduler = one_front
    version, _ = exported_translator
    settings = WorkerSettings(index=0, models=())
    fronts.load(fronts.parent, Load("translator/1", version, "fp32"), settings)
    assert not front.poll(0) and set(fronts.loading) == {"translator/1"}  # still loading
    fronts.submit(fronts.parent, Submit(KEY, _job(4)))  # the served version decodes meanwhile
    assert isinstance(_finish(scheduler)[-1], Result)
    loaded = _load_answer(fronts, front)
    assert isinstance(loaded, Loaded) and loaded.key == "translator/1"
    assert loaded.info["golden_inputs"] > 0 and loaded.info["provider"] == "CPUExecutionProvider"
    assert fronts.holders["translator/1"] == {fronts.parent} and not fronts.loading
    assert fronts.info["models"]["translator/1"] == loaded.info
    fronts.load(fronts.parent, Load("translator/1", version, "fp32"), settings)
    assert _received(front) == loaded  # loaded already: answered at once


def test_on_cuda_a_version_loads_between_two_steps(one_front, exported_translator):
    """There the loop answers the Load before it goes on (a CUDA graph's recording fails
    beside another thread's run); the version is the CPU's here."""
    fronts, front, _ = one_front
    fronts.load_beside = False
    version, _ = exported_translator
    fronts.load(fronts.parent, Load("translator/1", version, "fp32"), WorkerSettings(0, ()))
    assert "translator/1" in fronts.schedulers and not fronts.loading  # before the next wait
    loaded = _received(front)
    assert isinstance(loaded, Loaded) and loaded.info == fronts.info["models"]["translator/1"]


def test_a_version_let_go_of_while_loading_is_answered_then_dropped(one_front, exported_translator):
    fronts, front, _ = one_front
    version, _ = exported_translator
    fronts.load(fronts.parent, Load("translator/1", version, "fp32"), WorkerSettings(0, ()))
    fronts.unload(fronts.parent, "translator/1", asked=True)  # the front gave up on it
    assert isinstance(_load_answer(fronts, front), Loaded)  # the answer the front drops
    assert set(fronts.schedulers) == {KEY} and set(fronts.info["models"]) == {KEY}
    assert set(fronts.holders) == {KEY} and not fronts.loading
    fronts.submit(fronts.parent, Submit("translator/1", _job(5)))
    (failure,) = _received(front).events
    assert failure.kind == "Unavailable" and "not loaded here" in failure.message


def test_the_last_front_to_let_go_of_a_version_unloads_it(one_front):
    fronts, front, scheduler = one_front
    fronts.submit(fronts.parent, Submit(KEY, _job(3)))
    fronts.unload(fronts.parent, KEY)
    assert KEY not in fronts.schedulers and KEY not in fronts.info["models"]
    assert KEY not in fronts.holders
    report = _received(front)  # closed: what it held is answered, to its front
    assert isinstance(report, Report) and report.key == KEY
    (failure,) = report.events
    assert (failure.job_id, failure.kind) == (3, "Unavailable")
    assert not scheduler.events
    fronts.unload(fronts.parent, KEY)  # a second time: nothing left to do


def test_the_parent_gone_ends_the_worker(one_front):
    fronts, front, _ = one_front
    front.close()
    fronts.send(fronts.parent, Ready({}))
    fronts.outbox.close()  # the send has been tried
    with pytest.raises(BrokenPipeError):
        fronts.check_sent()


def test_a_front_that_connects_is_told_ready_and_serves_every_model(two_fronts):
    fronts, _, other, _ = two_fronts
    assert len(fronts.links) == 2
    link = fronts.links[1]
    assert fronts.holders[KEY] == {fronts.parent, link}
    assert _received(other) == Ready(fronts.info)


def test_each_front_gets_the_events_of_its_own_jobs(two_fronts):
    fronts, _, other, scheduler = two_fronts
    _received(other)  # Ready
    link = fronts.links[1]
    other.send(Submit(KEY, _job(10)))
    assert fronts.wait(5) == [link]
    fronts.submit(link, link.recv())
    fronts.submit(fronts.parent, Submit(KEY, _job(11)))
    assert fronts.owner == {10: (link, KEY)}
    events = _finish(scheduler)
    routed = fronts.route(events)
    assert {e.job_id for e in routed[link]} == {10}
    assert {e.job_id for e in routed[fronts.parent]} == {11}
    assert fronts.owner == {}  # its job ended: forgotten


def test_a_front_that_goes_away_has_its_jobs_cancelled_and_lets_go_of_its_models(two_fronts):
    fronts, _, other, scheduler = two_fronts
    _received(other)  # Ready
    link = fronts.links[1]
    fronts.submit(link, Submit(KEY, _job(20, max_length=50)))
    fronts.submit(fronts.parent, Submit(KEY, _job(21, max_length=4)))
    scheduler.iterate()
    other.close()
    fronts.send(link, Ready({}))  # its pipe is gone: the send fails
    fronts.outbox.close()
    fronts.check_sent()
    assert fronts.links == [fronts.parent]
    assert fronts.holders[KEY] == {fronts.parent}  # the parent still serves it
    assert fronts.schedulers[KEY] is scheduler
    events = {e.job_id: e for e in _finish(scheduler) if isinstance(e, Result | Failure)}
    assert isinstance(events[20], Failure) and events[20].kind == "Cancelled"
    assert isinstance(events[21], Result)
    fronts.drop(link)  # dropped already: nothing happens


def test_fronts_that_come_and_go_are_waited_on(two_fronts):
    """The loop's wait is kept from step to step: a front gone leaves it, and the next one
    (on a descriptor number a gone one had, sooner or later) joins it."""
    fronts, _, other, _ = two_fronts
    for job_id in range(5):
        assert isinstance(_received(other), Ready)
        link = fronts.links[1]
        other.send(Submit(KEY, _job(job_id)))
        assert fronts.wait(5) == [link]
        assert [m.job.id for m in fronts.inboxes[link].read()] == [job_id]
        other.close()
        assert fronts.wait(5) == [link]  # its end of the link is readable: its close
        with pytest.raises(EOFError):
            fronts.inboxes[link].read()
        fronts.drop(link)
        assert fronts.wait(0) == [] and fronts.links == [fronts.parent]
        other = Client(fronts.listener.address, "AF_UNIX", authkey=b"key")
        _accepted(fronts)
    other.close()


def test_fronts_asking_for_a_version_being_loaded_share_its_load(two_fronts, exported_translator):
    fronts, front, other, _ = two_fronts
    version, _ = exported_translator
    other_link = fronts.links[1]
    assert isinstance(_received(other), Ready)
    message = Load("translator/1", version, "fp32")
    fronts.load(fronts.parent, message, WorkerSettings(0, ()))
    fronts.load(other_link, message, WorkerSettings(0, ()))
    assert len(fronts.loading["translator/1"].asked) == 2  # one load for both
    first = _load_answer(fronts, front)
    assert isinstance(first, Loaded) and _received(other) == first
    assert fronts.holders["translator/1"] == {fronts.parent, other_link}


def test_every_front_sees_the_worker_end_once_what_was_queued_is_sent(two_fronts):
    """Closing (the loop ended: stopped, or raised) sends what is queued, then ends the
    connection of every front on the socket, so that each hears at once that the worker is
    gone; the parent's pipe ends with the process."""
    fronts, front, other, _ = two_fronts
    _received(other)  # Ready
    fronts.send(fronts.links[1], Ready({}))
    fronts.close()
    assert _received(other) == Ready({})
    assert other.poll(2), "the connection stays open"
    with pytest.raises(EOFError):
        other.recv()
    assert not fronts.parent.closed and not front.poll(0.1)


def test_without_a_socket_nothing_listens(one_front):
    fronts, *_ = one_front
    assert fronts.listener is None
    assert fronts.wait(0.05) == []
    assert fronts.links == [fronts.parent]


@pytest.fixture
def replica_fronts(engine):
    """A Ray replica's worker: the replica its parent, a front connected over TCP."""
    settings = WorkerSettings(
        index=0, models=(), socket="127.0.0.1:0", authkey=b"key", replica=True
    )
    parent, worker_end = Pipe()
    scheduler = Scheduler(engine, max_rows=8)
    info = {"pid": 1, "models": {KEY: {"kind": "transformer"}}}
    fronts = Fronts(worker_end, {KEY: scheduler}, info, settings)
    try:
        host, port = info["address"].rsplit(":", 1)
        assert (host, int(port)) == fronts.listener.address and int(port) > 0
        front = Client((host, int(port)), "AF_INET", authkey=b"key")
        _accepted(fronts)
        yield fronts, parent, front, scheduler
    finally:
        fronts.close()


def test_a_replica_listens_on_tcp_and_its_front_gets_the_measurements(replica_fronts):
    fronts, _, front, _ = replica_fronts
    assert _received(front) == Ready(fronts.info)  # the address it listens on among the info
    link = fronts.links[1]
    assert fronts.measurer is link  # the front, not the replica, counts the measurements


def test_a_replica_s_front_unloads_what_the_replica_started_with(replica_fronts):
    fronts, _, _, _ = replica_fronts
    link = fronts.links[1]
    fronts.drop(link)  # a front gone lets go, but the replica still serves its versions
    assert KEY in fronts.schedulers
    fronts.links.append(link)
    fronts.holders[KEY].add(link)
    fronts.unload(link, KEY, asked=True)  # a front's Unload: the version goes
    assert KEY not in fronts.schedulers


def test_the_worker_socket_is_a_unix_path_or_tcp():
    from service.worker.settings import socket_address

    assert socket_address("/run/attnserve/worker-0.sock") == (
        "AF_UNIX",
        "/run/attnserve/worker-0.sock",
    )
    assert socket_address("10.0.0.7:0") == ("AF_INET", ("10.0.0.7", 0))
    assert socket_address("[::1]:5000") == ("AF_INET", ("::1", 5000))
    assert socket_address("/tmp/a:1") == ("AF_UNIX", "/tmp/a:1")


def test_a_front_s_clock_is_moved_onto_a_replica_s_and_back(engine):
    """A replica on another machine counts its monotonic clock from another boot: a job's
    deadline is moved onto the replica's clock by what the front's read as it sent it, and
    a report carries the replica's, by which the front moves a result's moments onto its
    own. A worker on the front's machine shares its clock: nothing is moved or stamped."""
    import time
    from dataclasses import replace

    front, worker_end = Pipe()
    scheduler = Scheduler(engine, max_rows=8)
    info = {"pid": 1, "models": {KEY: {"kind": "transformer"}}}
    settings = WorkerSettings(index=0, models=(), replica=True)
    fronts = Fronts(worker_end, {KEY: scheduler}, info, settings)
    ahead = 1e5  # the front's clock, a day ahead of this worker's
    sent = time.monotonic() + ahead
    job = replace(_job(3), deadline=sent + 30.0)
    fronts.submit(fronts.parent, Submit(KEY, job, sent))
    (waiting,) = scheduler.waiting
    assert 29.0 < waiting.job.deadline - time.monotonic() <= 30.0  # 30 s left, here
    events = _finish(scheduler)
    assert isinstance(events[-1], Result)  # not expired at its first step
    fronts.send(fronts.parent, Report(KEY, events, None, 0, 0))
    report = _received(front)
    assert abs(report.sent_at - time.monotonic()) < 5.0  # the worker's clock
    timings = events[-1].timings
    moved = timings.moved(ahead)
    assert moved.first_token_at - timings.first_token_at == pytest.approx(ahead)
    assert moved.gaps == timings.gaps and moved.queued_at <= moved.first_token_at
    fronts.close()


def test_a_worker_on_the_front_s_machine_keeps_the_front_s_clock(one_front):
    import time
    from dataclasses import replace

    fronts, front, scheduler = one_front
    deadline = time.monotonic() + 30.0
    fronts.submit(fronts.parent, Submit(KEY, replace(_job(4), deadline=deadline), 1.0))
    assert scheduler.waiting[0].job.deadline == deadline
    fronts.send(fronts.parent, Report(KEY, [], None, 0, 0))
    assert _received(front).sent_at == 0.0


def test_a_front_that_connects_after_the_worker_ended_is_refused(replica_fronts):
    """The listener was closed while its thread waited in accept, a call that holds the
    socket: it went on listening, and a replica's front reconnecting after the loop ended (as
    the cluster's front does half a second after a connection ends) was let in, passed the
    key's handshake and heard nothing, neither Ready nor an end."""
    import threading

    fronts, _, front, _ = replica_fronts
    address = fronts.listener.address
    fronts.close()
    with pytest.raises(EOFError):
        while True:  # Ready, then the end
            _received(front)
    with pytest.raises(ConnectionRefusedError):
        late = Client(address, "AF_INET", authkey=b"key")
        late.poll(2)  # what it hears: nothing, the connection open
    assert not any(t.name == "accept" and t.is_alive() for t in threading.enumerate())
