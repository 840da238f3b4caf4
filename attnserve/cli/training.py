"""`data`, `train` and `evaluate`: a model's corpus, its training and its scores. Torch-side:
each command imports its model's commands (`models.commands`, `models.caption_commands`)
only when it runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

from attnserve.cli.options import (
    MODELS,
    TORCH_DECODING,
    add_decoding,
    count,
    default_data,
    positive,
    shipped_checkpoint,
)
from attnserve.cli.subcommand import Subcommand, refusals
from service.runtime.documents import SPLITTING


def model_commands(model: str) -> ModuleType:
    """The torch-side commands of `model` (imported here: torch)."""
    if model == "captioner":
        from models import caption_commands

        return caption_commands
    from models import commands

    return commands


class Data(Subcommand):
    name = "data"
    help = "build a training corpus from Debian packages"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from models.caption_data import DataOptions  # numpy and Pillow: the defaults shown

        scenes = DataOptions()
        parser.add_argument("model", choices=MODELS)
        parser.add_argument("--out", type=Path, help="default: data/<model>")
        parser.add_argument(
            "--train-scenes",
            type=positive,
            default=scenes.train,
            help=f"captioner: training scenes (default {scenes.train})",
        )
        parser.add_argument(
            "--test-scenes",
            type=positive,
            default=scenes.test_per_part,
            help=f"captioner: scenes per test part (default {scenes.test_per_part})",
        )
        parser.add_argument(
            "--families",
            type=_training_families,
            default=scenes.families,
            help="captioner: the artwork families training scenes are drawn in, comma-separated "
            f"(default {','.join(scenes.families)})",
        )
        parser.add_argument(
            "--no-styles",
            dest="styles",
            action="store_false",
            help="captioner: training objects keep their family's look (no palette swaps, "
            "posterising, flat colours or line art)",
        )
        parser.add_argument(
            "--catalogs",
            action="store_true",
            help="translator: modern pairs from Debian gettext catalogs (cached in "
            "data/debian-cache) and CLDR, back-translated fortunes, the modern and everyday "
            "test parts",
        )
        parser.add_argument(
            "--modern",
            type=Path,
            metavar="DIR",
            help="translator: mix the Bible corpus and the --catalogs build in --out into DIR "
            "(train, dev and every test part) for the modern translator",
        )

    def run(self, args: argparse.Namespace) -> int:
        args.out = args.out or default_data(args.model)
        with _missing_inputs(f"data {args.model}"):
            return model_commands(args.model).data(args)


def _training_families(text: str) -> tuple[str, ...]:
    from models.caption_data import check_families

    try:
        return check_families(tuple(name.strip() for name in text.split(",") if name.strip()))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class Train(Subcommand):
    name = "train"
    help = "train a model (resumes an existing run)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", choices=MODELS)
        parser.add_argument("--data", type=Path, help="default: data/<model>")
        parser.add_argument("--run-dir", type=Path, help="default: runs/<model>")
        parser.add_argument("--out", type=Path, help="default: the shipped checkpoint")
        parser.add_argument("--preset", choices=["base", "tiny"], default="base")
        parser.add_argument("--vocab-size", type=int, help="tokenizer size (default: the preset's)")
        _add_budget(parser)
        _add_run_files(parser)

    def run(self, args: argparse.Namespace) -> int:
        args.data = args.data or default_data(args.model)
        args.run_dir = args.run_dir or Path("runs") / args.model
        args.out = args.out or shipped_checkpoint(args.model)
        if args.max_minutes is None:
            args.max_minutes = _training_budget(args.model)
        with _missing_inputs(f"train {args.model}"):
            if args.pack or args.resume_from:
                from models import run_state  # torch

                if args.pack:
                    print(json.dumps(run_state.pack_run(args.run_dir, args.pack)))
                    return 0
                if not (args.run_dir / "last.pt").exists():
                    unpacked = run_state.unpack_run(args.resume_from, args.run_dir)
                    print(json.dumps({"resumed": str(args.resume_from)} | unpacked))
            return model_commands(args.model).train(args)


def _missing_inputs(what: str):
    """Data, a checkpoint or a packed run that is missing or not what it should be, or a
    folder that cannot be written: one line of error naming the file, not a traceback."""
    from models.checkpoint import UnreadableCheckpoint  # torch

    return refusals(what, OSError, UnreadableCheckpoint)


def _add_budget(parser: argparse.ArgumentParser) -> None:
    """How long and on what a run trains."""
    parser.add_argument(
        "--max-minutes", type=float, help="time budget (default: the model's training options')"
    )
    parser.add_argument(
        "--leg-minutes",
        type=float,
        default=0.0,
        help="captioner: train this many minutes of the budget, then stop (0: all of it)",
    )
    parser.add_argument(
        "--batch-size", type=positive, default=64, help="captioner: images per step"
    )
    parser.add_argument(
        "--rand-conv",
        type=float,
        default=0.0,
        help="captioner: share of each batch's images restyled by a random convolution",
    )
    parser.add_argument(
        "--mixstyle",
        type=float,
        default=0.0,
        help="captioner: probability a batch's feature styles are mixed (MixStyle)",
    )
    parser.add_argument("--max-epochs", type=positive, default=1000)
    parser.add_argument("--max-steps", type=count, default=0, help="0: no limit")
    parser.add_argument(
        "--max-tokens", type=positive, default=4000, help="tokens per batch and rank"
    )
    parser.add_argument("--warmup-steps", type=positive, default=500)
    parser.add_argument("--lr-scale", type=float, default=0.7)
    parser.add_argument("--dev-sentences", type=count, default=0, help="0: the whole dev split")
    parser.add_argument("--checkpoint-every", type=positive, default=100)
    parser.add_argument(
        "--decay-steps",
        type=count,
        default=0,
        help="captioner: the learning rate decays over this many steps (0: over the time budget)",
    )
    parser.add_argument(
        "--evaluate-every",
        type=count,
        default=500,
        help="captioner: steps between dev scores inside an epoch (0: at its end only)",
    )
    parser.add_argument(
        "--threads", type=count, default=0, help="torch threads per process (0: torch's own)"
    )


def _add_run_files(parser: argparse.ArgumentParser) -> None:
    """What a run keeps, packs, resumes from or starts from."""
    parser.add_argument(
        "--average",
        type=count,
        default=0,
        help="translator: keep the weights every --snapshot-every steps and ship the mean of "
        "the last N when it beats the best checkpoint on dev (0: off)",
    )
    parser.add_argument("--snapshot-every", type=positive, default=400)
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


def _training_budget(model: str) -> float:
    """The training options' own time budget of `model`, in minutes."""
    if model == "captioner":
        from models.caption_train import CaptionTrainOptions  # torch

        return CaptionTrainOptions().max_minutes
    from models.train import TrainOptions

    return TrainOptions().max_minutes


class Evaluate(Subcommand):
    name = "evaluate"
    help = (
        "translator: BLEU and chrF; captioner: exact match, BLEU-4, CIDEr, attention "
        "localisation; per test part"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", choices=MODELS)
        parser.add_argument(
            "--split",
            choices=["dev", "test", "test-modern", "test-everyday", "all"],
            default="test",
            help="test-modern, test-everyday: the translator's parts of `data translator "
            "--catalogs`; all: every test part the data has (bible, modern, everyday; the "
            "captioner's test split)",
        )
        parser.add_argument("--data", type=Path, help="default: data/<model>")
        parser.add_argument(
            "--checkpoint",
            type=Path,
            help="default: the shipped checkpoint; translator: also a run's last.pt, best.pt "
            "or snapshots/step-*.pt",
        )
        parser.add_argument("--baseline", choices=["apertium"], help="score a peer instead")
        parser.add_argument(
            "--versus", choices=["apertium"], help="translator: score a peer too, on the same parts"
        )
        parser.add_argument(
            "--limit", type=count, default=0, help="first N sentences only (0: all)"
        )
        parser.add_argument(
            "--sentence-splitting",
            choices=SPLITTING,
            default=SPLITTING[0],
            help="translator: cut each test line as the server cuts a text (default: sentences)",
        )
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
        parser.add_argument(
            "--free",
            action="store_true",
            help="captioner: decode without the checkpoint's caption grammar",
        )
        # max length: the translator's 256, the captioner's own limit
        # PyTorch decoding alone: no words for the server to tokenize
        add_decoding(parser, {**TORCH_DECODING, "max_length": None}, words=False)

    def run(self, args: argparse.Namespace) -> int:
        args.data = args.data or default_data(args.model)
        args.checkpoint = args.checkpoint or shipped_checkpoint(args.model)
        if args.model == "translator" and args.max_length is None:
            args.max_length = TORCH_DECODING["max_length"]
        with _missing_inputs(f"evaluate {args.model}"):
            return model_commands(args.model).evaluate(args)


COMMANDS = (Data, Train, Evaluate)
