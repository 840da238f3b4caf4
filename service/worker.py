"""A worker process: onnxruntime sessions and one continuous batch per served model version.

It loads and verifies every model version of the repository, whatever its kind, decodes their
golden sets through its own schedulers on its own execution provider (warm-up and check in
one), reports ready, then loops: read messages from the front (`Submit`, `Cancel`, `Stop`),
run one scheduling round per busy model, send back what happened (`Report`). The messages are
the dataclasses of service.messages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from service.decoding import DecodingOptions
from service.errors import ModelRepositoryError
from service.graphs import IN_PLACE, STATIC
from service.kinds import kind_class
from service.messages import (
    Cancel,
    Failed,
    Load,
    Loaded,
    NotLoaded,
    Ready,
    Report,
    Result,
    Stop,
    Submit,
    Unload,
)
from service.repository import ModelVersion
from service.scheduler import Job, Scheduler, Stats

STATS_EVERY = 0.1  # seconds between reports when only measurements or the batch state are new
GOLDEN_AGREEMENT = 0.9  # token agreement a variant without its own golden set must reach


@dataclass(frozen=True)
class WorkerSettings:
    index: int
    models: tuple[tuple[str, ModelVersion], ...]  # (key, version verified by the front)
    variants: tuple[tuple[str, str], ...] = ()  # (key, variant) of every model version
    device: str = "cpu"
    gpu: int = 0  # the GPU of this worker, on cuda
    io_binding: bool | None = None
    cache: str = "auto"  # ServerConfig.cache
    max_rows: int = 64
    batching: str = "continuous"
    window: float = 0.005

    def variant_of(self, key: str) -> str:
        return dict(self.variants)[key]


def golden_check(scheduler: Scheduler, model_version, variant: str) -> int:
    """Decodes the version's golden set; raises ModelRepositoryError on a mismatch. Returns
    the number of inputs checked."""
    golden, cache = model_version.golden(), getattr(scheduler.engine, "cache", None)
    if cache == "static":  # the in-place step at a fixed capacity, certified token-identical
        cache = "in_place"

    def of(name: str) -> list[dict]:  # a variant's entries made with this cache (older: any)
        return [g for g in golden if g["variant"] == name and g.get("cache", cache) == cache]

    entries = of(variant)
    own = bool(entries)
    entries = entries or of("fp32") or [g for g in golden if g["variant"] == "fp32"]
    if not entries:
        raise ModelRepositoryError(f"{model_version.directory}: no golden set for {variant}")
    inputs_of = kind_class(model_version.manifest["model"]["kind"]).golden_inputs
    for i, entry in enumerate(entries):  # one at a time, as they were decoded (the batch a
        options = DecodingOptions(max_length=entry["max_length"])  # row shares moves int8)
        scheduler.submit(Job(-1 - i, inputs_of(model_version, entry), options))
        while scheduler.busy:
            scheduler.iterate()
    results = {e.job_id: e for e in scheduler.events}
    scheduler.events.clear()
    scheduler.stats = Stats()
    problems = []
    for i, entry in enumerate(entries):
        event = results.get(-1 - i)
        if not isinstance(event, Result):
            problems.append(f"golden input {i}: {event}")
            continue
        tokens, expected = event.results[0][0].tokens, entry["expected_ids"]
        if own and tokens != expected:
            problems.append(f"golden input {i}: {tokens} instead of {expected}")
        if not own:
            same = sum(a == b for a, b in zip(tokens, expected, strict=False))
            if same < GOLDEN_AGREEMENT * max(len(tokens), len(expected)):
                problems.append(f"golden input {i}: {same} of {len(expected)} tokens agree")
    if problems:
        raise ModelRepositoryError(
            f"{model_version.directory} ({variant}) fails its golden set: " + "; ".join(problems)
        )
    return len(entries)


def _load(settings: WorkerSettings):
    schedulers, info = {}, {"pid": os.getpid(), "models": {}}
    for key, model_version in settings.models:
        schedulers[key], info["models"][key] = _load_model(
            settings, model_version, settings.variant_of(key)
        )
    return schedulers, info


def _cache_for(cache: str, model_version, variant: str) -> str | None:
    """The configured cache where the version ships that form of its step, else the engine's
    default (None): a repository may hold models without a key/value cache (the captioner)
    beside the translator."""
    prefix = {"in_place": IN_PLACE, "static": STATIC}.get(cache)
    if cache == "auto" or (prefix and not model_version.has_graph(variant, prefix + "decoder")):
        return None
    return cache


def _load_model(settings: WorkerSettings, model_version, variant: str):
    """(scheduler, info) of one model version, its golden set checked."""
    from service.onnx_engine import OnnxEngine  # after CUDA_VISIBLE_DEVICES is set

    cache = _cache_for(settings.cache, model_version, variant)
    engine = OnnxEngine(model_version, variant, settings.device, 1, settings.io_binding,
                        cache=cache)  # fmt: skip
    scheduler = Scheduler(engine, settings.max_rows, settings.batching, settings.window)
    checked = golden_check(scheduler, model_version, variant)
    info = {
        "provider": engine.decoder.get_providers()[0],
        "cache": engine.cache,
        "cuda_graphs": bool(engine.static is not None and engine.static.capture),
        "kind": engine.kind,
        "golden_inputs": checked,
    }
    return scheduler, info


def run_worker(conn, settings: WorkerSettings) -> None:
    """The worker process's main function."""
    # The front owns the workers' lives (a Stop message, or the pipe closing when it is
    # gone): a Ctrl-C or SIGTERM sent to the whole process group must not end them in the
    # middle of a drain, with calls in flight.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    if settings.device == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(settings.gpu)
    try:
        schedulers, info = _load(settings)
    except Exception as error:  # reported to the front, which refuses to serve
        conn.send(Failed(f"worker {settings.index}: {type(error).__name__}: {error}"))
        return
    conn.send(Ready(info))
    with contextlib.suppress(EOFError, BrokenPipeError, KeyboardInterrupt):
        _loop(conn, schedulers, settings)  # ends on "stop", or when the front is gone


def _serve_load(conn, schedulers: dict[str, Scheduler], settings, message: Load) -> None:
    """Loads one more model version between two steps (the other models wait meanwhile)."""
    try:
        scheduler, info = _load_model(settings, message.version, message.variant)
    except Exception as error:  # a broken version: refused, the others go on
        conn.send(NotLoaded(message.key, f"{type(error).__name__}: {error}"))
        return
    schedulers[message.key] = scheduler
    conn.send(Loaded(message.key, info))


def _loop(conn, schedulers: dict[str, Scheduler], settings: WorkerSettings) -> None:
    reported = {key: (0, 0) for key in schedulers}  # (rows, waiting) last sent
    last_report = time.monotonic()
    while True:
        waits = [w for s in schedulers.values() if (w := s.wait_time()) is not None]
        if conn.poll(min(waits) if waits else None):
            while True:
                message = conn.recv()
                if isinstance(message, Stop):
                    return
                if isinstance(message, Submit):
                    schedulers[message.key].submit(message.job)
                elif isinstance(message, Cancel):
                    if message.key in schedulers:
                        schedulers[message.key].cancel(message.job_id)
                elif isinstance(message, Load):
                    _serve_load(conn, schedulers, settings, message)
                elif isinstance(message, Unload):
                    schedulers.pop(message.key, None)
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
            # events at once; measurements and the batch state (a gauge) at most every
            # STATS_EVERY, so a busy worker does not send a message a step
            if scheduler.events or (due and (measured or state != reported.get(key, (0, 0)))):
                conn.send(Report(key, scheduler.events, scheduler.stats, *state))
                scheduler.events, scheduler.stats, reported[key] = [], Stats(), state
                last_report = now
            elif scheduler.events:  # a stream's step: its events alone, measurements later
                conn.send(Report(key, scheduler.events, None, *state))
                scheduler.events = []
