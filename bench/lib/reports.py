"""A bench's report: as JSON on stdout and in a file, and a row of a Markdown table."""

from __future__ import annotations

import json
from pathlib import Path


def print_report(report: dict, path: Path | None) -> None:
    """A bench's JSON report on stdout, and in `path` when one is given."""
    text = json.dumps(report, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n")


def table_row(cells) -> str:
    """One row of a Markdown table."""
    return "| " + " | ".join(map(str, cells)) + " |"
