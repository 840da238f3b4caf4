"""The worker's device lock (service.worker.device): runs beside each other, a recording run
alone, and a launch's recording asked on the thread that runs it."""

from __future__ import annotations

import threading
import time

import pytest

from service.runtime.tensors import Launch, Recording
from service.worker.device import DeviceLock, run_step


def _started(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _until(condition, seconds: float = 10.0) -> None:
    ends = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < ends, "the condition never held"
        time.sleep(0.001)


def test_a_run_alone_waits_for_the_shared_runs_and_goes_before_those_that_ask_later():
    lock, order = DeviceLock(), []
    holding, release = threading.Event(), threading.Event()

    def first():
        with lock.shared():
            order.append("shared")
            holding.set()
            release.wait()

    def second():
        with lock.shared():
            order.append("second shared")

    def recording():
        with lock.alone():
            order.append("alone")

    threads = [_started(first)]
    holding.wait()
    threads.append(_started(recording))
    _until(lambda: lock._waiting == 1)
    threads.append(_started(second))
    time.sleep(0.05)  # the later shared run waits behind the one waiting to be alone
    assert order == ["shared"]
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["shared", "alone", "second shared"]


def test_shared_runs_go_beside_each_other():
    lock, inside, both = DeviceLock(), [], threading.Barrier(2, timeout=10)

    def run():
        with lock.shared():
            inside.append(1)
            both.wait()  # breaks unless the other run is inside too

    threads = [_started(run), _started(run)]
    for thread in threads:
        thread.join(10)
    assert len(inside) == 2 and not both.broken


def test_a_launch_records_once_on_each_thread_that_runs_it_and_again_after_a_failure():
    """Its first run on a thread holds the lock alone (onnxruntime records the graph there);
    later runs there share it; another thread records again; a run that raised recorded
    nothing, so the next one is alone again."""
    lock, recording, seen = DeviceLock(), Recording(), []
    fail = [True]

    def run():
        seen.append((threading.current_thread().name, lock._alone))
        if fail.pop() if fail else False:
            raise RuntimeError("the capture failed")

    launch = Launch(run, lambda: None, recording)
    with pytest.raises(RuntimeError):
        run_step(launch, lock)
    run_step(launch, lock)
    run_step(launch, lock)
    other = threading.Thread(target=run_step, args=(launch, lock), name="other")
    other.start()
    other.join(10)
    run_step(launch, lock)
    main = threading.current_thread().name
    assert seen == [(main, True), (main, True), (main, False), ("other", True), (main, False)]
    assert not Launch(run, lambda: None).records()  # nothing recorded: never alone


def test_the_runs_held_alone_and_their_seconds_are_counted_until_taken():
    """What the worker reports with its loop's phases (the metrics' device-alone counters):
    each recording run, a failed one too, from asking for the lock to letting it go."""
    lock, recording = DeviceLock(), Recording()
    assert lock.take_alone() == (0, 0.0)
    launch = Launch(lambda: time.sleep(0.02), lambda: None, recording)
    run_step(launch, lock)  # records: alone
    run_step(launch, lock)  # replays: shared, not counted
    with pytest.raises(RuntimeError), lock.alone():
        raise RuntimeError("the capture failed")
    runs, seconds = lock.take_alone()
    assert runs == 2 and 0.02 <= seconds < 5
    assert lock.take_alone() == (0, 0.0)
