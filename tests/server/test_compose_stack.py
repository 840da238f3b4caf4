"""The compose stack as local processes: `attnserve serve` and a real Prometheus running the
deployed configuration (its service discovery pointed at 127.0.0.1), scraping the server."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from helpers import PROMETHEUS_CONFIG, PROMETHEUS_DIR, installed

from service import client


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


@pytest.fixture(scope="module")
def server(start_server):
    """A server as the stack deploys it, its response cache on (the shared server's is off):
    the cache's panels have series."""
    return start_server("--workers", "2", "--response-cache-entries", "1000")


@pytest.fixture
def prometheus(tmp_path, server) -> Iterator[tuple[str, subprocess.Popen]]:
    """A prometheus process running the deployed config against the live server."""
    web = f"127.0.0.1:{_free_port()}"
    target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_local_config(target, web)))
    log = (tmp_path / "prometheus.log").open("w")
    args = [
        installed("prometheus"),
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


@pytest.mark.slow
def test_prometheus_scrapes_the_live_server_with_the_deployed_config(prometheus, server):
    web, process = prometheus
    target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    for text in ("Yo soy de Canadá.", "Dios es amor."):
        client.translate(server.channel, [text], timeout=30)
    deadline = time.monotonic() + 20
    (up,) = _poll_query(web, 'up{job="attnserve"} == 1', process, deadline)
    assert up["metric"]["instance"] == target
    query = 'attnserve_request_duration_seconds_count{method="Translate",code="OK"}'
    (count,) = _poll_query(web, query, process, deadline)
    assert count["metric"]["model"] == "translator" and float(count["value"][1]) >= 2
    infos = _poll_query(web, "attnserve_model_info", process, deadline)
    assert {i["metric"]["kind"] for i in infos} == {"transformer", "captioner"}
    assert {i["metric"]["execution_provider"] for i in infos} == {"CPUExecutionProvider"}
    groups = {g["name"] for g in _api(web, "rules")["groups"]}
    assert groups == {"attnserve-recording", "attnserve-alerts"}


@pytest.mark.slow
def test_every_dashboard_panel_returns_data_from_the_live_prometheus(prometheus, server):
    import importlib.util
    import threading

    from helpers import ROOT

    spec = importlib.util.spec_from_file_location("panels", ROOT / "deploy/grafana/panels.py")
    panels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(panels)
    written = json.loads((ROOT / "deploy/grafana/dashboards/attnserve.json").read_text())
    assert written == panels.dashboard()  # the file is what panels.py writes
    web, process = prometheus
    image = (ROOT / "examples" / "scene.png").read_bytes()
    stop = threading.Event()

    def traffic():
        sent = 0
        while not stop.is_set():
            sent += 1  # a sentence the cache holds after the first call, and a new one
            texts = ["Yo soy de Canadá.", f"Tengo {sent} perros."]
            client.translate(server.channel, texts, timeout=30)
            list(client.translate_stream(server.channel, "Dios es amor.", timeout=30))
            client.caption(server.channel, [image], timeout=30)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        _poll_query(web, "count_over_time(attnserve_workers_ready[1m]) >= 3", process, deadline)
        empty = []
        for panel in written["panels"]:
            for target in panel["targets"]:
                query = target["expr"].replace("$__rate_interval", "1m").replace("$model", ".*")
                if not _api(web, "query", query=query)["result"]:
                    empty.append((panel["title"], query))
    finally:
        stop.set()
        thread.join(60)
    assert not empty, empty
    assert sum(len(p["targets"]) for p in written["panels"]) >= 20
