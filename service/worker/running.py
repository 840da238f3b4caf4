"""The scheduler's state of one request: a `Job` (the message the front sent) and where the
scheduler has it, as an explicit status and, once it has left, why.

    WAITING -> ENCODING -> RUNNING -> FINISHED
        \\___________\\__________\\____> ABORTED (cancelled, deadline passed, refused)

A request holds rows of the batch from its admission (ENCODING: its encoder runs, its rows
are reserved) until it leaves. Its rows are decoded by a `Search` (beam search, sampling,
greedy search of several inputs or with alignment), or, as most of a busy server's are, as one
row of the scheduler's greedy rows (service.worker.greedy_rows), which need no Python per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from service.runtime.controls import Controls
from service.runtime.decoding import Search
from service.worker.messages import Job


class RequestStatus(Enum):
    WAITING = "waiting"  # queued for rows
    ENCODING = "encoding"  # admitted: its rows reserved, its encoder running
    RUNNING = "running"  # its rows in the batch
    FINISHED = "finished"  # its result sent
    ABORTED = "aborted"  # its failure sent

    @property
    def ended(self) -> bool:
        return self in (RequestStatus.FINISHED, RequestStatus.ABORTED)


class FinishReason(Enum):
    DONE = "done"  # every hypothesis ended (`</s>` or max_length)
    CANCELLED = "cancelled"  # by the client
    EXPIRED = "expired"  # its deadline passed first
    REFUSED = "refused"  # it can never fit the batch
    STOPPED = "stopped"  # the scheduler stopped first
    FAILED = "failed"  # its search or its encoder raised (a fault of the server's): it fails alone


@dataclass(slots=True, eq=False)
class Request:
    """One job as the scheduler holds it."""

    job: Job
    queued_at: float
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    owner: int = -1  # its index in the scheduler's tables while it holds rows
    search: Search | None = field(default=None, repr=False)  # None: one greedy row
    memory: int = 0  # memory length of its own encoder output
    admitted_at: float = 0.0
    # the scheduler's step that gives it its first token (the one after its admission);
    # every running request takes a token at every step, so its token times are the steps'
    first_step: int = 0
    streamed: list[int] = field(default_factory=list)  # best tokens in the last partial
    rows: int = field(init=False)  # batch rows it takes at its start

    def __post_init__(self) -> None:
        self.rows = self.job.rows

    @property
    def id(self) -> int:
        return self.job.id

    def end(self, status: RequestStatus, reason: FinishReason) -> None:
        self.status, self.finish_reason, self.owner = status, reason, -1

    @staticmethod
    def is_greedy_row(job: Job) -> bool:
        """Whether `job` decodes as one greedy row: one input, beam 1, no sampling, no
        alignment kept (the alignment needs a step's attention per row, kept by a Search),
        no decoding control but its step limit (a control reads the row's tokens)."""
        options = job.options
        return (
            job.inputs == 1
            and options.beam_size == 1
            and not options.sampling
            and not job.keep_alignment
            and not Controls.wanted(options, job.controls)
        )

    @staticmethod
    def max_length(job: Job) -> int:
        """The step limit of a one-input job."""
        controls = job.controls
        if controls is None or controls.max_lengths is None:
            return job.options.max_length
        return controls.max_lengths[0]
