"""`attnserve`: the commands of every group, and the dispatch to the one named."""

from __future__ import annotations

import argparse
import os
import sys

from attnserve.cli import caption, exporting, health, serve, training, translate
from attnserve.cli.render import escape_unencodable
from attnserve.cli.subcommand import Failure, Subcommand

DESCRIPTION = "The `attnserve` command line."
# every command, in the order `attnserve --help` lists them
COMMANDS: tuple[type[Subcommand], ...] = (
    *training.COMMANDS,
    *translate.COMMANDS,
    *caption.COMMANDS,
    *exporting.COMMANDS,
    *serve.COMMANDS,
    *health.COMMANDS,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description=DESCRIPTION)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command().subparser_init(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Subcommand = args.handler
    command.check(args)
    escape_unencodable(sys.stdout)  # a text out of a latin-1 terminal's reach: no traceback
    try:
        return command.run(args)
    except Failure as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left (`| head`): stop as a pipeline expects
        # what stdout still buffers goes nowhere, not to a second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:  # Ctrl-C: its calls were cancelled with their channel
        return 130  # 128 + SIGINT, as a shell reports a command it interrupted
