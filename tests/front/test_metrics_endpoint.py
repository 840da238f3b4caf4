"""The /metrics endpoint on the address `metrics_listen` names, IPv4 or IPv6."""

from __future__ import annotations

import urllib.request

import pytest

from service.front.config import ServerConfig
from service.front.metrics import Metrics, serve_metrics
from service.runtime.errors import Unavailable


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:0"])
def test_the_endpoint_listens_on_an_ipv4_or_an_ipv6_address(listen):
    """Before, an IPv6 address ([::1]:9400, as gRPC and HTTP take it) failed the server's
    start with a traceback: the endpoint's socket was always an IPv4 one."""
    metrics = Metrics()
    metrics.workers_ready.set(3)
    server, thread = serve_metrics(ServerConfig(metrics_listen=listen), metrics.registry)
    try:
        host = listen.rpartition(":")[0]
        url = f"http://{host}:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert "attnserve_workers_ready 3.0" in response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_port_in_use_is_refused_naming_the_setting():
    """Before, `attnserve serve` on a metrics port in use ended in an OSError traceback."""
    metrics = Metrics()
    server, thread = serve_metrics(ServerConfig(metrics_listen="127.0.0.1:0"), metrics.registry)
    busy = f"127.0.0.1:{server.server_port}"
    try:
        with pytest.raises(Unavailable, match=rf"^metrics_listen {busy}: cannot listen there \("):
            serve_metrics(ServerConfig(metrics_listen=busy), metrics.registry)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
