"""Iteration-level scheduling of decode jobs over one engine.

Between two decode steps the scheduler drops the rows of jobs whose client cancelled or whose
deadline passed, admits waiting jobs (encoder run, then their rows join the running batch)
while the batch has room, takes one step for every row, lets each job's search advance on
its own rows, and sends finished jobs away at once. A short job never waits for a long one,
and beam hypotheses are rows like any other.

`batching="request"` is request-level batching instead, for comparison: jobs are collected
for `window` seconds (or until the rows are full) and decoded to the end before the next
ones start.

The scheduler does no I/O: what happened is appended to `events` (service.messages) and
`stats`, which the worker process sends to the front. It knows no model kind: inputs are the
engine's encoder inputs by name, special tokens the engine's, memory and state the batch's.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from service.batch import ContinuousBatch
from service.batching import concat_padded
from service.decoding import DecodingOptions, Hypothesis, Search, make_search, rank_together
from service.inference import Engine
from service.messages import Admitted, Event, Failure, Partial, Result, Timings
from service.search import SearchRequest

BATCHING = ("continuous", "request")
KEEP_TIMES = 4096  # every this many steps, the step times no running job needs are dropped


def rows_needed(inputs: int, options: DecodingOptions) -> int:
    """Batch rows a job takes at its start: one per hypothesis searched."""
    copies = options.num_hypotheses if options.sampling else options.beam_size
    return inputs * copies


@dataclass
class Job:
    """One request's decoding work: the engine's encoder inputs for its inputs, and how."""

    id: int
    encoder_inputs: dict[str, np.ndarray]  # keyword arguments of Engine.encode, batch = inputs
    options: DecodingOptions
    stream: bool = False  # send the best hypothesis after every step
    deadline: float | None = None  # time.monotonic() after which the job is dropped
    keep_alignment: bool = False
    keep_log_probs: bool = False
    # set by the scheduler
    search: Search | None = field(default=None, repr=False)
    memory: int = 0  # memory length of the job's own encoder output
    queued_at: float = 0.0
    admitted_at: float = 0.0
    # the scheduler's step that gives the job its first token (the one after its admission);
    # every running job takes a token at every step, so its token times are the steps'
    first_step: int = 0
    streamed: list[int] = field(default_factory=list)  # best tokens in the last partial event
    cancelled: bool = False

    @property
    def inputs(self) -> int:
        return len(next(iter(self.encoder_inputs.values())))

    @property
    def rows(self) -> int:
        return rows_needed(self.inputs, self.options)


@dataclass
class Stats:
    """Measurements since the last report, for the metrics."""

    encoder_seconds: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    step_rows: list[int] = field(default_factory=list)
    tokens: int = 0


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        max_rows: int = 64,
        batching: str = "continuous",
        window: float = 0.005,
        clock=time.monotonic,
    ):
        if batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, got {batching!r}")
        self.engine, self.max_rows, self.batching, self.window = engine, max_rows, batching, window
        self.clock = clock
        self.batch = ContinuousBatch(engine)
        self.waiting: deque[Job] = deque()
        self.running: list[Job] = []
        self.events: list[Event] = []
        self.stats = Stats()
        # when each step ended, from the first step of the oldest running job on (the jobs'
        # token times): step `n` at _times[n - _times_from]; _steps: the steps taken so far
        self._times: list[float] = []
        self._times_from = self._steps = 0

    # -- what the worker calls ------------------------------------------------------------
    def submit(self, job: Job) -> None:
        job.queued_at = self.clock()
        if job.rows > self.max_rows:  # the front checks this too; never admit what cannot fit
            self._fail(
                job, "InvalidArgument", f"needs {job.rows} batch rows, at most {self.max_rows}"
            )
            return
        self.waiting.append(job)

    def cancel(self, job_id: int) -> None:
        for job in (*self.waiting, *self.running):
            if job.id == job_id:
                job.cancelled = True

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def rows(self) -> int:
        return self.batch.rows

    def wait_time(self) -> float | None:
        """How long the worker may sleep before `iterate` has something to do (None: until a
        message comes)."""
        if self.running:
            return 0.0
        if not self.waiting:
            return None
        if self.batching == "request":
            return max(0.0, self.waiting[0].queued_at + self.window - self.clock())
        return 0.0

    def iterate(self) -> None:
        """One scheduling round: drop, admit, step."""
        self._drop_abandoned()
        self._admit()
        if self.running:
            self._step()

    # -- internals ------------------------------------------------------------------------
    def _fail(self, job: Job, kind: str, message: str) -> None:
        self.events.append(Failure(job.id, kind, message))

    def _abandoned(self, job: Job, now: float) -> bool:
        if job.cancelled:
            self._fail(job, "Cancelled", "cancelled by the client")
            return True
        if job.deadline is not None and now >= job.deadline:
            self._fail(job, "DeadlineExceeded", "deadline passed before the decode finished")
            return True
        return False

    def _drop_abandoned(self) -> None:
        now = self.clock()
        jobs = (*self.waiting, *self.running)
        if not any(j.cancelled or (j.deadline is not None and now >= j.deadline) for j in jobs):
            return
        self.waiting = deque(j for j in self.waiting if not self._abandoned(j, now))
        keep, still, offset = [], [], 0
        for job in self.running:
            rows = job.search.rows
            if not self._abandoned(job, now):
                keep.append(np.arange(offset, offset + rows))
                still.append(job)
            offset += rows
        if len(still) < len(self.running):
            self.running = still
            self.batch.reorder(np.concatenate(keep) if keep else np.zeros(0, np.int64))

    def _admit(self) -> None:
        if not self.waiting:
            return
        if self.batching == "request":
            if self.running:
                return
            full = sum(j.rows for j in self.waiting) >= self.max_rows
            if not full and self.clock() < self.waiting[0].queued_at + self.window:
                return
        admitted, rows = [], self.batch.rows
        while self.waiting and rows + self.waiting[0].rows <= self.max_rows:
            admitted.append(self.waiting.popleft())
            rows += admitted[-1].rows
        if not admitted:
            return
        # one encoder run for every request admitted in this round, one join
        start = self.clock()
        inputs = [job.encoder_inputs for job in admitted]
        encoder = self.engine.encode(
            **{k: concat_padded([i[k] for i in inputs]) for k in inputs[0]}
        )
        memory_mask = np.asarray(encoder.memory_mask)
        sources, offset = [], 0
        tokens = self.engine.special_tokens
        for job in admitted:
            job.search = make_search(job.inputs, job.options, tokens.bos, tokens.eos)
            own = memory_mask[offset : offset + job.inputs]
            job.memory = int(np.flatnonzero(own.any(axis=0))[-1]) + 1
            sources.append(job.search.sources + offset)
            offset += job.inputs
        self.batch.join(encoder, np.concatenate(sources))
        now = self.clock()
        self.stats.encoder_seconds.append(now - start)
        for job in admitted:
            job.admitted_at, job.first_step = now, self._steps
            self.running.append(job)
            self.events.append(Admitted(job.id, now - job.queued_at))

    def _step(self) -> None:
        start = self.clock()
        running = self.running
        searches = [job.search for job in running]
        singles = all(s.single for s in searches)
        if singles:  # one array of ints, not hundreds of arrays joined
            tokens = np.fromiter((s.next_token for s in searches), np.int64, len(searches))
            tokens = tokens.reshape(-1, 1)
            sizes = None
        else:  # the one-row greedy jobs' ints, the others' rows, in one list
            pieces, sizes = [], []
            for s in searches:
                if s.single:
                    pieces.append(s.next_token)
                    sizes.append(1)
                else:
                    pieces.extend(s.tokens[:, 0].tolist())
                    sizes.append(s.rows)
            tokens = np.array(pieces, dtype=np.int64).reshape(-1, 1)
        candidates, attention = self.batch.search_step(tokens, self._request(searches))
        now = self.clock()
        self.stats.step_seconds.append(now - start)
        self.stats.step_rows.append(len(tokens))
        self.stats.tokens += len(tokens)
        self._times.append(now)
        self._steps += 1
        if singles and attention is None:
            # every job a one-row greedy search (most of a busy server's): each takes its
            # row's best candidate from these lists, no candidates sliced
            going = [
                search.advance_single(token, log_prob)
                for search, token, log_prob in zip(
                    searches,
                    candidates.ids[:, 0].tolist(),
                    candidates.log_probs[:, 0].tolist(),
                    strict=True,
                )
            ]
            keep = None if all(going) else [i for i, g in enumerate(going) if g]
        else:
            keep, going, offset = [], [], 0
            # the beam searches' choices, ranked in one pass for all of one beam size
            ranked = rank_together(searches, candidates, sizes)
            if attention is None:  # the one-row greedy jobs among the others: as above
                best = candidates.ids[:, 0].tolist()
                best_log_probs = candidates.log_probs[:, 0].tolist()
            for job, search, chosen in zip(running, searches, ranked, strict=True):
                if search.single and attention is None:
                    going.append(search.advance_single(best[offset], best_log_probs[offset]))
                    if going[-1]:
                        keep.append(offset)
                    offset += 1
                    continue
                rows = search.rows
                own = slice(offset, offset + rows)
                seen = None if attention is None else _width(attention[own], job.memory)
                if chosen is None:
                    kept = search.advance(candidates.rows(own), seen) + offset
                else:
                    kept = search.advance_ranked(chosen, seen) + offset
                going.append(not search.done)
                if going[-1]:
                    keep.extend(kept.tolist())
                offset += rows
        if keep is None:  # every row goes on, in place
            still = running
        else:
            still = [job for job, g in zip(running, going, strict=True) if g]
            for job, g in zip(running, going, strict=True):
                if not g:
                    self._finish(job, now)
        for job in still:
            if job.stream:
                self._stream(job)
        self.running = still
        if keep is not None and (
            len(keep) != len(tokens) or keep[-1] != len(tokens) - 1 or not _ascending(keep)
        ):
            self.batch.reorder(np.array(keep, dtype=np.int64))
        if self._steps % KEEP_TIMES == 0:  # forget the steps before every running job's first
            oldest = min((job.first_step for job in still), default=self._steps)
            del self._times[: oldest - self._times_from]
            self._times_from = oldest

    def _request(self, searches: list[Search]) -> SearchRequest:
        """One search request for every running job's rows (`searches`, in order): as many
        candidates as the most demanding search needs (0, the whole vocabulary, wins), a
        temperature per row when a job samples (1 for the rows of the others), the attention
        when a job keeps it."""
        ks = [s.k for s in searches]
        temperature = None
        if any(s.temperature is not None for s in searches):
            temperature = np.concatenate(
                [np.full(s.rows, s.temperature or 1.0, dtype=np.float32) for s in searches]
            )
        attention = any(job.keep_alignment for job in self.running)
        return SearchRequest(0 if 0 in ks else max(ks), temperature, attention)

    def _stream(self, job: Job) -> None:
        """A partial event: the best hypothesis as the tokens kept from the last one and the
        new ones."""
        tokens, sent = job.search.best_tokens(0), job.streamed
        kept = len(sent) if tokens[: len(sent)] == sent else _common_prefix(tokens, sent)
        self.events.append(Partial(job.id, kept, tokens[kept:], job.search.steps))
        job.streamed = tokens

    def _finish(self, job: Job, now: float) -> None:
        results = job.search.results()
        for hypotheses in results:
            for h in hypotheses:
                _strip(h, job)
        times = self._times[job.first_step - self._times_from :]  # its tokens', now last
        gaps = [b - a for a, b in pairwise(times)]
        timings = Timings(job.queued_at, job.admitted_at, times[0], now, gaps)
        self.events.append(Result(job.id, results, timings))


def _ascending(index: list[int]) -> bool:
    """Whether `index` is 0, 1, 2, ... (every row kept in place), given its length and last
    entry already match: rows only drop or permute, so a strictly increasing list is it."""
    return all(a < b for a, b in pairwise(index))


def _common_prefix(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _width(attention: np.ndarray, memory: int) -> np.ndarray:
    """A job's cross-attention over its own memory length (the batch's may be longer or, once
    compacted, shorter)."""
    if attention.shape[1] >= memory:
        return attention[:, :memory]
    return np.pad(attention, ((0, 0), (0, memory - attention.shape[1])))


def _strip(h: Hypothesis, job: Job) -> None:
    """Drops what the client did not ask for before it crosses the process boundary."""
    if not job.keep_alignment:
        h.alignment = None
    if not job.keep_log_probs:
        h.token_log_probs = []
