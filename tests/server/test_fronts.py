"""Several front processes on one port (`--fronts`): the kernel spreads connections over them,
every front reaches every worker, /metrics counts every call once, and a worker or a front
that dies costs no unary call."""

from __future__ import annotations

import collections
import io
import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from PIL import Image
from servers import load_until

from service import client

TEXTS = ["El perro come pan en la casa.", "Mañana iremos al mercado con mis hermanos."]
CHANNELS = 16
pytestmark = pytest.mark.slow  # servers of two fronts, killed and drained


def _channels(server) -> list[grpc.Channel]:
    """Channels with a connection each (a local subchannel pool: channels of one process
    would otherwise share one connection)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    return [grpc.insecure_channel(server.address, options=options) for _ in range(CHANNELS)]


def _connections(pid: int, port: int, state: str = "01") -> int:
    """TCP sockets on `port` that process `pid` holds (/proc), in `state` (01: established
    connections, 0A: listening)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rpartition(":")[2], 16)
            if local_port == port and fields[3] == state and fields[9] in inodes:
                held += 1
    return held


def _answers(channels, rounds: int) -> list[str]:
    def one(channel) -> list[str]:
        answers = []
        for _ in range(rounds):
            response = client.translate(channel, TEXTS, timeout=60)
            answers.append(" | ".join(t.hypotheses[0].text for t in response.translations))
        return answers

    with ThreadPoolExecutor(len(channels)) as pool:
        return [a for answers in pool.map(one, channels) for a in answers]


def test_fronts_share_the_port_every_worker_and_the_metrics(start_server):
    server = start_server("--workers", "2", "--fronts", "2")
    state = server.wait()
    (other,) = state["fronts"]
    port = state["grpc_port"]
    reference = _answers([server.channel], 1)[0]
    channels = _channels(server)
    try:
        answers = _answers(channels, 3)
        # every answer is the one a single connection gets, whichever front took it
        assert answers == [reference] * CHANNELS * 3
        # streams too: every step's events reach the front that holds the stream
        unary = client.translate(server.channel, TEXTS[1:], timeout=60)
        with ThreadPoolExecutor(len(channels)) as pool:
            streams = list(
                pool.map(lambda c: list(client.translate_stream(c, TEXTS[1], timeout=60)), channels)
            )
        for events in streams:
            got, want = events[-1].result.translations[0], unary.translations[0]
            assert [(h.text, h.tokens) for h in got.hypotheses] == [
                (h.text, h.tokens) for h in want.hypotheses
            ]
            # at least one partial before the result (partials that wait while the front is
            # busy are sent merged as one: how many arrive is the machine's timing)
            assert len(events) >= 2 and events[-1].result.model == unary.model
            steps = [e.partial.steps for e in events[:-1]]
            assert steps == sorted(set(steps)) and steps[0] >= 1
            last = list(events[-2].partial.tokens)
            assert last and last == list(want.hypotheses[0].tokens)[: len(last)]
        # and the captioner, the other service every front serves
        buffer = io.BytesIO()
        pixels = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(buffer, "PNG")
        expected = client.caption(server.channel, [buffer.getvalue()], timeout=60)
        with ThreadPoolExecutor(len(channels)) as pool:
            captions = list(
                pool.map(lambda c: client.caption(c, [buffer.getvalue()], timeout=60), channels)
            )
        best = expected.captions[0].hypotheses[0]
        assert best.text  # the same caption, whichever front (scores to float rounding: the
        for caption in captions:  # rows a batch holds change the sums' order)
            got = caption.captions[0].hypotheses[0]
            assert (got.text, got.tokens) == (best.text, best.tokens)
            assert got.score == pytest.approx(best.score, abs=1e-4)
        # the kernel spread the connections: both fronts hold some of them
        held = {pid: _connections(pid, port) for pid in (server.process.pid, other)}
        assert all(held.values()) and sum(held.values()) >= CHANNELS, held
        # /metrics adds the fronts: every call counted once, the workers' gauges not doubled
        calls = 2 + CHANNELS * 3
        count = "attnserve_request_duration_seconds_count"
        server.wait_for(
            lambda: server.value(count, method="Translate", code="OK") == calls,
            what="every call counted",
        )
        streamed = server.value(count, method="TranslateStream", code="OK")
        assert streamed == CHANNELS
        assert server.value("attnserve_requests_in_flight") == 0
        assert server.value("attnserve_workers_ready") == 2
        assert server.value("attnserve_model_info", model="translator") == 1
        first_tokens = server.value(
            "attnserve_time_to_first_token_seconds_count", model="translator"
        )
        assert first_tokens == calls + CHANNELS
        assert server.value(count, method="Caption", code="OK") == 1 + CHANNELS
        promtool = [shutil.which("promtool"), "check", "metrics"]
        check = subprocess.run(
            promtool, input=server.scrape(), capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check

        # a worker killed under load from every connection: no call fails, the worker is
        # started again by the first front and the other front connects to it again
        stop = threading.Event()
        with ThreadPoolExecutor(len(channels)) as pool:
            loads = [pool.submit(load_until, channel, stop, False) for channel in channels]
            try:
                server.wait_for(
                    lambda: server.value("attnserve_requests_in_flight") >= 4, what="load"
                )
                time.sleep(0.5)
                os.kill(state["workers"][0], signal.SIGKILL)
                server.wait_for(lambda: server.value("attnserve_workers_ready") == 2, 60, "restart")
                time.sleep(1.0)
            finally:
                stop.set()
            codes = collections.Counter(c for load in loads for _, _, c in load.result(60))
        assert codes == {"OK": codes["OK"]} and codes["OK"] > CHANNELS, codes
        assert server.value("attnserve_worker_restarts_total") == 1
        # both fronts reach the new worker: every connection is answered again
        assert _answers(channels, 1) == [reference] * CHANNELS
    finally:
        for channel in channels:
            channel.close()


def test_a_front_that_dies_is_started_again_and_every_front_drains(start_server):
    server = start_server("--workers", "1", "--fronts", "2")
    state = server.wait()
    (other,) = state["fronts"]
    os.kill(other, signal.SIGKILL)
    log = Path(server.log_file)
    server.wait_for(lambda: "front 1 exited" in log.read_text(), 30, "the front's death")

    def new_front() -> int | None:  # the first front's child listening on the port
        children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
        pids = {int(p) for p in children.read_text().split()} - {other}
        return next((p for p in pids if _connections(p, state["grpc_port"], "0A")), None)

    server.wait_for(lambda: new_front() is not None, 60, "the front started again")
    channels = _channels(server)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the new front serves once it has the worker
            try:
                answers = _answers(channels, 1)
                break
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                time.sleep(0.5)
        assert len(set(answers)) == 1 and len(answers) == CHANNELS
        replacement = new_front()
        assert _connections(replacement, state["grpc_port"]) > 0

        # SIGTERM to the first front drains both: the calls in flight are answered, and each
        # client, refused once with UNAVAILABLE, goes to another replica (it stops sending
        # here: a client that keeps sending meets gRPC's own shutdown, which test_operations
        # covers with backing-off clients)
        with ThreadPoolExecutor(len(channels)) as pool:
            loads = [pool.submit(_until_refused, channel) for channel in channels]
            server.wait_for(lambda: server.value("attnserve_requests_in_flight") >= 4, what="load")
            server.process.send_signal(signal.SIGTERM)
            code = server.process.wait(60)
            ends = [load.result(60) for load in loads]
    finally:
        for channel in channels:
            channel.close()
    assert code == 0
    answered = sum(ok for ok, _ in ends)
    assert [refusal for _, refusal in ends] == ["UNAVAILABLE"] * CHANNELS and answered > 0, ends
    assert not Path(f"/proc/{replacement}").exists() or _zombie(replacement)
    assert "[front 1]: draining" in log.read_text()


def _until_refused(channel, seconds: float = 60.0) -> tuple[int, str]:
    """A client's calls until its first refusal: (calls answered, the refusal's code)."""
    answered, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            client.translate(channel, TEXTS, timeout=30)
            answered += 1
        except grpc.RpcError as error:
            return answered, error.code().name
    return answered, "never refused"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_fronts_share_the_http_port_and_the_files_they_translate(start_server):
    import httpx

    server = start_server("--workers", "1", "--fronts", "2", "--http-listen", "127.0.0.1:0")
    state = server.wait()
    (other,) = state["fronts"]
    port = state["http_port"]
    body = {"texts": TEXTS}
    sessions = [httpx.Client(base_url=server.http_url, timeout=60) for _ in range(CHANNELS)]
    try:
        answers = [s.post("/v1/translate", json=body).json()["translations"] for s in sessions]
        assert all(answer == answers[0] for answer in answers)
        # the kernel spread the connections: both fronts serve HTTP on the one port
        held = {pid: _connections(pid, port) for pid in (server.process.pid, other)}
        assert all(held.values()) and sum(held.values()) >= CHANNELS, held
        count = "attnserve_request_duration_seconds_count"
        server.wait_for(
            lambda: server.value(count, method="http/Translate", code="OK") == CHANNELS,
            what="every HTTP call counted once",
        )
        # a file translated by one front downloads from whichever front a connection reaches
        for i, session in enumerate(sessions[:4]):
            sent = session.post(
                "/translate_file",
                data={"source": "es", "target": "en"},
                files={"file": (f"carta{i}.txt", TEXTS[0].encode(), "text/plain")},
            )
            url = sent.json()["translatedFileUrl"]
            for reader in sessions[4:8]:
                assert reader.get(url).text == answers[0][0]["hypotheses"][0]["text"]
    finally:
        for session in sessions:
            session.close()
