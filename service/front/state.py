"""What the services of a front share: the models served, the worker pool, the metrics, the
response cache and the drain; how a model is found by name and version, and how a prepared
request becomes jobs."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time

from service.front.cache import ResponseCache
from service.front.config import ServerConfig
from service.front.metrics import Metrics, observe_all
from service.front.pool import WorkerPool
from service.front.registry import Models, default_models
from service.front.versions import version_order
from service.runtime.errors import InvalidArgument, NotFound, Unavailable
from service.runtime.kinds import Prepared, ServedModel
from service.runtime.languages import own_code, shown
from service.worker.messages import Job, Timings

log = logging.getLogger("attnserve")

# A drain waits for calls in flight, then for DRAIN_QUIET seconds without a new call (at most
# DRAIN_LINGER seconds), before the gRPC server stops: long enough for a client answered
# during the drain to send its next call even on a loaded host, so that the call is refused
# with UNAVAILABLE and goes to another replica (docs/reliability.md).
DRAIN_QUIET, DRAIN_LINGER = 1.0, 3.0
# gRPC health's own service: SERVING while the front answers, until a drain (a liveness
# probe asks it; "" and each service's name say whether calls can be served now)
LIVENESS = "grpc.health.v1.Health"


class Front:
    """State shared by the services: models, workers, metrics, drain flag."""

    def __init__(self, config: ServerConfig, models: Models, pool: WorkerPool, metrics: Metrics):
        self.config, self.models, self.pool, self.metrics = config, models, pool, metrics
        self.services = frozenset(models)  # gRPC services cannot be added once started
        self.device = "cpu"
        self.defaults = default_models(config, models)
        self.serving = False
        self.draining = False
        self.in_flight = 0
        # worker key -> calls in flight that named that version, from when they named it
        # (before their inputs are prepared and any job is sent): a retired version drains them
        self.resolved: collections.Counter[str] = collections.Counter()
        self.idle = asyncio.Event()
        self.idle.set()
        self.last_call = 0.0  # time.monotonic() of the last call received
        self.cache = ResponseCache(
            config.response_cache_entries, config.response_cache_bytes, metrics
        )

    @property
    def healthy(self) -> bool:
        """What health says, over gRPC as over HTTP: SERVING once the workers have passed
        their checks, while the pool can serve (a worker, on a Ray cluster a replica, is
        ready), until a drain starts."""
        return self.serving and self.pool.serving and not self.draining

    def health(self, service: str) -> bool:
        """Whether health says SERVING for `service`: LIVENESS until a drain starts; the
        server ("") as `healthy` says, and a service while it also serves a model version
        (once its last one is retired, every call to it is refused NOT_FOUND)."""
        if service == LIVENESS:
            return not self.draining
        return self.healthy and (not service or bool(self.models.get(service)))

    async def drained(self, seconds: float) -> bool:
        """Waits, at most `seconds`, until no call is in flight and then no call has arrived
        for DRAIN_QUIET seconds (at most DRAIN_LINGER after the last call ended): a client
        still sending after its UNAVAILABLE would otherwise meet the gRPC server's shutdown,
        which cancels the calls it has received but not yet handed to a handler. False when
        calls are still in flight at the bound."""
        end = time.monotonic() + seconds
        linger_end = None
        while True:
            now = time.monotonic()
            if self.in_flight:
                linger_end = None
                try:
                    await asyncio.wait_for(self.idle.wait(), end - now)
                except TimeoutError:
                    return self.in_flight == 0
                continue
            linger_end = linger_end or min(end, now + DRAIN_LINGER)
            quiet_at = self.last_call + DRAIN_QUIET
            if now >= quiet_at or now >= linger_end:
                return True
            await asyncio.sleep(min(quiet_at, linger_end) - now)

    async def drain(self) -> None:
        """Refuses new calls (UNAVAILABLE), lets those in flight finish within
        `drain_seconds`, then fails what is left UNAVAILABLE and gives their handlers a
        second to answer."""
        seconds = self.config.drain_seconds
        log.info("draining: %d calls in flight, %.0f s to finish", self.in_flight, seconds)
        self.draining = True
        if await self.drained(seconds):
            return
        log.warning(
            "drain: %d calls still in flight after %.0f s: cancelling them", self.in_flight, seconds
        )
        self.metrics.drain_cancelled_calls.inc(self.in_flight)
        self.pool.fail_all(
            Unavailable(
                f"the server stopped: its drain ({seconds:g} s) "
                "ended before this call did; retry on another replica"
            )
        )
        with contextlib.suppress(TimeoutError):  # the handlers send that status
            await asyncio.wait_for(self.idle.wait(), 1.0)

    def covering(self, service: str, source: str, target: str) -> str:
        """The served model of `service` whose newest version reads `source` and writes
        `target` (either may be empty: any; each its own code or as the edge names it; a
        model that declares none on a side takes any there), the most specialised first
        (those that declare both sides, then the fewest languages), then the default, then
        by name; InvalidArgument where none does."""
        default, found = self.defaults.get(service, ""), []
        for name, versions in self.models.get(service, {}).items():
            languages = versions[max(versions, key=version_order)].languages
            if _takes(source, languages.source) and _takes(target, languages.target):
                undeclared = (not languages.source) + (not languages.target)
                size = max(len(languages.source), 1) * max(len(languages.target), 1)
                found.append((undeclared, size, name != default, name))
        if not found:
            raise InvalidArgument(
                f"source_language {shown(source)}, target_language {shown(target)}: no served "
                "model translates that; name a model, or see the languages each one declares"
            )
        return min(found)[-1]

    def named(self, service: str, request) -> str:
        """The model a request names: its `model`; where it names none but languages, the
        served model that covers them (`covering`); else "" (the default)."""
        source = getattr(request, "source_language", "")
        target = getattr(request, "target_language", "")
        if request.model or not (source or target):
            return request.model
        return self.covering(service, source, target)

    @contextlib.contextmanager
    def holding(self, model: ServedModel):
        """Counts a call that named `model` in `resolved` until it ends."""
        key = model.worker_key
        self.resolved[key] += 1
        try:
            yield model
        finally:
            self.resolved[key] -= 1
            if not self.resolved[key]:
                del self.resolved[key]

    def resolve(self, service: str, name: str, version: str) -> ServedModel:
        names = self.models.get(service, {})
        name = name or self.defaults.get(service, "")
        versions = names.get(name)
        if versions is None:
            others = [s for s, n in self.models.items() if name in n and s != service]
            hint = f"; {name!r} is served by {others[0]}" if others else ""
            raise NotFound(
                f"model: no model named {name!r} (served by {service}: {sorted(names)}){hint}"
            )
        if not version:
            return versions[max(versions, key=version_order)]
        if version not in versions:
            raise NotFound(
                f"version: model {name!r} has no version {version!r} "
                f"(served: {sorted(versions, key=version_order)})"
            )
        return versions[version]

    def describe(self, model: ServedModel, variant: str) -> None:
        """The model's attnserve_model_info sample, once its workers have it loaded."""
        infos = [w.info.get("models", {}).get(model.worker_key, {}) for w in self.pool.workers]
        info = infos[0]
        choices: dict[tuple, list[int]] = {}  # each GPU's worker checks its own static step
        for i, each in enumerate(infos):
            if each.get("cache_reason"):
                choices.setdefault((each["cache"], each["cache_reason"]), []).append(i)
        for (cache, why), workers in choices.items():
            log.info(
                "%s steps with cache %s (worker%s %s): %s",
                model.key,
                cache,
                "s" * (len(workers) > 1),
                ", ".join(map(str, workers)),
                why,
            )
        self.metrics.model.labels(model.version.name, model.version.version).info(
            {
                "kind": model.kind,
                "service": model.service,
                "precision": variant,
                "execution_provider": info.get("provider", ""),
                "cache": info.get("cache", ""),  # in place, growing, static (or none)
                # whether each bucket of the static step is replayed as a CUDA graph
                "cuda_graphs": str(bool(info.get("cuda_graphs"))).lower(),
            }
        )

    def forget(self, model: ServedModel) -> None:
        with contextlib.suppress(KeyError):
            self.metrics.model.remove(model.version.name, model.version.version)

    def label(self, service: str, name: str) -> str:
        """Metric label of a requested model: its name when served, else "unknown" (a label
        per unknown name would let clients grow the metrics without bound)."""
        name = name or self.defaults.get(service, "")
        return name if name in self.models.get(service, {}) else "unknown"

    def check_available(self) -> None:
        if self.draining:
            raise Unavailable("the server is draining (shutting down); retry on another replica")
        if not self.serving:
            raise Unavailable("the server is warming up; retry shortly")

    def jobs(self, prepared: Prepared, context, stream: bool, most: int = 0) -> list[Job]:
        """The decode jobs of a prepared request: its inputs are independent sequences, cut
        into jobs that each fit a batch (they may run on different workers), of at most
        `most` inputs each when given. InvalidArgument only when one input's hypotheses alone
        need more rows than a batch has."""
        copies, rows = prepared.options.copies, self.config.max_batch_rows
        if copies > rows:
            raise InvalidArgument(
                f"options: {copies} hypotheses per input need {copies} batch rows, at most {rows}"
            )
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        per_job = min(rows // copies, most or rows)
        controls = prepared.controls
        return [
            Job(
                id=self.pool.next_id(),
                encoder_inputs={
                    k: v[start : start + per_job] for k, v in prepared.encoder_inputs.items()
                },
                options=prepared.options,
                stream=stream,
                deadline=deadline,
                keep_alignment=prepared.keep_alignment,
                keep_log_probs=prepared.keep_log_probs,
                controls=None
                if controls is None
                else controls.subset(list(range(start, min(start + per_job, prepared.inputs)))),
            )
            for start in range(0, prepared.inputs, per_job)
        ]

    def observe(self, labels: tuple[str, str], received: float, timings: list[Timings]) -> None:
        """A request's time to first token (its first job's) and its token gaps."""
        first = min((t.first_token_at for t in timings if t.first_token_at), default=0.0)
        if first:
            self.metrics.time_to_first_token.labels(*labels).observe(first - received)
        gaps = [gap for t in timings for gap in t.gaps]
        observe_all(self.metrics.inter_token_latency.labels(*labels), gaps)


def _takes(given: str, codes: tuple[str, ...]) -> bool:
    """Whether a side of a model that declares `codes` takes the code a request `given`:
    any where either is empty, as the model's resolve_languages takes it."""
    return not given or not codes or own_code(given, codes) in codes
