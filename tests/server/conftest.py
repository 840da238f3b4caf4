"""Real servers for the service tests: `attnserve serve` processes on 127.0.0.1, ports chosen
by the OS, on the model repository exported for this test session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service import client
from service.wire.v1 import translation_pb2_grpc

START_TIMEOUT = 90.0  # seconds; workers load and check their golden set


class Server:
    """One `attnserve serve` process and the means to talk to it."""

    def __init__(self, repository: Path, directory: Path, *flags: str):
        self.ready_file = directory / "ready.json"
        self.log_file = directory / "server.log"
        if "--fronts" not in flags:  # one front, whatever the host's cores (fronts = 0)
            flags = ("--fronts", "1", *flags)
        local = ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        files = ["--ready-file", str(self.ready_file), "--repository", str(repository)]
        command = [sys.executable, "-m", "attnserve.cli", "serve", *local, *files, *flags]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.log = open(self.log_file, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=env)
        self.channel = None

    def state(self) -> dict | None:
        try:
            return json.loads(self.ready_file.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def wait(self, serving: bool = True, timeout: float = START_TIMEOUT) -> dict:
        """Waits for the ready file (bound, or serving); fails with the server's log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state()
            if state is not None and (state["serving"] or not serving):
                self.address = f"127.0.0.1:{state['grpc_port']}"
                self.metrics_url = f"http://127.0.0.1:{state['metrics_port']}/metrics"
                if "http_port" in state:
                    self.http_url = f"http://127.0.0.1:{state['http_port']}"
                if self.channel is None:
                    self.channel = client.connect(self.address)
                    self.stub = translation_pb2_grpc.TranslationServiceStub(self.channel)
                return state
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"server not ready: {self.log_file.read_text()}")

    def scrape(self) -> str:
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return response.read().decode()

    def samples(self) -> dict[tuple, float]:
        """{(sample name, sorted label items): value} of the metrics endpoint."""
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(self.scrape())
            for s in family.samples
        }

    def value(self, name: str, **labels) -> float:
        return sum(
            v
            for (n, items), v in self.samples().items()
            if n == name and labels.items() <= dict(items).items()
        )

    def wait_for(self, predicate, timeout: float = 10.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}")

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = [int(p) for p in children.read_text().split()]
        return [p for p in pids if b"attnserve" in _cmdline(p) or b"spawn_main" in _cmdline(p)]

    def terminate(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture(scope="session")
def start_server(model_repository, tmp_path_factory):
    """Starts a server with extra flags; every server started is stopped at the end. The
    response cache is off unless the flags set it: these tests repeat requests that must be
    decoded again (tests/server/test_cache.py turns it on)."""
    servers = []

    def start(*flags: str, wait: bool = True) -> Server:
        if not any(f.startswith("--response-cache") for f in flags):
            flags = (*flags, "--response-cache-entries", "0")
        server = Server(model_repository, tmp_path_factory.mktemp("server"), *flags)
        servers.append(server)
        if wait:
            server.wait()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def server(start_server) -> Server:
    """The shared server: two workers (one per core here), continuous batching."""
    return start_server("--workers", "2", "--max-batch-rows", "64")


def rpc_error(call) -> grpc.RpcError:
    """The RpcError a call raises (fails the test when it succeeds)."""
    try:
        call()
    except grpc.RpcError as error:
        return error
    raise AssertionError("the call succeeded")
