"""Where the checkpoints shipped in the repository live, once (no torch: the command line and
the tests read these paths without loading a model)."""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
SHIPPED_TRANSLATOR = CHECKPOINTS / "translator"
SHIPPED_CAPTIONER = CHECKPOINTS / "captioner"
