"""Real servers for the service tests and what their tests share: `attnserve serve`
processes on 127.0.0.1, ports chosen by the OS, the calls that keep them busy, and model
versions published while they serve. (A module of its own name, so that a test module of any
folder imports it as itself; conftest.py holds the fixtures.)"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
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


def rpc_error(call) -> grpc.RpcError:
    """The RpcError a call raises (fails the test when it succeeds)."""
    try:
        call()
    except grpc.RpcError as error:
        return error
    raise AssertionError("the call succeeded")


def load_until(channel, stop: threading.Event, stream: bool) -> list[tuple[float, float, str]]:
    """One client's calls until `stop`: (start, end, status code name) each. Like a client
    with gRPC's retry policy, it backs off after a failure: exponentially (0.1 s doubling up
    to 1.6 s) with jitter. Eight such clients still leave a draining server no quiet second:
    its drain ends at its bound, and gRPC's own shutdown, which cancels a call received but
    not yet handed to a handler, may meet one of them (a fixed 0.1 s pause meets it often)."""
    texts = ["El perro come pan en la casa.", "Mañana iremos al mercado con mis hermanos."]
    outcomes, failures, jitter = [], 0, random.Random()
    while not stop.is_set():
        start = time.monotonic()
        try:
            if stream:
                list(client.translate_stream(channel, texts[1], timeout=30))
            else:
                client.translate(channel, texts, timeout=30)
            code = "OK"
        except grpc.RpcError as error:
            code = error.code().name
        outcomes.append((start, time.monotonic(), code))
        failures = 0 if code == "OK" else failures + 1
        if failures:
            stop.wait(min(0.1 * 2 ** (failures - 1), 1.6) * jitter.uniform(0.5, 1.0))
    return outcomes


def add_version(repository, source: str, version: str, corrupt: bool = False):
    """A copy of translator/<source> as <version>, written aside and renamed into place (how
    a version is published: the server never sees it half written)."""
    staging = repository / "translator" / f".incoming-{version}"
    shutil.copytree(repository / "translator" / source, staging)
    manifest = json.loads((staging / "manifest.json").read_text())
    manifest["model"]["version"] = version  # the manifest itself is not among the hashed files
    (staging / "manifest.json").write_text(json.dumps(manifest))
    if corrupt:
        with open(staging / "tokenizer.model", "ab") as f:
            f.write(b"\0")
    staging.rename(repository / "translator" / version)


def is_served(server, version: str) -> bool:
    """Whether `server` serves translator `version` (its model_info metric)."""
    return server.value("attnserve_model_info", model="translator", version=version) == 1
