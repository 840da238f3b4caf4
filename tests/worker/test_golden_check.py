"""The start-up check decodes a version's golden set as the certificate decoded it: a
translator's inputs under the length bound relative to their sources that every request
gets, so a model that never ends its outputs (a random one) passes the check its
certificate's golden set holds it to, and a wrong expected token still fails it."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_transformer

from service.runtime.controls import length_limit
from service.runtime.decoding import DEFAULT_MAX_LENGTH_RATIO
from service.runtime.errors import ModelRepositoryError
from service.runtime.repository import GOLDEN
from service.worker.scheduler import Scheduler
from service.worker.startup import golden_check

torch = pytest.importorskip("torch")

SOURCES = [[6, 7, 8, 9, 10], [11, 12, 13]]


@pytest.fixture(scope="module")
def endless(tmp_path_factory, shipped_translator):
    """A tiny translator version whose greedy outputs never end, with its golden set."""
    from export.certify import golden_set
    from export.repository import write_version

    tokenizer = shipped_translator[1]
    model = tiny_transformer(vocab_size=tokenizer.vocab_size)
    with torch.no_grad():  # one token outweighs every other, </s> included
        model.source_embedding.weight.mul_(60.0)
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    version = write_version(
        model, tokenizer.model_file, directory, "tiny", "1", ("fp32",), method="built"
    )
    golden = golden_set(version, SOURCES)
    (directory / GOLDEN).write_text(json.dumps(golden), encoding="utf-8")
    return version, golden


def _engine(version):
    from service.runtime.onnx_engine import OnnxEngine

    return OnnxEngine(version, "fp32", cache="in_place")


def test_a_golden_set_of_outputs_cut_at_their_bound_passes_the_check(endless):
    version, golden = endless
    for entry in golden:  # each decode ran to its source's bound, short of max_length
        limit = entry["max_length"]
        bound = length_limit(limit, DEFAULT_MAX_LENGTH_RATIO, len(entry["source_ids"]))
        assert len(entry["expected_ids"]) == bound < limit
    assert golden_check(Scheduler(_engine(version)), version, "fp32") == len(SOURCES)


def test_a_wrong_expected_token_still_fails_it(endless, tmp_path):
    version, golden = endless
    changed = [dict(entry) for entry in golden]
    for entry in changed:
        entry["expected_ids"] = [entry["expected_ids"][0] + 1, *entry["expected_ids"][1:]]
    (version.directory / GOLDEN).write_text(json.dumps(changed), encoding="utf-8")
    try:
        with pytest.raises(ModelRepositoryError, match=r"fails its golden set: golden input 0"):
            golden_check(Scheduler(_engine(version)), version, "fp32")
    finally:
        (version.directory / GOLDEN).write_text(json.dumps(golden), encoding="utf-8")
