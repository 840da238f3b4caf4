"""`export` (PyTorch to ONNX, parity, a model repository version) and `parity` (a version's
suite again). Torch-side: `export.commands` is imported only when they run."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnserve.cli.options import MODELS, default_data, positive, shipped_checkpoint
from attnserve.cli.subcommand import Subcommand, refusals
from service.runtime.choices import VARIANTS


class Export(Subcommand):
    name = "export"
    help = "export to ONNX, prove parity, write a model repository"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "model",
            choices=(*MODELS, "hf"),
            help="one of ours, or hf: a Hugging Face model directory (Marian, M2M100, NLLB, "
            "mBART-50)",
        )
        parser.add_argument("directory", nargs="?", type=Path, help="hf: the model directory")
        parser.add_argument("--out", type=Path, required=True, help="the model repository root")
        parser.add_argument("--checkpoint", type=Path, help="default: the shipped checkpoint")
        parser.add_argument("--name", help="default: the model (translator, captioner)")
        parser.add_argument("--version", default="1")
        parser.add_argument(
            "--variants",
            type=_variants,
            default="fp32,int8,fp16",
            help=f"comma-separated, of {', '.join(VARIANTS)}",
        )
        parser.add_argument(
            "--graphs",
            choices=["traced", "built"],
            default="built",
            help="how the graphs are made: built op by op with fused attention (a "
            "translator's every graph, ours or a Hugging Face model's; the captioner's step; "
            "fewer kernels, faster), or traced by torch.export",
        )
        parser.add_argument(
            "--int8-scales",
            choices=["per-channel", "per-tensor"],
            default="per-channel",
            help="int8 weights with one scale per output channel, or one per weight "
            "(onnxruntime 1.32 fuses either into DynamicQuantizeMatMul; per channel is closer "
            "to fp32, per weight a few per cent faster)",
        )
        parser.add_argument("--data", type=Path, help="default: data/<model>")
        parser.add_argument(
            "--sentences", type=positive, default=200, help="test sentences (or images) decoded"
        )
        hf = parser.add_argument_group("hf")
        hf.add_argument(
            "--texts",
            type=Path,
            help="hf: the certificate's source texts, one a line (default: the Spanish test "
            "sentences of data/translator)",
        )
        hf.add_argument("--references", type=Path, help="hf: their translations, one a line")
        hf.add_argument(
            "--source-language",
            default="",
            help="hf: the texts' language; a Marian model's source where its tokenizer "
            "does not name it",
        )
        hf.add_argument(
            "--target-language",
            default="",
            help="hf: the language certified (a multilingual model's); a Marian model's "
            "target where its tokenizer does not name it",
        )
        hf.add_argument(
            "--reads",
            help="hf: the languages the version declares it reads, comma-separated (default: "
            "every one the model names; mBART-50's one-to-many model: en_XX)",
        )
        hf.add_argument(
            "--writes",
            help="hf: the languages it declares it writes (mBART-50's many-to-one model: en_XX)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from export import commands  # torch

        if args.model == "hf":
            if args.directory is None or not args.name:
                self.parser.error("export hf needs DIRECTORY and --name")
            # a directory refused: its architecture, tokenizer, languages; unreadable
            return _refused(commands.export_hf, args, f"export hf {args.directory}")
        args.data = args.data or default_data(args.model)
        args.checkpoint = args.checkpoint or shipped_checkpoint(args.model)
        args.name = args.name or args.model
        return _refused(commands.export, args, f"export {args.model}")


def _variants(text: str) -> str:
    """Variant names, comma-separated: each one the runtime serves (not left out unseen, the
    export done without it)."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, unknown))}: not a variant (of {', '.join(VARIANTS)})"
        )
    return ",".join(names)


class Parity(Subcommand):
    name = "parity"
    help = "re-run the parity suite of a model version"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("directory", type=Path, help="MODEL_REPOSITORY/<model>/<version>")
        parser.add_argument("--checkpoint", type=Path, help="default: the manifest's source")
        parser.add_argument("--data", type=Path, help="default: data/<the manifest's model kind>")
        parser.add_argument("--sentences", type=positive, default=200, help="or images")
        parser.add_argument("--json", action="store_true", help="the whole certificate as JSON")

    def run(self, args: argparse.Namespace) -> int:
        from export import commands  # torch

        return _refused(commands.parity, args, f"parity {args.directory}")


def _refused(command, args: argparse.Namespace, what: str) -> int:
    """`command(args)`, a refusal (a checkpoint, data or version that is missing, unreadable
    or fails its checks; too few test inputs) one line of error, not a traceback."""
    from service.runtime.errors import ModelRepositoryError

    with refusals(what, ModelRepositoryError, ValueError, OSError):
        return command(args)


COMMANDS = (Export, Parity)
