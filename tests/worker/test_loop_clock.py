"""Where a worker's loop spends its time: each lap goes whole to the phase it names, the
scheduler's own phases come out of the `schedule` lap that held them, and a take hands over
the seconds since the last one and starts again at 0."""

from __future__ import annotations

import pytest

from service.worker.loop_clock import PHASES, STEP_PHASES, LoopClock, step_phases


class Ticks:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_laps_add_up_to_the_time_that_passed_each_in_its_phase():
    ticks = Ticks()
    clock = LoopClock(ticks)
    for phase, seconds in (("idle", 2.0), ("messages", 0.25), ("idle", 1.0), ("reports", 0.5)):
        ticks.now += seconds
        clock.lap(phase)
    expected = {**dict.fromkeys(PHASES, 0.0), "idle": 3.0, "messages": 0.25, "reports": 0.5}
    assert clock.seconds == expected
    assert sum(clock.seconds.values()) == ticks.now - 100.0


def test_the_scheduler_s_phases_are_taken_out_of_its_schedule_lap():
    ticks = Ticks()
    clock = LoopClock(ticks)
    ticks.now += 10.0
    clock.schedule({"run": 6.0, "prepare": 1.0, "encoder": 2.0})
    assert clock.seconds["run"] == 6.0 and clock.seconds["prepare"] == 1.0
    assert clock.seconds["encoder"] == 2.0
    assert clock.seconds["schedule"] == pytest.approx(1.0)  # the scheduler's own rest
    assert sum(clock.seconds.values()) == pytest.approx(10.0)


def test_a_take_hands_over_the_seconds_and_starts_again():
    ticks = Ticks()
    clock = LoopClock(ticks)
    ticks.now += 1.0
    clock.lap("messages")
    ticks.now += 3.0  # a lap not yet closed waits for the next take
    taken = clock.take()
    assert taken["messages"] == 1.0 and sum(taken.values()) == 1.0
    assert clock.seconds == dict.fromkeys(PHASES, 0.0)
    clock.lap("run")
    assert clock.take()["run"] == 3.0


def test_the_scheduler_s_phases_are_phases_of_the_loop():
    assert set(STEP_PHASES) < set(PHASES) and "schedule" not in STEP_PHASES
    assert step_phases() == dict.fromkeys(STEP_PHASES, 0.0)
