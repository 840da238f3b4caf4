"""Iteration-level scheduling of decode jobs over one engine.

Between two decode steps the scheduler drops the rows of jobs whose client cancelled or whose
deadline passed, joins the rows of admitted jobs whose encoder has run, admits waiting jobs
while the batch has room (their encoder runs inline, or beside the steps on the encoder
thread), takes one step for every row, lets each job's search advance on its own rows, and
sends finished jobs away at once. A short job never waits for a long one, and beam hypotheses
are rows like any other.

With the step thread (`step_thread=True`), a step of rows that are all greedy lanes runs
beside the scheduler's own work: once a step's ids are in, the rows' bookkeeping that the
next step depends on (lanes advanced, ended rows dropped, cancelled rows dropped, encoded
rows joined, an admission reserved) is done, the next step starts on the thread, and the
jobs the last step ended are finished, its partial events built and the worker's messages
read while it runs. A step with a `Search` among its rows is waited for (its search chooses
the next step's rows), and so is one that records a CUDA graph (service.worker.device). Every
step goes to the thread: onnxruntime records a binding's graph on each thread that runs it.

The running rows' state lives in arrays updated in place, in the batch's row order: the
owner of each row (its request's index in the scheduler's tables) and the token it is fed
next. One-row greedy jobs, most of a busy server's, are lanes of `GreedyRows` and advance
together by a few numpy operations; Python runs per job only when a job is admitted, ends,
streams, or searches with a `Search` (beams, samples, several inputs, alignment). So a
step's host work grows with what changed, not with the rows.

`batching="request"` is request-level batching instead, for comparison: jobs are collected
for `window` seconds (or until the rows are full) and decoded to the end before the next
ones start.

The scheduler does no I/O: what happened is appended to `events` (service.worker.messages) and
`stats`, which the worker process sends to the front. It knows no model kind: inputs are the
engine's encoder inputs by name, special tokens the engine's, memory and state the batch's.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from service.runtime.batch import ContinuousBatch
from service.runtime.choices import BATCHING, Batching
from service.runtime.controls import loop_start, with_grammar
from service.runtime.decoding import Hypothesis, make_search, rank_together
from service.runtime.inference import Engine
from service.runtime.search import Candidates, SearchRequest
from service.runtime.tensors import EncoderOutput
from service.worker.device import DEVICE, run_step
from service.worker.encoder_thread import EncoderThread, together
from service.worker.greedy_rows import GreedyRows
from service.worker.loop_clock import step_phases
from service.worker.messages import Admitted, Event, Failure, Job, Partial, Result, Stats, Timings
from service.worker.running import FinishReason, Request, RequestStatus
from service.worker.step_thread import Running, StepThread

MAX_ROWS = 64  # rows one worker decodes together, by default
WINDOW_SECONDS = 0.005  # how long request-level batching collects, by default
KEEP_TIMES = 4096  # every this many steps, the step times no running job needs are dropped
AHEAD_WAIT = 0.002  # seconds a run of steps ahead may last, by default
REST_SECONDS = 30.0  # a worker idle this long lets go of the memory its batch keeps for rows


@dataclass
class _Admission:
    """An admission round: its requests (in encoder row order), the encoder row each of
    their batch rows decodes, and its encoder's run."""

    requests: list[Request]
    sources: np.ndarray  # (rows,) int64
    future: Future | None = None  # on the encoder thread
    encoder: EncoderOutput | None = None  # inline: already run
    seconds: float = 0.0
    reservation: object = None  # slots the encoder thread writes the memory into (or None)
    error: Exception | None = None  # what its encoder's run raised


@dataclass
class _Launched:
    """A step started: its run on the step thread (None: it ran inline), its output, the
    searches' blocks of rows it decodes, when it started."""

    running: Running | None
    output: object  # () -> (candidates, attention)
    blocks: list
    started: float  # the scheduler's clock
    launched_at: float = 0.0  # perf_counter once started on the step thread
    steps: int = 1  # greedy steps run back to back (Scheduler.steps_ahead)
    begun: float = 0.0  # perf_counter as its preparation began
    ran: float = 0.0  # seconds its run took inline (0: on the step thread)


@dataclass
class _Stepped:
    """What is left of a step once its rows' bookkeeping is done: the greedy jobs it ended
    (finished, their results not yet built) and its streamed greedy rows' new tokens."""

    ended: list[Request]
    streamed: tuple[list, list, list] | None  # (requests, new tokens of each, steps)
    now: float
    steps: int = 1  # decoder steps it took (more where they ran back to back)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        max_rows: int = MAX_ROWS,
        batching: Batching = "continuous",
        window: float = WINDOW_SECONDS,
        clock=time.monotonic,
        encoder_thread: bool = False,
        admission_interval: int = 1,
        batch: ContinuousBatch | None = None,
        step_thread: bool = False,
        steps_ahead: int = 1,
        ahead_wait: float = AHEAD_WAIT,
    ):
        """`encoder_thread`: admissions' encoder runs beside the steps
        (service.worker.encoder_thread) and their rows join at the first step boundary after
        it (into an empty batch, with no step to run beside, inline: no thread handoff before
        an idle worker's first token); else inline, before the step. `admission_interval`:
        while rows run, an admission round starts at most every this many steps (gathering
        more jobs into one encoder run, at the cost of their wait).
        `batch`: the engine's continuous batch by default. `step_thread`: steps of greedy
        rows run on a thread of their own, beside the bookkeeping of the step before.
        `steps_ahead`: while every row is a greedy lane (no search, sampling or alignment),
        up to this many steps run back to back on the device, each fed the ids the
        one before chose, where the batch can (the static step: `ContinuousBatch.
        steps_ahead`); their rows' bookkeeping follows once for all of them, and jobs join
        between two such runs. `ahead_wait`: a run lasts at most about this many seconds at
        the last run's pace (the host's time around a run, the device's a step; one step
        where even one takes longer), so that what waits for the host to look (a job to
        join, a first token, a stream's next, a result) waits at most about that."""
        if batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, got {batching!r}")
        self.engine, self.max_rows, self.batching, self.window = engine, max_rows, batching, window
        self.clock = clock
        self.batch = ContinuousBatch(engine) if batch is None else batch
        self.waiting: deque[Request] = deque()
        self.events: list[Event] = []
        self.stats = Stats()
        tokens = engine.special_tokens
        self.bos, self.eos = tokens.bos, tokens.eos
        self.grammar = getattr(engine, "grammar", None)
        # by owner index (a request holding rows: admitted, not yet ended), for as many as
        # the batch's rows and as many more whose result is built while a step runs
        owners = 2 * max_rows
        self.owners: list[Request | None] = [None] * owners
        self._free = list(range(owners - 1, -1, -1))
        self.greedy = GreedyRows(owners, tokens.eos)
        self.is_greedy = np.zeros(owners, dtype=bool)  # (owners,) a lane of `greedy`
        # by batch row
        self.row_owner = np.zeros(0, dtype=np.int64)  # (rows,)
        self.next_tokens = np.zeros(0, dtype=np.int64)  # (rows,) what each row is fed next
        self._searching = self._aligning = self._sampling = self._streaming = 0
        self._requests: dict[int, Request] = {}  # by job id, until it ends
        self._cancelled: list[Request] = []
        self._deadlines: list[tuple[float, int, Request]] = []  # a heap
        self._order = itertools.count()
        self._admission: _Admission | None = None
        # the first row of the first input encoded (a golden input in a served worker): run
        # when every request of a failed admission fails on its own too, to tell whose fault
        self._probe: dict[str, np.ndarray] | None = None
        self.admission_interval, self._admitted_at_step = admission_interval, -admission_interval
        # the worker's: every run holds it shared, a step that records a CUDA graph alone
        self._device = DEVICE
        self._encoder = EncoderThread(engine, self._device) if encoder_thread else None
        self._stepper = StepThread() if step_thread else None
        if steps_ahead < 1:
            raise ValueError(f"steps_ahead must be 1 or more, got {steps_ahead}")
        if not ahead_wait >= 0:
            raise ValueError(f"ahead_wait must be 0 seconds or more, got {ahead_wait}")
        self.steps_ahead, self.ahead_wait = steps_ahead, ahead_wait
        # the last run's pace: the host's seconds around it (its preparation and outputs),
        # and the device's a step (its run over its steps); unknown before the first
        self._host_seconds, self._device_seconds = 0.0, float("inf")
        self._launched: _Launched | None = None
        self._idle_since: float | None = None  # the clock when `rest` first found it idle
        self.beside_seconds = 0.0  # the scheduler's own time while a step ran on the thread
        self.phases = step_phases()  # this thread's seconds in each step phase, since taken
        # when each step ended, from the first step of the oldest running job on (the jobs'
        # token times): step `n` at _times[n - _times_from]; _steps: the steps taken so far
        self._times: list[float] = []
        self._times_from = self._steps = 0

    # -- what the worker calls ------------------------------------------------------------
    def submit(self, job: Job) -> None:
        if self.grammar is not None:  # every output of the version follows its grammar
            job = replace(job, controls=with_grammar(job.controls, self.grammar))
        request = Request(job, self.clock())
        if job.rows > self.max_rows:  # the front checks this too; never admit what cannot fit
            message = f"needs {job.rows} batch rows, at most {self.max_rows}"
            self._abort(request, FinishReason.REFUSED, "InvalidArgument", message)
            return
        self.waiting.append(request)
        self._requests[job.id] = request
        if job.deadline is not None:
            heapq.heappush(self._deadlines, (job.deadline, next(self._order), request))

    def cancel(self, job_id: int) -> None:
        request = self._requests.get(job_id)
        if request is not None:
            self._cancelled.append(request)

    def close(self, stopped: str = "the worker stopped") -> None:
        """Stops: waits for an admission's encoder in progress, then every job still held
        (waiting, encoding or running) fails with Unavailable ("`stopped` before the decode
        finished"), so that none is lost. A step in progress is taken first: the jobs it
        ended are sent."""
        if self._launched is not None:
            self._settle(self._collect())
        if self._stepper is not None:
            self._stepper.close()
        if self._encoder is not None:
            self._encoder.close()
        for request in list(self._requests.values()):
            message = f"{stopped} before the decode finished; retry"
            self._abort(request, FinishReason.STOPPED, "Unavailable", message)
        self.waiting.clear()
        self._admission = None
        if len(self.row_owner):
            self._keep_rows(np.zeros(0, dtype=np.int64))

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self._admission or self._launched or len(self.row_owner))

    @property
    def rows(self) -> int:
        return self.batch.rows

    @property
    def running(self) -> list[Request]:
        """The requests holding rows of the batch, in row order."""
        if not len(self.row_owner):
            return []
        owners = self.row_owner[np.r_[True, self.row_owner[1:] != self.row_owner[:-1]]]
        return [self.owners[o] for o in owners.tolist()]

    def take_phases(self) -> dict[str, float]:
        """This thread's seconds in each step phase (service.worker.loop_clock) since the last
        take."""
        taken, self.phases = self.phases, step_phases()
        return taken

    def wait_time(self) -> float | None:
        """How long the worker may sleep before `iterate` has something to do (None: until a
        message comes)."""
        if len(self.row_owner) or self._admission is not None or self._launched is not None:
            return 0.0
        if not self.waiting:
            return None
        if self.batching == "request":
            return max(0.0, self.waiting[0].queued_at + self.window - self.clock())
        return 0.0

    def iterate(self) -> None:
        """One scheduling round: the step in progress taken in (its rows' bookkeeping),
        drop, join what was encoded, admit, start a step; then the jobs the last step ended
        finished and its partials built (on the step thread, while the next step runs)."""
        self._idle_since = None
        stepped = self._collect() if self._launched is not None else None
        self._drop_abandoned()
        phases, start = self.phases, time.perf_counter()
        encoder = phases["encoder"]
        self._join_encoded()
        self._admit()
        phases["admit"] += time.perf_counter() - start - (phases["encoder"] - encoder)
        if len(self.row_owner):
            self._launch()
        if stepped is not None:
            self._settle(stepped)
        if self._launched is not None and self._launched.running is None:
            self._settle(self._collect())  # a step inline: its bookkeeping now

    def rest(self) -> None:
        """Called while the scheduler is not busy: once it has been idle REST_SECONDS, the
        batch lets go of the memory it keeps for rows to come (once a rest: a busy host
        batch reuses that memory rather than fault fresh pages in at every rebuild, and an
        idle worker need not hold what its largest batch took)."""
        if self.busy:
            return
        now = self.clock()
        if self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= REST_SECONDS:
            self.batch.rest()
            self._idle_since = float("inf")  # rested: not again until the next job

    # -- leaving --------------------------------------------------------------------------
    def _fail(self, request: Request, kind: str, message: str) -> None:
        self.events.append(Failure(request.id, kind, message))

    def _abort(self, request: Request, reason: FinishReason, kind: str, message: str) -> None:
        self._release(request)
        request.end(RequestStatus.ABORTED, reason)
        self._fail(request, kind, message)

    def _release(self, request: Request) -> None:
        """Frees what the request holds in the scheduler's tables (not its batch rows)."""
        if self._requests.get(request.id) is request:
            del self._requests[request.id]
            self._forget_deadlines()
        owner = request.owner
        if owner < 0:
            return
        self.owners[owner] = None
        self._free.append(owner)
        job = request.job
        # a running request, or one whose last step ended it (its result being built)
        if request.status in (RequestStatus.RUNNING, RequestStatus.FINISHED):
            self._searching -= request.search is not None
            self._aligning -= job.keep_alignment
            self._sampling -= job.options.sampling
            self._streaming -= job.stream and request.search is None

    def _forget_deadlines(self) -> None:
        """The deadlines of requests that ended are dropped once they are half the heap: an
        ended request (its inputs, its search) is not held until its deadline passes."""
        if len(self._deadlines) > 2 * len(self._requests):
            held = self._requests
            self._deadlines = [d for d in self._deadlines if held.get(d[2].id) is d[2]]
            heapq.heapify(self._deadlines)

    def _drop_abandoned(self) -> None:
        """Cancelled jobs, and jobs whose deadline passed, leave: their rows too."""
        gone: list[tuple[Request, FinishReason]] = []
        for request in self._cancelled:
            if not request.status.ended:
                gone.append((request, FinishReason.CANCELLED))
        self._cancelled.clear()
        now = self.clock()
        while self._deadlines and self._deadlines[0][0] <= now:
            request = heapq.heappop(self._deadlines)[2]
            if not request.status.ended:
                gone.append((request, FinishReason.EXPIRED))
        if not gone:
            return
        owners = [r.owner for r, _ in gone if r.status is RequestStatus.RUNNING]
        if any(r.status is RequestStatus.WAITING for r, _ in gone):
            leaving = {id(r) for r, _ in gone}
            self.waiting = deque(r for r in self.waiting if id(r) not in leaving)
        for request, reason in gone:
            if request.status.ended:  # cancelled and expired at once
                continue
            if reason is FinishReason.CANCELLED:
                self._abort(request, reason, "Cancelled", "cancelled by the client")
            else:
                message = "deadline passed before the decode finished"
                self._abort(request, reason, "DeadlineExceeded", message)
        if owners:
            self._keep_rows(np.flatnonzero(~np.isin(self.row_owner, owners)))

    def _keep_rows(self, keep: np.ndarray) -> None:
        """Keeps rows `keep` (int64, may drop, repeat or permute) of the batch and tables."""
        self.row_owner = self.row_owner[keep]
        self.next_tokens = self.next_tokens[keep]
        self.batch.reorder(keep)

    # -- joining --------------------------------------------------------------------------
    def _admit(self) -> None:
        """Starts an admission round of the waiting jobs that fit, one round at a time."""
        if not self.waiting or self._admission is not None:
            return
        running = len(self.row_owner) > 0
        if running and self._steps - self._admitted_at_step < self.admission_interval:
            return
        if self.batching == "request":
            if len(self.row_owner):
                return
            full = sum(r.rows for r in self.waiting) >= self.max_rows
            if not full and self.clock() < self.waiting[0].queued_at + self.window:
                return
        admitted, rows = [], self.batch.rows
        while self.waiting and rows + self.waiting[0].rows <= self.max_rows:
            request = self.waiting.popleft()
            request.status, request.owner = RequestStatus.ENCODING, self._free.pop()
            self.owners[request.owner] = request
            admitted.append(request)
            rows += request.rows
        if not admitted:
            return
        self._admitted_at_step = self._steps
        # one encoder run for every request admitted in this round, one join
        given = [r.job.encoder_inputs for r in admitted]
        admission = _Admission(admitted, self._sources(admitted))
        if self._encoder is None or not running:  # no step to run beside: inline
            encoder_start = time.perf_counter()
            try:
                admission.encoder = self._encode(together(given))
            except Exception as error:  # whose fault: _encode_apart
                admission.error = error
            admission.seconds = time.perf_counter() - encoder_start
            self.phases["encoder"] += admission.seconds
        else:  # the memory written into reserved slots beside the steps, where it can be
            admission.reservation = self.batch.reserve(len(admission.sources))
            place = partial(self.batch.place, admission.reservation, admission.sources)
            admission.future = self._encoder.submit(given, place)
        self._admission = admission
        self._join_encoded()

    def _encode(self, inputs: dict[str, np.ndarray]) -> EncoderOutput:
        """The encoder run on this thread, holding the device shared (another thread of the
        worker may record a CUDA graph meanwhile: the encoder thread's runs hold it too)."""
        with self._device.shared():
            return self.engine.encode(**inputs)

    def _probe_encodes(self) -> bool:
        """Whether the encoder still runs on an input it has encoded before."""
        if self._probe is None:
            return False
        probe_start = time.perf_counter()
        try:
            self._encode(self._probe)
        except Exception:
            return False
        finally:
            self.phases["encoder"] += time.perf_counter() - probe_start
        return True

    def _sources(self, admitted: list[Request]) -> np.ndarray:
        """Each admitted request's search (None: a greedy row) -> the encoder row of each of
        their batch rows, in order."""
        sources, offset = [], 0
        for request in admitted:
            job = request.job
            if Request.is_greedy_row(job):
                sources.append(np.array([offset]))
            else:
                request.search = make_search(
                    job.inputs, job.options, self.bos, self.eos, job.controls
                )
                sources.append(request.search.sources + offset)
            offset += job.inputs
        return np.concatenate(sources)

    def _join_encoded(self) -> None:
        """The rows of the admission in progress join the batch once its encoder has run (at
        once when no row runs: there is nothing to do meanwhile)."""
        admission = self._admission
        if admission is None:
            return
        if admission.future is not None:
            if len(self.row_owner) and not admission.future.done():
                return
            waited_from = time.perf_counter()
            try:
                admission.encoder, admission.seconds = admission.future.result()
            except Exception as error:  # whose fault: _encode_apart
                admission.error = error
            self.phases["encoder"] += time.perf_counter() - waited_from
        self._admission = None
        if admission.error is None:
            if self._probe is None:
                inputs = admission.requests[0].job.encoder_inputs
                self._probe = {name: array[:1].copy() for name, array in inputs.items()}
            self._join(admission)
            return
        for alone in self._encode_apart(admission):
            self._join(alone)

    def _encode_apart(self, admission: _Admission) -> list[_Admission]:
        """The admission's encoder run raised: each request still wanted runs it once more
        on its own -> an admission of each whose run succeeded. A request whose own run
        raises fails alone (Internal: the front admitted an input the graph refuses); the
        rows running and the other requests go on. When every request fails on its own and
        an input encoded before fails too (or none was), the fault recurs whatever the
        input (the session's or the device's): it is raised, and the worker ends and is
        replaced (the front sends its calls to another worker)."""
        self.batch.release(admission.reservation)
        apart, failed, row, start = [], [], 0, 0
        for request in admission.requests:
            rows = 1 if request.search is None else len(request.search.sources)
            sources = admission.sources[row : row + rows] - start
            row, start = row + rows, start + request.job.inputs
            if request.status is not RequestStatus.ENCODING:  # left while it was encoded
                continue
            encoder, encoder_start = None, time.perf_counter()
            try:
                encoder = self._encode(request.job.encoder_inputs)
            except Exception as error:
                failed.append((request, error))
            seconds = time.perf_counter() - encoder_start
            self.phases["encoder"] += seconds  # a run that raised as well
            if encoder is not None:
                apart.append(_Admission([request], sources, encoder=encoder, seconds=seconds))
        if failed and not apart and not self._probe_encodes():
            raise admission.error
        for request, error in failed:
            message = f"the encoder failed on this request's input: {type(error).__name__}: {error}"
            self._abort(request, FinishReason.FAILED, "Internal", message)
        return apart

    def _join(self, admission: _Admission) -> None:
        """The admitted rows that are still wanted join the batch: their owners' tables and
        greedy lanes set, their first input tokens after the rows there are."""
        encoder, requests = admission.encoder, admission.requests
        counts = [1 if r.search is None else len(r.search.sources) for r in requests]
        joined = [r for r in requests if r.status is RequestStatus.ENCODING]  # not left
        self.stats.encoder_seconds.append(admission.seconds)
        every = len(joined) == len(requests)
        if not every:  # what the encoder thread wrote is used only where every row joins
            self.batch.release(admission.reservation)
        if not joined:
            return
        kept = np.repeat([r.status is RequestStatus.ENCODING for r in requests], counts)
        sources = admission.sources if every else admission.sources[kept]
        owners = np.repeat([r.owner for r in requests], counts)[kept]
        tokens = np.full(len(owners), self.bos, dtype=np.int64)
        lanes = [r for r in joined if r.search is None]
        self.is_greedy[owners] = False
        if lanes:
            self.greedy.start_many(
                np.array([r.owner for r in lanes]),
                np.array([Request.max_length(r.job) for r in lanes]),
                np.array([r.job.stream for r in lanes]),
            )
            self.is_greedy[[r.owner for r in lanes]] = True
        if len(lanes) < len(joined):
            self._start_searches(requests, tokens, encoder)
        self.batch.join(encoder, sources, admission.reservation if every else None)
        self.row_owner = np.concatenate([self.row_owner, owners])
        self.next_tokens = np.concatenate([self.next_tokens, tokens])
        now = self.clock()
        for request in joined:
            job = request.job
            request.status = RequestStatus.RUNNING
            request.admitted_at, request.first_step = now, self._steps
            self._searching += request.search is not None
            self._aligning += job.keep_alignment
            self._sampling += job.options.sampling
            self._streaming += job.stream and request.search is None
            self.events.append(Admitted(job.id, now - request.queued_at))

    def _start_searches(self, requests: list[Request], tokens: np.ndarray, encoder) -> None:
        """The joining searches' first tokens into `tokens` (the joined rows', in order), and
        each one's own memory length (for its alignment)."""
        memory_mask = np.asarray(encoder.memory_mask)
        row, start = 0, 0
        for request in requests:
            inputs, start = request.job.inputs, start + request.job.inputs
            if request.status is not RequestStatus.ENCODING:
                continue
            search = request.search
            if search is None:
                row += 1
                continue
            own = memory_mask[start - inputs : start]
            request.memory = int(np.flatnonzero(own.any(axis=0))[-1]) + 1
            tokens[row : row + search.rows] = search.tokens[:, 0]
            row += search.rows

    # -- stepping -------------------------------------------------------------------------
    def _blocks(self) -> list[tuple[Request, int, int]]:
        """(request, first row, rows) of every request decoded by a Search, in row order
        (a request's rows are contiguous)."""
        owner = self.row_owner
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        ends = np.r_[starts[1:], len(owner)]
        searched = ~self.is_greedy[owner[starts]]
        return [
            (self.owners[o], s, e - s)
            for o, s, e in zip(
                owner[starts[searched]].tolist(),
                starts[searched].tolist(),
                ends[searched].tolist(),
                strict=True,
            )
        ]

    def _request(self, blocks: list[tuple[Request, int, int]]) -> SearchRequest:
        """One search request for every row: as many candidates as the most demanding
        search needs (0, the whole vocabulary, wins), a temperature per row when a job
        samples (1 for the others' rows), the attention when a job keeps it."""
        ks = [r.search.k for r, _, _ in blocks]
        k = 0 if 0 in ks else max(ks, default=1)
        temperature = None
        if self._sampling:
            temperature = np.ones(len(self.row_owner), dtype=np.float32)
            for request, start, rows in blocks:
                if request.search.temperature is not None:
                    temperature[start : start + rows] = request.search.temperature
        controls = {}
        for request, start, _ in blocks:
            if request.search.controls is not None:
                for row, control in request.search.row_controls().items():
                    controls[start + row] = control
        return SearchRequest(k, temperature, self._aligning > 0, controls=controls)

    def _launch(self) -> None:
        """Starts a step of every row: on the step thread where every row is a greedy lane,
        else inline (a search chooses the next step's rows)."""
        blocks = self._blocks() if self._searching else []
        for request, first, rows in blocks:
            self.next_tokens[first : first + rows] = request.search.tokens[:, 0]
        started, prepared_from = self.clock(), time.perf_counter()
        request = self._request(blocks)
        steps = self._ahead(request)
        launch = self.batch.launch_search_step(self.next_tokens[:, None], request, steps)
        run_from = time.perf_counter()
        self.phases["prepare"] += run_from - prepared_from
        run, running = partial(run_step, launch, self._device), None
        if self._stepper is None:
            run()
        else:  # every step of the engine on one thread: its CUDA graphs recorded there once
            # waited for here: a search's step (the search chooses the next step's rows), and
            # a step that records its graph (every other use of the device waits meanwhile,
            # the worker's loop too: it holds no lock)
            waited = bool(blocks) or launch.records(self._stepper.serial)
            running = self._stepper.start(run)
            if waited:
                running.wait()
                running = None
        launched_at = time.perf_counter()
        self.phases["run"] += launched_at - run_from
        ran = launched_at - run_from if running is None else 0.0
        self._launched = _Launched(
            running, launch.output, blocks, started, launched_at, steps, prepared_from, ran
        )

    def _ahead(self, request: SearchRequest) -> int:
        """How many greedy steps run back to back now (1: one step): where every row is a
        greedy lane whose tokens go nowhere but its result, as many as `steps_ahead`, the
        batch, and the lane with the most steps left allow, and as many as a run of
        `ahead_wait` holds at the last run's pace (the host's time once, the device's a
        step)."""
        if self.steps_ahead == 1 or self._stepper is not None:
            return 1
        if self._searching or self._sampling or self._aligning:
            return 1
        device = max(self._device_seconds, 1e-9)  # a run that took no time on this clock
        steps = min(self.steps_ahead, int((self.ahead_wait - self._host_seconds) / device))
        if steps <= 1:
            return 1
        lanes = self.row_owner
        left = int((self.greedy.max_length[lanes] - self.greedy.steps[lanes]).max(initial=1))
        return max(1, min(steps, left, self.batch.steps_ahead(request)))

    def _collect(self) -> _Stepped:
        """The step started last, its ids in: the rows' bookkeeping the next step depends on
        (lanes and searches advanced, ended rows dropped) -> what is left to settle."""
        launched, self._launched = self._launched, None
        phases, waited_from = self.phases, time.perf_counter()
        if launched.running is not None:
            seconds = launched.running.wait()
            self.beside_seconds += min(waited_from - launched.launched_at, seconds)
        read_from = time.perf_counter()
        candidates, attention = launched.output()
        phases["run"] += read_from - waited_from
        read = time.perf_counter()
        phases["outputs"] += read - read_from
        device = launched.ran + read_from - waited_from
        self._host_seconds = read - launched.begun - device
        self._device_seconds = device / launched.steps
        if launched.steps > 1:
            return self._collect_ahead(launched, candidates)
        blocks, rows = launched.blocks, len(self.row_owner)
        now = self.clock()
        self.stats.step_seconds.append(now - launched.started)
        self.stats.step_rows.append(rows)
        self.stats.tokens += rows
        self._times.append(now)
        self._steps += 1
        ids = np.ascontiguousarray(candidates.ids[:, 0])
        ended = self._advance_greedy(ids, candidates.log_probs[:, 0], bool(blocks))
        if blocks:
            keep = self._advance_searches(blocks, candidates, attention, ended, now)
        else:
            keep = None if not ended.any() else np.flatnonzero(~ended)
        return self._leave(ended, ids, keep, now)

    def _collect_ahead(self, launched: _Launched, candidates: Candidates) -> _Stepped:
        """`_collect` of greedy steps run back to back: each lane takes its tokens up to its
        end (`</s>` or its last step); what a row's slot computed after that is dropped."""
        steps, rows = launched.steps, len(self.row_owner)
        now = self.clock()
        each = (now - launched.started) / steps
        ended = np.zeros(rows, dtype=bool)
        taken = 0
        for step in range(steps):
            live = np.flatnonzero(~ended)
            if not len(live):
                break
            lanes = self.row_owner[live]
            ids = np.ascontiguousarray(candidates.ids[live, step])
            ended[live] = self.greedy.advance(lanes, ids, candidates.log_probs[live, step])
            self.stats.step_seconds.append(each)
            self.stats.step_rows.append(len(live))
            taken += len(live)
        self.stats.tokens += taken
        self._times += [now] * steps  # every token reaches the host now
        self._steps += steps
        keep = None if not ended.any() else np.flatnonzero(~ended)
        # a stream that goes on gets every token of the run (one that ended, its result)
        return self._leave(ended, candidates.ids, keep, now, steps)

    def _leave(self, ended, ids: np.ndarray, keep, now: float, steps: int = 1) -> _Stepped:
        """After a step's (or a run's) lanes and searches advanced: the greedy jobs that
        `ended` (rows,) no longer cancellable, streams given their new `ids` (rows,) or
        (rows, steps), the last ones fed next, the rows `keep` (None: every one) kept."""
        rows, finished = len(self.row_owner), []
        if ended.any():
            finished = [self.owners[o] for o in self.row_owner[ended].tolist()]
            for request in finished:  # no longer cancellable: its result is built next
                request.status = RequestStatus.FINISHED
        streamed = self._streamed(ids, ended) if self._streaming else None
        self.next_tokens = ids if ids.ndim == 1 else np.ascontiguousarray(ids[:, -1])
        if keep is not None and not (len(keep) == rows and np.array_equal(keep, np.arange(rows))):
            self._keep_rows(keep)
        return _Stepped(finished, streamed, now, steps)

    def _settle(self, stepped: _Stepped) -> None:
        """A step's greedy jobs that ended finished, its streamed rows' partials sent."""
        for request in stepped.ended:
            self._finish(request, stepped.now)
        if stepped.streamed is not None:
            requests, tokens, steps = stepped.streamed
            for request, new, step in zip(requests, tokens, steps, strict=True):
                if request.status is RequestStatus.RUNNING:  # not cancelled since
                    self.events.append(Partial(request.id, step - len(new), new, step))
        if self._steps // KEEP_TIMES != (self._steps - stepped.steps) // KEEP_TIMES:
            # forget the steps before every running job's first
            running = (self.owners[o] for o in np.unique(self.row_owner).tolist())
            oldest = min((r.first_step for r in running), default=self._steps)
            del self._times[: oldest - self._times_from]
            self._times_from = oldest

    def _advance_greedy(self, ids: np.ndarray, log_probs: np.ndarray, mixed: bool) -> np.ndarray:
        """The greedy rows take their best candidate -> (rows,) bool, the greedy rows that
        ended."""
        if not mixed:  # every row a greedy lane
            return self.greedy.advance(self.row_owner, ids, log_probs)
        ended = np.zeros(len(self.row_owner), dtype=bool)
        rows = np.flatnonzero(self.is_greedy[self.row_owner])
        if len(rows):
            ended[rows] = self.greedy.advance(self.row_owner[rows], ids[rows], log_probs[rows])
        return ended

    def _advance_searches(self, blocks, candidates: Candidates, attention, ended, now):
        """Each Search advances on its own rows (the beam searches ranked in one pass for
        all of one beam size) -> the rows to keep, in order: the greedy rows that go on and
        what each search keeps of its own."""
        searches = [r.search for r, _, _ in blocks]
        sizes = [n for _, _, n in blocks]
        searched = candidates  # the search rows' candidates, in order
        if sum(sizes) < len(self.row_owner):
            searched = candidates.rows(np.flatnonzero(~self.is_greedy[self.row_owner]))
        ranked = rank_together(searches, searched, sizes)
        pieces, done = [], 0  # done: the rows before it whose greedy rows are decided
        for (request, first, count), chosen in zip(blocks, ranked, strict=True):
            if done < first:
                pieces.append(done + np.flatnonzero(~ended[done:first]))
            done = first + count
            seen = None if attention is None else _width(attention[first:done], request.memory)
            search = request.search
            try:
                if chosen is None:
                    kept = search.advance(candidates.rows(slice(first, done)), seen)
                else:
                    kept = search.advance_ranked(chosen, seen)
            except Exception as error:  # this job fails alone; its rows leave with it
                message = f"the decode failed: {type(error).__name__}: {error}"
                self._abort(request, FinishReason.FAILED, "Internal", message)
                continue
            if search.done:
                self._finish(request, now)
                continue
            pieces.append(kept + first if first else kept)
            if request.job.stream:
                self._stream(request)
        if done < len(ended):
            pieces.append(done + np.flatnonzero(~ended[done:]))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)

    def _streamed(self, ids: np.ndarray, ended: np.ndarray) -> tuple[list, list, list]:
        """Every streamed greedy row that goes on: its request, new tokens (`ids` (rows,) of
        one step, or (rows, steps) of steps run ahead) and step count (an owner's stream flag
        counts while it is a greedy lane)."""
        owner = self.row_owner
        streamed = np.flatnonzero(self.greedy.stream[owner] & self.is_greedy[owner] & ~ended)
        lanes = owner[streamed]
        requests = [self.owners[lane] for lane in lanes.tolist()]
        new = ids[streamed] if ids.ndim == 2 else ids[streamed, None]
        return requests, new.tolist(), self.greedy.steps[lanes].tolist()

    def _stream(self, request: Request) -> None:
        """A partial event: the best hypothesis as the tokens kept from the last one and the
        new ones."""
        tokens, sent = request.search.best_tokens(0), request.streamed
        kept = len(sent) if tokens[: len(sent)] == sent else _common_prefix(tokens, sent)
        self.events.append(Partial(request.id, kept, tokens[kept:], request.search.steps))
        request.streamed = tokens

    def _finish(self, request: Request, now: float) -> None:
        job = request.job
        if request.search is None:
            penalty = job.options.length_penalty
            results = [[self.greedy.hypothesis(request.owner, penalty)]]
        else:
            results = request.search.results()
        for hypotheses in results:
            for h in hypotheses:
                _strip(h, job)
        first = request.first_step - self._times_from
        end = None  # its tokens', now last; a lane's, not the steps run after its end
        if request.search is None:
            end = first + max(int(self.greedy.steps[request.owner]), 1)
        times = self._times[first:end]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        timings = Timings(request.queued_at, request.admitted_at, times[0], now, gaps)
        self._release(request)
        request.end(RequestStatus.FINISHED, FinishReason.DONE)
        self.events.append(Result(job.id, results, timings))


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
    """Drops what the client did not ask for before it crosses the process boundary. A
    hypothesis the front may cut where it loops (the length bound on, and its tokens
    looping: `translation.loops_cut`) keeps its log-probabilities, which score the cut."""
    if not job.keep_alignment:
        h.alignment = None
    may_be_cut = job.options.max_length_ratio > 0 and loop_start(h.tokens, ()) is not None
    if not job.keep_log_probs and not may_be_cut:
        h.token_log_probs = []
