"""`attnserve health` (`attnserve.cli.health`) against a stand-in gRPC health service: the
status printed, exit status 0 only when SERVING, and the deadline of the call."""

from __future__ import annotations

import pytest
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from stand_ins import started

from attnserve.cli import health, main
from service import client


@pytest.fixture(scope="module")
def health_server():
    servicer = grpc_health.HealthServicer()
    serving = health_pb2.HealthCheckResponse.SERVING
    servicer.set("", serving)
    servicer.set(client.SERVICE_NAME, serving)
    servicer.set("draining", health_pb2.HealthCheckResponse.NOT_SERVING)
    server, address = started(lambda s: health_pb2_grpc.add_HealthServicer_to_server(servicer, s))
    yield address
    server.stop(None)


def test_health_exits_0_only_when_serving(health_server, capsys):
    address = health_server
    assert main(["health", "--server", address]) == 0
    assert main(["health", "--server", address, "--service", client.SERVICE_NAME]) == 0
    assert main(["health", "--server", address, "--service", "draining"]) == 1
    assert main(["health", "--server", address, "--service", "nope"]) == 1
    assert capsys.readouterr().out.split() == [
        "SERVING",
        "SERVING",
        "NOT_SERVING",
        "SERVICE_UNKNOWN",
    ]


def test_health_asks_the_server_of_the_environment(health_server, capsys, monkeypatch):
    monkeypatch.setenv("ATTNSERVE_SERVER", health_server)
    assert main(["health", "--service", "draining"]) == 1
    assert capsys.readouterr().out == "NOT_SERVING\n"


def test_health_calls_with_its_own_deadline_unless_given_one(health_server, monkeypatch, capsys):
    asked = []
    real = client.health

    def recorded(channel, service="", *, timeout=None):
        asked.append((service, timeout))
        return real(channel, service, timeout=timeout)

    monkeypatch.setattr(client, "health", recorded)
    assert main(["health", "--server", health_server]) == 0
    assert main(["health", "--server", health_server, "--timeout", "0.5", "--service", "x"]) == 1
    assert asked == [("", health.TIMEOUT), ("x", 0.5)]
    assert f"(default: {health.TIMEOUT:g})" in " ".join(_help(capsys).split())


def _help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["health", "--help"])
    return capsys.readouterr().out
