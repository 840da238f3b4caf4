"""`attnserve serve`: the gRPC server on the bundled model repository (torch-free)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import fields
from pathlib import Path

FLAG_HELP = {
    "listen": "gRPC HOST:PORT (port 0: the OS chooses)",
    "metrics_listen": "Prometheus HOST:PORT",
    "repository": "model repository root",
    "workers": "worker processes (0: one per core, or per GPU)",
    "batching": "continuous or request",
    "ready_file": "write the ports (JSON) here once serving",
}


def add_serve(commands) -> None:
    from service.config import ServerConfig

    parser = commands.add_parser(
        "serve",
        help="serve the model repository over gRPC",
        description="Settings: embedded defaults, then --config FILE (TOML), then ATTNSERVE_* "
        "environment variables, then these flags.",
    )
    parser.add_argument("--config", type=Path, help="TOML file of settings")
    parser.add_argument("--print-config", action="store_true", help="print the settings, exit")
    for field in fields(ServerConfig):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, dest=field.name, default=None, help=FLAG_HELP.get(field.name))


def serve(args: argparse.Namespace) -> int:
    from service.config import ServerConfig, load_config
    from service.errors import ServiceError
    from service.server import serve as run_server

    logging.basicConfig(format="attnserve: %(message)s", level=logging.INFO, stream=sys.stderr)
    overrides = {f.name: getattr(args, f.name) for f in fields(ServerConfig)}
    try:
        config = load_config(args.config, overrides=overrides)
        if args.print_config:
            for field in fields(config):
                value = getattr(config, field.name)
                if value is not None:
                    print(f"{field.name} = {_toml(value)}")
            return 0
        return asyncio.run(run_server(config))
    except ServiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):
        return f'"{value}"'
    return str(value)
