"""Paths as text any output can carry (JSON, a UTF-8 terminal or log), for the command line
and the torch-side commands alike."""

from __future__ import annotations

import os


def file_name(path: str | os.PathLike[str]) -> str:
    """`path` (or a text that names paths) with the bytes of a name that are not UTF-8 as
    \\xNN escapes: Python keeps such bytes as surrogates, which would make a JSON's bytes
    invalid UTF-8."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
