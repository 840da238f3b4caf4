"""The load benchmark's traffic: a started server and the client's channel to it, one model's
side of the run (its requests, their reference answers, their gRPC messages and methods), and
one loop of a level over them."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from bench.lib.server import Server
from bench.lib.workload import InProcess, InProcessCaptioner, Local, Picture, Request
from service.wire.v1 import (
    caption_pb2,
    caption_pb2_grpc,
    decoding_pb2,
    translation_pb2,
    translation_pb2_grpc,
)


@dataclass
class Running:
    """A started server and the client's channel to it, with a stub per model."""

    name: str
    flags: list[str]
    server: Server
    channel: grpc.aio.Channel | None = None
    stubs: dict = field(default_factory=dict)


@dataclass
class Traffic:
    """One model's side of the run: its requests, their in-process answers (the reference),
    and their gRPC messages and methods."""

    model: str  # translator, captioner
    label: str  # the model's name: its label in the server's metrics
    pool: list  # Request or Picture, each with its max_length
    local: Local
    references: list[dict]
    stream: list  # a streaming request per pool entry
    unary: list  # the same as a unary request
    stub: type
    methods: tuple[str, str]  # (streaming, unary)

    def method(self, running: Running, unary: bool = False):
        return getattr(running.stubs[self.model], self.methods[unary])


# a test line is one input, as the in-process reference decodes it (some lines hold two
# sentences, which the server would otherwise decode apart)
WHOLE = translation_pb2.SENTENCE_SPLITTING_NONE


def stream_requests(pool: list[Request]) -> list[translation_pb2.TranslateStreamRequest]:
    return [
        translation_pb2.TranslateStreamRequest(
            text=r.text,
            options=decoding_pb2.DecodingOptions(max_length=r.max_length),
            sentence_splitting=WHOLE,
        )
        for r in pool
    ]


def translation_traffic(version, pool: list[Request], local: InProcess, references) -> Traffic:
    stream = stream_requests(pool)
    unary = [
        translation_pb2.TranslateRequest(
            texts=[m.text], options=m.options, sentence_splitting=WHOLE
        )
        for m in stream
    ]
    stub, methods = translation_pb2_grpc.TranslationServiceStub, ("TranslateStream", "Translate")
    return Traffic(
        "translator", version.name, pool, local, references, stream, unary, stub, methods
    )


def caption_traffic(version, pool: list[Picture], local: InProcessCaptioner, references) -> Traffic:
    options = [decoding_pb2.DecodingOptions(max_length=p.max_length) for p in pool]
    stream = [
        caption_pb2.CaptionStreamRequest(image=p.png, options=o)
        for p, o in zip(pool, options, strict=True)
    ]
    unary = [
        caption_pb2.CaptionRequest(images=[p.png], options=o)
        for p, o in zip(pool, options, strict=True)
    ]
    stub, methods = caption_pb2_grpc.CaptionServiceStub, ("CaptionStream", "Caption")
    return Traffic("captioner", version.name, pool, local, references, stream, unary, stub, methods)


@dataclass(frozen=True)
class Flow:
    """One loop of a level: `value` clients (closed) or requests a second (open) over the
    first `count` requests of a traffic."""

    traffic: Traffic
    load: str  # closed, open
    value: float
    count: int
    seed: int = 0  # added to the open loop's arrival seed

    def __str__(self) -> str:
        if self.load == "closed":
            return f"{self.traffic.model}: closed, {self.value:g} clients, {self.count} requests"
        return f"{self.traffic.model}: open, {self.value:.1f}/s, {self.count} requests"
