"""The scheduler's own work per step, the engine left out: N one-input jobs stepped.

    python -m bench.scheduler_step [--jobs 256] [--beam 1] [--beam-jobs 0] [--steps 200]
        [--rounds 3] [--ending MAX_LENGTH]

`Scheduler.iterate` over a batch whose search step returns random candidates at once, so what
is timed is the per-job bookkeeping a busy GPU worker does around every decoder step (a row's
token appended, its end checked, the kept rows' index built; with `--beam` above 1, each job
a beam search: its rows' candidates ranked and its beams chosen; `--beam-jobs` puts a few
beam jobs beside the others, a batch of mixed traffic). Prints the best round's ms per step
and us per job.

With `--ending`, `--jobs` greedy rows are kept full by a closed loop of jobs that end after
between half of MAX_LENGTH and MAX_LENGTH tokens, each replaced as it ends (a busy server's
traffic): what a job costs the scheduler from its submission to its result (queued,
admitted, joined, stepped, its hypothesis and timings built, its row let go), over `--steps`
steps. Prints the best round's ms per step, us per finished job and jobs ended a step.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from types import SimpleNamespace

import numpy as np

from service.runtime.decoding import DecodingOptions
from service.runtime.search import Candidates
from service.runtime.tensors import EncoderOutput, Launch
from service.worker.messages import Job, Result
from service.worker.scheduler import Scheduler

BEAM_JOB = 4  # the beam of --beam-jobs


class InstantBatch:
    """A ContinuousBatch stand-in: candidates for every row, no model (a few sets made before
    the clock starts, taken in turn); a step's run sleeps `run_seconds` (a device's run: the
    GIL let go meanwhile, as onnxruntime does)."""

    def __init__(self, rows: int, k: int, seed: int = 0, run_seconds: float = 0.0):
        rng, self.sets, self.turn, self.rows = np.random.default_rng(seed), [], 0, 0
        self.run = partial(time.sleep, run_seconds) if run_seconds else lambda: None
        for _ in range(8):  # distinct tokens a row, never </s>: every job runs on
            ids = 4 + np.argsort(rng.random((rows, 64)), axis=1)[:, :k] * 100
            ids += rng.integers(0, 100, size=(rows, 1))
            log_probs = -np.sort(rng.random((rows, k)), axis=1).astype(np.float32)
            self.sets.append(Candidates(ids, log_probs))

    def join(self, encoder, sources, reservation=None) -> None:
        self.rows += len(sources)

    def launch_search_step(self, tokens, request, steps: int = 1) -> Launch:
        assert steps == 1  # no run ahead: the scheduler's default
        candidates = self.sets[self.turn % len(self.sets)]
        self.turn += 1
        assert len(tokens) <= len(candidates.ids) and request.k <= candidates.ids.shape[1]
        if len(tokens) < len(candidates.ids):  # a batch not full: its rows' first ones
            candidates = Candidates(
                candidates.ids[: len(tokens)], candidates.log_probs[: len(tokens)]
            )
        return Launch(self.run, lambda: (candidates, None))

    def reorder(self, index) -> None:
        self.rows = len(index)

    def reserve(self, rows: int) -> None:  # no slots kept: the memory joins with its rows
        return None

    def place(self, reservation, sources, encoder) -> None:
        pass

    def release(self, reservation) -> None:
        pass


class _NoEngine:
    """What the scheduler reads of an engine before its batch: special tokens, and an
    encoder whose output is a mask alone."""

    special_tokens = SimpleNamespace(bos=1, eos=2)

    def encode(self, x: np.ndarray) -> EncoderOutput:
        return EncoderOutput({}, np.ones((len(x), 1), dtype=np.int64))


def per_step_seconds(jobs: int, steps: int, beam: int = 1, beam_jobs: int = 0) -> float:
    """`jobs` one-input jobs of beam `beam` (1: greedy), and `beam_jobs` more of beam 4."""
    rows, width = jobs * beam + beam_jobs * BEAM_JOB, 2 * max(beam, BEAM_JOB if beam_jobs else 1)
    scheduler = Scheduler(_NoEngine(), max_rows=rows, batch=InstantBatch(rows, width))
    for i in range(jobs + beam_jobs):
        options = DecodingOptions(beam_size=beam if i < jobs else BEAM_JOB, max_length=10**9)
        scheduler.submit(Job(i, {"x": np.zeros((1, 1), np.int64)}, options))
    scheduler.iterate()  # every job admitted, and a first step
    if scheduler.rows != rows:
        raise RuntimeError(f"{scheduler.rows} rows admitted of {rows}")
    start = time.perf_counter()
    for _ in range(steps):
        scheduler.iterate()
    return (time.perf_counter() - start) / steps


class ClosedLoop:
    """Keeps `rows` greedy jobs in `scheduler`, each one that ends replaced by the next: a
    busy server's traffic. Every job takes `inputs` (its encoder inputs); their most tokens
    go over max_length // 2 to max_length in a scattered order."""

    def __init__(self, scheduler: Scheduler, rows: int, max_length: int, inputs: dict):
        self.scheduler, self.rows, self.inputs = scheduler, rows, inputs
        self.lengths = range(max(1, max_length // 2), max_length + 1)
        self.submitted = self.finished = 0

    def iterate(self) -> list:
        """The scheduler topped up to `rows` jobs and iterated once -> its events."""
        scheduler, lengths = self.scheduler, self.lengths
        while self.submitted - self.finished < self.rows:
            options = DecodingOptions(max_length=lengths[self.submitted * 7 % len(lengths)])
            scheduler.submit(Job(self.submitted, self.inputs, options))
            self.submitted += 1
        scheduler.iterate()
        events, scheduler.events = scheduler.events, []
        self.finished += sum(isinstance(event, Result) for event in events)
        return events


def per_job_seconds(rows: int, steps: int, max_length: int) -> tuple[float, float]:
    """`rows` greedy rows kept full by jobs of between max_length // 2 and max_length tokens
    -> (seconds a step, seconds a finished job), over `steps` steps."""
    scheduler = Scheduler(_NoEngine(), max_rows=rows, batch=InstantBatch(rows, 2))
    loop = ClosedLoop(scheduler, rows, max_length, {"x": np.zeros((1, 1), np.int64)})
    for _ in range(max_length):  # into the steady state: the first jobs ended, others joined
        loop.iterate()
    counted, start = loop.finished, time.perf_counter()
    for _ in range(steps):
        loop.iterate()
    seconds = time.perf_counter() - start
    if loop.finished == counted:
        raise RuntimeError(f"no job ended in {steps} steps of jobs up to {max_length} tokens")
    return seconds / steps, seconds / (loop.finished - counted)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=256)
    parser.add_argument("--beam", type=int, default=1, help="each job's beam size")
    parser.add_argument(
        "--beam-jobs", type=int, default=0, help=f"more jobs beside them, of beam {BEAM_JOB}"
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--ending",
        type=int,
        metavar="MAX_LENGTH",
        help="greedy jobs of up to this many tokens end and are replaced: us per finished job",
    )
    args = parser.parse_args(argv)
    if args.ending:
        runs = [per_job_seconds(args.jobs, args.steps, args.ending) for _ in range(args.rounds)]
        step, job = min(runs)
        print(
            f"{args.jobs} rows, jobs of {max(1, args.ending // 2)}-{args.ending} tokens: "
            f"{step * 1e3:.3f} ms per step, {job * 1e6:.2f} us per finished job "
            f"({step / job:.2f} jobs a step)"
        )
        return 0
    best = min(
        per_step_seconds(args.jobs, args.steps, args.beam, args.beam_jobs)
        for _ in range(args.rounds)
    )
    beside = f" and {args.beam_jobs} of beam {BEAM_JOB}" if args.beam_jobs else ""
    print(
        f"{args.jobs} jobs, beam {args.beam}{beside}: {best * 1e3:.3f} ms per step, "
        f"{best / (args.jobs + args.beam_jobs) * 1e6:.2f} us per job"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
