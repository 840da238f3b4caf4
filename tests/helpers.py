"""Helpers shared by the test suites: paths and small random models."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TRANSLATOR = ROOT / "models" / "checkpoints" / "translator"
TRANSLATOR_DATA = ROOT / "data" / "translator"
SHIPPED_CAPTIONER = ROOT / "models" / "checkpoints" / "captioner"
CAPTIONER_DATA = ROOT / "data" / "captioner"


def tiny_transformer(seed: int = 0, **overrides):
    """A small random model whose outputs are far from uniform (weights scaled up)."""
    import torch

    from models.config import PRESETS
    from models.transformer import Transformer

    config = PRESETS["tiny"]
    if overrides:
        from dataclasses import replace

        config = replace(config, **overrides)
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3.0)
    return model


def random_sources(vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, vocab, size=n).tolist() for n in lengths]


def run_bench(
    module: str, arguments: list[str], markdown: Path, timeout: float
) -> tuple[dict, str]:
    """(JSON report, Markdown) of `python -m <module> --quick --json ... --markdown F`."""
    import json
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", module, "--quick", "--json", *arguments]
    done = subprocess.run(
        [*command, "--markdown", str(markdown)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout), markdown.read_text(encoding="utf-8")
