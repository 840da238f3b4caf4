"""`caption`: images to words, over gRPC or here with the PyTorch checkpoint. Either engine's
captions are read into `results`, so both print the same lines, JSON and figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnserve.cli import remote
from attnserve.cli.figures import write_attention
from attnserve.cli.options import (
    TORCH_DECODING,
    add_decoding,
    add_engine,
    add_server,
    check_engine,
    check_figure,
    utf8,
)
from attnserve.cli.render import progress, read_images, show
from attnserve.cli.subcommand import Subcommand
from models.shipped import SHIPPED_CAPTIONER

TIMEOUT = 120.0  # seconds, the default deadline of each caption call (64 images at most)
# caption's options that mean something over gRPC only
GRPC_ONLY = (
    "server",
    "stream",
    "timeout",
    "model",
    "model_version",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "token_file",
    "target_prefix",  # words, tokenized by the server (as translate's)
    "suppress",
)
TORCH_CAPTIONING = {**TORCH_DECODING, "max_length": None}  # None: the model's own limit


class Caption(Subcommand):
    name = "caption"
    help = "caption images (over gRPC, or locally with --engine torch)"
    description = (
        "The image files are sent as they are (the server decodes them), 64 (and 32 MB) a "
        "request; with more, a progress bar on stderr. One line per image in the order given, or "
        "RANK<TAB>SCORE<TAB>TEXT per hypothesis when there are several (a backslash, line "
        "break or tab written \\\\, \\n, \\r or \\t). Decoding options not "
        "given are left to the server over gRPC; with --engine torch they default to beam "
        "size 1, n-best 1 and the model's max length. --attention draws the best caption's "
        "attention over the image, word by word. An unreadable image file exits with status "
        "2; a failed call prints `error: CODE: details` on stderr and exits with status 1."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("images", nargs="+", type=Path, help="image files (PNG, JPEG, WebP)")
        add_engine(parser)
        add_server(parser, TIMEOUT)
        parser.add_argument(
            "--model", type=utf8, help="model name (default: the server's captioner)"
        )
        parser.add_argument(
            "--model-version",
            "--version",
            dest="model_version",
            type=utf8,
            help="model version (default: the newest loaded)",
        )
        parser.add_argument(
            "--stream",
            action="store_true",
            help="show each caption growing step by step on stderr, one image after another",
        )
        parser.add_argument("--checkpoint", type=Path, help="--engine torch: the checkpoint")
        parser.add_argument(
            "--attention",
            type=Path,
            metavar="OUT.png",
            help="write the best caption's attention figure (OUT-1.png, ... for several images)",
        )
        parser.add_argument("--n-best", type=int, help="hypotheses per image")
        parser.add_argument(
            "--json",
            action="store_true",
            help="one JSON object: every hypothesis with its scores, log-probs and attention "
            "maps, the same whichever engine decodes",
        )
        add_decoding(parser, None)

    def check(self, args: argparse.Namespace) -> None:
        check_engine(self.parser, args, GRPC_ONLY, TORCH_CAPTIONING, SHIPPED_CAPTIONER)
        check_figure(self.parser, args.attention, "--attention")

    def run(self, args: argparse.Namespace) -> int:
        if args.engine == "grpc":
            return remote.client_call(_caption, args)
        from attnserve.cli import local  # torch

        images = read_images(args.images)
        opened = None if images is None else local.open_images(args.images, images)
        if opened is None:
            return 2
        results = local.caption(args, args.images, opened)
        show(results, args.json)
        _figures(args, images, results.captions)
        return 0


def _caption(channel, args: argparse.Namespace) -> int:
    try:
        options = remote.request_options(args, False)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    images = read_images(args.images)
    if images is None:
        return 2
    call = {
        **remote.call_options(args, options, TIMEOUT),
        "return_attention": args.json or args.attention is not None,
    }
    if args.stream:
        captions = _caption_stream(channel, args, images, call)
    else:
        captions = _caption_batches(channel, args, images, call)
    _figures(args, images, captions)
    return 0


def _figures(args: argparse.Namespace, images: list[bytes], captions) -> None:
    """--attention: a figure per image, drawn on the file as the server decodes it."""
    if args.attention is None:
        return
    for index, (image, caption) in enumerate(zip(images, captions, strict=True)):
        write_attention(args.attention, index, len(images), image, caption)


def _caption_stream(channel, args: argparse.Namespace, images: list[bytes], call: dict) -> list:
    from service import client

    def stream(image: bytes):
        return client.caption_stream(channel, image, **call)

    def read(response, index: int):
        return remote.captions(response, args.images[index : index + 1])

    return remote.stream_each(stream, images, read, "image", args.json, sys.stderr)


def _caption_batches(channel, args: argparse.Namespace, images: list[bytes], call: dict) -> list:
    """Every image, 64 (and 32 MB) a request; printed once all are back."""
    from service import client

    many = len(images) > client.IMAGES_PER_REQUEST
    with progress(len(images), "captioned", "image", many) as shown:
        response = client.caption_batches(channel, images, progress=shown, **call)
    results = remote.captions(response, args.images)
    show(results, args.json)
    return list(results.captions)


COMMANDS = (Caption,)
