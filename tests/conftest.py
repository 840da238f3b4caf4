"""Shared fixtures: the shipped translator, the built corpus; the gpu marker's skip."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SHIPPED_TRANSLATOR, TRANSLATOR_DATA


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
