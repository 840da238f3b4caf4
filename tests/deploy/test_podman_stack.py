"""The compose stack run for real: the Dockerfile and docker-compose.yml built and run by
podman (runc) and podman-compose, from a base image made locally with mmdebstrap (no image
registry), two attnserve replicas, Prometheus scraping both, `down` draining a call in flight.

Marked `stack`: it builds images (minutes), so it runs only when asked, `./dev.sh stack` or
`pytest -m stack`. The build and run times are written to
$ATTNSERVE_STACK_DIR/timings.json (default /var/tmp/attnserve-stack) and printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import grpc
import pytest
from helpers import LONG, ROOT

from service import client

# catatonit: the init of the compose file's `init: true`
TOOLS = (
    "podman",
    "runc",
    "mmdebstrap",
    "podman-compose",
    "iptables",
    "/usr/libexec/podman/catatonit",
)
pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in TOOLS),
        reason=f"needs {', '.join(TOOLS)} (./dev.sh stack installs them)",
    ),
]
STATE = Path(os.environ.get("ATTNSERVE_STACK_DIR", "/var/tmp/attnserve-stack"))
BASE = "localhost/attnserve-base:bookworm"
PROMETHEUS = "localhost/attnserve-prometheus:latest"
PROJECT = "attnservestack"
REPLICAS = 2
# podman: runc (crun fails on some hosts' cgroups), no default ulimits, netavark networks
CONTAINERS_CONF = """[containers]
default_ulimits = []

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
"""
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
timings: dict[str, float] = {}


def _run(command: list[str], env: dict, timeout: float = 1800) -> str:
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stderr[-4000:]}"
    return result.stdout


def _timed(name: str, command: list[str], env: dict) -> str:
    start = time.monotonic()
    output = _run(command, env)
    timings[name] = round(time.monotonic() - start, 1)
    return output


@pytest.fixture(scope="module")
def env() -> dict:
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "containers.conf").write_text(CONTAINERS_CONF)
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(STATE / "containers.conf"),
        "PYTHON_IMAGE": BASE,
        "PROMETHEUS_IMAGE": PROMETHEUS,
        # host ports chosen by the system: two replicas cannot share one
        "ATTNSERVE_GRPC_PORT": "127.0.0.1:",
        "ATTNSERVE_METRICS_PORT": "127.0.0.1:",
        "ATTNSERVE_HTTP_PORT": "127.0.0.1:",
        "PROMETHEUS_PORT": "127.0.0.1:",
    }
    images = _run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], env).split()
    if BASE not in images:
        _timed("base_image_seconds", ["deploy/podman/base-image.sh", BASE], env)
    _timed(
        "attnserve_image_seconds",
        [
            "podman",
            "build",
            "--format",
            "docker",
            "--build-arg",
            f"PYTHON_IMAGE={BASE}",
            "--target",
            "runtime",
            "-t",
            "attnserve:cpu",
            ".",
        ],
        env,
    )
    _timed(
        "prometheus_image_seconds",
        [
            "podman",
            "build",
            "--format",
            "docker",
            "-f",
            "deploy/podman/prometheus.Containerfile",
            "--build-arg",
            f"BASE_IMAGE={BASE}",
            "-t",
            PROMETHEUS,
            ".",
        ],
        env,
    )
    return env


def _compose(env: dict, *args: str) -> str:
    return _run(["podman-compose", "-p", PROJECT, *args], env, timeout=300)


def _containers(env: dict, service: str) -> list[str]:
    names = _run(
        [
            "podman",
            "ps",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=io.podman.compose.project={PROJECT}",
        ],
        env,
    )
    return sorted(n for n in names.split() if n.startswith(f"{PROJECT}_{service}_"))


def _host_port(env: dict, container: str, port: int) -> int:
    mapping = _run(["podman", "port", container, str(port)], env).split()[0]
    return int(mapping.rpartition(":")[2])


def _down(env: dict) -> None:
    """The stack removed, scaled replicas too (podman-compose's down misses all but one)."""
    labelled = _run(
        ["podman", "ps", "-aq", "--filter", f"label=io.podman.compose.project={PROJECT}"], env
    ).split()
    if labelled:
        _run(["podman", "rm", "-f", "-t", "30", *labelled], env, timeout=120)
    _compose(env, "down", "-v")


@pytest.fixture(scope="module")
def stack(env):
    _down(env)
    start = time.monotonic()
    _compose(
        env, "up", "-d", "--no-build", "--scale", f"attnserve={REPLICAS}", "attnserve", "prometheus"
    )
    replicas = _containers(env, "attnserve")
    assert len(replicas) == REPLICAS
    ports = [_host_port(env, name, 50051) for name in replicas]
    for port in ports:
        with client.connect(f"127.0.0.1:{port}") as channel:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if client.health(channel, timeout=2) == "SERVING":
                        break
                except grpc.RpcError:  # not listening yet
                    pass
                assert time.monotonic() < deadline, f"replica on {port} not serving in 300 s"
                time.sleep(1)
    timings["up_to_serving_seconds"] = round(time.monotonic() - start, 1)
    http_ports = [_host_port(env, name, 8080) for name in replicas]
    yield {"grpc_ports": ports, "http_ports": http_ports, "replicas": replicas}
    _down(env)
    (STATE / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    print(json.dumps(timings))


def test_every_replica_translates_and_captions(stack):
    for port in stack["grpc_ports"]:
        with client.connect(f"127.0.0.1:{port}") as channel:
            response = client.translate(channel, ["¿Dónde está la estación de tren?"], timeout=60)
            assert response.translations[0].hypotheses[0].text.strip()
            image = (ROOT / "examples" / "scene.png").read_bytes()
            captions = client.caption(channel, [image], timeout=60)
            assert captions.captions[0].hypotheses[0].text.strip()


def test_every_replica_answers_over_http(stack):
    """The HTTP port of each replica: LibreTranslate's API and the contract's JSON form."""
    for port in stack["http_ports"]:
        body = urllib.parse.urlencode({"q": "Buenos días.", "source": "es", "target": "en"})
        url = f"http://127.0.0.1:{port}/translate"
        with _NO_PROXY.open(urllib.request.Request(url, body.encode()), timeout=60) as answer:
            assert json.loads(answer.read())["translatedText"].strip()
        with _NO_PROXY.open(f"http://127.0.0.1:{port}/v1/health", timeout=10) as answer:
            assert json.loads(answer.read()) == {"status": "SERVING"}


def test_prometheus_scrapes_every_replica_by_dns(env, stack):
    (prometheus,) = _containers(env, "prometheus")
    web = f"127.0.0.1:{_host_port(env, prometheus, 9090)}"
    query = urllib.parse.urlencode({"query": 'up{job="attnserve"} == 1'})
    deadline = time.monotonic() + 120
    while True:
        try:
            with _NO_PROXY.open(f"http://{web}/api/v1/query?{query}", timeout=5) as response:
                result = json.load(response)["data"]["result"]
        except OSError:
            result = []
        if len(result) == REPLICAS:
            break
        assert time.monotonic() < deadline, f"Prometheus scrapes {len(result)} replicas"
        time.sleep(2)
    assert len({r["metric"]["instance"] for r in result}) == REPLICAS


def _in_flight(metrics_port: int) -> float:
    with _NO_PROXY.open(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("attnserve_requests_in_flight"):
                return float(line.split()[-1])
    return 0.0


def test_down_drains_a_call_in_flight(env, stack):
    """Runs last (it stops the replicas): a long call sent before the stop still ends OK."""
    port = stack["grpc_ports"][0]
    metrics_port = _host_port(env, stack["replicas"][0], 9400)
    outcome: dict = {}

    def call():
        with client.connect(f"127.0.0.1:{port}") as channel:
            try:
                outcome["response"] = client.translate(
                    channel, ["Yo soy de Canadá."], timeout=120, **LONG
                )
            except grpc.RpcError as error:  # recorded for the assertion
                outcome["error"] = error

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 30
    while _in_flight(metrics_port) < 1:
        assert time.monotonic() < deadline and thread.is_alive(), "the call never ran"
        time.sleep(0.05)
    start = time.monotonic()
    # every replica: podman-compose's stop and down reach only the first of a scaled service
    _run(["podman", "stop", "-t", "30", *stack["replicas"]], env, timeout=120)
    timings["stop_seconds"] = round(time.monotonic() - start, 1)
    thread.join(150)
    assert "error" not in outcome, outcome.get("error")
    assert len(outcome["response"].translations[0].hypotheses) == 16
    assert not _containers(env, "attnserve")


def test_the_image_serves_the_repository_certified_on_the_host(env):
    """The image copies in data/repository as `./dev.sh repository` built and certified it:
    each version's manifest (its graphs' hashes and its parity certificate) is the host's."""
    for version in ("translator/1", "captioner/1", "captioner/2"):
        inside = _run(
            [
                "podman",
                "run",
                "--rm",
                "--entrypoint",
                "cat",
                "attnserve:cpu",
                f"/srv/attnserve/repository/{version}/manifest.json",
            ],
            env,
            timeout=120,
        )
        host = (ROOT / "data" / "repository" / version / "manifest.json").read_text()
        assert json.loads(inside) == json.loads(host)
        assert json.loads(inside)["parity"]["passed"] is True
