"""TLS, mutual TLS and bearer tokens against a real server, with certificates made here: a CA,
the server's certificate for 127.0.0.1 and a client's, both signed by it."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import subprocess
import sys
import time

import grpc
import pytest
from servers import START_TIMEOUT, rpc_error

from service import client
from service.front.security import parse_tokens, refusal
from service.runtime.errors import InvalidArgument

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

TOKEN = "token-for-every-service-0123456789"
CAPTION_ONLY = "token-for-captions-only-0123456789"


def _certificate(name: str, key, issuer_name, issuer_key, *, ca=False, ip=None):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip is not None:
        names = [x509.IPAddress(ipaddress.ip_address(ip)), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory, name: str, key, certificate) -> tuple:
    key_path, cert_path = directory / f"{name}.key", directory / f"{name}.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """{name: (certificate, key)} of a CA, the server (127.0.0.1) and a client."""
    directory = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "attnserve test CA")])
    ca = _certificate("attnserve test CA", ca_key, ca_name, ca_key, ca=True)
    files = {"ca": _write(directory, "ca", ca_key, ca)}
    for name, ip in (("server", "127.0.0.1"), ("client", None)):
        key = ec.generate_private_key(ec.SECP256R1())
        files[name] = _write(directory, name, key, _certificate(name, key, ca_name, ca_key, ip=ip))
    tokens = directory / "tokens"
    tokens.write_text(f"# who may call\n{TOKEN}\n{CAPTION_ONLY} caption\n")
    files["tokens"] = tokens
    return files


@pytest.fixture(scope="module")
def secured(start_server, pki):
    """A server with mutual TLS and tokens."""
    (cert, key), (ca, _) = pki["server"], pki["ca"]
    return start_server(
        "--workers",
        "1",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--tls-client-ca",
        str(ca),
        "--auth-tokens-file",
        str(pki["tokens"]),
        "--http-listen",
        "127.0.0.1:0",
        wait=False,
    )


def _ready(server) -> str:
    """Waits for the secured server's ready file (the fixture's plaintext health check
    cannot pass TLS) and returns its address."""
    start = time.monotonic()
    while time.monotonic() - start < START_TIMEOUT:
        state = server.state()
        if state is not None and state["serving"]:
            server.metrics_url = f"http://127.0.0.1:{state['metrics_port']}/metrics"
            return f"127.0.0.1:{state['grpc_port']}"
        assert server.process.poll() is None, server.log_file.read_text()
        time.sleep(0.05)
    raise AssertionError(server.log_file.read_text())


def _mtls(pki, token=None) -> dict:
    (cert, key), (ca, _) = pki["client"], pki["ca"]
    return {"tls_ca": ca, "tls_cert": cert, "tls_key": key, "token": token}


def test_mutual_tls_and_tokens_refuse_and_serve_as_configured(secured, pki):
    address = _ready(secured)
    hello = ["Hola."]
    with client.connect(address) as plaintext:  # TLS is on: plaintext gets no answer
        error = rpc_error(lambda: client.translate(plaintext, hello, timeout=10))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
    with client.connect(address, tls_ca=pki["ca"][0], token=TOKEN) as no_certificate:
        error = rpc_error(lambda: client.translate(no_certificate, hello, timeout=10))
        assert error.code() == grpc.StatusCode.UNAVAILABLE  # mutual TLS: refused handshake
    with client.connect(address, **_mtls(pki)) as anonymous:
        assert client.health(anonymous, timeout=10) == "SERVING"  # probes need no token
        error = rpc_error(lambda: client.translate(anonymous, hello, timeout=10))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "no bearer token" in error.details()
    with client.connect(address, **_mtls(pki, "a-wrong-token-0123456789")) as wrong:
        error = rpc_error(lambda: client.translate(wrong, hello, timeout=10))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "not known" in error.details()
    with client.connect(address, **_mtls(pki, CAPTION_ONLY)) as captions_only:
        error = rpc_error(lambda: client.translate(captions_only, hello, timeout=10))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        error = rpc_error(  # allowed on captions: it passes authentication, the image fails
            lambda: client.caption(captions_only, [b"not an image"], timeout=10)
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    with client.connect(address, **_mtls(pki, TOKEN)) as allowed:
        answer = client.translate(allowed, hello, timeout=30)
        assert answer.translations[0].hypotheses[0].text
        stream = list(client.translate_stream(allowed, "Dios es amor.", timeout=30))
        assert stream[-1].HasField("result")
    refused = secured.value
    assert refused("attnserve_auth_refused_calls_total", code="UNAUTHENTICATED") == 2
    assert refused("attnserve_auth_refused_calls_total", code="PERMISSION_DENIED") == 1


def test_the_command_line_client_speaks_mutual_tls_with_a_token(secured, pki, tmp_path):
    address = _ready(secured)
    (cert, key), (ca, _) = pki["client"], pki["ca"]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    base = [sys.executable, "-m", "attnserve.cli"]
    tls = ["--server", address, "--tls-ca", str(ca), "--tls-cert", str(cert), "--tls-key", str(key)]
    command = [*base, "translate", *tls, "--token-file", str(token_file), "Dios es amor."]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    refused = subprocess.run(
        [*base, "translate", *tls, "Dios es amor."], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    health = subprocess.run([*base, "health", *tls], capture_output=True, text=True, timeout=60)
    assert health.returncode == 0 and health.stdout.strip() == "SERVING"


def test_http_speaks_the_same_mutual_tls_and_tokens(secured, pki):
    import httpx

    _ready(secured)
    url = f"https://127.0.0.1:{secured.state()['http_port']}"
    (cert, key), (ca, _) = pki["client"], pki["ca"]
    body = {"texts": ["Hola."]}
    mutual = ssl.create_default_context(cafile=str(ca))
    mutual.load_cert_chain(str(cert), str(key))
    with httpx.Client(verify=mutual, timeout=60) as web:
        assert web.post(f"{url}/v1/translate", json=body).status_code == 401  # no token
        bearer = {"authorization": f"Bearer {TOKEN}"}
        answer = web.post(f"{url}/v1/translate", json=body, headers=bearer)
        assert answer.status_code == 200 and answer.json()["translations"]
        caption_only = {"authorization": f"Bearer {CAPTION_ONLY}"}
        assert web.post(f"{url}/v1/translate", json=body, headers=caption_only).status_code == 403
    server_only = ssl.create_default_context(cafile=str(ca))
    with (
        httpx.Client(verify=server_only, timeout=10) as no_certificate,
        pytest.raises(httpx.HTTPError),
    ):
        no_certificate.get(f"{url}/v1/health")  # refused in the handshake
    with httpx.Client(timeout=10) as plain, pytest.raises(httpx.HTTPError):
        plain.get(url.replace("https", "http") + "/v1/health")


def test_token_entries_are_checked():
    (every, captions) = parse_tokens(f"{TOKEN}\n{CAPTION_ONLY} caption,translation # both", "t")
    assert every.services is None
    assert captions.services == {"attnserve.v1.CaptionService", "attnserve.v1.TranslationService"}
    for bad in ("short", f"{TOKEN} nosuchservice", f"{TOKEN} caption extra"):
        with pytest.raises(InvalidArgument):
            parse_tokens(bad, "t")


def test_reflection_takes_a_token_of_any_services_and_no_unknown_one():
    """A token of one service may read the contract by reflection, as grpcurl does before
    every call it makes; no token, or an unknown one, may not."""
    (captions,) = parse_tokens(f"{CAPTION_ONLY} caption", "t")
    for name in ("grpc.reflection.v1alpha.ServerReflection", "attnserve.v1.CaptionService"):
        assert refusal([captions], CAPTION_ONLY, name, "a token") is None
    denied = refusal([captions], CAPTION_ONLY, "attnserve.v1.TranslationService", "a token")
    assert denied is not None and denied[0] == grpc.StatusCode.PERMISSION_DENIED
    for presented in (None, "a-wrong-token-0123456789"):
        unknown = refusal([captions], presented, "grpc.reflection.v1alpha.ServerReflection", "")
        assert unknown is not None and unknown[0] == grpc.StatusCode.UNAUTHENTICATED


def test_the_metrics_endpoint_serves_https_with_basic_auth_on_loopback(start_server, pki, tmp_path):
    import base64
    import ssl
    import urllib.error
    import urllib.request

    (cert, key), (ca, _) = pki["server"], pki["ca"]
    users = tmp_path / "metrics-users"
    users.write_text("# user:password\nprometheus:scrape-secret-0123\n")
    server = start_server(
        "--workers",
        "1",
        "--metrics-listen",
        "127.0.0.1:0",
        "--metrics-tls-cert",
        str(cert),
        "--metrics-tls-key",
        str(key),
        "--metrics-basic-auth-file",
        str(users),
        wait=False,
    )
    _ready(server)
    url = server.metrics_url.replace("http://", "https://")
    context = ssl.create_default_context(cafile=str(ca))

    def scrape(user_password: str | None) -> int:
        request = urllib.request.Request(url)
        if user_password is not None:
            encoded = base64.b64encode(user_password.encode()).decode()
            request.add_header("Authorization", f"Basic {encoded}")
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                assert b"attnserve_workers_ready" in response.read()
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    assert scrape("prometheus:scrape-secret-0123") == 200
    assert scrape("prometheus:wrong") == 401
    assert scrape(None) == 401
    with pytest.raises(OSError):  # plain HTTP gets no answer from HTTPS (reset or refused)
        urllib.request.urlopen(server.metrics_url, timeout=10)
