"""The model repository's layout: every `<model>/<version>/manifest.json`, hidden names left
out (a version written aside under one is not read half written); a manifest of another
layout refused, naming every problem."""

from __future__ import annotations

import json

import pytest

from service.runtime.errors import ModelRepositoryError
from service.runtime.repository import (
    FORMAT_VERSION,
    MANIFEST,
    manifests,
    sha256,
    unchanged,
    verify,
)


def test_manifests_leave_out_hidden_versions_and_models(tmp_path):
    for directory in (
        "translator/1",
        "translator/2",
        "translator/.incoming-3",
        "captioner/1",
        ".trash/1",
    ):
        (tmp_path / directory).mkdir(parents=True)
        (tmp_path / directory / MANIFEST).write_text("{}")
    (tmp_path / "translator" / "4").mkdir()  # no manifest (yet): not a version
    found = [str(path.relative_to(tmp_path).parent) for path in manifests(tmp_path)]
    assert found == ["captioner/1", "translator/1", "translator/2"]


def _version(tmp_path, **manifest):
    (tmp_path / MANIFEST).write_text(json.dumps({"format_version": FORMAT_VERSION, **manifest}))
    return tmp_path


MODEL = {"name": "translator", "version": "1", "kind": "transformer"}


def test_a_manifest_of_another_layout_is_refused_naming_every_problem(tmp_path):
    (tmp_path / MANIFEST).write_text("[]")
    with pytest.raises(ModelRepositoryError, match="manifest format version None"):
        verify(tmp_path)
    broken = {"model": "translator", "files": ["a"], "graphs": {"fp32": "a"}, "ops": []}
    with pytest.raises(ModelRepositoryError) as error:
        verify(_version(tmp_path, **broken, tokenizer=3))
    for part in ("model: an object", "files: an object", "graphs: an object", "ops: an object"):
        assert part in str(error.value)
    assert "tokenizer: a path expected" in str(error.value)


def test_every_graph_and_op_the_manifest_names_is_hashed(tmp_path):
    (tmp_path / "search.onnx").write_bytes(b"op")
    ops = {"search": {"float32": "search.onnx"}}
    with pytest.raises(ModelRepositoryError, match=r"search.onnx: not hashed in the manifest"):
        verify(_version(tmp_path, model=MODEL, files={}, graphs={"fp32": {}}, ops=ops))
    files = {"search.onnx": sha256(tmp_path / "search.onnx")}
    version = verify(_version(tmp_path, model=MODEL, files=files, graphs={"fp32": {}}, ops=ops))
    assert version.op("search", "float32") == tmp_path / "search.onnx"


def test_a_version_replaced_since_it_was_verified_is_told_apart(tmp_path):
    """A directory renamed over after the front verified it holds files other than those
    hashed: the manifest's revision, which hashes them all, tells the two apart."""
    version = verify(_version(tmp_path, model=MODEL, files={}, graphs={"fp32": {}}))
    unchanged(version)
    assert verify(tmp_path).revision == version.revision  # read again: the same
    limits = {"max_output_tokens": 2}
    _version(tmp_path, model=MODEL, files={}, graphs={"fp32": {}}, limits=limits)
    with pytest.raises(ModelRepositoryError, match="replaced since it was verified"):
        unchanged(version)
    (tmp_path / MANIFEST).unlink()
    with pytest.raises(ModelRepositoryError, match="unreadable manifest"):
        unchanged(version)
