"""The shipped translator exported once per test session into a temporary model repository,
with its parity certificate."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def exported_translator(tmp_path_factory, translator_data):
    """(ModelVersion, certificate) of the shipped translator, fp32 and int8."""
    from helpers import SHIPPED_TRANSLATOR

    from export.certify import MIN_SENTENCES, certify
    from export.repository import write_version
    from models.checkpoint import WEIGHTS, load_checkpoint
    from models.corpus import read_split
    from service.repository import sha256

    model, tokenizer = load_checkpoint(SHIPPED_TRANSLATOR)
    directory = tmp_path_factory.mktemp("repository") / "translator" / "1"
    source = {"checkpoint": str(SHIPPED_TRANSLATOR), "sha256": sha256(SHIPPED_TRANSLATOR / WEIGHTS)}
    model_version = write_version(
        model, tokenizer.model_file, directory, "translator", "1", ("fp32", "int8"), source
    )
    spanish, english = read_split(translator_data, "test")
    sources = tokenizer.encode_batch(spanish[:MIN_SENTENCES])
    certificate = certify(model_version, SHIPPED_TRANSLATOR, sources, english[:MIN_SENTENCES])
    from service.repository import verify

    return verify(directory), certificate
