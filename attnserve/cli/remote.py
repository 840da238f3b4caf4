"""The gRPC side of the client commands: the connection (TLS, bearer token), the request's
decoding options, and streams shown as they grow. grpc and the client are imported when a
command calls a server, not when the command line starts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from attnserve.cli.render import PartialLine, print_hypotheses
from attnserve.cli.subcommand import Failure


def client_call(command: Callable, args: argparse.Namespace) -> int:
    """Runs `command(channel, args)` on a channel to `--server`; a failed call is one line on
    stderr and exit status 1."""
    import grpc

    from service import client

    connection = client.connect(
        args.server,
        tls=args.tls,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        token=_token(args.token_file),
    )
    try:
        with connection as channel:
            return command(channel, args)
    except grpc.RpcError as error:
        print(f"error: {client.status_text(error)}", file=sys.stderr)
        return 1


def _token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise Failure(f"--token-file: {error}") from error


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


def proto_json(message) -> str:
    """A message as one line of JSON, under its .proto field names, every field shown."""
    from google.protobuf import json_format

    return json_format.MessageToJson(
        message,
        preserving_proto_field_name=True,
        indent=None,
        ensure_ascii=False,
        always_print_fields_with_no_presence=True,
    )


def stream_each(stream, inputs: list, field: str, noun: str, json: bool, partials) -> list:
    """Streams the inputs one after another: every event as JSON with `json`, else the
    growing best hypothesis on `partials` and the final one on stdout. Returns the results
    (`field` of each final response: translations, captions)."""
    results = []
    for index, item in enumerate(inputs):
        line = PartialLine(partials)
        try:
            for event in stream(item):
                if json:
                    print(proto_json(event), flush=True)
                elif event.WhichOneof("event") == "partial":
                    line.show(event.partial.text)
                if event.WhichOneof("event") == "result":
                    results.extend(getattr(event.result, field))
        finally:
            line.close()
        if len(results) != index + 1:
            raise Failure(f"the stream of {noun} {index + 1} ended without one result")
        if not json:
            print_hypotheses(results[-1])
            sys.stdout.flush()
    return results
