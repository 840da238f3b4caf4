"""The traffic of the side-by-side run: one sentence a call to either server, in closed loops
of N clients for a time (bounded in calls too), or every text of a list once; the calls of
each API as the other's clients send them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import numpy as np

CALL_SECONDS = 600.0  # one call at most (a 60,000-character document at one sentence a time)
MAX_CALLS = 20_000  # one level at most, whatever its time
Send = Callable[[str], Awaitable[str]]


class Failed(Exception):
    """A call answered without a translation."""


def libretranslate_sender(http, url: str, text_format: str = "text") -> Send:
    """POST /translate as LibreTranslate's clients send it (either server)."""

    async def send(text: str) -> str:
        body = {"q": text, "source": "es", "target": "en", "format": text_format}
        response = await http.post(f"{url}/translate", json=body, timeout=CALL_SECONDS)
        if response.status_code != 200:
            raise Failed(f"{response.status_code} {response.text[:200]}")
        return response.json()["translatedText"]

    return send


def contract_sender(http, url: str, beam_size: int = 4, html: bool = False) -> Send:
    """POST /v1/translate, the contract as JSON, with `options.beamSize`."""

    async def send(text: str) -> str:
        body: dict = {"texts": [text], "options": {"beamSize": beam_size}}
        if html:
            body["textFormat"] = "TEXT_FORMAT_HTML"
        response = await http.post(f"{url}/v1/translate", json=body, timeout=CALL_SECONDS)
        if response.status_code != 200:
            raise Failed(f"{response.status_code} {response.text[:200]}")
        return response.json()["translations"][0]["hypotheses"][0]["text"]

    return send


def grpc_sender(stub, beam_size: int = 4, html: bool = False) -> Send:
    """TranslationService.Translate with `options.beam_size`."""
    from service.wire.v1 import decoding_pb2, translation_pb2

    options = decoding_pb2.DecodingOptions(beam_size=beam_size)
    text_format = translation_pb2.TEXT_FORMAT_HTML if html else translation_pb2.TEXT_FORMAT_PLAIN

    async def send(text: str) -> str:
        request = translation_pb2.TranslateRequest(
            texts=[text], options=options, text_format=text_format
        )
        response = await stub.Translate(request, timeout=CALL_SECONDS)
        return response.translations[0].hypotheses[0].text

    return send


def http_client(clients: int):
    """An httpx client with a connection for every client; no proxy from the environment."""
    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    return httpx.AsyncClient(limits=limits, trust_env=False, timeout=CALL_SECONDS)


def summary(latencies: list[float], failed: int, seconds: float, clients: int) -> dict:
    ok = len(latencies)
    ms = np.array(latencies) * 1000 if latencies else np.array([np.nan])
    return {
        "clients": clients,
        "seconds": round(seconds, 2),
        "sentences": ok,
        "failed": failed,
        "sentences_per_s": round(ok / seconds, 2) if seconds > 0 else 0.0,
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
    }


async def closed_loop(send: Send, texts: list[str], clients: int, seconds: float) -> dict:
    """`clients` loops, each sending the next text of `texts` (round robin from its own
    offset) as soon as its last call is answered, for `seconds` (and MAX_CALLS at most):
    sentences a second, p50 and p99 latency. A failed call is counted, not timed."""
    latencies: list[float] = []
    failures: list[str] = []
    calls = 0
    end = time.monotonic() + seconds

    async def loop(index: int) -> None:
        nonlocal calls
        turn = index * max(1, len(texts) // clients)
        while time.monotonic() < end and calls < MAX_CALLS:
            calls += 1
            text = texts[turn % len(texts)]
            turn += 1
            start = time.monotonic()
            try:
                await send(text)
                latencies.append(time.monotonic() - start)
            except Exception as error:
                failures.append(f"{type(error).__name__}: {error}"[:200])

    started = time.monotonic()
    await asyncio.gather(*(loop(i) for i in range(clients)))
    report = summary(latencies, len(failures), time.monotonic() - started, clients)
    if failures:
        report["first_failure"] = failures[0]
    return report


async def every_text(send: Send, texts: list[str], clients: int) -> tuple[list[str], dict]:
    """Every text once, `clients` at a time: the outputs in order ("" for a failed call),
    and the pass's figures."""
    outputs = [""] * len(texts)
    latencies: list[float] = []
    failures: list[str] = []
    queue = iter(range(len(texts)))

    async def loop() -> None:
        for i in queue:
            start = time.monotonic()
            try:
                outputs[i] = await send(texts[i])
                latencies.append(time.monotonic() - start)
            except Exception as error:
                failures.append(f"{type(error).__name__}: {error}"[:200])

    started = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(clients)))
    report = summary(latencies, len(failures), time.monotonic() - started, clients)
    if failures:
        report["first_failure"] = failures[0]
    return outputs, report


async def one_call(send: Send, text: str) -> tuple[str, float]:
    """One call: its output and seconds."""
    start = time.monotonic()
    output = await send(text)
    return output, time.monotonic() - start
