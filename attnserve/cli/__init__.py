"""The `attnserve` command line: a module per group of commands, each command a `Subcommand`
(`subcommand.py`) that `main.py` collects and dispatches to.

Torch-side commands (data, train, evaluate, export, parity, translate and caption --engine
torch) import torch only when they run, so the server and the gRPC client (translate, caption,
score, health) start without it.
"""

from attnserve.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
