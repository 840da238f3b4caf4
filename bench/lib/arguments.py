"""The tail of a server bench's command line: where the models are, where the report goes."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from bench.lib.paths import REPOSITORY
from bench.lib.reports import print_report


def run_server_bench(parser: argparse.ArgumentParser, run, argv: list[str] | None) -> int:
    """The tail of a server bench's command line: `--repository` and `--json` added to
    `parser`, `run(args)` (a coroutine) run, its report printed."""
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print_report(asyncio.run(run(args)), args.json)
    return 0
