"""The model repository's layout: every `<model>/<version>/manifest.json`, hidden names left
out (a version written aside under one is not read half written)."""

from __future__ import annotations

from service.runtime.repository import MANIFEST, manifests


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
