"""A worker process: onnxruntime sessions and one continuous batch per served model version.

It loads and verifies every model version of the repository, whatever its kind, decodes their
golden sets through its own schedulers on its own execution provider (warm-up and check in
one), reports ready, then loops: read messages from the front (`Submit`, `Cancel`, `Stop`),
run one scheduling round per busy model, send back what happened (`Report`). The messages are
the dataclasses of service.worker.messages.

With several front processes (`fronts` in the configuration) the worker also listens on a Unix
socket of its own (`WorkerSettings.socket`, authenticated by `authkey`), and every other front
connects to it: one batch serves the calls of every front. Each front's events go back to it
alone; the measurements (`Stats`) go to the front that started the worker, so that every
metric is counted once. A model version stays loaded while any connected front serves it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import AuthenticationError, Listener, wait

from service.runtime.cache_choice import choose_cache, shipped_caches
from service.runtime.choices import AUTO, Auto, Batching, Cache, Device, Threading
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import ModelRepositoryError
from service.runtime.inference import parting_margin
from service.runtime.kinds import kind_class
from service.runtime.repository import ModelVersion
from service.worker.messages import (
    Cancel,
    Failed,
    Failure,
    Job,
    Load,
    Loaded,
    NotLoaded,
    Ready,
    Report,
    Result,
    Stats,
    Stop,
    Submit,
    Unload,
)
from service.worker.outbox import Outbox
from service.worker.scheduler import MAX_ROWS, WINDOW_SECONDS, Scheduler

STATS_EVERY = 0.1  # seconds between reports when only measurements or the batch state are new
GOLDEN_AGREEMENT = 0.9  # token agreement a variant without its own golden set must reach
# the start-up check of the static step on CUDA (device_check): the golden inputs submitted
# in waves, a few steps apart, each wave decoding a few tokens further
CHECK_WAVES, CHECK_STAGGER, CHECK_LENGTH = 4, 3, 12


@dataclass(frozen=True)
class WorkerSettings:
    index: int
    models: tuple[tuple[str, ModelVersion], ...]  # (key, version verified by the front)
    variants: tuple[tuple[str, str], ...] = ()  # (key, variant) of every model version
    # the server's settings of the same names (service.front.config.ServerConfig)
    device: Device = "cpu"
    gpu: int = 0  # the GPU of this worker, on cuda
    io_binding: bool | None = None
    cache: Cache | Auto = AUTO
    max_rows: int = MAX_ROWS
    batching: Batching = "continuous"
    window: float = WINDOW_SECONDS
    encoder: Threading | Auto = AUTO
    step: Threading = "inline"
    socket: str = ""  # a Unix socket the other fronts connect to ("" with one front)
    authkey: bytes = b""  # what a front connecting to `socket` must know

    def variant_of(self, key: str) -> str:
        return dict(self.variants)[key]

    def scheduler(self, engine) -> Scheduler:
        """A scheduler over `engine` as configured (the encoder on a thread of its own on
        cuda unless configured otherwise)."""
        encoder = self.encoder == "thread" or (self.encoder == "auto" and self.device == "cuda")
        return Scheduler(
            engine,
            self.max_rows,
            self.batching,
            self.window,
            encoder_thread=encoder,
            step_thread=self.step == "thread",
        )


def golden_check(scheduler: Scheduler, model_version, variant: str) -> int:
    """Decodes the version's golden set; raises ModelRepositoryError on a mismatch. Returns
    the number of inputs checked."""
    golden, cache = model_version.golden(), scheduler.engine.cache
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
    results = _collect(scheduler)
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


def _collect(scheduler: Scheduler) -> dict[int, object]:
    """The events of a start-up check's jobs by job id, taken out of the scheduler with its
    measurements (they are not traffic)."""
    events = {e.job_id: e for e in scheduler.events}
    scheduler.events.clear()
    scheduler.stats = Stats()
    return events


def device_check(
    fast: Scheduler, reference: Scheduler, inputs: list[dict], tie: float = 0.0
) -> tuple[str | None, int]:
    """(what differed, or None where `fast` decodes `inputs` greedily as `reference` does;
    how many decodes parted at a near tie). Each scheduler decodes them in CHECK_WAVES waves
    CHECK_STAGGER steps apart (the n-th wave CHECK_LENGTH + n tokens long at most), so that
    rows join a batch whose other rows are at other positions and leave it at other times,
    and up to CHECK_WAVES x len(inputs) rows decode at once: the cases a decode of one input
    at a time (the golden check) never meets. A decode that parts from the reference's where
    the reference's log-probabilities of the two tokens lie within `tie` is a near tie, not a
    difference: two steps within their certified tolerance may rank such tokens either way."""

    def decode(scheduler: Scheduler) -> dict[int, list[int] | str]:
        for wave in range(CHECK_WAVES):
            options = DecodingOptions(max_length=CHECK_LENGTH + wave)
            for i, job_inputs in enumerate(inputs):
                scheduler.submit(Job(-1 - wave * len(inputs) - i, job_inputs, options))
            for _ in range(CHECK_STAGGER):
                if scheduler.busy:
                    scheduler.iterate()
        while scheduler.busy:
            scheduler.iterate()
        return {
            j: e.results[0][0].tokens if isinstance(e, Result) else str(e)
            for j, e in _collect(scheduler).items()
        }

    got, expected = decode(fast), decode(reference)
    if len(expected) != CHECK_WAVES * len(inputs) or got.keys() != expected.keys():
        return f"{len(got)} of {len(expected)} jobs answered", 0
    differing = sorted(j for j in expected if got[j] != expected[j])
    ties = [
        j
        for j in differing
        if tie > 0
        and _near_tie(reference.engine, inputs[(-1 - j) % len(inputs)], expected[j], got[j], tie)
    ]
    differing = [j for j in differing if j not in ties]
    if not differing:
        return None, len(ties)
    first = differing[0]
    return (
        f"{len(differing)} of {len(expected)} decodes differ, e.g. {got[first]} instead "
        f"of {expected[first]}"
    ), len(ties)


def _near_tie(engine, job_inputs: dict, expected, got, tie: float) -> bool:
    """Whether two decodes of one input part where `engine` (the reference) gives the two
    tokens log-probabilities within `tie` of each other."""
    if isinstance(expected, str) or isinstance(got, str):  # a failed job
        return False
    return parting_margin(engine, engine.encode(**job_inputs), expected, got)[1] <= tie


def tie_window(manifest: dict, variant: str) -> float:
    """How close two tokens' log-probabilities may be for two steps certified for `variant`
    (each step's logits within the certificate's `atol` of the model's) to rank them either
    way: a flip needs the model's margin within 2 atol, where a step may see it as 4 atol.
    0 where the version holds no certified tolerance for it (token-identical then)."""
    graphs = (manifest.get("parity") or {}).get("graphs", {})
    return 4 * float(graphs.get(variant, {}).get("tolerance", {}).get("atol", 0.0))


def choose_engine(settings: WorkerSettings, model_version, variant: str):
    """(engine, why) of one model version: the cache `choose_cache` gives for its variant
    (service.runtime.cache_choice). Where that names a trial (on CUDA, the static step with
    each bucket replayed as a CUDA graph: the fastest served step as measured,
    docs/benchmarks-gpu.md), the trial once it decodes as the growing step on this very
    device (device_check over the golden inputs); else the growing step, and why."""
    from service.runtime.onnx_engine import OnnxEngine  # after CUDA_VISIBLE_DEVICES is set

    def engine(cache: str):
        return OnnxEngine(
            model_version, variant, settings.device, 1, settings.io_binding, cache=cache
        )

    shipped = shipped_caches(model_version, variant)
    choice = choose_cache(settings.cache, settings.device, shipped)
    if choice.trial is None:
        return engine(choice.cache), choice.reason
    inputs_of = kind_class(model_version.manifest["model"]["kind"]).golden_inputs
    inputs = [
        inputs_of(model_version, entry)
        for entry in model_version.golden()
        if entry["variant"] == "fp32" and entry.get("cache", "in_place") == "in_place"
    ]
    tie = tie_window(model_version.manifest, variant)
    return static_if_checked(engine, inputs, settings, tie)


def static_if_checked(engine, inputs: list[dict], settings: WorkerSettings, tie: float = 0.0):
    """(engine, why): `engine("static")` where it decodes `inputs` as `engine("growing")`
    does (device_check, near ties within `tie` allowed), else the growing one. `engine`:
    cache -> an engine on the device."""
    growing = engine("growing")
    if not inputs:
        return growing, "the static step not checked on this device: no golden inputs"
    try:
        static = engine("static")
        schedulers = [settings.scheduler(e) for e in (static, growing)]
        try:
            problem, ties = device_check(*schedulers, inputs, tie)
        finally:
            for scheduler in schedulers:
                scheduler.close()
    except Exception as error:  # e.g. a capture this onnxruntime or device refuses
        return growing, f"the static step failed to run here: {type(error).__name__}: {error}"
    if problem is not None:
        return growing, f"the static step decodes unlike the growing one here: {problem}"
    parted = f", {ties} parting at a near tie (within {tie:g})" if ties else ""
    return static, (
        f"the fastest served step, decoding as the growing one on this device "
        f"({CHECK_WAVES * len(inputs)} staggered decodes{parted})"
    )


def _load(settings: WorkerSettings):
    schedulers, info = {}, {"pid": os.getpid(), "models": {}}
    for key, model_version in settings.models:
        schedulers[key], info["models"][key] = _load_model(
            settings, model_version, settings.variant_of(key)
        )
    return schedulers, info


def _load_model(settings: WorkerSettings, model_version, variant: str):
    """(scheduler, info) of one model version, its golden set checked."""
    engine, why = choose_engine(settings, model_version, variant)
    scheduler = settings.scheduler(engine)
    checked = golden_check(scheduler, model_version, variant)
    info = {
        "provider": engine.decoder.get_providers()[0],
        "cache": engine.cache,
        "cache_reason": why,
        "cuda_graphs": bool(engine.capture),
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
        fronts = _Fronts(conn, schedulers, info, settings)
    except Exception as error:  # reported to the front, which refuses to serve
        conn.send(Failed(f"worker {settings.index}: {type(error).__name__}: {error}"))
        return
    conn.send(Ready(info))
    try:
        with contextlib.suppress(EOFError, BrokenPipeError, KeyboardInterrupt):
            _loop(fronts, schedulers, settings)  # ends on "stop", or when the front is gone
    finally:
        fronts.close()


class _Fronts:
    """The front processes a worker answers: `parent`, the pipe to the front that started it,
    and the fronts connected on its socket since. Keeps which front submitted each job and
    which fronts serve each model version."""

    def __init__(self, parent, schedulers: dict[str, Scheduler], info: dict, settings):
        self.parent, self.links = parent, [parent]
        self.schedulers, self.info = schedulers, info
        self.owner: dict[int, tuple] = {}  # job id -> (link, key), jobs of the other fronts
        self.holders = {key: {parent} for key in schedulers}  # key -> links serving it
        self.listener = self._wake = None
        self.outbox = Outbox()
        self._accepted: list = []
        if settings.socket:
            with contextlib.suppress(FileNotFoundError):  # a worker's before this one
                os.unlink(settings.socket)
            self.listener = Listener(settings.socket, "AF_UNIX", authkey=settings.authkey)
            self._wake, self._waker = os.pipe()
            threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                link = self.listener.accept()
            except (AuthenticationError, EOFError, ConnectionError):
                continue  # a connection that did not know the key, or left mid-handshake
            except OSError:
                return  # closed
            self._accepted.append(link)
            os.write(self._waker, b"\0")

    def wait(self, timeout: float | None) -> list:
        """The links with messages waiting (fronts that connected are added first)."""
        waitables = self.links + ([self._wake] if self._wake is not None else [])
        ready = wait(waitables, timeout)
        if self._wake in ready:
            ready.remove(self._wake)
            os.read(self._wake, 4096)
            while self._accepted:
                link = self._accepted.pop()
                self.links.append(link)
                for holders in self.holders.values():
                    holders.add(link)
                self.send(link, Ready(self.info))
        return ready

    def send(self, link, message) -> None:
        """Sends to one front, by the outbox's thread."""
        self.outbox.put(link, message)

    def check_sent(self) -> None:
        """Fronts whose messages could not be sent are gone: the parent ends the worker,
        another is dropped."""
        for link in self.outbox.failed():
            if link is self.parent:
                raise BrokenPipeError("the front that started this worker is gone")
            self.drop(link)

    def drop(self, link) -> None:
        """A front went away: its jobs are cancelled and its model versions let go."""
        if link not in self.links:
            return
        self.links.remove(link)
        link.close()
        for job_id, (owner, key) in list(self.owner.items()):
            if owner is link and key in self.schedulers:  # its last event goes nowhere
                self.schedulers[key].cancel(job_id)
        for key in list(self.holders):
            self.unload(link, key)

    def submit(self, link, message: Submit) -> None:
        scheduler = self.schedulers.get(message.key)
        if scheduler is None:  # unloaded while that front still named it
            failure = Failure(
                message.job.id,
                "Unavailable",
                f"model version {message.key} is not loaded here; retry",
            )
            self.send(link, Report(message.key, [failure], None, 0, 0))
            return
        if link is not self.parent:
            self.owner[message.job.id] = (link, message.key)
        scheduler.submit(message.job)

    def load(self, link, message: Load, settings) -> None:
        """Loads one more model version between two steps (the other models wait meanwhile);
        a version another front had loaded is answered at once."""
        if message.key in self.schedulers:
            self.holders[message.key].add(link)
            self.send(link, Loaded(message.key, self.info["models"][message.key]))
            return
        try:
            scheduler, info = _load_model(settings, message.version, message.variant)
        except Exception as error:  # a broken version: refused, the others go on
            self.send(link, NotLoaded(message.key, f"{type(error).__name__}: {error}"))
            return
        self.schedulers[message.key], self.info["models"][message.key] = scheduler, info
        self.holders[message.key] = {link}
        self.send(link, Loaded(message.key, info))

    def unload(self, link, key: str) -> None:
        """`link`'s front serves `key` no more; the last one to let go unloads it."""
        holders = self.holders.get(key)
        if holders is None:
            return
        holders.discard(link)
        if not holders:
            del self.holders[key]
            scheduler = self.schedulers.pop(key, None)
            if scheduler is not None:
                scheduler.close()
            self.info["models"].pop(key, None)

    def route(self, events: list) -> dict:
        """{link: its events}: each event to the front whose job it is."""
        if not self.owner:  # the parent's jobs alone (always so with one front)
            return {self.parent: events} if events else {}
        routed: dict = {}
        for event in events:
            owner = self.owner.get(event.job_id)
            link = self.parent if owner is None else owner[0]
            routed.setdefault(link, []).append(event)
            if owner is not None and isinstance(event, Result | Failure):
                del self.owner[event.job_id]
        return routed

    def close(self) -> None:
        self.outbox.close()
        if self.listener is not None:
            self.listener.close()


def _stop(fronts: _Fronts, schedulers: dict[str, Scheduler]) -> None:
    """Every scheduler stops; what each still held is answered (Unavailable), each front its
    own jobs."""
    for key, scheduler in schedulers.items():
        scheduler.close()
        for link, events in fronts.route(scheduler.events).items():
            fronts.send(link, Report(key, events, None, 0, 0))
        scheduler.events = []


def _loop(fronts: _Fronts, schedulers: dict[str, Scheduler], settings: WorkerSettings) -> None:
    reported = {key: (0, 0) for key in schedulers}  # (rows, waiting) last sent
    last_report = time.monotonic()
    while True:
        fronts.check_sent()
        waits = [w for s in schedulers.values() if (w := s.wait_time()) is not None]
        for link in fronts.wait(min(waits) if waits else None):
            while link in fronts.links:
                try:
                    message = link.recv()
                except (EOFError, OSError):
                    if link is fronts.parent:
                        raise
                    fronts.drop(link)
                    break
                if isinstance(message, Stop) and link is fronts.parent:
                    _stop(fronts, schedulers)
                    return
                if isinstance(message, Submit):
                    fronts.submit(link, message)
                elif isinstance(message, Cancel):
                    if message.key in schedulers:
                        schedulers[message.key].cancel(message.job_id)
                elif isinstance(message, Load):
                    fronts.load(link, message, settings)
                elif isinstance(message, Unload):
                    fronts.unload(link, message.key)
                if not link.poll(0):
                    break
        for scheduler in schedulers.values():
            if scheduler.busy:
                scheduler.iterate()
        now = time.monotonic()
        due = now - last_report >= STATS_EVERY
        for key, scheduler in list(schedulers.items()):  # a front gone may unload one
            state = (scheduler.rows, len(scheduler.waiting))
            measured = scheduler.stats.step_seconds or scheduler.stats.encoder_seconds
            routed = fronts.route(scheduler.events)
            scheduler.events = []
            own = routed.pop(fronts.parent, [])
            # events at once; measurements and the batch state (a gauge) at most every
            # STATS_EVERY, so a busy worker does not send a message a step
            if own or (due and (measured or state != reported.get(key, (0, 0)))):
                fronts.send(fronts.parent, Report(key, own, scheduler.stats, *state))
                scheduler.stats, reported[key] = Stats(), state
                last_report = now
            for link, events in routed.items():  # the other fronts' calls: their events
                if link in fronts.links:
                    fronts.send(link, Report(key, events, None, *state))
