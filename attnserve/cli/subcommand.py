"""What an `attnserve` command is: a name, its flags, its checks and its run."""

from __future__ import annotations

import argparse
import contextlib
from typing import ClassVar


class Failure(Exception):
    """A command failed for a reason other than a gRPC status: `error: MESSAGE` on stderr and
    exit status 1."""


@contextlib.contextmanager
def refusals(what: str, *kinds: type[Exception]):
    """An error of `kinds` raised inside (a missing input, a file of something else) as a
    Failure `what: error`: one line, not a traceback."""
    try:
        yield
    except kinds as refused:
        raise Failure(f"{what}: {refused}") from refused


class Subcommand:
    """One `attnserve NAME` command.

    `subparser_init` adds the command's parser and points the parsed arguments back at the
    command (`args.handler`). `check` then refuses what argparse cannot (`self.parser.error`:
    usage on stderr, exit status 2) and completes defaults; `run` does the work and returns
    the exit status. Heavy imports (torch, models, export) belong inside `run`, so that
    building the parser stays torch-free.
    """

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str | None] = None

    def subparser_init(self, subparsers) -> argparse.ArgumentParser:
        self.parser = subparsers.add_parser(self.name, help=self.help, description=self.description)
        self.add_arguments(self.parser)
        self.parser.set_defaults(handler=self)
        return self.parser

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The command's arguments (none unless it declares some)."""

    def check(self, args: argparse.Namespace) -> None:
        """Nothing to refuse or complete unless the command says so."""

    def run(self, args: argparse.Namespace) -> int:
        """Runs the command; returns its exit status."""
        raise NotImplementedError(self.name)
