"""Admission by a latency budget: a limit on the batch rows in flight, steered by the latency
the calls actually see.

A continuous batch takes every call that fits in its rows, so under overload the rows fill
up and every call slows down together (a step over 64 rows costs more than over 8): a queue
limit alone refuses too late. `AdmissionLimit` keeps the rows in flight (running and queued,
over all workers) under a limit, and moves the limit after every window of finished calls:

- the window's p99 latency over the budget: the limit falls in proportion
  (limit x budget / p99, at most halved per window), so a burst is cut within a few windows;
- under the budget while the rows in flight came near the limit: it rises in proportion
  too (limit x budget / p99), by at least a tenth (and one row) and at most doubled, so the
  limit finds the largest batch that keeps the budget, slowly near the budget and quickly
  when calls take a fraction of it (a burst after quiet traffic is admitted within a few
  windows, not refused while the limit creeps up a row at a time);
- under the budget, with the rows in flight far from the limit: the limit comes down to
  HEADROOM times the most rows any window has held within the budget since the last cut.
  A limit no traffic has tried is a promise nobody has checked: a server started with a
  full batch per worker, and serving 16 rows, would otherwise let the first burst of an
  overload take 128 rows at once, and every call admitted in that burst takes several times
  the budget before the first window can close. This is TCP's congestion window validation
  (RFC 7661) applied to batch rows.

A call whose rows would pass the limit is refused at once (RESOURCE_EXHAUSTED): it learns in
a millisecond what it would have learnt after its deadline. When nothing is in flight a call
is always admitted, so a single call longer than the budget still runs. The latency is the
front's: from submission to the worker until the result, queueing in the worker included;
the budget should sit above the latency of the longest calls normal traffic makes (at
capacity), e.g. its p99. This is the scheme of adaptive concurrency limits (TCP's AIMD, and
the gradient limiters of service proxies) applied to batch rows.
"""

from __future__ import annotations

import math

import numpy as np

WINDOW_SECONDS = 0.5  # a window closes after this long with MIN_SAMPLES calls finished ...
MIN_SAMPLES = 8
LONG_WINDOW_SECONDS = 5.0  # ... or after this long with any
NEAR_LIMIT = 0.8  # rows in flight at least this part of the limit: the limit may rise
RISE = 0.1
HEADROOM = 1.5  # an unpressed limit comes down to this times the most rows proven in budget
PERCENTILE = 99  # of a window's latencies, held to the budget


class AdmissionLimit:
    def __init__(self, budget_seconds: float, ceiling: int, floor: int = 1, start: int = 0):
        self.budget = budget_seconds
        self.ceiling, self.floor = ceiling, max(1, min(floor, ceiling))
        self.limit = min(start, ceiling) if start > 0 else ceiling
        self._latencies: list[float] = []
        self._window_start: float | None = None
        self._pressed = False  # rows in flight came near the limit during the window
        self._peak = 0  # the most rows in flight during the window
        self._proven = 0  # the most rows a window held within the budget since the last cut

    def admits(self, in_flight: int, rows: int) -> bool:
        """Whether a call of `rows` may join `in_flight` rows."""
        if in_flight + rows >= NEAR_LIMIT * self.limit:
            self._pressed = True
        admitted = in_flight == 0 or in_flight + rows <= self.limit
        if admitted:
            self._peak = max(self._peak, in_flight + rows)
        return admitted

    def observe(self, seconds: float, now: float) -> None:
        """A call finished after `seconds`; closes the window when it is due."""
        if self._window_start is None:
            self._window_start = now
        self._latencies.append(seconds)
        age = now - self._window_start
        if (age >= WINDOW_SECONDS and len(self._latencies) >= MIN_SAMPLES) or (
            age >= LONG_WINDOW_SECONDS
        ):
            self._adjust(float(np.percentile(self._latencies, PERCENTILE)))
            self._latencies, self._window_start, self._pressed = [], now, False
            self._peak = 0

    def _adjust(self, latency: float) -> None:
        if latency > self.budget:
            factor = max(0.5, self.budget / latency)
            self.limit = max(self.floor, int(self.limit * factor))
            self._proven = 0
            return
        self._proven = max(self._proven, self._peak)
        if self._pressed:
            factor = min(2.0, max(1.0 + RISE, self.budget / max(latency, 1e-9)))
            self.limit = min(self.ceiling, max(self.limit + 1, int(self.limit * factor)))
        elif self._proven:
            validated = math.ceil(HEADROOM * self._proven)
            self.limit = max(self.floor, min(self.limit, validated))
