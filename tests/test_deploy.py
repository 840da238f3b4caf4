"""The deployment files: docker-compose.yml and the Prometheus configuration and rules.

The compose file is validated by docker-compose 1.29 (Debian's; no Docker engine is needed) and
read back as compose resolves it. The Prometheus files pass promtool, and a real prometheus
process scrapes a stand-in for the server through the deployed scrape configuration.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
PROMETHEUS_RULES = PROMETHEUS_DIR / "rules.yml"
PROMETHEUS_RULES_TEST = PROMETHEUS_DIR / "rules_test.yml"
GRPC_PORT, METRICS_PORT = 50051, 9400
SCALED = {"ATTNSERVE_GRPC_PORT": "50051-50054", "ATTNSERVE_METRICS_PORT": "9400-9403"}


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run ./dev.sh, which installs it (Debian packages)")
    return path


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False
    )


def _compose(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """docker-compose on the project's file, blind to the caller's ATTNSERVE_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSERVE_", "COMPOSE_"))}
    env.update(extra_env or {})
    return _run([_binary("docker-compose"), "-f", str(COMPOSE_FILE), *args], env=env)


def _seconds(duration: str | int) -> float:
    """A compose duration ("30s", "1m30s", "1h") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", str(duration))
    assert parts and "".join(n + u for n, u in parts) == str(duration), duration
    return sum(float(n) * units[u] for n, u in parts)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _host_path(service: dict, container_path: str) -> Path | None:
    """Where a file of a service's container comes from on the host, through a bind mount."""
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume.get("source", ""), volume["target"]
        inside = Path(container_path)
        if source.startswith(("/", ".")) and inside.is_relative_to(target):
            return (ROOT / source / inside.relative_to(target)).resolve()
    return None


@pytest.fixture(scope="module")
def compose() -> dict:
    """The compose file as docker-compose resolves it (anchors merged, variables set)."""
    result = _compose("--profile", "gpu", "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


# -- docker-compose ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "extra_env"),
    [([], {}), (["--profile", "gpu"], {}), ([], {**SCALED, "ATTNSERVE_WORKERS": "2"})],
    ids=["default", "gpu-profile", "scaled"],
)
def test_compose_file_is_valid(profile, extra_env):
    result = _compose(*profile, "config", "-q", extra_env=extra_env)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr


def test_compose_validation_catches_a_misspelt_option(tmp_path):
    text = COMPOSE_FILE.read_text().replace("stop_grace_period:", "stop_grace_periods:")
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text)
    result = _run([_binary("docker-compose"), "-f", str(broken), "config", "-q"])
    assert result.returncode != 0
    assert "stop_grace_periods" in result.stderr


def test_attnserve_publishes_grpc_and_metrics(compose):
    service = compose["services"]["attnserve"]
    published = {(str(p["published"]), p["target"]) for p in service["ports"]}
    assert published == {(str(GRPC_PORT), GRPC_PORT), (str(METRICS_PORT), METRICS_PORT)}
    environment = service["environment"]
    assert _port(environment["ATTNSERVE_LISTEN"]) == GRPC_PORT
    assert _port(environment["ATTNSERVE_METRICS_LISTEN"]) == METRICS_PORT
    assert environment["ATTNSERVE_DEVICE"] == "cpu"
    assert environment["ATTNSERVE_WORKERS"] is None  # unset: one worker per core
    assert service["build"]["target"] == "runtime"


def test_attnserve_ports_scale_as_host_ranges():
    result = _compose("config", extra_env=SCALED)
    assert result.returncode == 0, result.stderr
    ports = yaml.safe_load(result.stdout)["services"]["attnserve"]["ports"]
    assert {str(p["published"]) for p in ports} == set(SCALED.values())


def test_attnserve_health_check_asks_the_grpc_port(compose):
    service = compose["services"]["attnserve"]
    check = service["healthcheck"]
    assert check["test"][:4] == ["CMD", "attnserve", "health", "--server"]
    assert _port(check["test"][4]) == _port(service["environment"]["ATTNSERVE_LISTEN"])
    assert _seconds(check["timeout"]) < _seconds(check["interval"])
    assert check["retries"] >= 1
    assert _seconds(check["start_period"]) >= 30  # the workers load the model first


def test_attnserve_drains_and_restarts(compose):
    service = compose["services"]["attnserve"]
    assert _seconds(service["stop_grace_period"]) == 30
    assert service.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert service["restart"] in ("always", "unless-stopped")
    assert service["init"] is True


def test_gpu_service_reserves_nvidia_gpus_behind_a_profile(compose):
    service = compose["services"]["attnserve-gpu"]
    assert service["profiles"] == ["gpu"]
    assert service["environment"]["ATTNSERVE_DEVICE"] == "cuda"
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert "attnserve" in service["networks"]["default"]["aliases"]  # scraped with the rest
    assert service["healthcheck"] == compose["services"]["attnserve"]["healthcheck"]
    assert _seconds(service["stop_grace_period"]) == 30


def test_prometheus_runs_the_checked_config(compose):
    service = compose["services"]["prometheus"]
    assert service["image"].startswith("prom/prometheus:")
    flags = dict(arg.split("=", 1) for arg in service["command"] if "=" in arg)
    config_path = Path(flags["--config.file"])
    assert _host_path(service, str(config_path)) == PROMETHEUS_CONFIG
    rules = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["rule_files"]
    for rule_file in rules:  # relative to the config file, in the container as here
        in_container = str(config_path.parent / rule_file)
        assert _host_path(service, in_container) == PROMETHEUS_DIR / rule_file


def test_prometheus_scrapes_every_attnserve_replica(compose):
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "attnserve"]
    assert _seconds(job["scrape_interval"]) == 5
    (discovery,) = job["dns_sd_configs"]
    assert discovery["names"] == ["attnserve"] and "attnserve" in compose["services"]
    assert discovery["type"] == "A" and discovery["port"] == METRICS_PORT


# -- promtool ---------------------------------------------------------------------------------


def test_promtool_checks_config_and_rules():
    result = _run([_binary("promtool"), "check", "config", str(PROMETHEUS_CONFIG)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout
    result = _run([_binary("promtool"), "check", "rules", str(PROMETHEUS_RULES)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_pass_their_unit_tests():
    result = _run([_binary("promtool"), "test", "rules", str(PROMETHEUS_RULES_TEST)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rejects_a_broken_rule(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(PROMETHEUS_RULES.read_text().replace("rate(", "rate[", 1))
    result = _run([_binary("promtool"), "check", "rules", str(rules)])
    assert result.returncode != 0
    assert "parse error" in result.stdout + result.stderr


# -- a real Prometheus scraping a stand-in server ---------------------------------------------

LABELS = 'model="translator",method="Translate",code="OK"'
EXPOSITION = f"""\
# HELP attnserve_request_duration_seconds Time from request to response.
# TYPE attnserve_request_duration_seconds histogram
attnserve_request_duration_seconds_bucket{{{LABELS},le="0.1"}} 2
attnserve_request_duration_seconds_bucket{{{LABELS},le="0.5"}} 5
attnserve_request_duration_seconds_bucket{{{LABELS},le="2.5"}} 6
attnserve_request_duration_seconds_bucket{{{LABELS},le="+Inf"}} 7
attnserve_request_duration_seconds_sum{{{LABELS}}} 4.25
attnserve_request_duration_seconds_count{{{LABELS}}} 7
# HELP attnserve_worker_restarts_total Worker processes restarted after they died.
# TYPE attnserve_worker_restarts_total counter
attnserve_worker_restarts_total 1
"""


class _StandIn(BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = (200, EXPOSITION.encode()) if self.path == "/metrics" else (404, b"")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (a port of the OS's choice) serving EXPOSITION."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _local_config(target: str, web: str) -> dict:
    """The deployed configuration with its service discovery pointed at local addresses."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["rule_files"] = [str(PROMETHEUS_DIR / f) for f in config["rule_files"]]
    for job in config["scrape_configs"]:
        address = target if job["job_name"] == "attnserve" else web
        job.pop("dns_sd_configs", None)
        job["static_configs"] = [{"targets": [address]}]
    return config


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _api(web: str, path: str, **query: str) -> dict:
    url = f"http://{web}/api/v1/{path}?{urllib.parse.urlencode(query)}"
    with _NO_PROXY.open(url, timeout=2) as response:
        return json.load(response)["data"]


def _poll_query(web: str, query: str, process, deadline: float) -> list[dict]:
    """The query's result once it is non-empty; fails when prometheus exits or time runs out."""
    while time.monotonic() < deadline:
        assert process.poll() is None, f"prometheus exited with {process.returncode}"
        try:
            result = _api(web, "query", query=query)["result"]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            result = []
        if result:
            return result
        time.sleep(0.25)
    pytest.fail(f"no result for {query} within 20 s")


@pytest.fixture
def prometheus(tmp_path, stand_in) -> Iterator[tuple[str, subprocess.Popen]]:
    """A prometheus process running the deployed config against the stand-in."""
    web = f"127.0.0.1:{_free_port()}"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_local_config(stand_in, web)))
    log = (tmp_path / "prometheus.log").open("w")
    args = [
        _binary("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address={web}",
    ]
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield web, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_prometheus_scrapes_the_attnserve_job(prometheus, stand_in):
    web, process = prometheus
    deadline = time.monotonic() + 20
    (up,) = _poll_query(web, 'up{job="attnserve"} == 1', process, deadline)
    assert up["metric"]["instance"] == stand_in

    count = _poll_query(web, "attnserve_request_duration_seconds_count", process, deadline)
    assert [(s["metric"]["job"], s["metric"]["model"], s["value"][1]) for s in count] == [
        ("attnserve", "translator", "7")
    ]
    buckets = _api(web, "query", query="attnserve_request_duration_seconds_bucket")["result"]
    assert sorted(s["metric"]["le"] for s in buckets) == ["+Inf", "0.1", "0.5", "2.5"]
    (restarts,) = _api(web, "query", query="attnserve_worker_restarts_total")["result"]
    assert restarts["value"][1] == "1"

    groups = {g["name"] for g in _api(web, "rules")["groups"]}
    assert groups == {"attnserve-recording", "attnserve-alerts"}
