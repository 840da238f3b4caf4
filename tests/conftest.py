"""Shared fixtures: the shipped translator, the built corpus, and a tiny random model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TRANSLATOR = ROOT / "models" / "checkpoints" / "translator"
TRANSLATOR_DATA = ROOT / "data" / "translator"


@pytest.fixture(scope="session")
def translator_data() -> Path:
    """The corpus built from the Debian packages (built once when missing)."""
    from models.corpus import build_translator_data

    if not (TRANSLATOR_DATA / "test.es").exists():
        build_translator_data(TRANSLATOR_DATA)
    return TRANSLATOR_DATA


@pytest.fixture(scope="session")
def shipped_translator():
    """(model, tokenizer) of the trained translator shipped in the repository."""
    from models.checkpoint import load_checkpoint

    return load_checkpoint(SHIPPED_TRANSLATOR)


@pytest.fixture(scope="session")
def test_sentences(translator_data) -> list[str]:
    from models.corpus import read_split

    spanish, _ = read_split(translator_data, "test")
    return spanish[:12]


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


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu run only where onnxruntime has a CUDA execution provider."""
    try:
        import onnxruntime

        has_cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA execution provider")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
