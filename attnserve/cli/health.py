"""`health`: a server's gRPC health service."""

from __future__ import annotations

import argparse

from attnserve.cli import remote
from attnserve.cli.options import add_server, utf8
from attnserve.cli.subcommand import Subcommand

TIMEOUT = 5.0  # seconds


class Health(Subcommand):
    name = "health"
    help = "ask a server's gRPC health service; exit status 0 only when SERVING"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_server(parser, TIMEOUT)
        parser.add_argument(
            "--service",
            default="",
            type=utf8,
            metavar="NAME",
            help='a service name such as attnserve.v1.TranslationService (default "": the server)',
        )

    def run(self, args: argparse.Namespace) -> int:
        return remote.client_call(_health, args)


def _health(channel, args: argparse.Namespace) -> int:
    from service import client

    status = client.health(channel, args.service, timeout=args.timeout or TIMEOUT)
    print(status)
    return 0 if status == "SERVING" else 1


COMMANDS = (Health,)
