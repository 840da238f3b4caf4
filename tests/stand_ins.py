"""Stand-in gRPC services for the client and command-line tests, in process on a free port.

`StandIn` translates by upper-casing its input; `CaptionStandIn` describes each image by its
bytes, or by its size when it is a PNG. Both refuse the input "fail" the way the server
refuses a bad field, so tests see what the client sends and how the command line prints what
comes back.
"""

from __future__ import annotations

import struct
from concurrent import futures

import grpc
import numpy as np

from service.wire.v1 import (
    caption_pb2,
    caption_pb2_grpc,
    decoding_pb2,
    translation_pb2,
    translation_pb2_grpc,
)


def started(register) -> tuple[grpc.Server, str]:
    """(server, address): a gRPC server on a free port of 127.0.0.1 with the servicers
    `register(server)` adds. The caller stops it."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def translation_started(servicer) -> tuple[grpc.Server, str]:
    """`started` with `servicer` as the translation service alone."""
    return started(
        lambda s: translation_pb2_grpc.add_TranslationServiceServicer_to_server(servicer, s)
    )


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _hypotheses(text: str, options: decoding_pb2.DecodingOptions) -> list:
    count = options.num_hypotheses if options.HasField("num_hypotheses") else 1
    source = ["▁" + word for word in text.split()] + ["</s>"]
    hypotheses = []
    for rank in range(count):
        output = text.upper() + "!" * rank
        target = ["▁" + word for word in output.split()] + ["</s>"]
        hypothesis = decoding_pb2.Hypothesis(
            text=output, score=-1.0 - rank, log_prob=-2.0 - rank, tokens=target, finished=True
        )
        if options.return_log_probs:
            hypothesis.token_log_probs.extend([-0.5] * len(target))
        if options.return_alignment:
            weights = np.full((len(target), len(source)), 1 / len(source), dtype=np.float32)
            hypothesis.alignment.source_tokens.extend(source)
            hypothesis.alignment.target_tokens.extend(target)
            hypothesis.alignment.weights.extend(weights.ravel().tolist())
        hypotheses.append(hypothesis)
    return hypotheses


class StandIn(translation_pb2_grpc.TranslationServiceServicer):
    """Translates by upper-casing; refuses the text "fail" the way the server refuses a field."""

    def __init__(self) -> None:
        self.requests: list = []

    def _response(self, request, texts: list[str], context) -> translation_pb2.TranslateResponse:
        for i, text in enumerate(texts):
            if text == "fail":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"texts[{i}]: refused")
        response = translation_pb2.TranslateResponse(
            model=request.model or "translator", version=request.version or "1"
        )
        for text in texts:
            translation = response.translations.add()
            translation.hypotheses.extend(_hypotheses(text, request.options))
            translation.token_counts.input_tokens = len(text.split()) + 1
            translation.token_counts.output_tokens = len(text.split()) + 1
        response.token_counts.input_tokens = sum(len(t.split()) + 1 for t in texts)
        response.token_counts.output_tokens = response.token_counts.input_tokens
        return response

    def Translate(self, request, context):
        self.requests.append(request)
        texts = list(request.texts) + [raw.decode() for raw in request.utf8_texts]
        return self._response(request, texts, context)

    def TranslateStream(self, request, context):
        self.requests.append(request)
        text = request.text if request.HasField("text") else request.utf8_text.decode()
        words = text.upper().split()
        for step in range(1, len(words) + 1):
            partial = translation_pb2.PartialHypothesis(
                text=" ".join(words[:step]), tokens=words[:step], steps=step
            )
            yield translation_pb2.TranslateStreamResponse(partial=partial)
        yield translation_pb2.TranslateStreamResponse(
            result=self._response(request, [text], context)
        )


CAPTION_GRID = (3, 4)  # not square, so rows and columns cannot be swapped unseen


def _describe(data: bytes) -> str:
    """The stand-in's caption: "a W by H image" for a PNG, else the bytes upper-cased."""
    if data.startswith(PNG_SIGNATURE):
        width, height = struct.unpack(">II", data[16:24])
        return f"a {width} by {height} image"
    return data.decode().upper()


class CaptionStandIn(caption_pb2_grpc.CaptionServiceServicer):
    """Captions by `_describe`; token t of a caption attends to grid cell t (row-major) only.
    Refuses the image b"fail" the way the server refuses an undecodable image."""

    def __init__(self) -> None:
        self.requests: list = []

    def _caption(self, data: bytes, request) -> caption_pb2.Caption:
        options = request.options
        count = options.num_hypotheses if options.HasField("num_hypotheses") else 1
        width, height = struct.unpack(">II", data[16:24]) if data[:8] == PNG_SIGNATURE else (0, 0)
        caption = caption_pb2.Caption(image_width=width, image_height=height)
        cells = CAPTION_GRID[0] * CAPTION_GRID[1]
        for rank in range(count):
            text = _describe(data) + "!" * rank
            tokens = ["▁" + word for word in text.split()]
            hypothesis = caption.hypotheses.add(
                text=text, score=-1.0 - rank, log_prob=-2.0, tokens=tokens, finished=True
            )
            if options.return_log_probs:
                hypothesis.token_log_probs.extend([-0.5] * (len(tokens) + 1))
            if request.return_attention:
                maps = hypothesis.attention
                maps.grid_height, maps.grid_width = CAPTION_GRID
                maps.image_width, maps.image_height = width, height
                for step, token in enumerate([*tokens, "</s>"]):
                    maps.tokens.add(token=token, weights=np.eye(cells)[step % cells].tolist())
        caption.token_counts.input_tokens = cells
        caption.token_counts.output_tokens = len(caption.hypotheses[0].tokens) + 1
        return caption

    def _response(self, request, images: list[bytes], context) -> caption_pb2.CaptionResponse:
        for i, data in enumerate(images):
            if data == b"fail":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"images[{i}]: not an image")
        response = caption_pb2.CaptionResponse(
            model=request.model or "captioner", version=request.version or "1"
        )
        for data in images:
            caption = response.captions.add()
            caption.CopyFrom(self._caption(data, request))
            response.token_counts.input_tokens += caption.token_counts.input_tokens
            response.token_counts.output_tokens += caption.token_counts.output_tokens
        return response

    def Caption(self, request, context):
        self.requests.append(request)
        return self._response(request, list(request.images), context)

    def CaptionStream(self, request, context):
        self.requests.append(request)
        if request.image != b"fail":
            words = _describe(request.image).split()
            for step in range(1, len(words) + 1):
                partial = caption_pb2.PartialCaption(
                    text=" ".join(words[:step]), tokens=words[:step], steps=step
                )
                yield caption_pb2.CaptionStreamResponse(partial=partial)
        yield caption_pb2.CaptionStreamResponse(
            result=self._response(request, [request.image], context)
        )
