"""Flags and defaults that several commands share: the decoding options, the server to call,
the engine that decodes, and where a model's data and checkpoint live."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from models.shipped import CHECKPOINTS
from service.runtime.decoding import MODEL_RULES, DecodingOptions

MODELS = ("translator", "captioner")
ENGINES = ("grpc", "torch")
# Decoding defaults of the local PyTorch engine: the runtime's own, as the server's (over
# gRPC an option not given is left to the server)
TORCH_DECODING = {
    ("n_best" if f.name == "num_hypotheses" else f.name): f.default
    for f in fields(DecodingOptions)
    if f.name not in ("suppress", *MODEL_RULES)  # words, tokenized by the server; the model's
}
TORCH_ONLY = ("checkpoint",)  # options that mean something for the torch engine only
MAX_SECONDS = 365 * 24 * 3600.0  # the longest --timeout


def shipped_checkpoint(model: str) -> Path:
    return CHECKPOINTS / model


def default_data(model: str) -> Path:
    return Path("data") / model


def add_decoding(
    parser: argparse.ArgumentParser, defaults: dict | None, words: bool = True
) -> None:
    """The decoding options; with `defaults` None every option defaults to None (unset).
    `words`: also --target-prefix and --suppress, which the server tokenizes (no PyTorch
    decoding takes them)."""
    default = (defaults or {}).get
    parser.add_argument("--beam-size", "--beam", type=int, default=default("beam_size"))
    parser.add_argument(
        "--max-length", type=int, default=default("max_length"), help="decoding steps at most"
    )
    parser.add_argument("--length-penalty", type=float, default=default("length_penalty"))
    parser.add_argument(
        "--temperature", type=float, default=default("temperature"), help="> 0 samples"
    )
    parser.add_argument(
        "--top-k", type=int, default=default("top_k"), help="sample among the k best"
    )
    parser.add_argument(
        "--top-p", type=float, default=default("top_p"), help="nucleus sampling mass"
    )
    parser.add_argument("--seed", type=int, help="sampling seed")
    _add_controls(parser.add_argument_group("decoding controls"), default, words)


def _add_controls(controls, default, words: bool) -> None:
    if words:
        controls.add_argument("--target-prefix", type=utf8, help="the output starts with this text")
    controls.add_argument(
        "--min-length", type=int, default=default("min_length"), help="tokens before </s>"
    )
    controls.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=default("no_repeat_ngram_size"),
        help="no n-gram of this many tokens twice",
    )
    controls.add_argument(
        "--repetition-penalty",
        type=float,
        default=default("repetition_penalty"),
        help="above 1: tokens already produced are less likely",
    )
    if words:
        controls.add_argument(
            "--suppress",
            action="append",
            type=utf8,
            metavar="WORDS",
            help="never produce these (repeatable)",
        )
    controls.add_argument(
        "--max-length-ratio",
        type=float,
        default=default("max_length_ratio"),
        help="a text's output at most ratio x its tokens + 10 steps (0: max length alone)",
    )


def utf8(text: str) -> str:
    """An argument that a call sends as text (a text, a word, a name, the server's address)
    read as UTF-8: refused where the command line gave bytes that are not, which Python
    keeps as surrogates and no request can carry (the error, as stdin's, names the byte)."""
    try:  # the bytes given, surrogates back to what they stand for
        return text.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeError as error:
        raise argparse.ArgumentTypeError(f"not UTF-8 ({error})") from None


def seconds(text: str) -> float:
    """A deadline: above 0 and at most MAX_SECONDS. Far past it ("inf" among them) gRPC's
    deadline, nanoseconds since the epoch in 64 bits, overflows: every call would fail
    DEADLINE_EXCEEDED at once."""
    value = float(text)
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be above 0 and at most {MAX_SECONDS:.0f} (a year), got {text}"
        )
    return value


def positive(text: str) -> int:
    return _at_least(1, text)


def count(text: str) -> int:
    """A count where 0 says "none" or "no limit": negative means nothing."""
    return _at_least(0, text)


def _at_least(least: int, text: str) -> int:
    value = int(text)
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {text}")
    return value


def check_output(
    parser: argparse.ArgumentParser, path: Path | None, flag: str = "--output"
) -> None:
    """Refuses an output `flag` (--output, or a figure's) that cannot be written (a folder,
    or in a missing folder) before anything is sent: what was decoded is not lost at its
    end."""
    if path is None:
        return
    if path.is_dir():
        parser.error(f"{flag} {path}: a folder, not a file")
    if not path.resolve().parent.is_dir():
        parser.error(f"{flag} {path}: no folder {path.resolve().parent}")


def check_figure(parser: argparse.ArgumentParser, path: Path | None, flag: str) -> None:
    """`check_output`, and a name that says PNG: a figure is written as PNG, whose name
    would otherwise lie (out.svg holding a PNG) or grow one (matplotlib's out.png for out)."""
    check_output(parser, path, flag)
    if path is not None and path.suffix.lower() != ".png":
        parser.error(f"{flag} {path}: a figure is a PNG file, named .png")


def add_server(parser: argparse.ArgumentParser, timeout: float) -> None:
    """Where the server is, the deadline of each call, TLS and the bearer token."""
    parser.add_argument(
        "--server",
        type=utf8,
        metavar="HOST:PORT",
        help="the gRPC server (default: $ATTNSERVE_SERVER, else 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--timeout", type=seconds, help=f"deadline of each call in seconds (default: {timeout:g})"
    )
    tls = parser.add_argument_group("TLS and tokens")
    tls.add_argument("--tls", action="store_true", help="TLS with the system's CA certificates")
    tls.add_argument("--tls-ca", type=Path, help="PEM CA bundle that signed the server (TLS)")
    tls.add_argument("--tls-cert", type=Path, help="PEM client certificate (mutual TLS)")
    tls.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    tls.add_argument(
        "--token-file",
        type=Path,
        help="file holding the bearer token to send (default: $ATTNSERVE_TOKEN)",
    )


def add_engine(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="grpc: ask a server (default); torch: decode here with the PyTorch checkpoint",
    )


def check_engine(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    grpc_only: tuple[str, ...],
    torch_decoding: dict,
    checkpoint: Path,
) -> None:
    """Refuses options of the other engine; fills the torch engine's defaults."""
    foreign = grpc_only if args.engine == "torch" else TORCH_ONLY
    given = [name for name in foreign if getattr(args, name) not in (None, False)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        other = "grpc" if args.engine == "torch" else "torch"
        parser.error(f"{flags}: only with --engine {other}")
    if args.engine == "torch":
        for name, value in torch_decoding.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        if args.checkpoint is None:
            args.checkpoint = checkpoint
