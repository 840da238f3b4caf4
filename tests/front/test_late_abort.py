"""A call whose deadline passes while its handler waits for the event loop (under overload)
and then fails (RESOURCE_EXHAUSTED, a bad field) has been ended by gRPC already: the abort
fails in gRPC's core (ExecuteBatchError, which the server logs with a traceback per call).
The handler ends as a cancelled one instead, counted DEADLINE_EXCEEDED as its client saw it."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from stand_in import servicer

from service.front.config import ServerConfig
from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.front.servicer import DEADLINE_SLACK_S, Method, add_servicer, cancel_code
from service.runtime.errors import ResourceExhausted
from service.wire.v1 import translation_pb2, translation_pb2_grpc


def _count(metrics: Metrics, code: str) -> float:
    labels = {"model": "unknown", "method": "Translate", "code": code}
    return metrics.registry.get_sample_value("attnserve_request_duration_seconds_count", labels)


def test_a_call_failed_after_its_deadline_passed_logs_no_traceback(caplog):
    async def run():
        pool = WorkerPool([], Metrics(), 8)
        translation = servicer(pool, None, ServerConfig())

        async def late(model, request):
            time.sleep(0.3)  # the event loop held past the client's deadline
            raise ResourceExhausted("4 requests are already waiting")

        translation.methods = {"Translate": Method(late, None)}
        raised, handler = [], translation.Translate

        async def translate(request, context):  # what the handler ends with, seen by gRPC
            try:
                return await handler(request, context)
            except BaseException as error:
                raised.append(type(error).__name__)
                raise

        translation.Translate = translate
        server = grpc.aio.server()
        add_servicer(server, translation)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = translation_pb2_grpc.TranslationServiceStub(channel)
                try:
                    await stub.Translate(
                        translation_pb2.TranslateRequest(texts=["Hola."]), timeout=0.1
                    )
                except grpc.aio.AioRpcError as error:
                    code = error.code()
            await asyncio.sleep(0.3)  # the handler's end, and what gRPC logs of it
        finally:
            await server.stop(0)
        return code, raised, pool.metrics

    with caplog.at_level(logging.WARNING):
        code, raised, metrics = asyncio.run(run())
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert raised == ["CancelledError"]  # not ExecuteBatchError, which gRPC logs
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert _count(metrics, "DEADLINE_EXCEEDED") == 1
    assert _count(metrics, "RESOURCE_EXHAUSTED") is None


def test_a_status_message_is_cut_to_what_a_client_reads():
    """A message echoing a request's field whole (a model name of 20,000 characters) passed
    the 8 KiB of trailers a client reads, which it then reports as RESOURCE_EXHAUSTED."""
    from urllib.parse import quote

    from service.front.servicer import MOST_DETAILS, shortened

    assert shortened("model: no model named 'x'") == "model: no model named 'x'"
    for name in ("x" * 20_000, "ñ" * 20_000, "%" * 20_000, "😀" * 20_000):
        said = shortened(f"model: no model named {name!r}")
        assert said.startswith("model: no model named '" + name[:10])
        assert said.endswith(f"... ({len(name) + 24} characters)")
        assert len(quote(said, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")) <= MOST_DETAILS


def test_a_cancellation_at_the_deadline_is_counted_as_the_deadline():
    """A client's deadline passes first on its side: its cancellation reaches the server up
    to the call's transit time before the server's own deadline. Within DEADLINE_SLACK_S of
    it, it is the deadline's; earlier, or with no deadline, the client's cancel."""

    class Context:
        def __init__(self, remaining):
            self.remaining = remaining

        def time_remaining(self):
            return self.remaining

    assert cancel_code(Context(-0.01)) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert cancel_code(Context(DEADLINE_SLACK_S / 2)) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert cancel_code(Context(DEADLINE_SLACK_S + 1.0)) == grpc.StatusCode.CANCELLED
    assert cancel_code(Context(None)) == grpc.StatusCode.CANCELLED
