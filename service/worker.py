"""A worker process: onnxruntime sessions and one scheduler per served model version.

It loads and verifies its model versions, decodes their golden sets through its own
scheduler on its own execution provider (warm-up and check in one), reports ready, then
loops: read messages from the front (submit, cancel, stop), run one scheduling round per
busy model, send back what happened. Messages:

    front -> worker   ("submit", key, Job) | ("cancel", key, job id) | ("stop",)
    worker -> front   ("ready", info) | ("failed", message)
                      | ("events", key, events, Stats or None, (batch rows, waiting jobs))
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from service.batching import source_batch
from service.decoding import DecodingOptions
from service.errors import ModelRepositoryError
from service.repository import ModelVersion
from service.scheduler import Job, Scheduler, Stats

STATS_EVERY = 0.1  # seconds between reports when only measurements are new
GOLDEN_AGREEMENT = 0.9  # token agreement a variant without its own golden set must reach


@dataclass(frozen=True)
class WorkerSettings:
    index: int
    models: tuple[tuple[str, ModelVersion], ...]  # (key, version verified by the front)
    variant: str = "fp32"
    device: str = "cpu"
    gpu: int = 0  # the GPU of this worker, on cuda
    io_binding: bool | None = None
    max_rows: int = 64
    batching: str = "continuous"
    window: float = 0.005


def golden_check(scheduler: Scheduler, model_version, variant: str) -> int:
    """Decodes the version's golden set; raises ModelRepositoryError on a mismatch. Returns
    the number of sentences checked."""
    golden = model_version.golden()
    entries = [g for g in golden if g["variant"] == variant]
    own = bool(entries)
    entries = entries or [g for g in golden if g["variant"] == "fp32"]
    if not entries:
        raise ModelRepositoryError(f"{model_version.directory}: no golden set for {variant}")
    limit = model_version.config["max_length"]
    for i, entry in enumerate(entries):
        src_ids, src_mask = source_batch([entry["source_ids"]], limit)
        options = DecodingOptions(max_length=entry["max_length"])
        scheduler.submit(Job(-1 - i, {"src_ids": src_ids, "src_mask": src_mask}, options))
    while scheduler.busy:
        scheduler.iterate()
    results = {e[1]: e for e in scheduler.events}
    scheduler.events.clear()
    scheduler.stats = Stats()
    problems = []
    for i, entry in enumerate(entries):
        event = results.get(-1 - i)
        if event is None or event[0] != "result":
            problems.append(f"golden sentence {i}: {event}")
            continue
        tokens, expected = event[2][0][0].tokens, entry["expected_ids"]
        if own and tokens != expected:
            problems.append(f"golden sentence {i}: {tokens} instead of {expected}")
        if not own:
            same = sum(a == b for a, b in zip(tokens, expected, strict=False))
            if same < GOLDEN_AGREEMENT * max(len(tokens), len(expected)):
                problems.append(f"golden sentence {i}: {same} of {len(expected)} tokens agree")
    if problems:
        raise ModelRepositoryError(
            f"{model_version.directory} ({variant}) fails its golden set: " + "; ".join(problems)
        )
    return len(entries)


def _load(settings: WorkerSettings):
    from service.onnx_engine import OnnxEngine  # after CUDA_VISIBLE_DEVICES is set

    schedulers, info = {}, {"pid": os.getpid(), "models": {}}
    for key, model_version in settings.models:
        engine = OnnxEngine(
            model_version, settings.variant, settings.device, 1, settings.io_binding
        )
        scheduler = Scheduler(engine, settings.max_rows, settings.batching, settings.window)
        checked = golden_check(scheduler, model_version, settings.variant)
        schedulers[key] = scheduler
        info["models"][key] = {
            "provider": engine.decoder.get_providers()[0],
            "golden_sentences": checked,
        }
    return schedulers, info


def run_worker(conn, settings: WorkerSettings) -> None:
    """The worker process's main function."""
    if settings.device == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(settings.gpu)
    try:
        schedulers, info = _load(settings)
    except Exception as error:  # reported to the front, which refuses to serve
        conn.send(("failed", f"worker {settings.index}: {type(error).__name__}: {error}"))
        return
    conn.send(("ready", info))
    with contextlib.suppress(EOFError, BrokenPipeError, KeyboardInterrupt):
        _loop(conn, schedulers)  # ends on "stop", or when the front is gone


def _loop(conn, schedulers: dict[str, Scheduler]) -> None:
    reported = {key: (0, 0) for key in schedulers}  # (rows, waiting) last sent
    last_report = time.monotonic()
    while True:
        waits = [w for s in schedulers.values() if (w := s.wait_time()) is not None]
        if conn.poll(min(waits) if waits else None):
            while True:
                message = conn.recv()
                if message[0] == "stop":
                    return
                if message[0] == "submit":
                    schedulers[message[1]].submit(message[2])
                elif message[0] == "cancel":
                    schedulers[message[1]].cancel(message[2])
                if not conn.poll(0):
                    break
        for scheduler in schedulers.values():
            if scheduler.busy:
                scheduler.iterate()
        now = time.monotonic()
        due = now - last_report >= STATS_EVERY
        for key, scheduler in schedulers.items():
            state = (scheduler.rows, len(scheduler.waiting))
            measured = scheduler.stats.step_seconds or scheduler.stats.encoder_seconds
            if state != reported[key] or (due and measured):  # measurements, state, events
                conn.send(("events", key, scheduler.events, scheduler.stats, state))
                scheduler.events, scheduler.stats, reported[key] = [], Stats(), state
                last_report = now
            elif scheduler.events:  # a stream's step: its events alone, measurements later
                conn.send(("events", key, scheduler.events, None, state))
                scheduler.events = []
