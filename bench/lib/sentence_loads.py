"""A few fixed Spanish sentences, and closed loops of unary Translate calls over them, one
sentence a call (bench.overload, bench.scaling; bench.soak sends them too)."""

from __future__ import annotations

import asyncio
import time

import grpc

from service.wire.v1 import translation_pb2

SENTENCES = [
    "Yo soy de Canadá.",
    "¿Dónde está la estación de tren?",
    "El perro come pan en la casa.",
    "Mañana iremos al mercado con mis hermanos.",
    "La contraseña es incorrecta.",
    "No tengas miedo, porque yo estoy contigo.",
]
DEADLINE = 30.0  # seconds, one call


async def translate(stub, index: int) -> tuple[str, float]:
    """One call of the `index`-th sentence (round robin): its code and seconds."""
    request = translation_pb2.TranslateRequest(texts=[SENTENCES[index % len(SENTENCES)]])
    start = time.monotonic()
    try:
        await stub.Translate(request, timeout=DEADLINE)
        code = "OK"
    except grpc.aio.AioRpcError as error:
        code = error.code().name
    return code, time.monotonic() - start


async def closed_loop(stub, clients: int, seconds: float) -> tuple[list[tuple[str, float]], float]:
    """`clients` closed loops of calls for `seconds`: every call's (code, seconds), and the
    time they took. `stub` may be a list: client i calls through stub i modulo its length
    (one connection each)."""
    outcomes = []
    end = time.monotonic() + seconds
    stubs = stub if isinstance(stub, list) else [stub]

    async def loop(index: int) -> None:
        turn = index
        while time.monotonic() < end:
            outcomes.append(await translate(stubs[index % len(stubs)], turn))
            turn += clients

    started = time.monotonic()
    await asyncio.gather(*(loop(i) for i in range(clients)))
    return outcomes, time.monotonic() - started
