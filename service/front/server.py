"""The front process: gRPC (grpc.aio), health, reflection, metrics, draining.

It reads the model repository and serves every model version in it, each through the
service of its kind (service.runtime.kinds: translators on TranslationService, captioners on
CaptionService). It checks every request at the edge (fields, texts, images, limits), hands
decode jobs to the worker processes and turns their results into responses. Health reports
NOT_SERVING, for the server and for each service by name, until every worker has passed its
golden-set checks, and again once a drain starts (SIGTERM): from then on new calls get
UNAVAILABLE and calls in flight have `drain_seconds` to finish. With `fronts` > 1 several
front processes run this on one port and share the workers (service.front.fronts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from service.front.cache import ResponseCache
from service.front.caption import CaptionServicer
from service.front.config import ServerConfig, choice_lines
from service.front.fronts import (
    FrontProcesses,
    MergedRegistry,
    Secondary,
    remove_sockets,
    worker_sockets,
)
from service.front.metrics import Metrics, serve_metrics
from service.front.pool import WorkerPool, worker_settings
from service.front.security import TokenAuth, load_tokens, server_credentials
from service.front.servicer import add_servicer
from service.front.translate import TranslationServicer
from service.front.versions import VersionWatcher, newest, version_order
from service.runtime.errors import (
    InvalidArgument,
    ModelRepositoryError,
    NotFound,
    Unavailable,
)
from service.runtime.kinds import Prepared, ServedModel, served_model
from service.runtime.repository import MANIFEST, manifests, verify
from service.worker.messages import Job, Timings

log = logging.getLogger("attnserve")
TRANSLATION_SERVICE = TranslationServicer.service
CAPTION_SERVICE = CaptionServicer.service
SERVICES = {  # service: the setting naming its default model
    TRANSLATION_SERVICE: "default_translator",
    CAPTION_SERVICE: "default_captioner",
}

# A drain waits for calls in flight, then for DRAIN_QUIET seconds without a new call (at most
# DRAIN_LINGER seconds), before the gRPC server stops: long enough for a client answered
# during the drain to send its next call even on a loaded host, so that the call is refused
# with UNAVAILABLE and goes to another replica (docs/reliability.md).
DRAIN_QUIET, DRAIN_LINGER = 1.0, 3.0

Models = dict[str, dict[str, dict[str, ServedModel]]]  # service -> name -> version -> model


def load_repository(config: ServerConfig) -> Models:
    """{service: {model name: {version: ServedModel}}} of every verified version under the
    repository, each under the service of its kind."""
    root = Path(config.repository)
    found = manifests(root)
    if not found:
        raise ModelRepositoryError(
            f"no model repository at {root} (expected <model>/<version>/{MANIFEST}); build one "
            f"with: attnserve export translator --out {root}"
        )
    models: Models = {}
    for manifest in found:
        model = served_model(verify(manifest.parent), config)
        models.setdefault(model.service, {}).setdefault(model.version.name, {})[
            model.version.version
        ] = model
    for names in models.values():  # the newest max_versions of each model
        for name, versions in names.items():
            keep = newest(versions, config.max_versions)
            names[name] = {v: m for v, m in versions.items() if v in keep}
    return models


def default_models(config: ServerConfig, models: Models) -> dict[str, str]:
    """{service: its default model name}: the one the configuration names, else the service's
    only model. Several models and no setting is an error, never a guess."""
    defaults, problems = {}, []
    for service, names in models.items():
        setting = SERVICES[service]
        declared = getattr(config, setting)
        if declared:
            if declared not in names:
                problems.append(
                    f"{setting} = {declared!r}, not a {service} model ({sorted(names)})"
                )
            defaults[service] = declared
        elif len(names) == 1:
            defaults[service] = next(iter(names))
        else:
            problems.append(f"{service} serves {sorted(names)}: set {setting} to one of them")
    if problems:
        raise ModelRepositoryError("default models: " + "; ".join(problems))
    return defaults


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
        self.idle = asyncio.Event()
        self.idle.set()
        self.last_call = 0.0  # time.monotonic() of the last call received
        self.cache = ResponseCache(
            config.response_cache_entries, config.response_cache_bytes, metrics
        )

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
        infos = [w.info.get("models", {}).get(model.key, {}) for w in self.pool.workers]
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
        itl = self.metrics.inter_token_latency.labels(*labels)
        for gap in (gap for t in timings for gap in t.gaps):
            itl.observe(gap)


SERVICERS = {servicer.service: servicer for servicer in (TranslationServicer, CaptionServicer)}


async def serve(
    config: ServerConfig, stop: asyncio.Event | None = None, role: Secondary | None = None
) -> int:
    """Runs the server until SIGTERM/SIGINT (or `stop`), then drains. Returns an exit code.
    With `fronts` > 1 this is the first front, and the others run it with their `role`
    (service.front.fronts): they connect to its workers and drain when it says so."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    if role is None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    models = load_repository(config)
    credentials, tokens = server_credentials(config), load_tokens(config)
    metrics = Metrics()
    served = [m for names in models.values() for v in names.values() for m in v.values()]
    others = sockets = None
    if role is None:
        keys = tuple((m.key, m.version) for m in served)
        device, why = config.device_choice()
        fronts, workers = config.front_choice(), config.worker_choice(device)
        # what every front is told, and the count of the workers they share: chosen once
        config = dataclasses.replace(config, fronts=fronts[0], workers=workers[0])
        choices = {m.key: config.variant_choice(device, m.version.manifest) for m in served}
        for line in choice_lines(device, why, choices, config.cache, fronts, workers):
            log.info("%s", line)
        variants = {key: variant for key, (variant, _) in choices.items()}
        settings, sockets = worker_sockets(
            worker_settings(config, keys, device, variants), config.fronts
        )
        if config.http_listen:  # every front serves the files any front translated
            config = dataclasses.replace(config, http_files=http_files(config))
        registry = metrics.registry
        if config.fronts > 1:
            others = FrontProcesses(config, settings, device, variants, run_front)
            registry = MergedRegistry(metrics.registry, others.collect)
        metrics_server, metrics_thread = serve_metrics(config, registry)
    else:
        settings, device, variants = list(role.settings), role.device, role.variants
    pool = WorkerPool(
        settings,
        metrics,
        config.max_queued_requests,
        config.latency_budget_seconds,
        role.index if role else 0,
        config.fronts,
    )
    pool.models = {m.key: m.version.name for m in served}
    front = Front(config, models, pool, metrics)

    def refused(code: grpc.StatusCode) -> None:
        metrics.auth_refused.labels(code.name).inc()

    interceptors = [TokenAuth(tokens, refused)] if tokens else []
    server = grpc.aio.server(options=config.grpc_options(), interceptors=interceptors)
    servicers = [SERVICERS[service](front) for service in sorted(models)]
    for servicer in servicers:
        add_servicer(server, servicer)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = (*sorted(models), health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(services, server)
    if credentials is None:
        grpc_port = server.add_insecure_port(config.listen)
    else:
        grpc_port = server.add_secure_port(config.listen, credentials)
    if grpc_port == 0:
        raise Unavailable(f"cannot listen on {config.listen}")
    for name in ("", *models):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    http = None
    if config.http_listen:
        from service.front.http.app import HttpServer, build_app  # Starlette and uvicorn

        app = build_app(front, servicers, tokens, refused, Path(config.http_files))
        http = HttpServer(app, config, reuse_port=config.fronts > 1)
        await http.start()
    host = config.listen.rpartition(":")[0]
    if role is None:
        ports = {"grpc_port": grpc_port, "metrics_port": metrics_server.server_port}
        if http is not None:
            ports["http_port"] = http.port
        _write_ready(config, {**ports, "serving": False})
    try:
        await pool.start()
        if others is not None:
            http_listen = f"{config.http_listen.rpartition(':')[0]}:{http.port}" if http else ""
            await others.start(f"{host}:{grpc_port}", http_listen)
    except RuntimeError as error:
        log.error("%s failed to start: %s", "front" if others else "workers", error)
        await server.stop(0)
        await pool.stop()
        if role is None:
            metrics_server.shutdown()
            remove_sockets(sockets)
        return 1
    front.device = device
    if role is None:
        for model in served:
            front.describe(model, variants[model.key])
    front.serving = True
    for name in ("", *models):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if role is None:
        fronts = {"fronts": others.pids()} if others else {}
        _write_ready(config, {**ports, "serving": True, "workers": pool.pids(), **fronts})
        names = ", ".join(f"{m.key} ({m.kind}, {variants[m.key]})" for m in served)
        log.info(
            "serving %s on %s:%d with %d %s workers and %d front%s; metrics on port %d",
            names,
            host,
            grpc_port,
            len(pool.workers),
            device,
            config.fronts,
            "s" if config.fronts > 1 else "",
            ports["metrics_port"],
        )
    else:
        _answer_first_front(role, metrics, stop)

    watcher = None
    if config.watch_seconds:
        watcher = asyncio.get_running_loop().create_task(VersionWatcher(front, config).run())
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    if others is not None:
        others.drain()  # every front drains at once
    log.info(
        "draining: %d calls in flight, %.0f s to finish", front.in_flight, config.drain_seconds
    )
    await health_servicer.enter_graceful_shutdown()  # NOT_SERVING first, then refuse calls
    front.draining = True
    if not await front.drained(config.drain_seconds):
        log.warning(
            "drain: %d calls still in flight after %.0f s: cancelling them",
            front.in_flight,
            config.drain_seconds,
        )
        metrics.drain_cancelled_calls.inc(front.in_flight)
        pool.fail_all(
            Unavailable(
                f"the server stopped: its drain ({config.drain_seconds:g} s) "
                "ended before this call did; retry on another replica"
            )
        )
        with contextlib.suppress(TimeoutError):  # the handlers send that status
            await asyncio.wait_for(front.idle.wait(), 1.0)
    await server.stop(0.2)
    if http is not None:
        await http.stop()
    if others is not None:  # the workers stop once no front has calls for them
        await others.stopped(config.drain_seconds + 5.0)
    await pool.stop()
    if role is None:
        metrics_server.shutdown()
        metrics_thread.join(1)
        remove_sockets(sockets)
    return 0


def _answer_first_front(role: Secondary, metrics: Metrics, stop: asyncio.Event) -> None:
    """A front other than the first: says it serves, then answers scrapes with its metrics
    and drains when told (or when the first front is gone)."""
    loop = asyncio.get_running_loop()
    role.control.send("ready")

    def on_control() -> None:
        try:
            while role.control.poll():
                if role.control.recv() == "drain":
                    stop.set()
        except (EOFError, OSError):
            loop.remove_reader(role.control.fileno())
            stop.set()

    def on_scrape() -> None:
        try:
            while role.scrape.poll():
                role.scrape.recv()
                role.scrape.send(list(metrics.registry.collect()))
        except (EOFError, OSError):
            loop.remove_reader(role.scrape.fileno())

    loop.add_reader(role.control.fileno(), on_control)
    loop.add_reader(role.scrape.fileno(), on_scrape)


def http_files(config: ServerConfig) -> Path:
    """The folder of files translated over HTTP: the configured one, or a new temporary one."""
    if config.http_files is not None:
        Path(config.http_files).mkdir(parents=True, exist_ok=True)
        return Path(config.http_files)
    return Path(tempfile.mkdtemp(prefix="attnserve-files-"))


def _write_ready(config: ServerConfig, state: dict) -> None:
    if config.ready_file is None:
        return
    path = Path(config.ready_file)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(state) + "\n")
    temporary.replace(path)


def run_front(config, role: Secondary) -> None:
    """A front other than the first: its process's main function."""
    # the first front owns this one's life: a Ctrl-C to the process group must not stop it
    # in the middle of a drain
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    prefix = f"attnserve[front {role.index}]: "
    logging.basicConfig(format=prefix + "%(message)s", level=logging.INFO, stream=sys.stderr)
    try:
        code = asyncio.run(serve(config, role=role))
    except Exception as error:  # the first front reports it and refuses to serve
        with contextlib.suppress(OSError):
            role.control.send(f"failed: front {role.index}: {type(error).__name__}: {error}")
        code = 1
    sys.exit(code)
