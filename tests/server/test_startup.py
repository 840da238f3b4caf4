"""A server refuses to serve a model repository that fails its checks."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys

import grpc
import pytest

from service.front.server import _grpc_port
from service.runtime.errors import Unavailable
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


def test_a_grpc_port_that_cannot_be_bound_is_refused_naming_the_setting():
    """grpcio raises a RuntimeError where it once returned port 0, which the server took
    for its refusal: the refusal was a traceback."""

    async def bind(listen: str) -> int:
        server = grpc.aio.server()
        try:
            return _grpc_port(server, listen, None)
        finally:
            await server.stop(0)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(Unavailable, match=rf"^listen {busy}: cannot listen there \("):
            asyncio.run(bind(busy))
    assert asyncio.run(bind("127.0.0.1:0")) > 0


@pytest.mark.parametrize("setting", ["--listen", "--metrics-listen", "--http-listen"])
def test_a_port_in_use_stops_the_server_with_one_line_and_nothing_left(
    model_repository, setting, tmp_path
):
    """Status 2 and one line naming the setting, as for any setting refused; before, a
    traceback (and a temporary folder of HTTP files left behind). The server's temporary
    folder is the test's own, so that servers started beside it leave theirs elsewhere."""
    ports = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0"}
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        flags = {**ports, "--http-listen": "127.0.0.1:0", setting: busy}
        command = [sys.executable, "-m", "attnserve.cli", "serve", "--workers", "1"]
        command += ["--fronts", "1", "--repository", str(model_repository)]
        done = subprocess.run(
            [*command, *(part for flag in flags.items() for part in flag)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "TMPDIR": str(temporary)},
        )
    assert done.returncode == 2, done.stderr
    name = setting.removeprefix("--").replace("-", "_")
    assert f"error: {name} {busy}: cannot listen there (" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert list(temporary.glob("attnserve-*")) == []
