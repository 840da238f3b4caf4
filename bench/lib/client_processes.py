"""Closed loops of unary Translate calls in client processes of their own (the GPU benchmark's
service level): each process one asyncio loop over CHANNELS connections, its answers' latency,
end and output tokens, its errors and its CPU seconds. grpc is imported in the client
processes only."""

from __future__ import annotations

import asyncio
import itertools
import os
import time

CALL_TIMEOUT = 120.0  # seconds, one gRPC call
CHANNELS = 8  # connections per client process


def client_ping() -> int:
    """Imports what a client process needs (before the levels time it); its process id."""
    import grpc  # noqa: F401

    from service.wire.v1 import translation_pb2_grpc  # noqa: F401

    return os.getpid()


def client_run(
    address: str,
    texts: list[str],
    max_length: int,
    clients: int,
    seconds: float,
    start_at: float,
    offset: int = 0,
    count: int = 0,
) -> dict:
    """A closed loop of `clients` Translate callers in one asyncio loop (over CHANNELS
    connections: the kernel spreads connections over a server's fronts), from
    wall-clock time `start_at` for `seconds` (and at most `count` calls when given). Runs in a
    client process."""
    return asyncio.run(
        _closed_loop(address, texts, max_length, clients, seconds, start_at, offset, count)
    )


async def _closed_loop(address, texts, max_length, clients, seconds, start_at, offset, count):
    import grpc

    from service.wire.v1 import decoding_pb2, translation_pb2, translation_pb2_grpc

    options = decoding_pb2.DecodingOptions(max_length=max_length)
    whole = translation_pb2.SENTENCE_SPLITTING_NONE  # a test line is one input
    requests = [
        translation_pb2.TranslateRequest(texts=[t], options=options, sentence_splitting=whole)
        for t in texts
    ]
    local = [("grpc.use_local_subchannel_pool", 1)]  # a connection per channel
    channels = [grpc.aio.insecure_channel(address, options=local) for _ in range(CHANNELS)]
    for channel in channels:
        await asyncio.wait_for(channel.channel_ready(), 30)
    stubs = [translation_pb2_grpc.TranslationServiceStub(channel) for channel in channels]
    calls = itertools.count(offset)
    answers: list[tuple[float, float, int, int]] = []  # (latency, end, index, output tokens)
    errors: dict[str, int] = {}
    await asyncio.sleep(max(0.0, start_at - time.time()))
    deadline = start_at + seconds
    cpu = time.process_time()

    async def client(stub) -> None:
        while time.time() < deadline:
            call = next(calls)
            if count and call - offset >= count:
                return
            index = call % len(requests)
            begin = time.perf_counter()
            try:
                response = await stub.Translate(requests[index], timeout=CALL_TIMEOUT)
            except grpc.aio.AioRpcError as error:
                errors[error.code().name] = errors.get(error.code().name, 0) + 1
                await asyncio.sleep(0.01)
                continue
            latency = time.perf_counter() - begin
            tokens = response.translations[0].token_counts.output_tokens
            answers.append((latency, time.time(), index, tokens))

    await asyncio.gather(*(client(stubs[i % CHANNELS]) for i in range(clients)))
    cpu = time.process_time() - cpu
    for channel in channels:
        await channel.close()
    return {"answers": answers, "errors": errors, "cpu_s": cpu, "pid": os.getpid()}
