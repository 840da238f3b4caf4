"""The front process: gRPC (grpc.aio), health, reflection, metrics, draining.

It reads the model repository and serves every model version in it, each through the
service of its kind (service.runtime.kinds: translators on TranslationService, captioners on
CaptionService). It checks every request at the edge (fields, texts, images, limits), hands
decode jobs to the worker processes and turns their results into responses. Health reports
NOT_SERVING, for the server and for each service by name, until every worker has passed its
golden-set checks, while no worker is ready (every one restarting; with `ray`, no
replica), and again once a drain starts
(SIGTERM; HTTP's health routes say the same, `Front.health`): from then on new calls get
UNAVAILABLE and calls in flight have `drain_seconds` to finish. With `fronts` > 1 several
front processes run this on one port and share the workers (service.front.fronts).
Health's own name (LIVENESS) is SERVING from the start until the drain, whatever the
workers: a liveness probe asks it, as restarting the front brings no worker back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from service.front.config import ServerConfig, cannot_listen, choice_lines
from service.front.fronts import (
    FrontProcesses,
    MergedRegistry,
    Secondary,
    remove_sockets,
    worker_sockets,
)
from service.front.metrics import Metrics, serve_metrics
from service.front.pool import WorkerPool, worker_settings
from service.front.registry import SERVICERS, load_repository
from service.front.security import TokenAuth, load_tokens, server_credentials
from service.front.servicer import add_servicer
from service.front.state import LIVENESS, Front
from service.front.versions import VersionWatcher
from service.runtime.errors import (
    Unavailable,
)

log = logging.getLogger("attnserve")


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
    keys = tuple((m.worker_key, m.version) for m in served)
    device, why = config.device_choice() if role is None else (role.device, "")
    choices = {m: config.variant_choice(device, m.version.manifest) for m in served}
    variants = {m.worker_key: variant for m, (variant, _) in choices.items()}
    others = sockets = made = None
    if role is None:
        fronts, workers = config.front_choice(), config.worker_choice(device)
        # what every front is told, and the count of the workers they share: chosen once
        config = dataclasses.replace(config, fronts=fronts[0], workers=workers[0])
        shown = {m.key: choice for m, choice in choices.items()}
        for line in choice_lines(device, why, shown, config, fronts, workers):
            log.info("%s", line)
        settings, sockets = worker_sockets(
            worker_settings(config, keys, device, variants), config.fronts
        )
        if config.http_listen:  # every front serves the files any front translated
            made = None if config.http_files else http_files(config)  # removed on exit
            config = dataclasses.replace(config, http_files=made or http_files(config))
        registry = metrics.registry
        if config.fronts > 1:
            others = FrontProcesses(config, settings, device, run_front)
            registry = MergedRegistry(metrics.registry, others.collect)
        try:
            metrics_server, metrics_thread = serve_metrics(config, registry)
        except Unavailable:
            remove_sockets(sockets)
            _remove(made)
            raise
    else:
        # the versions this front read, which the workers may not hold yet: the repository
        # may have changed since the first front read it (a version replaced in place, whose
        # new content the first loads at its next look). The pool loads them on each worker
        # it connects to (WorkerPool._catch_up), and sends calls only where they are loaded.
        chosen = tuple(variants.items())
        settings = [dataclasses.replace(s, models=keys, variants=chosen) for s in role.settings]
    if config.ray:
        # SIGTERM is the server's drain: Ray's handler of fatal signals must not take it
        os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
        from service.front.cluster import ClusterPool, ClusterSettings  # the ray extra

        pool = ClusterPool(
            settings[0],
            ClusterSettings.of(config),
            metrics,
            config.max_queued_requests,
            config.latency_budget_seconds,
        )
    else:
        pool = WorkerPool(
            settings,
            metrics,
            config.max_queued_requests,
            config.latency_budget_seconds,
            role.index if role else 0,
            config.fronts,
        )
    pool.models = {m.worker_key: m.version.name for m in served}
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
    health_names = (LIVENESS, "", *models)

    async def health_now(*_) -> None:
        """gRPC health of every name as the front says it now (a change told: ignored)."""
        await set_health(health_servicer, front, health_names)

    http = None
    try:
        grpc_port = _grpc_port(server, config.listen, credentials)
        await health_now()
        await server.start()
        if config.http_listen:
            from service.front.http.app import HttpServer, build_app  # Starlette and uvicorn

            app = build_app(front, servicers, tokens, refused, Path(config.http_files))
            http = HttpServer(app, config, reuse_port=config.fronts > 1)
            await http.start()
    except Unavailable:  # a port that cannot be bound: nothing started is left behind
        await server.stop(0)
        if role is None:
            metrics_server.shutdown()
            remove_sockets(sockets)
            _remove(made)
        raise
    host = config.listen.rpartition(":")[0]
    if role is None:
        ports = {"grpc_port": grpc_port, "metrics_port": metrics_server.server_port}
        if http is not None:
            ports["http_port"] = http.port
        _write_ready(config, {**ports, "serving": False})
    code = None  # the exit code of a start that ends before serving
    try:
        if await _started(pool, stop):
            if role is None and config.ray:  # Ray took the signals: the drain's again
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(signum, stop.set)
            if others is not None:
                http_host = config.http_listen.rpartition(":")[0]
                http_listen = f"{http_host}:{http.port}" if http else ""
                await others.start(f"{host}:{grpc_port}", http_listen)
        else:
            log.info("stopped while the workers started: nothing served")
            code = 0
    except RuntimeError as error:
        log.error("%s failed to start: %s", "front" if others else "workers", error)
        code = 1
    if code is not None:
        await server.stop(0)
        if http is not None:
            await http.stop()
        await pool.stop()
        if role is None:
            metrics_server.shutdown()
            remove_sockets(sockets)
            _remove(made)
        return code
    front.device = device
    if role is None:
        for model in served:
            front.describe(model, variants[model.worker_key])
    front.serving = True
    await health_now()
    pool.on_serving = health_now  # NOT_SERVING while no worker is ready (a drain's stays)
    if role is None:
        fronts = {"fronts": others.pids()} if others else {}
        _write_ready(config, {**ports, "serving": True, "workers": pool.pids(), **fronts})
        names = ", ".join(f"{m.key} ({m.kind}, {variants[m.worker_key]})" for m in served)
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
        versions = VersionWatcher(front, config, health_now)
        watcher = asyncio.get_running_loop().create_task(versions.run())
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    if others is not None:
        others.drain()  # every front drains at once
    await health_servicer.enter_graceful_shutdown()  # NOT_SERVING first, then refuse calls
    await front.drain()
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
        _remove(made)
    return 0


async def _started(pool: WorkerPool, stop: asyncio.Event) -> bool:
    """Starts the pool's workers -> False where `stop` comes first (SIGTERM or Ctrl-C while
    they load: on a Ray cluster, as long as its replicas are not placed): the start is then
    cancelled, and lets go of what it started. A failed start raises its RuntimeError."""
    starting = asyncio.ensure_future(pool.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return False
    starting.result()
    return True


async def set_health(servicer: health.aio.HealthServicer, front: Front, names) -> None:
    """gRPC health of each name in `names` as `front.health` says it (the HTTP health routes
    read it too), read again for each name: a later change told meanwhile is never undone."""
    answer = health_pb2.HealthCheckResponse
    for name in names:
        await servicer.set(name, answer.SERVING if front.health(name) else answer.NOT_SERVING)


def _grpc_port(server: grpc.aio.Server, listen: str, credentials) -> int:
    """Binds the gRPC server to `listen` -> the port (Unavailable where it cannot)."""
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError:  # grpcio raises (older ones returned 0); its own log line says why
        port = 0
    if port == 0:
        raise cannot_listen("listen", listen, "in use, or not an address here")
    return port


def _remove(folder: Path | None) -> None:
    """The temporary folder of translated files this server made, with what is in it."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


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
