"""The scheduler's own work per step, the engine left out: N one-row greedy jobs stepped.

    python -m bench.scheduler_step [--jobs 256] [--steps 200] [--rounds 3]

`Scheduler._step` over a batch whose search step returns random candidates at once, so what
is timed is the per-job bookkeeping a busy GPU worker does around every decoder step (a row's
token appended, its end checked, the kept rows' index built). Prints the best round's ms per
step and us per job.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from service.decoding import DecodingOptions, make_search
from service.scheduler import Job, Scheduler, Stats
from service.search import Candidates


class _InstantBatch:
    """A ContinuousBatch stand-in: candidates for every row, no model."""

    rows = 0

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def search_step(self, tokens, request):
        n = len(tokens)
        ids = self.rng.integers(4, 8000, size=(n, 1))  # never </s>: every job runs on
        return Candidates(ids, np.full((n, 1), -0.5, np.float32)), None

    def reorder(self, index) -> None:
        pass


def per_step_seconds(jobs: int, steps: int) -> float:
    scheduler = Scheduler.__new__(Scheduler)  # the state _step reads, without an engine
    scheduler.clock, scheduler.batch = time.monotonic, _InstantBatch()
    scheduler.events, scheduler.stats = [], Stats()
    scheduler._times, scheduler._times_from, scheduler._steps = [], 0, 0
    options = DecodingOptions(beam_size=1, max_length=10**9)
    scheduler.running = []
    for i in range(jobs):
        job = Job(i, {}, options)
        job.search = make_search(1, options, 1, 2)
        scheduler.running.append(job)
    start = time.perf_counter()
    for _ in range(steps):
        scheduler._step()
    return (time.perf_counter() - start) / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    best = min(per_step_seconds(args.jobs, args.steps) for _ in range(args.rounds))
    print(
        f"{args.jobs} jobs: {best * 1e3:.3f} ms per step, {best / args.jobs * 1e6:.2f} us per job"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
