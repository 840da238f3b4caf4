"""Where the project's data, checkpoints and model repository lie."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "data" / "repository"
TRANSLATOR_DATA = ROOT / "data" / "translator"
TEST_SOURCES = TRANSLATOR_DATA / "test.es"
CAPTIONER_DATA = ROOT / "data" / "captioner"
