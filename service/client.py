"""A small synchronous client of `attnserve.v1.TranslationService`, of
`attnserve.v1.CaptionService` and of gRPC health.

    with connect("127.0.0.1:50051") as channel:
        response = translate(channel, ["Yo soy de Canadá."], beam_size=4, timeout=30)
        for event in translate_stream(channel, "Dios.", timeout=30):
            ...  # event.WhichOneof("event"): "partial" after every step, then "result"
        image = Path("photo.jpg").read_bytes()  # encoded bytes, decoded by the server
        captions = caption(channel, image, return_attention=True, timeout=30)
        maps = attention_maps(captions.captions[0].hypotheses[0].attention)  # (tokens, h, w)
        for event in caption_stream(channel, image, timeout=30):
            ...  # as translate_stream: partials, then one result
        health(channel)  # "SERVING"

Decoding options left as None stay unset in the request, so the server's defaults apply.
Failures are raised as `grpc.RpcError`: `error.code()` is the status, `error.details()` names
the bad field. No torch here: this module belongs to the serving side.
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.runtime.documents import SPLITTING, pieces
from service.runtime.requests import MAX_TEXT_CHARS, MAX_TEXTS
from service.wire.v1 import (
    caption_pb2,
    caption_pb2_grpc,
    decoding_pb2,
    translation_pb2,
    translation_pb2_grpc,
)

DEFAULT_SERVER = "127.0.0.1:50051"
SERVER_ENVIRONMENT = "ATTNSERVE_SERVER"
TOKEN_ENVIRONMENT = "ATTNSERVE_TOKEN"
SERVICE_NAME = "attnserve.v1.TranslationService"
CAPTION_SERVICE = "attnserve.v1.CaptionService"
TEXTS_PER_CHUNK = 64  # texts a call of translate_batches sends by default
IMAGES_PER_REQUEST = 64  # the server's limit on images in one Caption request
REQUEST_BYTES = 32 * 1024 * 1024  # the server's limit on one request message
IMAGE_BYTES_PER_REQUEST = REQUEST_BYTES - 64 * 1024  # room for the options and framing
MAX_RECEIVE_BYTES = 64 * 1024 * 1024  # alignments of many long texts exceed gRPC's 4 MB


def default_server() -> str:
    """$ATTNSERVE_SERVER when set, else 127.0.0.1:50051."""
    return os.environ.get(SERVER_ENVIRONMENT) or DEFAULT_SERVER


def connect(
    address: str | None = None,
    *,
    tls: bool = False,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    token: str | None = None,
) -> grpc.Channel:
    """A channel to HOST:PORT (default: `default_server()`); close it or use `with`. A
    dns:///NAME:PORT target (a headless Service's name) spreads calls over every address the
    name resolves to, round robin.

    Plaintext unless `tls` or a TLS file is given: `tls_ca` is the CA bundle that signed the
    server's certificate (default: the system's), `tls_cert` and `tls_key` the client's own
    for mutual TLS. `token` (default: $ATTNSERVE_TOKEN) goes with every call as
    `authorization: Bearer TOKEN`."""
    address = address or default_server()
    options = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
    if address.startswith("dns:"):  # every address the name has, each call to the next
        options.append(("grpc.lb_policy_name", "round_robin"))
    if tls or tls_ca is not None or tls_cert is not None or tls_key is not None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        credentials = grpc.ssl_channel_credentials(
            root_certificates=None if tls_ca is None else Path(tls_ca).read_bytes(),
            private_key=None if tls_key is None else Path(tls_key).read_bytes(),
            certificate_chain=None if tls_cert is None else Path(tls_cert).read_bytes(),
        )
        channel = grpc.secure_channel(address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    token = token if token is not None else os.environ.get(TOKEN_ENVIRONMENT) or None
    if token:
        channel = grpc.intercept_channel(channel, _Bearer(token))
    return channel


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `authorization: Bearer TOKEN` to every call of a channel."""

    def __init__(self, token: str):
        self.metadata = ("authorization", f"Bearer {token}")

    def _details(self, details):
        return _CallDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self.metadata],
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


def _set(message, field: str, value, name: str) -> None:
    try:
        setattr(message, field, value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: {value!r} does not fit the field ({error})") from None


def decoding_options(
    *,
    beam_size: int | None = None,
    max_length: int | None = None,
    length_penalty: float | None = None,
    num_hypotheses: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    return_log_probs: bool = False,
    return_alignment: bool = False,
    target_prefix: str = "",
    min_length: int | None = None,
    no_repeat_ngram_size: int | None = None,
    repetition_penalty: float | None = None,
    suppress: str | Iterable[str] = (),
    max_length_ratio: float | None = None,
) -> decoding_pb2.DecodingOptions:
    """An `attnserve.v1.DecodingOptions`; every None is left unset (the server's default).

    Values are not judged here (an explicit 0 beam is sent, and refused by the server); only
    a value the field cannot hold (a negative count, a fraction for an integer) raises
    ValueError naming the option. `suppress` given one str is one word or phrase.
    """
    options = decoding_pb2.DecodingOptions(
        return_log_probs=return_log_probs,
        return_alignment=return_alignment,
        target_prefix=target_prefix,
        suppress=[suppress] if isinstance(suppress, str) else list(suppress),
    )
    given = [
        (
            options,
            dict(
                beam_size=beam_size,
                max_length=max_length,
                length_penalty=length_penalty,
                num_hypotheses=num_hypotheses,
                min_length=min_length,
                no_repeat_ngram_size=no_repeat_ngram_size,
                repetition_penalty=repetition_penalty,
                max_length_ratio=max_length_ratio,
            ),
        ),
        (options.sampling, dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)),
    ]
    for message, values in given:
        for field, value in values.items():
            if value is not None:
                _set(message, field, value, field)
    return options


def _options(
    options: decoding_pb2.DecodingOptions | None, decoding: dict
) -> decoding_pb2.DecodingOptions:
    if options is not None and decoding:
        raise TypeError("give either options or decoding keywords, not both")
    return options if options is not None else decoding_options(**decoding)


def document_parts(text: str, most: int = MAX_TEXT_CHARS) -> list[str]:
    """The text cut after paragraph breaks (else line breaks, sentence ends, spaces, else
    anywhere) into parts of at most `most` characters, whose concatenation is the text: each
    part fits one text of a Translate request."""
    return pieces(text, most)


def glossary_entries(
    glossary: dict[str, str] | Iterable[tuple[str, str]],
) -> list[translation_pb2.GlossaryEntry]:
    """GlossaryEntry messages of {source: target} or (source, target) pairs."""
    pairs = glossary.items() if isinstance(glossary, dict) else glossary
    return [translation_pb2.GlossaryEntry(source=s, target=t) for s, t in pairs]


def format_value(name: str) -> int:
    """The TextFormat value of "plain", "html" or "xml"."""
    values = {
        "plain": translation_pb2.TEXT_FORMAT_PLAIN,
        "html": translation_pb2.TEXT_FORMAT_HTML,
        "xml": translation_pb2.TEXT_FORMAT_XML,
    }
    if name not in values:
        raise ValueError(f"text_format must be one of {', '.join(values)}, not {name!r}")
    return values[name]


def splitting_value(name: str) -> int:
    """The SentenceSplitting value of "sentences", "lines" or "none"."""
    if name not in SPLITTING:
        raise ValueError(f"sentence_splitting must be one of {', '.join(SPLITTING)}, not {name!r}")
    return translation_pb2.SentenceSplitting.Value(f"SENTENCE_SPLITTING_{name.upper()}")


def translate(
    channel: grpc.Channel,
    texts: str | Iterable[str] = (),
    *,
    utf8_texts: Iterable[bytes] = (),
    model: str = "",
    version: str = "",
    options: decoding_pb2.DecodingOptions | None = None,
    timeout: float | None = None,
    sentence_splitting: str = "sentences",
    text_format: str = "plain",
    glossary: dict[str, str] | Iterable[tuple[str, str]] = (),
    source_language: str = "",
    target_language: str = "",
    **decoding,
) -> translation_pb2.TranslateResponse:
    """One Translate call. Decoding is either `options` (a message) or the keywords of
    `decoding_options` (beam_size=4, return_alignment=True, ...); `model` and `version` empty
    mean the server's default model and its newest version; `timeout` is the deadline in
    seconds (None: none); a text is cut into inputs at `sentence_splitting`: "sentences"
    (and line breaks), "lines" or "none"; `source_language` and `target_language` name the
    languages (a multilingual model's; with no `model`, the server picks the one that
    covers them)."""
    if isinstance(texts, str):
        texts = [texts]
    request = translation_pb2.TranslateRequest(
        model=model,
        version=version,
        texts=list(texts),
        utf8_texts=list(utf8_texts),
        options=_options(options, decoding),
        sentence_splitting=splitting_value(sentence_splitting),
        text_format=format_value(text_format),
        glossary=glossary_entries(glossary),
        source_language=source_language,
        target_language=target_language,
    )
    return translation_pb2_grpc.TranslationServiceStub(channel).Translate(request, timeout=timeout)


def score(
    channel: grpc.Channel,
    pairs: Iterable[tuple[str, str]],
    *,
    model: str = "",
    version: str = "",
    timeout: float | None = None,
    source_language: str = "",
    target_language: str = "",
) -> translation_pb2.ScoreResponse:
    """One Score call: the log-probability of each (source, target) pair's target tokens."""
    request = translation_pb2.ScoreRequest(
        model=model,
        version=version,
        pairs=[translation_pb2.ScorePair(source=s, target=t) for s, t in pairs],
        source_language=source_language,
        target_language=target_language,
    )
    return translation_pb2_grpc.TranslationServiceStub(channel).Score(request, timeout=timeout)


def score_batches(
    channel: grpc.Channel,
    pairs: Sequence[tuple[str, str]],
    *,
    batch_size: int = MAX_TEXTS,
    model: str = "",
    version: str = "",
    timeout: float | None = None,
    source_language: str = "",
    target_language: str = "",
) -> translation_pb2.ScoreResponse:
    """Any number of pairs, `batch_size` a Score call (`timeout` per call), answered as one
    response: the scores in order, the first call's model and version. A failed call's
    details name its pair among all the pairs (`pairs[1000]`, not the call's `pairs[0]`)."""

    def call(chunk: Sequence[tuple[str, str]]) -> translation_pb2.ScoreResponse:
        return score(
            channel,
            chunk,
            model=model,
            version=version,
            timeout=timeout,
            source_language=source_language,
            target_language=target_language,
        )

    responses = _chunked(call, pairs, "pairs", batch_size, 1, None)
    return _merged(translation_pb2.ScoreResponse(), responses, "scores")


def translate_batches(
    channel: grpc.Channel,
    texts: str | Sequence[str],
    *,
    batch_size: int = TEXTS_PER_CHUNK,
    concurrency: int = 1,
    progress: Callable[[int], None] | None = None,
    model: str = "",
    version: str = "",
    options: decoding_pb2.DecodingOptions | None = None,
    timeout: float | None = None,
    sentence_splitting: str = "sentences",
    text_format: str = "plain",
    glossary: dict[str, str] | Iterable[tuple[str, str]] = (),
    source_language: str = "",
    target_language: str = "",
    **decoding,
) -> translation_pb2.TranslateResponse:
    """Any number of texts, sent `batch_size` at a time (`timeout` per call), `concurrency`
    calls in flight, answered as one response: the translations in order, the token counts
    summed, the first call's model and version. `progress(done)` is called with the number of
    texts answered after each call."""
    options = _options(options, decoding)

    def call(chunk: Sequence[str]) -> translation_pb2.TranslateResponse:
        return translate(
            channel,
            chunk,
            model=model,
            version=version,
            options=options,
            timeout=timeout,
            sentence_splitting=sentence_splitting,
            text_format=text_format,
            glossary=glossary,
            source_language=source_language,
            target_language=target_language,
        )

    merged = translation_pb2.TranslateResponse()
    texts = [texts] if isinstance(texts, str) else texts  # one text, as `translate` takes it
    responses = _chunked(call, texts, "texts", batch_size, concurrency, progress)
    return _merged(merged, responses, "translations")


def _chunks(items: Sequence, batch_size: int, most_bytes: int | None) -> list[Sequence]:
    """`items` in order, `batch_size` a chunk and, with `most_bytes`, a chunk's items of that
    many bytes at most (a larger item alone)."""
    if most_bytes is None:
        return [items[start : start + batch_size] for start in range(0, len(items), batch_size)]
    chunks: list[list] = []
    size = 0
    for item in items:
        if not chunks or len(chunks[-1]) == batch_size or size + len(item) > most_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += len(item)
    return chunks


def _chunked(
    call, items: Sequence, field: str, batch_size: int, concurrency: int, progress, most_bytes=None
) -> list:
    """`call(chunk)` for every chunk of `_chunks`, `concurrency` calls in flight, responses in
    order; `progress(done)` after each call with the number of items answered. A failed call
    is raised with `field[i]` in its details counted over all `items`."""
    if batch_size < 1 or concurrency < 1:
        raise ValueError(
            f"batch_size and concurrency must be 1 or more ({batch_size}, {concurrency})"
        )
    chunks = _chunks(items, batch_size, most_bytes)
    starts = itertools.accumulate((len(chunk) for chunk in chunks), initial=0)
    done, lock = [0], threading.Lock()

    def one(start: int, chunk: Sequence):
        try:
            response = call(chunk)
        except grpc.RpcError as error:
            raise _ItemsError.counted(error, field, start) from None
        if progress is not None:
            with lock:
                done[0] += len(chunk)
                progress(done[0])
        return response

    pool = ThreadPoolExecutor(concurrency)
    try:
        return list(pool.map(one, starts, chunks))
    finally:  # a failure or Ctrl-C leaves now: the calls in flight end with their channel
        pool.shutdown(wait=False, cancel_futures=True)


class _ItemsError(grpc.RpcError):
    """The failure of one call of many, its details naming each item by its index among all
    the items (`images[70]`, where the call itself said `images[6]`); the rest as the call's
    own error."""

    def __init__(self, error: grpc.RpcError, details: str):
        super().__init__(details)
        self.error, self.renumbered = error, details

    @classmethod
    def counted(cls, error: grpc.RpcError, field: str, start: int) -> grpc.RpcError:
        details = error.details() if start and hasattr(error, "details") else None
        if not details:
            return error

        def shifted(found: re.Match) -> str:
            return f"{field}[{int(found.group(1)) + start}]"

        return cls(error, re.sub(rf"\b{re.escape(field)}\[(\d+)\]", shifted, details))

    def code(self) -> grpc.StatusCode:
        return self.error.code()

    def details(self) -> str:
        return self.renumbered

    def __getattr__(self, name: str):
        if name == "error":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.error, name)  # trailing_metadata(), debug_error_string(), ...


def _merged(merged, responses: list, field: str):
    """One response of many: `field` (translations, captions, scores) in order, the token
    counts summed where the response has them, the first response's model and version."""
    counted = "token_counts" in merged.DESCRIPTOR.fields_by_name
    for index, response in enumerate(responses):
        if index == 0:
            merged.model, merged.version = response.model, response.version
        getattr(merged, field).extend(getattr(response, field))
        if counted:
            merged.token_counts.input_tokens += response.token_counts.input_tokens
            merged.token_counts.output_tokens += response.token_counts.output_tokens
    return merged


def translate_stream(
    channel: grpc.Channel,
    text: str | bytes,
    *,
    model: str = "",
    version: str = "",
    options: decoding_pb2.DecodingOptions | None = None,
    timeout: float | None = None,
    sentence_splitting: str = "sentences",
    text_format: str = "plain",
    glossary: dict[str, str] | Iterable[tuple[str, str]] = (),
    source_language: str = "",
    target_language: str = "",
    **decoding,
) -> Iterator[translation_pb2.TranslateStreamResponse]:
    """The TranslateStream events of one text (bytes are sent as `utf8_text`): a `partial`
    after every decoding step (for a text of several sentences, after each sentence in order:
    the text so far), then one `result`. Leaving the loop early cancels the call."""
    request = translation_pb2.TranslateStreamRequest(
        model=model,
        version=version,
        options=_options(options, decoding),
        sentence_splitting=splitting_value(sentence_splitting),
        text_format=format_value(text_format),
        glossary=glossary_entries(glossary),
        source_language=source_language,
        target_language=target_language,
    )
    if isinstance(text, bytes):
        request.utf8_text = text
    else:
        request.text = text
    call = translation_pb2_grpc.TranslationServiceStub(channel).TranslateStream(
        request, timeout=timeout
    )
    try:
        yield from call
    finally:
        call.cancel()  # a no-op once the stream has ended


def _images(images: bytes | Iterable[bytes]) -> list[bytes]:
    """One image or several as a list of bytes (a bytearray or memoryview copied)."""
    if isinstance(images, bytes | bytearray | memoryview):
        images = [images]
    elif isinstance(images, str):
        raise TypeError("images are encoded bytes (read the file), not a str")
    return [bytes(i) if isinstance(i, bytearray | memoryview) else i for i in images]


def caption(
    channel: grpc.Channel,
    images: bytes | Iterable[bytes],
    *,
    model: str = "",
    version: str = "",
    options: decoding_pb2.DecodingOptions | None = None,
    return_attention: bool = False,
    timeout: float | None = None,
    **decoding,
) -> caption_pb2.CaptionResponse:
    """One Caption call for one encoded image (bytes) or several (PNG, JPEG or WebP, sent as
    they are: the server decodes them), at most IMAGES_PER_REQUEST. Decoding, `model`,
    `version` and `timeout` as in `translate`; `return_attention` puts each hypothesis'
    attention maps in `Hypothesis.attention` (see `attention_maps`)."""
    request = caption_pb2.CaptionRequest(
        model=model,
        version=version,
        images=_images(images),
        options=_options(options, decoding),
        return_attention=return_attention,
    )
    return caption_pb2_grpc.CaptionServiceStub(channel).Caption(request, timeout=timeout)


def caption_batches(
    channel: grpc.Channel,
    images: bytes | Sequence[bytes],
    *,
    batch_size: int = IMAGES_PER_REQUEST,
    progress: Callable[[int], object] | None = None,
    model: str = "",
    version: str = "",
    options: decoding_pb2.DecodingOptions | None = None,
    return_attention: bool = False,
    timeout: float | None = None,
    **decoding,
) -> caption_pb2.CaptionResponse:
    """Any number of images, sent `batch_size` at a time and no more than
    IMAGE_BYTES_PER_REQUEST bytes of images a call (the server takes REQUEST_BYTES in one
    message; a larger image goes alone), `timeout` per call, answered as one response: the
    captions in order, the token counts summed, the first call's model and version.
    `progress(done)`, when given, is called after each call with the number of images
    captioned so far."""
    options = _options(options, decoding)

    def call(chunk: Sequence[bytes]) -> caption_pb2.CaptionResponse:
        return caption(
            channel,
            chunk,
            model=model,
            version=version,
            options=options,
            return_attention=return_attention,
            timeout=timeout,
        )

    images = _images(images)
    responses = _chunked(call, images, "images", batch_size, 1, progress, IMAGE_BYTES_PER_REQUEST)
    return _merged(caption_pb2.CaptionResponse(), responses, "captions")


def caption_stream(
    channel: grpc.Channel,
    image: bytes,
    *,
    model: str = "",
    version: str = "",
    options: decoding_pb2.DecodingOptions | None = None,
    return_attention: bool = False,
    timeout: float | None = None,
    **decoding,
) -> Iterator[caption_pb2.CaptionStreamResponse]:
    """The CaptionStream events of one encoded image: a `partial` (the best caption so far)
    after every decoding step, then one `result`. Leaving the loop early cancels the call."""
    request = caption_pb2.CaptionStreamRequest(
        model=model,
        version=version,
        image=bytes(image),
        options=_options(options, decoding),
        return_attention=return_attention,
    )
    call = caption_pb2_grpc.CaptionServiceStub(channel).CaptionStream(request, timeout=timeout)
    try:
        yield from call
    finally:
        call.cancel()  # a no-op once the stream has ended


def health(channel: grpc.Channel, service: str = "", *, timeout: float | None = None) -> str:
    """The serving status of `service` ("" is the whole server) by `grpc.health.v1.Health`:
    SERVING, NOT_SERVING, UNKNOWN, or SERVICE_UNKNOWN when the server does not know the name
    (its NOT_FOUND answer). Any other failure is raised (UNAVAILABLE: nothing answers)."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:
            return "SERVICE_UNKNOWN"
        raise
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def alignment_matrix(alignment: decoding_pb2.Alignment) -> np.ndarray:
    """The weights of an Alignment as a [target tokens, source tokens] float32 array."""
    rows, columns = len(alignment.target_tokens), len(alignment.source_tokens)
    weights = np.asarray(alignment.weights, dtype=np.float32)
    if rows == 0 or columns == 0 or weights.size != rows * columns:
        raise ValueError(
            f"alignment: {weights.size} weights for {rows} target x {columns} source tokens"
        )
    return weights.reshape(rows, columns)


def attention_maps(maps: decoding_pb2.AttentionMaps) -> np.ndarray:
    """The weights of an AttentionMaps as a [tokens, grid height, grid width] float32 array:
    row r, column c of token t's grid covers the cell r, c of the image squeezed to the grid.
    Raises ValueError when there is no grid or a token's weights do not fill it."""
    height, width = maps.grid_height, maps.grid_width
    if height == 0 or width == 0:
        raise ValueError(f"attention: a {height} x {width} grid (no attention maps?)")
    weights = np.zeros((len(maps.tokens), height, width), dtype=np.float32)
    for index, token in enumerate(maps.tokens):
        if len(token.weights) != height * width:
            raise ValueError(
                f"attention: token {index} ({token.token!r}) has {len(token.weights)} weights "
                f"for a {height} x {width} grid"
            )
        weights[index] = np.asarray(token.weights, dtype=np.float32).reshape(height, width)
    return weights


def status_text(error: grpc.RpcError) -> str:
    """`CODE: details` of a failed call, as the command line prints it."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    return f"{code.name if code is not None else 'UNKNOWN'}: {details or error}"
