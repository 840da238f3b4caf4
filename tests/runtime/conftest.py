"""Fixtures of the runtime's tests: a tiny random translator built op by op, once."""

from __future__ import annotations

import pytest
from helpers import SHIPPED_TRANSLATOR, built_tiny_translator


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    """(model, version): a tiny random translator (fp32; its in-place, static and lean steps
    and the helper ops) with the shipped translator's tokenizer."""
    from service.runtime.tokenizer import Tokenizer

    tokenizer = Tokenizer(SHIPPED_TRANSLATOR / "tokenizer.model")
    directory = tmp_path_factory.mktemp("runtime-repository") / "tiny" / "1"
    return built_tiny_translator(directory, tokenizer, 7, ("fp32",))
