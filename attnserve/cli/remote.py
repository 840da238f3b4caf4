"""The gRPC side of the client commands: the connection (TLS, bearer token), the request's
decoding options, streams shown as they grow, and responses read into `results`, where the
wire's messages stop. grpc and the client are imported when a command calls a server, not
when the command line starts."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from attnserve.cli.render import PartialLine, encodes_all, print_hypotheses
from attnserve.cli.results import (
    Alignment,
    Attention,
    Caption,
    Captioned,
    Captions,
    Sentence,
    TokenAttention,
    TokenCounts,
    Translated,
    Translation,
    Translations,
    dumps,
)
from attnserve.cli.subcommand import Failure
from service.paths import file_name


def client_call(command: Callable, args: argparse.Namespace) -> int:
    """Runs `command(channel, args)` on a channel to `--server`; a failed call is one line on
    stderr and exit status 1."""
    import grpc

    from service import client

    if (args.tls_cert is None) != (args.tls_key is None):
        print("error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    token = _token(args.token_file)
    try:  # its TLS files read here: one missing, or not PEM
        _check_pem(args)
        connection = client.connect(
            args.server,
            tls=args.tls,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            token=token,
        )
    except (OSError, ValueError) as error:
        raise Failure(f"TLS: {error}") from error
    try:
        with connection as channel:
            return command(channel, args)
    except grpc.RpcError as error:
        print(f"error: {client.status_text(error)}", file=sys.stderr)
        return 1


def _check_pem(args: argparse.Namespace) -> None:
    """ValueError naming a TLS file that holds no PEM block: gRPC would fail every call with
    UNAVAILABLE, "Failed to create security handshaker", naming no file."""
    for flag, path in (
        ("--tls-ca", args.tls_ca),
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
    ):
        if path is not None and b"-----BEGIN " not in path.read_bytes():
            raise ValueError(f"{flag} {path}: not PEM (no -----BEGIN line)")


def _token(path: Path | None) -> str | None:
    """The bearer token of --token-file, else of $ATTNSERVE_TOKEN (None: no token), refused
    where it is missing, empty or holds what a header cannot carry."""
    from service.client import TOKEN_ENVIRONMENT

    if path is None:
        token = os.environ.get(TOKEN_ENVIRONMENT) or None
        return token and _header_value(token, f"${TOKEN_ENVIRONMENT}")
    try:
        token = path.read_text(encoding="utf-8-sig").strip()
    except OSError as error:
        raise Failure(f"--token-file: {error}") from error
    except UnicodeDecodeError as error:
        raise Failure(f"--token-file {path}: not UTF-8 ({error})") from None
    if not token:  # else no token at all would go, not even $ATTNSERVE_TOKEN
        raise Failure(f"--token-file: {path} holds no token")
    return _header_value(token, f"--token-file {path}")


def _header_value(token: str, where: str) -> str:
    """`token`, which gRPC sends in a header: printable ASCII alone (else every call fails
    INTERNAL, "Invalid metadata", naming nothing)."""
    if not (token.isascii() and token.isprintable()):
        raise Failure(f"{where}: a token is printable ASCII; this one holds other characters")
    return token


def request_options(args: argparse.Namespace, return_alignment: bool):
    """The DecodingOptions message of the flags given (ValueError: a value no request can
    carry, such as a negative count)."""
    from service import client

    return client.decoding_options(
        beam_size=args.beam_size,
        max_length=args.max_length,
        length_penalty=args.length_penalty,
        num_hypotheses=args.n_best,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        return_log_probs=args.json,
        return_alignment=return_alignment,
        target_prefix=args.target_prefix or "",
        min_length=args.min_length,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
        repetition_penalty=args.repetition_penalty,
        suppress=args.suppress or (),
        max_length_ratio=args.max_length_ratio,
    )


def call_options(args: argparse.Namespace, options, timeout: float) -> dict:
    """The model, version, options and timeout of a translate or caption call."""
    return {
        "model": args.model or "",
        "version": args.model_version or "",
        "options": options,
        "timeout": args.timeout or timeout,
    }


def proto_json(message, ascii: bool = False) -> str:
    """A message as one line of JSON, under its .proto field names, every field shown (with
    `ascii`, every character past ASCII escaped, as `results.dumps`)."""
    from google.protobuf import json_format

    return json_format.MessageToJson(
        message,
        preserving_proto_field_name=True,
        indent=None,
        ensure_ascii=ascii,
        always_print_fields_with_no_presence=True,
    )


def stream_each(stream, inputs: list, read, noun: str, json: bool, partials) -> list:
    """Streams the inputs one after another: with `json` every event as a line of JSON (the
    result as `results.as_json` writes it), else the growing best hypothesis on `partials`
    (the commands': stderr, so that stdout holds the results alone) and the final one on
    stdout. `read(response, index)` reads input `index`'s result into
    results. Returns the translations or captions, in order."""
    items, ascii = [], not encodes_all(sys.stdout)
    for index, item in enumerate(inputs):
        line = PartialLine(partials)
        try:
            for event in stream(item):
                if event.WhichOneof("event") == "result":
                    result = read(event.result, index)
                    items.extend(result.items)
                    if json:
                        print(f'{{"result": {dumps(result, ascii)}}}', flush=True)
                elif json:
                    print(proto_json(event, ascii), flush=True)
                else:
                    line.show(event.partial.text)
        finally:
            line.close()
        if len(items) != index + 1:
            raise Failure(f"the stream of {noun} {index + 1} ended without one result")
        if not json:
            print_hypotheses(items[-1])
            sys.stdout.flush()
    return items


def translations(response, texts: Sequence[str], first: int = 0) -> Translations:
    """A TranslateResponse read into results; `texts` are the texts it answers, in order, the
    first of them text `first` of the command (errors count from there)."""
    _check_count(len(response.translations), len(texts), "translations", "texts")
    items = tuple(
        _translation(text, message, first + index)
        for index, (text, message) in enumerate(zip(texts, response.translations, strict=True))
    )
    return Translations(response.model, response.version, items, _counts(response.token_counts))


def _translation(text: str, message, index: int) -> Translation:
    try:
        hypotheses = tuple(
            Translated(**_hypothesis(h), alignment=_alignment(h, "alignment"))
            for h in message.hypotheses
        )
        sentences = tuple(
            Sentence(
                s.source_start,
                s.source_end,
                s.target_start,
                s.target_end,
                _alignment(s, "alignment"),
            )
            for s in message.sentences
        )
    except ValueError as error:  # weights that do not fill the tokens' grid
        raise Failure(f"alignment of text {index + 1}: {error}") from None
    return Translation(
        text, hypotheses, sentences, tuple(message.glossary_applied), _counts(message.token_counts)
    )


def captions(response, images: Sequence[Path]) -> Captions:
    """A CaptionResponse read into results; `images` are the files it answers, in order."""
    _check_count(len(response.captions), len(images), "captions", "images")
    items = tuple(
        Caption(
            image=file_name(path),
            image_width=message.image_width,
            image_height=message.image_height,
            hypotheses=tuple(
                Captioned(**_hypothesis(h), attention=_attention(h)) for h in message.hypotheses
            ),
            token_counts=_counts(message.token_counts),
        )
        for path, message in zip(images, response.captions, strict=True)
    )
    return Captions(response.model, response.version, items, _counts(response.token_counts))


def _check_count(answered: int, sent: int, field: str, noun: str) -> None:
    if answered != sent:
        raise Failure(f"{answered} {field} for {sent} {noun}")


def _hypothesis(message) -> dict:
    """The fields every Hypothesis message has, as `results.Hypothesis` holds them."""
    return {
        "text": message.text,
        "score": float(message.score),
        "log_prob": float(message.log_prob),
        "tokens": tuple(message.tokens),
        "token_log_probs": tuple(float(p) for p in message.token_log_probs),
        "finished": message.finished,
    }


def _alignment(message, field: str) -> Alignment | None:
    """The Alignment in `message.<field>`, row by row (None when unset)."""
    from service.client import alignment_matrix

    if not message.HasField(field):
        return None
    alignment = getattr(message, field)
    rows = alignment_matrix(alignment).astype(float).tolist()
    return Alignment(
        tuple(alignment.source_tokens),
        tuple(alignment.target_tokens),
        tuple(tuple(row) for row in rows),
    )


def _attention(message) -> Attention | None:
    if not message.HasField("attention"):
        return None
    maps = message.attention
    return Attention(
        maps.grid_height,
        maps.grid_width,
        maps.image_height,
        maps.image_width,
        tuple(TokenAttention(t.token, tuple(float(w) for w in t.weights)) for t in maps.tokens),
    )


def _counts(message) -> TokenCounts:
    return TokenCounts(message.input_tokens, message.output_tokens)
