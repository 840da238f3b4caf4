"""What one run of the GPU benchmark measures, and how long it may take: the full plan, the
quick one (--quick), each changed by the command line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how long it may take."""

    batches: tuple[int, ...]
    beams: tuple[int, ...]
    length: int  # forced output tokens of every row
    rounds: int  # timed rounds per case, at most
    case_seconds: float  # a case's timed rounds share; fewer rounds when one takes longer
    engine_seconds: float  # the whole engine section (parity, steps, cases)
    beam_max_batch: int  # beam 4 runs batches up to this
    parity_sentences: int
    export_sentences: int
    single_steps: int  # batch-1 decoder steps timed (after SINGLE_WARMUP)
    clients: tuple[int, ...]
    level_seconds: float
    warmup_seconds: float  # service level, untimed, at the most clients
    latency_requests: int  # the single sentence, one call at a time


FULL = Plan(
    batches=(1, 16, 64, 256, 1024),
    beams=(1, 4),
    length=64,
    rounds=3,
    case_seconds=30.0,
    engine_seconds=330.0,
    beam_max_batch=1024,  # when the time box leaves room for it
    parity_sentences=200,
    export_sentences=200,
    single_steps=200,
    clients=(1, 16, 64, 256, 1024),
    level_seconds=15.0,
    warmup_seconds=8.0,
    latency_requests=100,
)
QUICK = Plan(
    batches=(1, 16),
    beams=(1, 4),
    length=16,
    rounds=2,
    case_seconds=10.0,
    engine_seconds=240.0,
    beam_max_batch=16,
    parity_sentences=16,
    export_sentences=8,
    single_steps=30,
    clients=(1, 4),
    level_seconds=4.0,
    warmup_seconds=2.0,
    latency_requests=10,
)
