"""The /metrics endpoint on the address `metrics_listen` names, IPv4 or IPv6, and what its
histograms' buckets can show."""

from __future__ import annotations

import socket
import ssl
import urllib.request

import pytest
from prometheus_client import generate_latest

from service.front.config import ServerConfig
from service.front.fronts import MergedRegistry
from service.front.metrics import Metrics, observe_all, serve_metrics
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


@pytest.mark.parametrize("fronts", [1, 2])
def test_a_scrape_may_ask_for_some_metrics_by_name(fronts):
    """Before, with several fronts, /metrics?name[]=... (prometheus_client's filter, which
    one front serves) answered 500 with a traceback in the log: the merged registry had no
    `restricted_registry`."""
    first, second = Metrics(), Metrics()
    for metrics in (first, second):
        metrics.requests_in_flight.labels("translator", "Translate").inc()
        metrics.request_duration.labels("translator", "Translate", "OK").observe(0.1)
    first.workers_ready.set(2)
    registry = first.registry
    if fronts == 2:
        registry = MergedRegistry(first.registry, lambda: [list(second.registry.collect())])
    server, thread = serve_metrics(ServerConfig(metrics_listen="127.0.0.1:0"), registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        query = "?name[]=attnserve_requests_in_flight&name[]=attnserve_workers_ready"
        with urllib.request.urlopen(url + query, timeout=5) as response:
            lines = [line for line in response.read().decode().splitlines() if line[0] != "#"]
        in_flight = 'attnserve_requests_in_flight{method="Translate",model="translator"}'
        assert sorted(lines) == [f"{in_flight} {fronts}.0", "attnserve_workers_ready 2.0"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _self_signed(directory) -> tuple:
    """A key and a self-signed certificate for 127.0.0.1, as files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert, key_file = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, key_file


def test_a_silent_connection_holds_up_no_https_scrape(tmp_path):
    """Before, the TLS handshake was done as a connection was accepted, in the one thread
    that accepts: a client that connected and sent nothing (a port check, a stalled
    scraper) stopped every later scrape of the HTTPS endpoint until it went away."""
    cert, key = _self_signed(tmp_path)
    config = ServerConfig(metrics_listen="127.0.0.1:0", metrics_tls_cert=cert, metrics_tls_key=key)
    metrics = Metrics()
    metrics.workers_ready.set(2)
    server, thread = serve_metrics(config, metrics.registry)
    silent = socket.create_connection(("127.0.0.1", server.server_port))
    try:
        context = ssl.create_default_context(cafile=str(cert))
        url = f"https://127.0.0.1:{server.server_port}/metrics"
        for _ in range(2):
            with urllib.request.urlopen(url, context=context, timeout=5) as response:
                assert "attnserve_workers_ready 2.0" in response.read().decode()
        plain = f"http://127.0.0.1:{server.server_port}/metrics"
        with pytest.raises(OSError):  # plain HTTP on the TLS port ends only its connection
            urllib.request.urlopen(plain, timeout=5)
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            assert response.status == 200
    finally:
        silent.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_call_within_the_longest_deadline_the_command_line_gives_has_a_bucket():
    """The request histogram's buckets stopped at 60 s, where `attnserve caption` gives each
    call 120 s (and a LibreTranslate file, counted whole, has no deadline unless its client
    sets one): a call of 61 to 120 s fell past the last bucket and its quantile read 60 s."""
    from attnserve.cli.caption import TIMEOUT

    metrics = Metrics()
    metrics.request_duration.labels("captioner", "Caption", "OK").observe(TIMEOUT - 1)
    bounds = {
        float(sample.labels["le"]): sample.value
        for family in metrics.request_duration.collect()
        for sample in family.samples
        if sample.name.endswith("_bucket")
    }
    below = [bound for bound, count in bounds.items() if count == 1 and bound != float("inf")]
    assert below and min(below) >= TIMEOUT - 1


def test_a_basic_auth_file_not_in_utf8_is_named_in_one_line(tmp_path):
    """A latin-1 metrics_basic_auth_file ended the server's start in a UnicodeDecodeError
    traceback; it is refused naming the file, as a missing one is."""
    from service.runtime.errors import InvalidArgument

    latin = tmp_path / "users"
    latin.write_bytes("prometheus:contraseña\n".encode("latin-1"))
    config = ServerConfig(metrics_listen="127.0.0.1:0", metrics_basic_auth_file=latin)
    with pytest.raises(InvalidArgument, match=f"metrics_basic_auth_file {latin}: 'utf-8' codec"):
        serve_metrics(config, Metrics().registry)


@pytest.mark.parametrize(
    "values",
    [
        [0.0004, 0.0005, 0.0005001, 0.003, 0.003, 0.7, 299.0, 301.0, 1e9, -1.0, 0.0],
        [0.004] * 29,
        [],
        [float("nan"), 0.01],
        # more than observe_all places one by one: numpy's way, the same edges
        [0.0004, 0.0005, 0.0005001, 0.003, 0.7, 299.0, 301.0, 1e9, -1.0, 0.0, float("nan")] * 2,
    ],
)
def test_observing_a_request_s_gaps_at_once_exposes_what_one_at_a_time_does(values):
    """`observe_all` (a request's token gaps in one go) against `observe` of each value: the
    same buckets (a value on a bound counted in it), count and sum in the exposition, for the
    seconds and the rows buckets, beside what was there before (the sum added up in another
    order: equal to rounding)."""
    one, many = Metrics(), Metrics()
    for metrics in (one, many):
        metrics.inter_token_latency.labels("translator", "Translate").observe(0.02)
        metrics.batch_rows.labels("translator").observe(300)
    for value in values:
        one.inter_token_latency.labels("translator", "Translate").observe(value)
        one.batch_rows.labels("translator").observe(value * 1000)
    observe_all(many.inter_token_latency.labels("translator", "Translate"), values)
    observe_all(many.batch_rows.labels("translator"), [v * 1000 for v in values])

    def exposed(metrics, sums: bool):
        lines = generate_latest(metrics.registry).decode().splitlines()
        lines = [line for line in lines if "_created" not in line]
        return [line for line in lines if ("_sum{" in line) == sums]

    assert exposed(many, sums=False) == exposed(one, sums=False)
    assert any("inter_token_latency_seconds_count" in line for line in exposed(many, False))
    sums = [[float(line.rpartition(" ")[2]) for line in exposed(m, True)] for m in (one, many)]
    assert len(sums[1]) == 2
    assert sums[1] == pytest.approx(sums[0], rel=1e-12, nan_ok=True)


def test_a_child_kept_for_its_labels_is_one_the_metric_still_exposes():
    """Labelled children are kept by their values (a call asks for some fifteen); a child
    removed, or every child cleared (the cluster's replicas by node are set anew so), is
    made again on its next use and exposed, not written into a child the metric let go."""
    metrics = Metrics()
    gauge, registry = metrics.cluster_replicas, metrics.registry

    def replicas(node: str) -> float | None:
        return registry.get_sample_value("attnserve_cluster_replicas", {"node": node})

    assert gauge.labels("a") is gauge.labels("a")  # kept
    gauge.labels("a").set(2)
    gauge.clear()
    gauge.labels("a").set(1)
    gauge.labels("b").set(3)
    assert (replicas("a"), replicas("b")) == (1, 3)
    gauge.remove("b")
    assert replicas("b") is None
    gauge.labels("b").set(4)
    assert replicas("b") == 4
    gauge.remove_by_labels({"node": "a"})
    gauge.labels("a").inc()
    assert replicas("a") == 1
