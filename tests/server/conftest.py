"""Real servers for the service tests: `attnserve serve` processes on 127.0.0.1, ports chosen
by the OS, on the model repository exported for this test session."""

from __future__ import annotations

import pytest
from servers import Server


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
