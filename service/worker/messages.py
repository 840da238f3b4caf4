"""What crosses between processes and out of the scheduler: small frozen dataclasses.

A `Job` is a request's decoding work as the front sends it (the scheduler keeps its own
state of it apart: service.worker.running). Scheduler events (worker -> front, inside a `Report`):
`Admitted`, `Partial`, `Result`, `Failure`, with the scheduler's `Stats`. Worker control:
`Submit`, `Cancel`, `Load`, `Unload`, `Stop` (front -> worker); `Ready`, `Failed`, `Loaded`,
`NotLoaded`, `Report` (worker -> front).
Each is pickled over the worker's pipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from service.runtime.controls import InputControls
    from service.runtime.decoding import DecodingOptions, Hypothesis


@dataclass(frozen=True)
class Job:
    """One request's decoding work: the engine's encoder inputs for its inputs, and how."""

    id: int
    encoder_inputs: dict[str, np.ndarray]  # keyword arguments of Engine.encode, batch = inputs
    options: DecodingOptions
    stream: bool = False  # send the best hypothesis after every step
    deadline: float | None = None  # time.monotonic() after which the job is dropped
    keep_alignment: bool = False
    keep_log_probs: bool = False
    controls: InputControls | None = None  # each input's step limit and forced start

    # read several times a job on both sides: computed once (kept beside the fields, which
    # a frozen dataclass allows; not compared, and a `replace` computes them again)
    @cached_property
    def inputs(self) -> int:
        return len(next(iter(self.encoder_inputs.values())))

    @cached_property
    def rows(self) -> int:
        """Batch rows the job takes at its start: one per hypothesis searched."""
        return self.inputs * self.options.copies


@dataclass
class Stats:
    """A scheduler's measurements since its last report, for the metrics."""

    encoder_seconds: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    step_rows: list[int] = field(default_factory=list)
    tokens: int = 0
    # the worker loop's seconds by phase (service.worker.loop_clock) since its last report:
    # in one model's stats a report round, as the loop serves every model
    loop_seconds: dict[str, float] = field(default_factory=dict)
    outbox_seconds: float = 0.0  # the outbox thread's sending, beside the loop, as loop_seconds
    # the worker's runs that held its device alone (CUDA graphs recorded), and their seconds
    # from asking to letting go, as loop_seconds (service.worker.device)
    alone_runs: int = 0
    alone_seconds: float = 0.0


@dataclass(frozen=True)
class Timings:
    """Moments of a job on the worker's monotonic clock (on the front's once its report is
    read: Report.sent_at)."""

    queued_at: float
    admitted_at: float
    first_token_at: float
    finished_at: float
    gaps: list[float] = field(default_factory=list)  # seconds between successive tokens

    def moved(self, offset: float) -> Timings:
        """The same moments on a clock `offset` seconds ahead."""
        moments = (self.queued_at, self.admitted_at, self.first_token_at, self.finished_at)
        return Timings(*(m + offset if m else m for m in moments), self.gaps)


# -- scheduler events -------------------------------------------------------------------------
@dataclass(frozen=True)
class Admitted:
    job_id: int
    waited: float  # seconds in the queue


@dataclass(frozen=True)
class Partial:
    """The best hypothesis of a streamed job after a step, as the tokens kept from the last
    partial and the new ones (a long stream does not resend its prefix every step)."""

    job_id: int
    kept: int
    new: list[int]
    steps: int


@dataclass(frozen=True)
class Result:
    job_id: int
    results: list[list[Hypothesis]]  # n-best per input
    timings: Timings


@dataclass(frozen=True)
class Failure:
    job_id: int
    kind: str  # a `service.runtime.errors.ERRORS` name: "InvalidArgument", "Cancelled", ...
    message: str

    def error(self) -> Exception:
        from service.runtime.errors import ERRORS

        return ERRORS[self.kind](self.message)


Event = Admitted | Partial | Result | Failure
Last = Result | Failure  # the event that ends a job: nothing of it follows


# -- front -> worker --------------------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    key: str  # "<model>/<version>"
    job: Job
    # the front's clock as it sent the job: the worker moves the job's deadline onto its own
    # clock by the difference (a replica on another machine counts from another boot)
    sent_at: float = 0.0


@dataclass(frozen=True)
class Cancel:
    key: str
    job_id: int


@dataclass(frozen=True)
class Load:
    """Serve one more model version: load it, check its golden set, answer Loaded/NotLoaded."""

    key: str
    version: object  # service.runtime.repository.ModelVersion, verified by the front
    variant: str


@dataclass(frozen=True)
class Unload:
    """Stop serving a model version (the front sends nothing more for it)."""

    key: str


@dataclass(frozen=True)
class Stop:
    pass


# -- worker -> front --------------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    info: dict  # pid, and per model key its execution provider and golden inputs checked


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass(frozen=True)
class Loaded:
    key: str
    info: dict  # as in Ready's info, of this model


@dataclass(frozen=True)
class NotLoaded:
    key: str
    message: str


@dataclass(frozen=True)
class Report:
    """What happened to one model's scheduler since the last report."""

    key: str
    events: list[Event]
    stats: Stats | None  # measurements, when any are sent
    rows: int  # batch rows in use
    waiting: int  # jobs waiting for rows
    # the worker's clock as it sent the report: the front moves its results' moments onto
    # its own clock by the difference (0: none to move)
    sent_at: float = 0.0
