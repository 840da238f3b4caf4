"""One `attnserve serve` process on 127.0.0.1: started, waited for, measured, stopped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench import machine
from bench.lib.paths import ROOT
from bench.lib.processes import process_cpu

START_SECONDS = 180.0  # for a server to bind and pass its warm-up
STOP_SECONDS = 30.0  # for a server to drain after SIGTERM before it is killed
LISTEN = ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]  # ports: the OS's


class Server:
    """One `attnserve serve` process on 127.0.0.1 (ports chosen by the OS)."""

    def __init__(self, repository: Path, directory: Path, flags: list[str], root: Path = ROOT):
        """`root`: the checkout whose code serves (another checkout's, as a baseline, runs
        with it first on the import path)."""
        self.ready_file = directory / "ready.json"
        self.log_path = directory / "server.log"
        if not any(flag.startswith("--response-cache") for flag in flags):
            # the benchmarks repeat their requests to measure decoding: no response cache
            flags = [*flags, "--response-cache-entries", "0"]
        self.flags = flags
        files = ["--ready-file", str(self.ready_file), "--repository", str(repository)]
        command = [sys.executable, "-m", "attnserve.cli", "serve", *LISTEN, *files, *flags]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        environment |= dict.fromkeys(machine.THREAD_VARIABLES, "1")
        if Path(root).resolve() != ROOT:
            environment["PYTHONPATH"] = str(Path(root).resolve())
        self.log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=environment, cwd=root
        )
        self.state: dict = {}

    async def wait(self) -> dict:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, json.JSONDecodeError):
                self.state = json.loads(self.ready_file.read_text())
                if self.state.get("serving"):
                    self.address = f"127.0.0.1:{self.state['grpc_port']}"
                    self.metrics_url = f"http://127.0.0.1:{self.state['metrics_port']}/metrics"
                    return self.state
            if self.process.poll() is not None:
                break
            await asyncio.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the server did not start: {self.log_path.read_text()[-4000:]}")

    def metrics(self) -> dict:
        """{(sample name, sorted label items): value} of the Prometheus endpoint."""
        # imported here: bench.gpu reports a missing prometheus-client instead of failing
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def cpu_seconds(self) -> dict:
        """User + system CPU seconds of the front processes (every one) and of the workers."""
        fronts = [self.process.pid, *self.state.get("fronts", [])]
        return {
            "front": sum(process_cpu(pid) for pid in fronts),
            "workers": sum(process_cpu(pid) for pid in self.state.get("workers", [])),
        }

    def stop(self) -> int | None:
        """SIGTERM (drain), then kill after STOP_SECONDS; the exit code."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            return self.process.returncode
        finally:
            self.log.close()
