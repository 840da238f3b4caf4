"""The `attnserve` command line.

Torch-side commands (data, train, evaluate, translate and caption --engine torch) are imported
only when they run, so serving commands and the gRPC client (translate, caption, health) start
without torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
from dataclasses import fields
from pathlib import Path

from attnserve.serving import add_repository, add_serve, repository, serve
from models.shipped import CHECKPOINTS, SHIPPED_CAPTIONER, SHIPPED_TRANSLATOR
from service.runtime.decoding import DecodingOptions
from service.runtime.documents import SPLITTING
from service.runtime.markup import FORMATS

MODELS = ("translator", "captioner")


def shipped_checkpoint(model: str) -> Path:
    return CHECKPOINTS / model


def default_data(model: str) -> Path:
    return Path("data") / model


# Decoding defaults of the local PyTorch engine: the runtime's own, as the server's (over
# gRPC an option not given is left to the server)
TORCH_DECODING = {
    ("n_best" if f.name == "num_hypotheses" else f.name): f.default
    for f in fields(DecodingOptions)
    if f.name != "suppress"  # words, tokenized by the server
}
TRANSLATE_TIMEOUT = 60.0  # seconds, the default deadline of a translate call
CAPTION_TIMEOUT = 120.0  # seconds, the default deadline of each caption call (64 images at most)
HEALTH_TIMEOUT = 5.0
# translate and caption options that mean something for one engine only
GRPC_ONLY = (
    "server",
    "stream",
    "alignment",
    "timeout",
    "model",
    "model_version",
    "input",
    "output",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "token_file",
    "target_prefix",
    "suppress",
    "text_format",
    "glossary",
)
CAPTION_GRPC_ONLY = (
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
)
TORCH_ONLY = ("checkpoint",)
FIGURE_SIDE = 512  # pixels: the image of an attention figure is shrunk to fit this square


def _decoding_arguments(parser: argparse.ArgumentParser, defaults: dict | None) -> None:
    """The decoding options; with `defaults` None every option defaults to None (unset)."""
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
    controls = parser.add_argument_group("decoding controls")
    controls.add_argument("--target-prefix", help="the output starts with this text")
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
    controls.add_argument(
        "--suppress", action="append", metavar="WORDS", help="never produce these (repeatable)"
    )
    controls.add_argument(
        "--max-length-ratio",
        type=float,
        default=default("max_length_ratio"),
        help="a text's output at most ratio x its tokens + 10 steps (0: max length alone)",
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _server_arguments(parser: argparse.ArgumentParser, timeout: float) -> None:
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="the gRPC server (default: $ATTNSERVE_SERVER, else 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--timeout", type=_seconds, help=f"deadline of each call in seconds (default: {timeout:g})"
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


def _add_data(commands) -> None:
    parser = commands.add_parser("data", help="build a training corpus from Debian packages")
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--out", type=Path, help="default: data/<model>")
    from models.caption_data import DataOptions  # numpy and Pillow, for this command only

    scenes = DataOptions()
    parser.add_argument(
        "--train-scenes",
        type=int,
        default=scenes.train,
        help=f"captioner: training scenes (default {scenes.train})",
    )
    parser.add_argument(
        "--test-scenes",
        type=int,
        default=scenes.test_per_part,
        help=f"captioner: scenes per test part (default {scenes.test_per_part})",
    )
    parser.add_argument(
        "--catalogs",
        action="store_true",
        help="translator: modern pairs from Debian gettext catalogs (cached in "
        "data/debian-cache) and CLDR, back-translated fortunes, the modern and everyday test "
        "parts",
    )
    parser.add_argument(
        "--modern",
        type=Path,
        metavar="DIR",
        help="translator: mix the Bible corpus and the --catalogs build in --out into DIR "
        "(train, dev and every test part) for the modern translator",
    )


def _add_train(commands) -> None:
    parser = commands.add_parser("train", help="train a model (resumes an existing run)")
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--data", type=Path, help="default: data/<model>")
    parser.add_argument("--run-dir", type=Path, help="default: runs/<model>")
    parser.add_argument("--out", type=Path, help="default: the shipped checkpoint")
    parser.add_argument("--preset", choices=["base", "tiny"], default="base")
    parser.add_argument("--vocab-size", type=int, help="tokenizer size (default: the preset's)")
    parser.add_argument(
        "--max-minutes", type=float, help="time budget (default: the model's training options')"
    )
    parser.add_argument(
        "--leg-minutes",
        type=float,
        default=0.0,
        help="captioner: train this many minutes of the budget, then stop (0: all of it)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="captioner: images per step")
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=0, help="0: no limit")
    parser.add_argument("--max-tokens", type=int, default=4000, help="tokens per batch and rank")
    parser.add_argument("--warmup-steps", type=int, default=500)
    parser.add_argument("--lr-scale", type=float, default=0.7)
    parser.add_argument("--dev-sentences", type=int, default=0, help="0: the whole dev split")
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per process")
    parser.add_argument(
        "--average",
        type=int,
        default=0,
        help="translator: keep the weights every --snapshot-every steps and ship the mean of "
        "the last N when it beats the best checkpoint on dev (0: off)",
    )
    parser.add_argument("--snapshot-every", type=int, default=400)
    parser.add_argument(
        "--pack",
        type=Path,
        metavar="FILE",
        help="do not train: write the run's last state to FILE, small enough to commit (int8 "
        "weights, progress, tokenizer; no optimizer moments), for --resume-from elsewhere",
    )
    parser.add_argument(
        "--resume-from",
        type=Path,
        metavar="FILE",
        help="a run directory without a run yet goes on from this packed run (--pack)",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        help="translator: start a new run from this checkpoint's weights (its embedding mapped "
        "piece by piece onto the new tokenizer)",
    )


def _add_evaluate(commands) -> None:
    parser = commands.add_parser(
        "evaluate",
        help="translator: BLEU and chrF; captioner: exact match, BLEU-4, CIDEr, attention "
        "localisation; per test part",
    )
    parser.add_argument("model", choices=MODELS)
    parser.add_argument(
        "--split",
        choices=["dev", "test", "test-modern", "test-everyday", "all"],
        default="test",
        help="test-modern, test-everyday: the translator's parts of `data translator --catalogs`; "
        "all: every test part the data has (bible, modern, everyday)",
    )
    parser.add_argument("--data", type=Path, help="default: data/<model>")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="default: the shipped checkpoint; translator: also a run's last.pt, best.pt or "
        "snapshots/step-*.pt",
    )
    parser.add_argument("--baseline", choices=["apertium"], help="score a peer instead")
    parser.add_argument(
        "--versus", choices=["apertium"], help="translator: score a peer too, on the same parts"
    )
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only")
    parser.add_argument(
        "--sentence-splitting",
        choices=SPLITTING,
        default=SPLITTING[0],
        help="translator: cut each test line as the server cuts a text (default: sentences)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    # max length: the translator's 256, the captioner's own limit
    _decoding_arguments(parser, {**TORCH_DECODING, "max_length": None})


def _add_translate(commands) -> None:
    parser = commands.add_parser(
        "translate",
        help="translate Spanish text to English (over gRPC, or locally with --engine torch)",
        description="Decoding options not given are left to the server over gRPC; with "
        "--engine torch they default as the server's do: beam size 1 (greedy), max length "
        "256, length penalty 1, n-best 1, no sampling. One line per text, or "
        "RANK<TAB>SCORE<TAB>TEXT per hypothesis when there are several. A failed call "
        "prints `error: CODE: details` on stderr and exits with status 1.",
    )
    parser.add_argument(
        "texts", nargs="*", help="texts; read one a line from --input or stdin when none"
    )
    parser.add_argument(
        "--input",
        type=Path,
        help="a file translated as one document: its paragraphs, blank lines and line breaks "
        "kept (one text a line with --lines)",
    )
    parser.add_argument(
        "--lines", action="store_true", help="--input holds one text a line, each translated apart"
    )
    parser.add_argument(
        "--sentence-splitting",
        choices=SPLITTING,
        default=SPLITTING[0],
        help="where the server cuts a text into inputs decoded apart (default: sentences, and "
        "line breaks)",
    )
    parser.add_argument(
        "--text-format",
        choices=FORMATS,
        help="html, xml: the markup is kept and only the text between it translated "
        "(default: plain)",
    )
    parser.add_argument(
        "--glossary",
        type=Path,
        help="SOURCE<TAB>TARGET terms, one a line: each source term found is translated as given",
    )
    parser.add_argument("--output", type=Path, help="write the translations here, one a line")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="calls in flight (64 texts a call)"
    )
    parser.add_argument(
        "--engine",
        choices=["grpc", "torch"],
        default="grpc",
        help="grpc: ask a server (default); torch: decode here with the PyTorch checkpoint",
    )
    _server_arguments(parser, TRANSLATE_TIMEOUT)
    parser.add_argument("--model", help="model name (default: the server's translator)")
    parser.add_argument("--model-version", help="model version (default: the newest loaded)")
    parser.add_argument(
        "--stream", action="store_true", help="show the output growing step by step"
    )
    parser.add_argument(
        "--alignment",
        type=Path,
        metavar="OUT.png",
        help="write the best hypothesis' cross-attention heatmap (OUT-1.png, ... for several)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="--engine torch: the checkpoint (also a run's last.pt, best.pt, snapshots/step-*.pt)",
    )
    parser.add_argument("--n-best", type=int, help="hypotheses per text")
    parser.add_argument("--json", action="store_true", help="scores, log-probs and alignment")
    _decoding_arguments(parser, None)


def _add_caption(commands) -> None:
    parser = commands.add_parser(
        "caption",
        help="caption images (over gRPC, or locally with --engine torch)",
        description="The image files are sent as they are (the server decodes them), "
        "64 a request; with more, a progress bar on stderr. One line per image in the order "
        "given, or RANK<TAB>SCORE<TAB>TEXT per hypothesis when there are several. Decoding "
        "options not given are left to the server over gRPC; with --engine torch they default "
        "to beam size 1, n-best 1 and the model's max length. --attention draws the best "
        "caption's attention over the image, word by word. An unreadable image file exits "
        "with status 2; a failed call prints `error: CODE: details` on stderr and exits with "
        "status 1.",
    )
    parser.add_argument("images", nargs="+", type=Path, help="image files (PNG, JPEG, WebP)")
    parser.add_argument(
        "--engine",
        choices=["grpc", "torch"],
        default="grpc",
        help="grpc: ask a server (default); torch: decode here with the PyTorch checkpoint",
    )
    _server_arguments(parser, CAPTION_TIMEOUT)
    parser.add_argument("--model", help="model name (default: the server's captioner)")
    parser.add_argument(
        "--model-version",
        "--version",
        dest="model_version",
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
        help="the response as JSON, with scores, log-probs and attention maps (--engine "
        "torch: one object per image)",
    )
    _decoding_arguments(parser, None)


def _add_health(commands) -> None:
    parser = commands.add_parser(
        "health",
        help="ask a server's gRPC health service; exit status 0 only when SERVING",
    )
    _server_arguments(parser, HEALTH_TIMEOUT)
    parser.add_argument(
        "--service",
        default="",
        metavar="NAME",
        help='a service name such as attnserve.v1.TranslationService (default "": the server)',
    )


def _add_score(commands) -> None:
    parser = commands.add_parser(
        "score",
        help="the log-probability of given translations (over gRPC)",
        description="Reads SOURCE<TAB>TARGET pairs, one a line, from --input or stdin and "
        "prints each pair's mean and total log-probability (MEAN<TAB>TOTAL), or the whole "
        "response with --json.",
    )
    _server_arguments(parser, TRANSLATE_TIMEOUT)
    parser.add_argument("--input", type=Path, help="pairs, one a line (default: stdin)")
    parser.add_argument("--model", default="", help="model name (default: the server's)")
    parser.add_argument("--model-version", default="", help="model version (default: newest)")
    parser.add_argument("--json", action="store_true", help="the response as JSON")


def _score(channel, args: argparse.Namespace) -> int:
    from service import client

    lines = args.input.read_text(encoding="utf-8") if args.input else sys.stdin.read()
    pairs = []
    for number, line in enumerate(lines.splitlines(), 1):
        if line.strip():
            source, tab, target = line.partition("\t")
            if not tab:
                raise _Failure(f"line {number}: SOURCE<TAB>TARGET expected")
            pairs.append((source, target))
    response = client.score(
        channel,
        pairs,
        model=args.model,
        version=args.model_version,
        timeout=args.timeout or TRANSLATE_TIMEOUT,
    )
    if args.json:
        print(_as_json(response))
        return 0
    for score in response.scores:
        print(f"{score.mean_log_prob:.4f}\t{score.log_prob:.4f}")
    return 0


def _add_export(commands) -> None:
    parser = commands.add_parser(
        "export", help="export to ONNX, prove parity, write a model repository"
    )
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--out", type=Path, required=True, help="the model repository root")
    parser.add_argument("--checkpoint", type=Path, help="default: the shipped checkpoint")
    parser.add_argument("--name", help="default: the model (translator, captioner)")
    parser.add_argument("--version", default="1")
    parser.add_argument("--variants", default="fp32,int8,fp16", help="of fp32, int8, fp16")
    parser.add_argument(
        "--graphs",
        choices=["traced", "built"],
        default="built",
        help="how the graphs are made: built op by op with fused attention (the translator's "
        "both, the captioner's step; fewer kernels, faster), or traced by torch.export",
    )
    parser.add_argument(
        "--int8-scales",
        choices=["per-channel", "per-tensor"],
        default="per-channel",
        help="int8 weights with one scale per output channel, or one per weight (onnxruntime "
        "1.32 fuses either into DynamicQuantizeMatMul; per channel is closer to fp32, per "
        "weight a few per cent faster)",
    )
    parser.add_argument("--data", type=Path, help="default: data/<model>")
    parser.add_argument(
        "--sentences", type=int, default=200, help="test sentences (or images) decoded"
    )


def _add_parity(commands) -> None:
    parser = commands.add_parser("parity", help="re-run the parity suite of a model version")
    parser.add_argument("directory", type=Path, help="MODEL_REPOSITORY/<model>/<version>")
    parser.add_argument("--checkpoint", type=Path, help="default: the manifest's source")
    parser.add_argument("--data", type=Path, help="default: data/<the manifest's model kind>")
    parser.add_argument("--sentences", type=int, default=200, help="or images")
    parser.add_argument("--json", action="store_true", help="the whole certificate as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_data,
        _add_train,
        _add_evaluate,
        _add_translate,
        _add_export,
        _add_parity,
        add_serve,
        _add_health,
        _add_score,
        _add_caption,
        add_repository,
    ):
        add(commands)
    return parser


def _check_engine_options(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    grpc_only: tuple[str, ...] = GRPC_ONLY,
    torch_decoding: dict = TORCH_DECODING,
    checkpoint: Path = SHIPPED_TRANSLATOR,
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


class _Failure(Exception):
    """A client command failed for a reason other than a gRPC status (exit status 1)."""


def _client_call(command, args: argparse.Namespace) -> int:
    """Runs a gRPC client command; a failed call is one line on stderr and exit status 1."""
    import grpc

    from service import client

    try:
        token = None
        if args.token_file is not None:
            try:
                token = args.token_file.read_text(encoding="utf-8").strip()
            except OSError as error:
                raise _Failure(f"--token-file: {error}") from error
        connection = client.connect(
            args.server,
            tls=args.tls,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            token=token,
        )
        with connection as channel:
            return command(channel, args)
    except grpc.RpcError as error:
        print(f"error: {client.status_text(error)}", file=sys.stderr)
        return 1
    except _Failure as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _health(channel, args: argparse.Namespace) -> int:
    from service import client

    status = client.health(channel, args.service, timeout=args.timeout or HEALTH_TIMEOUT)
    print(status)
    return 0 if status == "SERVING" else 1


def _request_options(args: argparse.Namespace, return_alignment: bool):
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


def _as_json(message) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(
        message,
        preserving_proto_field_name=True,
        indent=None,
        ensure_ascii=False,
        always_print_fields_with_no_presence=True,
    )


def _print_hypotheses(result, out=None) -> None:
    """The hypotheses of one translation or caption on `out` (default: stdout)."""
    out = out or sys.stdout
    hypotheses = result.hypotheses
    if len(hypotheses) == 1:
        print(hypotheses[0].text, file=out)
        return
    for rank, hypothesis in enumerate(hypotheses, 1):
        print(f"{rank}\t{hypothesis.score:.4f}\t{hypothesis.text}", file=out)


def _alignment_path(path: Path, index: int, count: int) -> Path:
    return path if count == 1 else path.with_name(f"{path.stem}-{index + 1}{path.suffix}")


def _write_alignment(path: Path, index: int, count: int, source: str, translation) -> None:
    from attnserve.alignment import draw_alignment

    if not translation.hypotheses or not translation.hypotheses[0].HasField("alignment"):
        raise _Failure(f"the server sent no alignment for text {index + 1}")
    try:
        draw_alignment(
            translation.hypotheses[0].alignment,
            _alignment_path(path, index, count),
            title=source if len(source) <= 80 else source[:77] + "...",
        )
    except (ValueError, OSError) as error:
        raise _Failure(f"alignment of text {index + 1}: {error}") from None


class _PartialLine:
    """Partial hypotheses on `stream` (default stdout): one line rewritten in place on a
    terminal, else one line each."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.open = False

    def show(self, text: str) -> None:
        if not self.tty:
            print(text, file=self.stream, flush=True)
            return
        width = shutil.get_terminal_size().columns - 1
        shown = text if len(text) <= width else "…" + text[-(width - 1) :]
        self.stream.write("\r\x1b[K" + shown)
        self.stream.flush()
        self.open = True

    def close(self) -> None:
        if self.open:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.open = False


def _stream_each(stream, inputs: list, field: str, noun: str, json: bool, partials) -> list:
    """Streams the inputs one after another: every event as JSON with `json`, else the
    growing best hypothesis on `partials` and the final one on stdout. Returns the results
    (`field` of each final response: translations, captions)."""
    results = []
    for index, item in enumerate(inputs):
        line = _PartialLine(partials)
        try:
            for event in stream(item):
                if json:
                    print(_as_json(event), flush=True)
                elif event.WhichOneof("event") == "partial":
                    line.show(event.partial.text)
                if event.WhichOneof("event") == "result":
                    results.extend(getattr(event.result, field))
        finally:
            line.close()
        if len(results) != index + 1:
            raise _Failure(f"the stream of {noun} {index + 1} ended without one result")
        if not json:
            _print_hypotheses(results[-1])
            sys.stdout.flush()
    return results


def _translate_stream(channel, args: argparse.Namespace, texts: list[str], options) -> list:
    from service import client

    return _stream_each(
        lambda text: client.translate_stream(channel, text, **_translate_call(args, options)),
        texts,
        "translations",
        "text",
        args.json,
        sys.stdout,
    )


def _translate_call(args: argparse.Namespace, options) -> dict:
    """`_call`'s keywords and where the server cuts the texts."""
    return {
        **_call(args, options),
        "sentence_splitting": args.sentence_splitting,
        "text_format": args.text_format or FORMATS[0],
        "glossary": _glossary(args.glossary),
    }


def _glossary(path: Path | None) -> list[tuple[str, str]]:
    """The terms of a glossary file (none without one)."""
    if path is None:
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise _Failure(f"--glossary: {error}") from error
    terms = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            source, tab, target = line.partition("\t")
            if not tab:
                raise _Failure(f"--glossary line {number}: SOURCE<TAB>TARGET expected")
            terms.append((source, target))
    return terms


def _call(args: argparse.Namespace, options, timeout: float = TRANSLATE_TIMEOUT) -> dict:
    """The model, version, options and timeout of a translate or caption call."""
    return {
        "model": args.model or "",
        "version": args.model_version or "",
        "options": options,
        "timeout": args.timeout or timeout,
    }


def _translate(channel, args: argparse.Namespace) -> int:
    from service import client

    try:
        options = _request_options(args, args.json or args.alignment is not None)
    except ValueError as error:  # a value the request cannot carry, such as a negative count
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.input is not None and not (args.lines or args.texts or args.stream):
        return _translate_document(channel, args, options)
    texts = args.texts or _read_lines(args.input)
    if texts is None:
        return 2
    if not texts:
        return 0
    if args.stream:
        translations = _translate_stream(channel, args, texts, options)
    else:
        many = len(texts) > client.TEXTS_PER_CHUNK
        progress = _Progress(len(texts), "translated", "text") if many else None
        try:
            response = client.translate_batches(
                channel,
                texts,
                concurrency=args.concurrency,
                progress=progress,
                **_translate_call(args, options),
            )
        finally:
            if progress is not None:
                progress.close()
        translations = response.translations
        with _output(args.output) as out:
            if args.json:
                print(_as_json(response), file=out)
            else:
                for translation in translations:
                    _print_hypotheses(translation, out)
    if args.alignment is not None:
        for index, (text, translation) in enumerate(zip(texts, translations, strict=True)):
            _write_alignment(args.alignment, index, len(texts), text, translation)
    return 0


def _translate_document(channel, args: argparse.Namespace, options) -> int:
    """--input as one document: cut at paragraph breaks into texts of at most the server's
    default max_text_chars, translated in one call, put back together."""
    from service import client

    try:
        text = args.input.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: {args.input}: {error}", file=sys.stderr)
        return 2
    parts = client.document_parts(text)
    texts = [p for p in parts if p.strip()]
    response = client.translate(channel, texts, **_translate_call(args, options)) if texts else None
    translated = iter(response.translations if response else [])
    result = "".join(next(translated).hypotheses[0].text if p.strip() else p for p in parts)
    with _output(args.output) as out:
        if args.json and response is not None:
            print(_as_json(response), file=out)
        else:
            out.write(result)
    return 0


def _read_lines(path: Path | None) -> list[str] | None:
    """Non-empty lines of a file, or of standard input when None (None: unreadable)."""
    if path is None:
        return [line.rstrip("\n") for line in sys.stdin if line.strip()]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: {path}: {error}", file=sys.stderr)
        return None
    return [line for line in lines if line.strip()]


@contextlib.contextmanager
def _output(path: Path | None):
    """Standard output, or the file `path` (written whole, UTF-8)."""
    if path is None:
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as out:
        yield out


class _Progress:
    """Inputs answered so far, on stderr: a tqdm bar when tqdm is installed, else a counter
    (rewritten in place on a terminal, one line per call otherwise). Called with the count."""

    def __init__(self, total: int, verb: str = "captioned", noun: str = "image") -> None:
        self.total, self.verb, self.noun = total, verb, noun
        self.tty = sys.stderr.isatty()
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, unit=noun, file=sys.stderr, dynamic_ncols=True)

    def __call__(self, done: int) -> None:
        text = f"{self.verb} {done}/{self.total} {self.noun}s"
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
        elif self.tty:
            sys.stderr.write(f"\r{text}")
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _read_images(paths: list[Path]) -> list[bytes] | None:
    """The bytes of every file, or None after one line on stderr per unreadable file."""
    images, failed = [], False
    for path in paths:
        try:
            images.append(path.read_bytes())
        except OSError as error:
            print(f"error: {path}: {error.strerror or error}", file=sys.stderr)
            failed = True
    return None if failed else images


def _figure_image(data: bytes):
    """The image as the server sees it (EXIF orientation of JPEG and WebP applied, transparency
    over white), as (H, W, 3) uint8, shrunk to fit FIGURE_SIDE."""
    import numpy as np
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as opened:
        image = ImageOps.exif_transpose(opened) if opened.format in ("JPEG", "WEBP") else opened
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            image = Image.alpha_composite(white, image.convert("RGBA"))
        image = image.convert("RGB")
        image.thumbnail((FIGURE_SIDE, FIGURE_SIDE), Image.BILINEAR)
        return np.asarray(image)


def _write_attention(path: Path, index: int, count: int, data: bytes, caption) -> None:
    from service import client
    from service.attention_figure import draw_attention

    if not caption.hypotheses or not caption.hypotheses[0].HasField("attention"):
        raise _Failure(f"the server sent no attention for image {index + 1}")
    best = caption.hypotheses[0]
    try:
        maps = client.attention_maps(best.attention)
        draw_attention(
            _figure_image(data),
            [token.token for token in best.attention.tokens],
            maps,
            path=_alignment_path(path, index, count),
            title=best.text if len(best.text) <= 80 else best.text[:77] + "...",
        )
    except (ValueError, OSError) as error:  # PIL's UnidentifiedImageError is an OSError
        raise _Failure(f"attention of image {index + 1}: {error}") from None


def _caption_stream(channel, args: argparse.Namespace, images: list[bytes], call: dict) -> list:
    from service import client

    return _stream_each(
        lambda image: client.caption_stream(channel, image, **call),
        images,
        "captions",
        "image",
        args.json,
        sys.stderr,
    )


def _caption(channel, args: argparse.Namespace) -> int:
    from service import client

    try:
        options = _request_options(args, False)
    except ValueError as error:  # a value the request cannot carry, such as a negative count
        print(f"error: {error}", file=sys.stderr)
        return 2
    images = _read_images(args.images)
    if images is None:
        return 2
    call = {
        **_call(args, options, CAPTION_TIMEOUT),
        "return_attention": args.json or args.attention is not None,
    }
    if args.stream:
        captions = _caption_stream(channel, args, images, call)
    else:
        progress = _Progress(len(images)) if len(images) > client.IMAGES_PER_REQUEST else None
        try:
            response = client.caption_batches(channel, images, progress=progress, **call)
        finally:
            if progress is not None:
                progress.close()
        captions = response.captions
        if args.json:
            print(_as_json(response))
        else:
            for caption in captions:
                _print_hypotheses(caption)
    if len(captions) != len(images):
        raise _Failure(f"{len(captions)} captions for {len(images)} images")
    if args.attention is not None:
        for index, (image, caption) in enumerate(zip(images, captions, strict=True)):
            _write_attention(args.attention, index, len(images), image, caption)
    return 0


def _training_budget(model: str) -> float:
    """The training options' own time budget of `model`, in minutes."""
    if model == "captioner":
        from models.caption_train import CaptionTrainOptions  # torch: training only

        return CaptionTrainOptions().max_minutes
    from models.train import TrainOptions

    return TrainOptions().max_minutes


def _model_defaults(args: argparse.Namespace) -> None:
    """Paths left unset follow the model: data/<model>, runs/<model>, the shipped checkpoint."""
    if args.command == "data":
        args.out = args.out or default_data(args.model)
        return
    args.data = args.data or default_data(args.model)
    if args.command == "train":
        args.run_dir = args.run_dir or Path("runs") / args.model
        args.out = args.out or shipped_checkpoint(args.model)
        if args.max_minutes is None:
            args.max_minutes = _training_budget(args.model)
    else:
        args.checkpoint = args.checkpoint or shipped_checkpoint(args.model)
        if args.command == "export":
            args.name = args.name or args.model
        elif args.model == "translator" and args.max_length is None:
            args.max_length = TORCH_DECODING["max_length"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "translate":
        _check_engine_options(parser, args)
        if args.engine == "grpc":
            return _client_call(_translate, args)
    if args.command == "health":
        return _client_call(_health, args)
    if args.command == "score":
        return _client_call(_score, args)
    if args.command == "serve":
        return serve(args)
    if args.command == "repository":
        return repository(args)
    if args.command in ("data", "train", "evaluate", "export"):
        _model_defaults(args)
    if args.command == "train" and (args.pack or args.resume_from):
        from models import run_state  # torch-side

        if args.pack:
            print(json.dumps(run_state.pack_run(args.run_dir, args.pack)))
            return 0
        if not (args.run_dir / "last.pt").exists():
            print(
                json.dumps(
                    {"resumed": str(args.resume_from)}
                    | run_state.unpack_run(args.resume_from, args.run_dir)
                )
            )
    if args.command in ("data", "train", "evaluate") and args.model == "captioner":
        from models import caption_commands  # torch-side: imported only for these commands

        return getattr(caption_commands, args.command)(args)
    if args.command == "caption":
        caption_torch = {**TORCH_DECODING, "max_length": None}  # None: the model's own limit
        _check_engine_options(parser, args, CAPTION_GRPC_ONLY, caption_torch, SHIPPED_CAPTIONER)
        if args.engine == "grpc":
            return _client_call(_caption, args)
        from models import caption_commands  # torch-side: imported only for --engine torch

        return caption_commands.caption(args)
    if args.command in ("data", "train", "evaluate", "translate"):
        from models import commands  # torch-side: imported only for these commands

        return getattr(commands, args.command)(args)
    if args.command in ("export", "parity"):
        from export import commands  # torch-side as well

        return getattr(commands, args.command)(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
