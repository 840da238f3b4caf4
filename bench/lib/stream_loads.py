"""Streaming (and unary) gRPC calls as the client sees them, every partial event timed; closed
loops of clients and open loops of Poisson arrivals over a list of messages."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc
import numpy as np

from service.wire.v1 import caption_pb2, translation_pb2


@dataclass
class Sample:
    """One call as the client saw it (perf_counter seconds)."""

    index: int
    start: float
    end: float = 0.0
    partials: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # decoding steps of each partial event
    code: str = "OK"
    result: translation_pb2.TranslateResponse | caption_pb2.CaptionResponse | None = None


async def call(method, index: int, message, timeout: float) -> Sample:
    """One streaming call (`method`: a stub's TranslateStream or CaptionStream); a failed call
    is recorded, not raised."""
    sample = Sample(index, time.perf_counter())
    partials = sample.partials
    stream = method(message, timeout=timeout)
    try:
        async for event in stream:
            if event.HasField("partial"):
                partials.append(time.perf_counter())
                sample.steps.append(event.partial.steps)
            else:
                sample.end, sample.result = time.perf_counter(), event.result
    except grpc.aio.AioRpcError as error:
        sample.code = error.code().name
    finally:
        stream.cancel()  # a no-op once the call has ended; else (this task cancelled) ends it
    if not sample.end:
        sample.end = time.perf_counter()
        if sample.code == "OK":
            sample.code = "NO_RESULT"
    return sample


async def unary_call(method, index: int, request, timeout: float) -> Sample:
    """One unary call (`method`: a stub's Translate or Caption)."""
    sample = Sample(index, time.perf_counter())
    try:
        sample.result = await method(request, timeout=timeout)
    except grpc.aio.AioRpcError as error:
        sample.code = error.code().name
    sample.end = time.perf_counter()
    return sample


async def closed_loop(method, messages, clients: int, seconds: float, timeout: float) -> dict:
    """`clients` clients share the requests in order, each sending its next request when its
    previous one is answered; no request is sent after `seconds`."""
    samples, indices = [], iter(range(len(messages)))
    start = time.perf_counter()
    deadline = start + seconds

    async def client():
        for index in indices:  # shared: each client takes the next request
            if time.perf_counter() > deadline:
                return
            samples.append(await call(method, index, messages[index], timeout))

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"samples": samples, "start": start}


async def open_loop(
    method, messages, rate: float, seed: int, seconds: float, drain: float, timeout
):
    """Poisson arrivals at `rate` per second (seeded), none after `seconds`; calls still in
    flight `drain` seconds after the last arrival are cancelled."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, len(messages)))
    tasks, lateness = [], []
    start = time.perf_counter()
    for index, at in enumerate(arrivals):
        if at > seconds:
            break
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lateness.append(time.perf_counter() - start - at)
        tasks.append(asyncio.create_task(call(method, index, messages[index], timeout)))
    pending = (await asyncio.wait(tasks, timeout=drain))[1] if tasks else set()
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    samples = [
        r if isinstance(r, Sample) else Sample(i, start, start, code="NOT_FINISHED")
        for i, r in enumerate(results)
    ]
    lateness = lateness or [0.0]
    late = {"mean_ms": 1000 * float(np.mean(lateness)), "max_ms": 1000 * float(max(lateness))}
    return {"samples": samples, "start": start, "arrival_lateness": late}
