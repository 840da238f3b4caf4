"""The front process: gRPC (grpc.aio), health, reflection, metrics, draining.

It reads the model repository, checks every request at the edge (fields, text, token limits),
tokenizes, hands decode jobs to the worker processes and turns their results into responses.
Health reports NOT_SERVING until every worker has passed its golden-set check, and again once
a drain starts (SIGTERM): from then on new calls get UNAVAILABLE and calls in flight have
`drain_seconds` to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from attnserve.v1 import decoding_pb2, translation_pb2, translation_pb2_grpc
from service import requests
from service.batching import source_batch
from service.config import ServerConfig
from service.decoding import Hypothesis
from service.errors import (
    InvalidArgument,
    ModelRepositoryError,
    NotFound,
    ServiceError,
    Unavailable,
)
from service.metrics import Metrics
from service.pool import Call, WorkerPool, worker_settings
from service.repository import MANIFEST, ModelVersion, verify
from service.scheduler import Job, Timings, rows_needed
from service.status import status_code
from service.tokenizer import EOS_ID, Tokenizer

log = logging.getLogger("attnserve")
TRANSLATION_SERVICE = translation_pb2.DESCRIPTOR.services_by_name["TranslationService"].full_name
TEXT_MODEL_KINDS = ("transformer",)  # models whose encoder reads token ids
# Requests are small (64 texts of 4,096 characters at most); responses with alignments can
# pass gRPC's default 4 MB (a 512 x 512 alignment is 1 MB), so they may reach 64 MB.
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 4 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


@dataclass
class ServedModel:
    """A model version as the front serves it: tokenizer and limits."""

    version: ModelVersion
    tokenizer: Tokenizer
    max_input_tokens: int
    max_output_length: int

    @property
    def key(self) -> str:
        return f"{self.version.name}/{self.version.version}"


def _version_order(version: str):
    return (0, int(version), "") if version.isdigit() else (1, 0, version)


def load_repository(config: ServerConfig) -> dict[str, dict[str, ServedModel]]:
    """{model name: {version: ServedModel}} of every verified version under the repository."""
    root = Path(config.repository)
    manifests = sorted(root.glob(f"*/*/{MANIFEST}"))
    if not manifests:
        raise ModelRepositoryError(
            f"no model repository at {root} (expected <model>/<version>/{MANIFEST}); build one "
            f"with: attnserve export translator --out {root}"
        )
    models: dict[str, dict[str, ServedModel]] = {}
    for manifest in manifests:
        version = verify(manifest.parent)
        if version.manifest["model"].get("kind") not in TEXT_MODEL_KINDS:
            continue
        limit = version.config["max_length"]
        input_limit = min(config.max_input_tokens or limit - 1, limit - 1)  # `</s>` is added
        output_limit = min(config.max_output_length or limit, limit)
        served = ServedModel(version, Tokenizer(version.tokenizer_file), input_limit, output_limit)
        models.setdefault(version.name, {})[version.version] = served
    return models


class Front:
    """State shared by the services: models, workers, metrics, drain flag."""

    def __init__(self, config: ServerConfig, models, pool: WorkerPool, metrics: Metrics):
        self.config, self.models, self.pool, self.metrics = config, models, pool, metrics
        self.serving = False
        self.draining = False
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.default_model = sorted(models)[0]

    def resolve(self, name: str, version: str) -> ServedModel:
        versions = self.models.get(name or self.default_model)
        if versions is None:
            raise NotFound(f"model: no model named {name!r} (served: {sorted(self.models)})")
        if not version:
            return versions[max(versions, key=_version_order)]
        if version not in versions:
            raise NotFound(
                f"version: model {name or self.default_model!r} has no version {version!r} "
                f"(served: {sorted(versions, key=_version_order)})"
            )
        return versions[version]

    def check_available(self) -> None:
        if self.draining:
            raise Unavailable("the server is draining (shutting down); retry on another replica")
        if not self.serving:
            raise Unavailable("the server is warming up; retry shortly")

    def job(
        self, model: ServedModel, texts, options, fields, request, context, stream=False
    ) -> tuple[Job, list]:
        """The decode job of checked texts; raises InvalidArgument beyond the limits."""
        token_ids = model.tokenizer.encode_batch(list(texts))
        problems = [
            f"{field}: {len(ids)} tokens, at most {model.max_input_tokens}"
            for field, ids in zip(fields, token_ids, strict=True)
            if len(ids) > model.max_input_tokens
        ]
        rows = rows_needed(len(token_ids), options)
        if rows > self.config.max_batch_rows:
            problems.append(
                f"options: {len(token_ids)} texts x {rows // len(token_ids)} hypotheses need "
                f"{rows} batch rows, at most {self.config.max_batch_rows}"
            )
        if problems:
            raise InvalidArgument("; ".join(problems))
        src_ids, src_mask = source_batch(token_ids, model.max_input_tokens + 1)
        remaining = context.time_remaining()
        job = Job(
            id=self.pool.next_id(),
            encoder_inputs={"src_ids": src_ids, "src_mask": src_mask},
            options=options,
            stream=stream,
            deadline=None if remaining is None else time.monotonic() + remaining,
            keep_alignment=request.options.return_alignment,
            keep_log_probs=request.options.return_log_probs,
        )
        return job, token_ids

    def observe(self, model: str, received: float, timings: Timings) -> None:
        if timings.first_token_at:
            self.metrics.time_to_first_token.labels(model).observe(
                timings.first_token_at - received
            )
        itl = self.metrics.inter_token_latency.labels(model)
        for gap in timings.gaps:
            itl.observe(gap)


def _text_fields(request) -> list[str]:
    return [f"texts[{i}]" for i in range(len(request.texts))] + [
        f"utf8_texts[{i}]" for i in range(len(request.utf8_texts))
    ]


def hypothesis_message(
    model: ServedModel, h: Hypothesis, source_ids: list[int], options_message
) -> decoding_pb2.Hypothesis:
    tokenizer = model.tokenizer
    message = decoding_pb2.Hypothesis(
        text=tokenizer.decode(h.tokens),
        score=h.score,
        log_prob=h.log_prob,
        tokens=tokenizer.pieces(h.tokens),
        finished=h.finished,
    )
    if options_message.return_log_probs:
        message.token_log_probs.extend(h.token_log_probs)
    if options_message.return_alignment and h.alignment is not None:
        source = [*source_ids, EOS_ID]
        target = h.tokens + ([EOS_ID] if h.finished else [])
        weights = h.alignment[: len(target), : len(source)]
        message.alignment.source_tokens.extend(tokenizer.pieces(source))
        message.alignment.target_tokens.extend(tokenizer.pieces(target))
        message.alignment.weights.extend(weights.astype(float).ravel().tolist())
    return message


def translate_response(
    model: ServedModel, token_ids, results, options_message
) -> translation_pb2.TranslateResponse:
    response = translation_pb2.TranslateResponse(
        model=model.version.name, version=model.version.version
    )
    for source_ids, hypotheses in zip(token_ids, results, strict=True):
        translation = response.translations.add()
        for h in hypotheses:
            translation.hypotheses.append(hypothesis_message(model, h, source_ids, options_message))
        translation.token_counts.input_tokens = len(source_ids) + 1
        translation.token_counts.output_tokens = sum(len(h.tokens) for h in hypotheses)
        response.token_counts.input_tokens += translation.token_counts.input_tokens
        response.token_counts.output_tokens += translation.token_counts.output_tokens
    return response


class TranslationServicer(translation_pb2_grpc.TranslationServiceServicer):
    def __init__(self, front: Front):
        self.front = front

    def _label(self, name: str) -> str:
        """Metric label of a requested model: its name when served, else "unknown" (a label
        per unknown name would let clients grow the metrics without bound)."""
        name = name or self.front.default_model
        return name if name in self.front.models else "unknown"

    async def _events(self, call: Call):
        """The call's events until its result; cancels the job if the client goes away.
        Partial events already waiting are merged into one ("partials", [events]): when the
        client or the front falls behind, it gets the newest hypothesis, not a backlog."""
        held = None
        try:
            while True:
                event, held = held or await call.events.get(), None
                if event[0] == "error":
                    raise event[1]
                if event[0] == "partial":
                    partials = [event]
                    while not call.events.empty():
                        following = call.events.get_nowait()
                        if following[0] != "partial":
                            held = following
                            break
                        partials.append(following)
                    yield ("partials", partials)
                    continue
                yield event
                if event[0] == "result":
                    return
        except asyncio.CancelledError:
            self.front.pool.cancel(call)
            raise

    @contextlib.asynccontextmanager
    async def _accounted(self, method: str, request, context):
        """Counts the call in flight and its duration by status code; turns a ServiceError
        into its gRPC status. Yields the served model the request names."""
        front, label = self.front, self._label(request.model)
        received, code = time.monotonic(), grpc.StatusCode.OK
        front.in_flight += 1
        front.idle.clear()
        front.metrics.requests_in_flight.labels(label).inc()
        try:
            front.check_available()
            yield front.resolve(request.model, request.version), label, received
        except ServiceError as error:
            code = status_code(error)
            await context.abort(code, str(error))
        except asyncio.CancelledError:
            code = _cancel_code(context)
            raise
        finally:
            front.metrics.requests_in_flight.labels(label).dec()
            front.in_flight -= 1
            if front.in_flight == 0:
                front.idle.set()
            front.metrics.request_duration.labels(label, method, code.name).observe(
                time.monotonic() - received
            )

    async def Translate(self, request, context):
        front = self.front
        async with self._accounted("Translate", request, context) as (model, label, received):
            texts, options = requests.translate_request(
                request, model.max_output_length, front.config.default_max_length
            )
            fields = _text_fields(request)
            job, token_ids = front.job(model, texts, options, fields, request, context)
            call = await front.pool.submit(model.key, job, context.time_remaining())
            async for event in self._events(call):
                if event[0] == "result":
                    front.observe(label, received, event[3])
                    return translate_response(model, token_ids, event[2], request.options)

    async def TranslateStream(self, request, context):
        front = self.front
        async with self._accounted("TranslateStream", request, context) as (model, label, t0):
            text, options = requests.translate_stream_request(
                request, model.max_output_length, front.config.default_max_length
            )
            job, token_ids = front.job(
                model, [text], options, ["text"], request, context, stream=True
            )
            call = await front.pool.submit(model.key, job, context.time_remaining())
            tokenizer, tokens, pieces = model.tokenizer, [], []
            async for event in self._events(call):
                if event[0] == "partials":  # each: (tokens kept from the last, new ones, steps)
                    for _, _, kept, new, _ in event[1]:
                        tokens = tokens[:kept] + new
                        pieces = pieces[:kept] + tokenizer.pieces(new)
                    partial = translation_pb2.PartialHypothesis(
                        text=tokenizer.decode(tokens), tokens=pieces, steps=event[1][-1][4]
                    )
                    yield translation_pb2.TranslateStreamResponse(partial=partial)
                elif event[0] == "result":
                    front.observe(label, t0, event[3])
                    result = translate_response(model, token_ids, event[2], request.options)
                    yield translation_pb2.TranslateStreamResponse(result=result)


def _cancel_code(context) -> grpc.StatusCode:
    """Why a call's handler was cancelled: its deadline passed, or the client went away."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return grpc.StatusCode.CANCELLED


def _port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def serve(config: ServerConfig, stop: asyncio.Event | None = None) -> int:
    """Runs the server until SIGTERM/SIGINT (or `stop`), then drains. Returns an exit code."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    models = load_repository(config)
    metrics = Metrics()
    host, port = _port(config.metrics_listen)
    metrics_server, metrics_thread = start_http_server(port, host, registry=metrics.registry)
    keys = tuple((m.key, m.version) for v in models.values() for m in v.values())
    pool = WorkerPool(worker_settings(config, keys), metrics, config.max_queued_requests)
    pool.models = {m.key: m.version.name for v in models.values() for m in v.values()}
    front = Front(config, models, pool, metrics)

    server = grpc.aio.server(options=GRPC_OPTIONS)
    translation_pb2_grpc.add_TranslationServiceServicer_to_server(
        TranslationServicer(front), server
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = (TRANSLATION_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(services, server)
    grpc_port = server.add_insecure_port(config.listen)
    if grpc_port == 0:
        raise Unavailable(f"cannot listen on {config.listen}")
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", TRANSLATION_SERVICE):
        await health_servicer.set(name, not_serving)
    await server.start()
    ports = {"grpc_port": grpc_port, "metrics_port": metrics_server.server_port}
    _write_ready(config, {**ports, "serving": False})
    try:
        await pool.start()
    except RuntimeError as error:
        log.error("workers failed to start: %s", error)
        await server.stop(0)
        metrics_server.shutdown()
        return 1
    for served in (m for v in models.values() for m in v.values()):
        provider = pool.workers[0].info["models"][served.key]["provider"]
        metrics.model.labels(served.version.name, served.version.version).info(
            {"precision": config.variant, "execution_provider": provider}
        )
    front.serving = True
    for name in ("", TRANSLATION_SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    _write_ready(config, {**ports, "serving": True, "workers": pool.pids()})
    names = ", ".join(f"{m.key} ({config.variant})" for v in models.values() for m in v.values())
    device, host = pool.workers[0].settings.device, config.listen.rpartition(":")[0]
    log.info(
        "serving %s on %s:%d with %d %s workers; metrics on port %d",
        names, host, grpc_port, len(pool.workers), device, ports["metrics_port"],
    )  # fmt: skip

    await stop.wait()
    log.info("draining: %d calls in flight, %.0f s to finish", front.in_flight,
                config.drain_seconds)  # fmt: skip
    front.draining = True
    await health_servicer.enter_graceful_shutdown()
    try:
        await asyncio.wait_for(front.idle.wait(), config.drain_seconds)
    except TimeoutError:
        log.warning("drain: %d calls still in flight after the grace period", front.in_flight)
    await server.stop(1.0)
    await pool.stop()
    metrics_server.shutdown()
    metrics_thread.join(1)
    return 0


def _write_ready(config: ServerConfig, state: dict) -> None:
    if config.ready_file is None:
        return
    path = Path(config.ready_file)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(state) + "\n")
    temporary.replace(path)
