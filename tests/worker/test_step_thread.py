"""The step beside the scheduler's own work: `start` returns once the run has started (not
once it has ended), runs go one at a time in order on the step thread, `wait` gives the run's
seconds or raises its error, and `close` lets the run in progress end first."""

from __future__ import annotations

import threading
import time

import pytest

from service.worker.step_thread import Running, StepThread


@pytest.fixture
def step():
    thread = StepThread()
    yield thread
    thread.close()


def test_start_returns_once_the_run_has_started_and_wait_once_it_has_ended(step):
    release, seen = threading.Event(), []

    def call():
        seen.append(threading.current_thread().name)
        release.wait(10)

    running = step.start(call)
    assert running.started.is_set() and not running.finished.is_set()
    assert seen == ["step"]  # the step thread's, not the caller's
    time.sleep(0.1)
    release.set()
    seconds = running.wait()
    assert running.finished.is_set()
    assert 0.1 <= seconds == running.seconds < 10


def test_runs_go_one_at_a_time_in_the_order_they_were_handed(step):
    order, inside = [], []

    def call(i):
        def run():
            inside.append(i)
            assert len(inside) == 1  # nothing else runs meanwhile
            time.sleep(0.01)
            order.append(i)
            inside.pop()

        return run

    runs = [step.start(call(i)) for i in range(5)]
    for running in runs:
        running.wait()
    assert order == list(range(5))


def test_a_run_s_error_is_raised_by_wait_and_the_thread_goes_on(step):
    def broken():
        raise ZeroDivisionError("in the run")

    running = step.start(broken)
    with pytest.raises(ZeroDivisionError, match="in the run"):
        running.wait()
    assert isinstance(running.error, ZeroDivisionError)
    done = []
    step.start(lambda: done.append(1)).wait()
    assert done == [1]


def test_close_lets_the_run_in_progress_end():
    thread, ended = StepThread(), []

    def slow():
        time.sleep(0.2)
        ended.append(True)

    running = thread.start(slow)
    thread.close()
    assert ended == [True] and running.finished.is_set()
    assert not thread._thread.is_alive()


def test_a_running_not_yet_finished_blocks_its_waiter():
    running = Running(lambda: None)
    waiter = threading.Thread(target=running.wait, daemon=True)
    waiter.start()
    waiter.join(0.1)
    assert waiter.is_alive()  # nothing set finished yet
    running.seconds = 0.5
    running.finished.set()
    waiter.join(5)
    assert not waiter.is_alive() and running.wait() == 0.5
