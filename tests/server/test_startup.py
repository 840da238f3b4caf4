"""A server refuses to serve a model repository that fails its checks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from service.runtime.repository import GOLDEN, MANIFEST, write_manifest


def _copy(model_repository, tmp_path):
    root = tmp_path / "repository"
    shutil.copytree(model_repository, root)
    return root, root / "translator" / "1"


def _serve(root, *flags: str) -> subprocess.CompletedProcess:
    local = ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--workers", "1"]
    command = [sys.executable, "-m", "attnserve.cli", "serve", "--repository", str(root)]
    command += [*local, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_file_that_does_not_match_its_hash_stops_the_server(model_repository, tmp_path):
    root, version = _copy(model_repository, tmp_path)
    graph = version / "ops" / "gather_float32.onnx"
    graph.write_bytes(graph.read_bytes() + b"\0")
    done = _serve(root)
    assert done.returncode != 0
    assert "ops/gather_float32.onnx: sha256 does not match the manifest" in done.stderr


def test_a_golden_set_the_runtime_does_not_reproduce_stops_the_server(model_repository, tmp_path):
    """The manifest is consistent (re-hashed), but the expected tokens are not what the graphs
    decode: the workers refuse, health never turns SERVING, the server exits."""
    root, version = _copy(model_repository, tmp_path)
    golden = json.loads((version / GOLDEN).read_text())
    for cache in ("growing", "in_place"):  # the first input of each way the cache is carried
        first = next(g for g in golden if g["variant"] == "fp32" and g["cache"] == cache)
        first["expected_ids"] = first["expected_ids"][::-1]
    (version / GOLDEN).write_text(json.dumps(golden))
    manifest = json.loads((version / MANIFEST).read_text())
    write_manifest(version, {k: v for k, v in manifest.items() if k not in ("files",)})
    done = _serve(root, "--ready-file", str(tmp_path / "ready.json"))
    assert done.returncode == 1
    assert "fails its golden set: golden input 0" in done.stderr
    assert json.loads((tmp_path / "ready.json").read_text())["serving"] is False


def test_an_unknown_manifest_format_and_a_missing_repository_are_refused(
    model_repository, tmp_path
):
    root, version = _copy(model_repository, tmp_path)
    manifest = json.loads((version / MANIFEST).read_text())
    (version / MANIFEST).write_text(json.dumps({**manifest, "format_version": 99}))
    done = _serve(root)
    assert done.returncode != 0 and "format version 99" in done.stderr
    done = _serve(tmp_path / "nowhere")
    assert done.returncode != 0 and "no model repository" in done.stderr
