"""Where a worker's loop thread spends its time, by phase: the loop's wall time split whole,
so that its phases add up to it. Operators read it as `attnserve_worker_loop_seconds_total`;
the benchmarks divide it by the steps taken.

The phases, in the order a busy loop meets them:
- `idle`: blocked for a message with no job held (waiting for work);
- `messages`: the fronts' messages read and acted on (submits, cancels, loads);
- `admit`: admission rounds and joins (rows reserved, requests' tables and lanes set, the
  memory joined), the encoder's run apart;
- `encoder`: an admission's encoder run inline, or waited for on the encoder thread;
- `prepare`: a step's inputs made and bound (their copy to the device included);
- `run`: the step's run inline, or the wait for it on the step thread;
- `outputs`: the step's chosen ids read back (a GPU's synchronisation, when run inline
  left it);
- `schedule`: the rest of the scheduler's work between steps (rows dropped, lanes and
  searches advanced, jobs finished, results and partials built);
- `reports`: events routed to their fronts and handed to the outbox.

The scheduler measures its own phases (`STEP_PHASES`, service.worker.scheduler), the worker
the rest; the scheduler's are taken out of the `schedule` lap that holds them.
"""

from __future__ import annotations

import time

PHASES = (
    "idle",
    "messages",
    "admit",
    "encoder",
    "prepare",
    "run",
    "outputs",
    "schedule",
    "reports",
)
STEP_PHASES = ("admit", "encoder", "prepare", "run", "outputs")  # the scheduler measures these


def step_phases() -> dict[str, float]:
    """A scheduler's seconds in each of its phases, all at 0."""
    return dict.fromkeys(STEP_PHASES, 0.0)


class LoopClock:
    """Laps of one thread: each lap's time goes to the phase it names."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._last = clock()
        self.seconds = dict.fromkeys(PHASES, 0.0)  # since the last take

    @property
    def pending(self) -> bool:
        """Seconds were counted since the last take."""
        return any(self.seconds.values())

    def lap(self, phase: str) -> None:
        """The time since the last lap was spent in `phase`."""
        now = self._clock()
        self.seconds[phase] += now - self._last
        self._last = now

    def schedule(self, taken: dict[str, float]) -> None:
        """Laps the scheduler's round: what it measured of its own phases (`taken`, since its
        last take) goes to them, the rest to `schedule`."""
        self.lap("schedule")
        for phase, seconds in taken.items():
            self.seconds[phase] += seconds
            self.seconds["schedule"] -= seconds

    def take(self) -> dict[str, float]:
        """The seconds by phase since the last take (laps not yet closed wait for the next)."""
        taken, self.seconds = self.seconds, dict.fromkeys(PHASES, 0.0)
        return taken
