"""The `attnserve` command line.

Torch-side commands (data, train, evaluate, translate --engine torch) are imported only when
they run, so serving commands start without torch installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SHIPPED_TRANSLATOR = Path(__file__).resolve().parents[1] / "models" / "checkpoints" / "translator"
TRANSLATOR_DATA = Path("data/translator")


def _decoding_arguments(parser: argparse.ArgumentParser, beam_size: int) -> None:
    parser.add_argument("--beam-size", type=int, default=beam_size)
    parser.add_argument("--max-length", type=int, default=256, help="decoding steps at most")
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--temperature", type=float, default=0.0, help="> 0 samples")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k best")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    parser.add_argument("--seed", type=int, help="sampling seed")


def _add_data(commands) -> None:
    parser = commands.add_parser("data", help="build a training corpus from Debian packages")
    parser.add_argument("model", choices=["translator"])
    parser.add_argument("--out", type=Path, default=TRANSLATOR_DATA)


def _add_train(commands) -> None:
    parser = commands.add_parser("train", help="train a model (resumes an existing run)")
    parser.add_argument("model", choices=["translator"])
    parser.add_argument("--data", type=Path, default=TRANSLATOR_DATA)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/translator"))
    parser.add_argument("--out", type=Path, default=SHIPPED_TRANSLATOR)
    parser.add_argument("--preset", choices=["base", "tiny"], default="base")
    parser.add_argument("--vocab-size", type=int, help="tokenizer size (default: the preset's)")
    parser.add_argument("--max-minutes", type=float, default=80.0)
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=0, help="0: no limit")
    parser.add_argument("--max-tokens", type=int, default=4000, help="tokens per batch and rank")
    parser.add_argument("--warmup-steps", type=int, default=500)
    parser.add_argument("--lr-scale", type=float, default=0.7)
    parser.add_argument("--dev-sentences", type=int, default=0, help="0: the whole dev split")
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per process")


def _add_evaluate(commands) -> None:
    parser = commands.add_parser("evaluate", help="BLEU and chrF on a split")
    parser.add_argument("model", choices=["translator"])
    parser.add_argument("--split", choices=["dev", "test"], default="test")
    parser.add_argument("--data", type=Path, default=TRANSLATOR_DATA)
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED_TRANSLATOR)
    parser.add_argument("--baseline", choices=["apertium"], help="score a peer instead")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    _decoding_arguments(parser, beam_size=4)


def _add_translate(commands) -> None:
    parser = commands.add_parser("translate", help="translate Spanish text to English")
    parser.add_argument("texts", nargs="*", help="texts; read one a line from stdin when none")
    parser.add_argument("--engine", choices=["torch"], default="torch")
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED_TRANSLATOR)
    parser.add_argument("--n-best", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="scores, log-probs and alignment")
    _decoding_arguments(parser, beam_size=4)


def _add_export(commands) -> None:
    parser = commands.add_parser(
        "export", help="export to ONNX, prove parity, write a model repository"
    )
    parser.add_argument("model", choices=["translator"])
    parser.add_argument("--out", type=Path, required=True, help="the model repository root")
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED_TRANSLATOR)
    parser.add_argument("--name", default="translator")
    parser.add_argument("--version", default="1")
    parser.add_argument("--variants", default="fp32,int8,fp16", help="of fp32, int8, fp16")
    parser.add_argument("--data", type=Path, default=TRANSLATOR_DATA)
    parser.add_argument("--sentences", type=int, default=200, help="test sentences decoded")


def _add_parity(commands) -> None:
    parser = commands.add_parser("parity", help="re-run the parity suite of a model version")
    parser.add_argument("directory", type=Path, help="MODEL_REPOSITORY/<model>/<version>")
    parser.add_argument("--checkpoint", type=Path, help="default: the manifest's source")
    parser.add_argument("--data", type=Path, default=TRANSLATOR_DATA)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="the whole certificate as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_add_data, _add_train, _add_evaluate, _add_translate, _add_export, _add_parity):
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("data", "train", "evaluate", "translate"):
        from models import commands  # torch-side: imported only for these commands

        return getattr(commands, args.command)(args)
    if args.command in ("export", "parity"):
        from export import commands  # torch-side as well

        return getattr(commands, args.command)(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
