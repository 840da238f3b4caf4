"""Model versions while serving: a version added under load takes the calls that name no
version, a broken one is refused without touching the others, a removed one drains, a front
started again after a version was replaced in place loads the content it read; no call fails
meanwhile."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from servers import add_version, is_served, rpc_error

from service import client


def _load(server, stop: threading.Event) -> list[tuple[str, str]]:
    """(status, version that answered) of one client's calls until `stop`."""
    outcomes = []
    while not stop.is_set():
        try:
            answer = client.translate(server.channel, ["Dios es amor."], timeout=30)
            outcomes.append(("OK", answer.version))
        except grpc.RpcError as error:
            outcomes.append((error.code().name, error.details()))
    return outcomes


def _swap(server, repository) -> None:
    """Version 2 added, a broken 3 refused, 1 removed, each seen through the metrics."""
    time.sleep(1.0)
    add_version(repository, "1", "2")
    server.wait_for(lambda: is_served(server, "2"), 120, "version 2 loaded and checked")
    add_version(repository, "1", "3", corrupt=True)
    server.wait_for(
        lambda: server.value("attnserve_model_versions_refused_total") == 1, 60, "version 3 refused"
    )
    shutil.rmtree(repository / "translator" / "1")
    server.wait_for(lambda: not is_served(server, "1"), 60, "version 1 retired")
    time.sleep(1.0)


@pytest.mark.slow
def test_versions_come_and_go_under_load_without_a_failed_call(
    start_server, model_repository, tmp_path
):
    repository = tmp_path / "repository"
    shutil.copytree(model_repository, repository)
    server = start_server(
        "--workers", "1", "--watch-seconds", "0.3", "--repository", str(repository)
    )
    stop = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        clients = [pool.submit(_load, server, stop) for _ in range(4)]
        try:
            _swap(server, repository)
        finally:
            stop.set()
        outcomes = [o for c in clients for o in c.result(timeout=60)]
    codes = collections.Counter(code for code, _ in outcomes)
    served = collections.Counter(version for _, version in outcomes)
    print(f"versions swapped under load: {dict(codes)}; by version {dict(served)}")
    assert set(codes) == {"OK"}, codes  # no call failed through the swap
    versions = [version for _, version in outcomes]
    assert versions[0] == "1" and {"1", "2"} == set(versions)  # the broken 3 was never served
    assert all(v == "2" for v in [v for c in clients for _, v in c.result()[-3:]])
    error = rpc_error(lambda: client.translate(server.channel, ["Hola."], version="1", timeout=10))
    assert error.code() == grpc.StatusCode.NOT_FOUND  # retired
    log = server.log_file.read_text()
    assert "translator/3 refused" in log and "sha256 does not match" in log
    assert "retired translator/1" in log
    assert ".incoming" not in log  # versions written aside were never looked at

    listing = subprocess.run(
        [sys.executable, "-m", "attnserve.cli", "repository", "verify", "--json"]
        + ["--repository", str(repository)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = {(r["model"], r["version"]): r for r in map(json.loads, listing.stdout.splitlines())}
    assert listing.returncode == 1  # version 3 does not verify
    assert rows["translator", "2"]["verified"] == "hashes and certificate"
    assert "sha256 does not match" in rows["translator", "3"]["problem"]


@pytest.mark.slow
def test_a_version_replaced_in_place_under_load_serves_its_new_content(
    start_server, model_repository, tmp_path
):
    """translator/1 renamed over as `attnserve export` publishes (its new manifest lets it write
    two tokens at most): calls naming it reach the new content once it is loaded, the calls
    in flight on the old one finish, and none fails."""

    repository = tmp_path / "repository"
    shutil.copytree(model_repository, repository)
    server = start_server(
        "--workers", "1", "--watch-seconds", "0.3", "--repository", str(repository)
    )
    directory = repository / "translator" / "1"

    def tokens() -> int:
        answer = client.translate(server.channel, ["Dios es amor."], version="1", timeout=30)
        return len(answer.translations[0].hypotheses[0].tokens)

    assert tokens() > 2
    stop = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        clients = [pool.submit(_load, server, stop) for _ in range(2)]
        try:
            time.sleep(0.5)
            _replace_in_place(directory)
            server.wait_for(
                lambda: "retired translator/1@" in server.log_file.read_text(),
                120,
                "the content replaced retired",
            )
        finally:
            stop.set()
        codes = collections.Counter(code for c in clients for code, _ in c.result(timeout=60))
    assert set(codes) == {"OK"}, codes
    assert tokens() <= 2
    assert is_served(server, "1")  # its model_info sample is the new content's
    log = server.log_file.read_text()
    assert "replaced in place" in log and "refused" not in log


def _replace_in_place(directory) -> None:
    """`directory`'s version published again as `attnserve export` does, its new manifest
    letting it write two tokens at most."""
    from export.repository import publish, staging

    staged = staging(directory)
    shutil.copytree(directory, staged)
    manifest = json.loads((staged / "manifest.json").read_text())
    manifest["limits"]["max_output_tokens"] = 2
    (staged / "manifest.json").write_text(json.dumps(manifest))
    publish(staged, directory)


def _round(server) -> list[str | int]:
    """One call over each of 16 new connections (spread over the fronts): the tokens each
    answer holds, or its error's code."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(server.address, options=options) for _ in range(16)]

    def one(channel) -> str | int:
        try:
            answer = client.translate(channel, ["Dios es amor."], version="1", timeout=30)
        except grpc.RpcError as error:
            return error.code().name
        return len(answer.translations[0].hypotheses[0].tokens)

    try:
        with ThreadPoolExecutor(len(channels)) as pool:
            return list(pool.map(one, channels))
    finally:
        for channel in channels:
            channel.close()


@pytest.mark.slow
def test_a_front_started_after_a_version_was_replaced_serves_what_the_workers_hold(
    start_server, model_repository, tmp_path
):
    """Two fronts; the first looks at the repository only at its start (watch_seconds 0) and
    serves translator/1 as it was. The other, started again after translator/1 was replaced in
    place, reads the new content: it loads it on the worker itself, and sends it no call
    before, so no call through either front fails (each front serves its own content)."""
    repository = tmp_path / "repository"
    shutil.copytree(model_repository, repository)
    server = start_server(
        "--workers", "1", "--fronts", "2", "--watch-seconds", "0", "--repository", str(repository)
    )
    (other,) = server.wait()["fronts"]
    _replace_in_place(repository / "translator" / "1")
    os.kill(other, signal.SIGKILL)
    log = server.log_file
    server.wait_for(lambda: "front 1 exited" in log.read_text(), 30, "the front's death")

    def new_content_served() -> bool:  # a short answer: the front started again serves
        return any(isinstance(n, int) and n <= 2 for n in _round(server))

    server.wait_for(new_content_served, 90, "the new content served by the new front")
    outcomes = _round(server) + _round(server)
    print(f"tokens of each answer, or its error: {outcomes}")
    assert all(isinstance(n, int) for n in outcomes), outcomes  # no call failed
    assert {n <= 2 for n in outcomes} == {True, False}, outcomes  # each front its content
    assert "[front 1]: worker 0 loads translator/1@" in log.read_text()
