"""Load benchmark: the gRPC server under closed- and open-loop streaming traffic.

    python -m bench.load --json [--quick] [--model both|translator] [--repository ROOT]
        [--sources FILE] [--captioner-data DIR] [--seed N] [--slo-ms MS] [--workers N]
        [--max-batch-rows R] [--mixed-fraction F] [--caption-rate-share S] [--markdown FILE]

One script, one run, traffic to 127.0.0.1 only. The workload is a pool of Spanish test verses
(several concatenated for the long ones), each with a target output length drawn from 8..128
tokens (seeded) sent as its max_length; a source is kept when greedy decoding in process
reaches 90% of its target (most run to max_length). Every request is a TranslateStream call,
so the client sees every decoding step: time to first token is the first partial event,
inter-token latency the gaps between successive partial events, end-to-end the call's start
to its final result.

The run, in this order:
- in process: the pool decoded one request at a time with `OnnxEngine` (fp32, one thread,
  CPU) and `translate_ids` (tokenizing and detokenizing included): the reference answers;
- two servers started side by side (the default worker count, 64 batch rows), one with
  continuous batching, one with request-level batching (`--batching request
  --batch-window-ms 5`), both warmed up; only one is loaded at a time;
- the first requests one at a time, each over gRPC (continuous server) and in process in
  turn, alternating which goes first: the gRPC overhead with both on the same machine state;
- rounds: in each, closed loops at 1, 4, 16 and 32 clients on the continuous server and at
  16 and 32 on the request-level one (each client sends its next request when its previous
  one ends), in an order that rotates from round to round, so that a machine whose speed
  drifts (a shared host) weighs on every level alike; each level's figures pool its rounds;
- open loops on the continuous server with Poisson arrivals (the same seeded pattern,
  scaled) at fractions of its closed-loop throughput at the most clients.

With the captioner (--model both, the default; the repository holds both models and every
server serves both, in the same workers), also:
- a pool of test images of --captioner-data (seeded), each encoded as PNG and sent as it is
  with max_length the model's own (captions end where the model ends them), decoded in
  process one at a time with `OnnxEngine` (fp32, one thread) after the PNG decoding and the
  squeeze to the model's side that the server does: the reference answers;
- the first images one at a time over gRPC (CaptionStream and Caption) and in process in
  turn, as the translations are;
- closed loops of captions (CaptionStream) at 1 and 16 clients, in the same rounds as the
  translator's levels;
- mixed traffic: a translation open loop at a fixed rate (--mixed-fraction of the closed-loop
  throughput at the most clients), alone and beside a caption open loop (CaptionStream,
  Poisson, --caption-rate-share times that rate, over the same span), the two in turn with
  the same translation arrivals, in rounds that alternate which runs first.

Every level is bounded in requests and in time; both servers are stopped (SIGTERM, then
kill) whatever happens. The client is one asyncio loop with one grpc.aio channel per server;
its CPU time, that of the server's front and workers, and that of every other process (from
/proc) are reported per level, as are a few numbers from the server's Prometheus endpoint
(differences over the level's rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from attnserve.v1 import (
    caption_pb2,
    caption_pb2_grpc,
    decoding_pb2,
    translation_pb2,
    translation_pb2_grpc,
)
from bench import machine
from service.runtime.decoding import DecodingOptions
from service.runtime.repository import manifests, verify
from service.runtime.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "data" / "repository"
TEST_SOURCES = ROOT / "data" / "translator" / "test.es"
CAPTIONER_DATA = ROOT / "data" / "captioner"
KINDS = {"transformer": "translator", "captioner": "captioner"}  # manifest kind: bench model


def print_report(report: dict, path: Path | None) -> None:
    """A bench's JSON report on stdout, and in `path` when one is given."""
    text = json.dumps(report, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n")


def run_server_bench(parser: argparse.ArgumentParser, run, argv: list[str] | None) -> int:
    """The tail of a server bench's command line: `--repository` and `--json` added to
    `parser`, `run(args)` (a coroutine) run, its report printed."""
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print_report(asyncio.run(run(args)), args.json)
    return 0


SOURCE_PER_TARGET = 1.0  # source tokens wanted per target output token, at least
NEAR, ATTEMPTS = 0.9, 10  # a request's output reaches NEAR x its target; sources tried for it
START_SECONDS = 180.0  # for a server to bind and pass its warm-up
STOP_SECONDS = 30.0  # for a server to drain after SIGTERM before it is killed
FULL = {
    "closed": [(1, 16), (4, 32), (16, 64), (32, 128)],  # (clients, requests) per round
    "request_level": [(16, 64), (32, 128)],
    "rounds": 4,  # every closed-loop level of both servers once a round, in a rotating order
    "interleaved": 64,  # requests over gRPC and in process in turn, one at a time
    "open_fractions": [0.25, 0.5, 0.75, 1.0],  # of the closed-loop throughput at most clients
    "open_requests": 160,
    "targets": (8, 128),
    "warmup": 16,
    "level_seconds": 120.0,  # closed loop: no new request after; open loop: no arrival after
    "drain_seconds": 60.0,  # open loop: in-flight calls after the last arrival
    "caption_closed": [(1, 32), (16, 128)],  # captions: (clients, requests) per round
    "caption_interleaved": 64,  # images over gRPC and in process in turn
    "mixed_rounds": 2,  # translation open loops alone and beside captions, each once a round
}
QUICK = {
    "closed": [(1, 2), (4, 4), (16, 16), (32, 32)],
    "request_level": [(32, 32)],
    "rounds": 2,
    "interleaved": 4,
    "open_fractions": [0.5, 1.0],
    "open_requests": 12,
    "targets": (8, 24),
    "warmup": 4,
    "level_seconds": 30.0,
    "drain_seconds": 30.0,
    "caption_closed": [(1, 2), (16, 16)],
    "caption_interleaved": 4,
    "mixed_rounds": 1,
}
SERVER_METRICS = {  # histogram: what its mean is reported as
    "attnserve_decode_step_batch_rows": "step_rows_mean",
    "attnserve_decode_step_duration_seconds": "step_ms_mean",
    "attnserve_encoder_duration_seconds": "encoder_ms_mean",
    "attnserve_queue_wait_seconds": "queue_wait_ms_mean",
    "attnserve_time_to_first_token_seconds": "ttft_ms_mean",
    "attnserve_inter_token_latency_seconds": "itl_ms_mean",
    "attnserve_request_duration_seconds": "request_ms_mean",
}


# -- the workload -------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    text: str
    source_tokens: int
    max_length: int  # the target output length


class Local:
    """A model in this process, answering one request at a time (`answer`)."""

    tokenizer: Tokenizer

    def answer(self, request):
        """The best hypothesis of one request, detokenized as the server does."""
        raise NotImplementedError

    def references(self, pool: list) -> list[dict]:
        """Each request decoded alone, one after the other: seconds, pieces, finished."""
        for request in pool[:4]:  # warm-up: first runs, allocator growth
            self.answer(request)
        results = []
        for request in pool:
            start = time.perf_counter()
            best = self.answer(request)
            seconds = time.perf_counter() - start
            pieces = self.tokenizer.pieces(best.tokens)
            results.append({"seconds": seconds, "pieces": pieces, "finished": best.finished})
        return results


class InProcess(Local):
    """The translator in this process: `OnnxEngine` fp32, one thread, CPU, `translate_ids`."""

    def __init__(self, version):
        from service.runtime.onnx_engine import OnnxEngine

        self.version = version
        self.engine = OnnxEngine(version, "fp32", "cpu", 1)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        self.limit = version.config["max_length"]

    def translate(self, text: str, max_length: int):
        """The best hypothesis of one text, tokenized, decoded greedily and detokenized."""
        from service.runtime.translation import translate_ids

        ids = self.tokenizer.encode(text)
        options = DecodingOptions(max_length=max_length)
        best = translate_ids(self.engine, [ids], options, self.limit)[0][0]
        self.tokenizer.decode(best.tokens)
        return best

    def answer(self, request: Request):
        return self.translate(request.text, request.max_length)


def _scheduler_share(
    index: int, version_dir: str, requests: list, clients: int, max_rows: int, barrier, out
) -> None:
    """One process of the in-process run: the worker's scheduler over the worker's engine
    (fp32, one thread), `clients` jobs in flight, each request's next one submitted when it
    ends; tokenizing and detokenizing included, as the front does them. Its throughput window
    is the closed loop's (`_window`): from the first request to the last one submitted,
    counting the answers that ended inside it."""
    from service.runtime.batching import source_batch
    from service.runtime.onnx_engine import OnnxEngine
    from service.worker.messages import Failure, Job, Result
    from service.worker.scheduler import Scheduler

    os.environ.update(dict.fromkeys(machine.THREAD_VARIABLES, "1"))
    version = verify(Path(version_dir))
    engine = OnnxEngine(version, "fp32", "cpu", 1)
    tokenizer = Tokenizer(version.tokenizer_file)
    limit = version.manifest["limits"]["max_source_tokens"]
    scheduler = Scheduler(engine, max_rows)
    submitted: list[float] = []

    def submit(index: int) -> None:
        text, max_length = requests[index]
        src_ids, src_mask = source_batch([tokenizer.encode(text)], limit)
        options = DecodingOptions(max_length=max_length)
        scheduler.submit(Job(index, {"src_ids": src_ids, "src_mask": src_mask}, options))
        submitted.append(time.perf_counter())

    def run(indices: list[int]) -> list[tuple[float, int, bool]]:
        waiting, answers = list(reversed(indices)), []
        for _ in range(min(clients, len(waiting))):
            submit(waiting.pop())
        while scheduler.busy:
            scheduler.iterate()
            for event in scheduler.events:
                if isinstance(event, Result):
                    best = event.results[0][0]
                    tokenizer.decode(best.tokens)
                    answers.append((time.perf_counter(), len(best.tokens), True))
                elif isinstance(event, Failure):
                    answers.append((time.perf_counter(), 0, False))
                else:
                    continue
                if waiting:
                    submit(waiting.pop())
            scheduler.events.clear()
        return answers

    run(list(range(min(2, len(requests)))))  # warm-up, untimed
    barrier.wait()
    submitted.clear()
    start = time.perf_counter()
    answers = run(list(range(len(requests))))
    last_send, ok = submitted[-1], [a for a in answers if a[2]]
    busy = _all_busy(start, last_send, [a[0] for a in ok], clients)  # as `_window` decides
    end = last_send if busy else max(a[0] for a in answers)
    counted = [a for a in ok if a[0] <= end]
    out.put({
        "process": index, "requests": len(counted), "tokens": sum(a[1] for a in counted),
        "seconds": end - start, "steady": busy, "failed": sum(not a[2] for a in answers),
    })  # fmt: skip


def _pooled(parts: list[dict], key: str) -> float:
    """A process's `key` per second over all its rounds' windows."""
    return sum(p[key] for p in parts) / sum(p["seconds"] for p in parts)


def in_process_closed_loop(
    version, pool: list[Request], clients: int, workers: int, max_rows: int
) -> dict:
    """The requests of a closed loop of `clients` through the server's own scheduler, without
    the server: `workers` processes (as many as the server's workers), each one scheduler with
    its share of the clients and of the requests. Throughput: the sum of the processes'."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(workers), context.Queue()
    share = max(1, clients // workers)
    shares = [[(r.text, r.max_length) for r in pool[w::workers]] for w in range(workers)]
    directory = str(version.directory)
    processes = [
        context.Process(
            target=_scheduler_share, args=(w, directory, part, share, max_rows, barrier, out)
        )
        for w, part in enumerate(shares)
    ]
    for process in processes:
        process.start()
    parts: list[dict] = []
    deadline = time.monotonic() + 900
    try:
        while len(parts) < workers:
            with contextlib.suppress(queue.Empty):
                parts.append(out.get(timeout=1.0))
                continue
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the in-process run failed (exit codes {dead})")
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    return {
        "clients": clients,
        "processes": workers,
        "parts": sorted(parts, key=lambda p: p["process"]),
        "throughput_rps": sum(p["requests"] / p["seconds"] for p in parts),
        "tokens_per_s": sum(p["tokens"] / p["seconds"] for p in parts),
        "failed": sum(p["failed"] for p in parts),
    }


@dataclass(frozen=True)
class Picture:
    png: bytes  # the image as sent
    scene: int  # its index in the test split
    max_length: int  # the model's own: captions end where the model ends them


class InProcessCaptioner(Local):
    """The captioner in this process: the PNG decoded and squeezed to the model's side as the
    server does, then `OnnxEngine` fp32, one thread, CPU, `caption_images`."""

    def __init__(self, version):
        from service.runtime.onnx_engine import OnnxEngine

        self.engine = OnnxEngine(version, "fp32", "cpu", 1)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        self.directory = version.directory
        self.side = version.manifest["preprocessor"]["size"][0]
        self.limit = version.config["max_length"]

    def answer(self, request: Picture):
        from service.runtime.captioning import caption_images
        from service.runtime.images import decode_image, resize_square

        square = resize_square(decode_image(request.png, "image").pixels, self.side)
        options = DecodingOptions(max_length=request.max_length)
        best = caption_images(self.engine, square[None], options)[0][0]
        self.tokenizer.decode(best.tokens)
        return best


def make_pictures(data: Path, count: int, max_length: int, seed: int) -> list[Picture]:
    """`count` distinct test images of the captioner's data (seeded), each encoded as PNG."""
    from PIL import Image

    from models.caption_data import read_scenes

    _, images = read_scenes(data, "test")
    if len(images) < count:
        raise SystemExit(f"{data}: {len(images)} test images, {count} needed")
    pictures = []
    for scene in np.random.default_rng(seed).choice(len(images), count, replace=False):
        encoded = io.BytesIO()
        Image.fromarray(np.asarray(images[scene])).save(encoded, format="PNG")
        pictures.append(Picture(encoded.getvalue(), int(scene), max_length))
    return pictures


def make_pool(lines: list[str], local: InProcess, count: int, targets, seed: int) -> list:
    """`count` requests, each a target length drawn from `targets` (inclusive) and a source
    that reaches it: consecutive verses from a random start, enough of them for the target;
    a source whose greedy output stops before NEAR x target is replaced by another (ATTEMPTS
    at most, then the longest-running one is kept)."""
    rng = np.random.default_rng(seed)
    limit, pool = local.limit - 1, []  # `</s>` is added to the source
    for _ in range(count):
        target = int(rng.integers(targets[0], targets[1] + 1))
        wanted = math.ceil(target * SOURCE_PER_TARGET) + 4
        best = None
        for _attempt in range(ATTEMPTS):
            start, verses = int(rng.integers(len(lines))), []
            while True:
                verses.append(lines[(start + len(verses)) % len(lines)])
                tokens = len(local.tokenizer.encode(" ".join(verses)))
                if tokens >= wanted or len(verses) == len(lines):
                    break
            if tokens > limit:
                continue
            text = " ".join(verses)
            output = len(local.translate(text, target).tokens)
            if best is None or output > best[2]:
                best = (text, tokens, output)
            if output >= NEAR * target:
                break
        if best is None:
            raise ValueError(f"no source of at most {limit} tokens for {target} output tokens")
        pool.append(Request(best[0], best[1], target))
    return pool


# -- the server ---------------------------------------------------------------------------


class Server:
    """One `attnserve serve` process on 127.0.0.1 (ports chosen by the OS)."""

    def __init__(self, repository: Path, directory: Path, flags: list[str]):
        self.ready_file = directory / "ready.json"
        self.log_path = directory / "server.log"
        self.flags = flags
        command = [
            sys.executable, "-m", "attnserve.cli", "serve",
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(self.ready_file), "--repository", str(repository), *flags,
        ]  # fmt: skip
        environment = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        environment |= dict.fromkeys(machine.THREAD_VARIABLES, "1")
        self.log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=environment, cwd=ROOT
        )
        self.state: dict = {}

    async def wait(self) -> dict:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, json.JSONDecodeError):
                self.state = json.loads(self.ready_file.read_text())
                if self.state.get("serving"):
                    self.address = f"127.0.0.1:{self.state['grpc_port']}"
                    self.metrics_url = f"http://127.0.0.1:{self.state['metrics_port']}/metrics"
                    return self.state
            if self.process.poll() is not None:
                break
            await asyncio.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the server did not start: {self.log_path.read_text()[-4000:]}")

    def metrics(self) -> dict:
        """{(sample name, sorted label items): value} of the Prometheus endpoint."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def cpu_seconds(self) -> dict:
        """User + system CPU seconds of the front processes (every one) and of the workers."""
        fronts = [self.process.pid, *self.state.get("fronts", [])]
        return {
            "front": sum(_process_cpu(pid) for pid in fronts),
            "workers": sum(_process_cpu(pid) for pid in self.state.get("workers", [])),
        }

    def stop(self) -> int | None:
        """SIGTERM (drain), then kill after STOP_SECONDS; the exit code."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            return self.process.returncode
        finally:
            self.log.close()


def _machine_busy() -> float:
    """CPU seconds the whole machine spent busy (every process), from /proc/stat."""
    try:
        ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is in user already


def _process_cpu(pid: int) -> float:
    try:
        fields_ = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


# -- the client ---------------------------------------------------------------------------


@dataclass
class Sample:
    """One call as the client saw it (perf_counter seconds)."""

    index: int
    start: float
    end: float = 0.0
    partials: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # decoding steps of each partial event
    code: str = "OK"
    result: translation_pb2.TranslateResponse | caption_pb2.CaptionResponse | None = None


def stream_requests(pool: list[Request]) -> list[translation_pb2.TranslateStreamRequest]:
    return [
        translation_pb2.TranslateStreamRequest(
            text=r.text, options=decoding_pb2.DecodingOptions(max_length=r.max_length)
        )
        for r in pool
    ]


async def call(method, index: int, message, timeout: float) -> Sample:
    """One streaming call (`method`: a stub's TranslateStream or CaptionStream); a failed call
    is recorded, not raised."""
    sample = Sample(index, time.perf_counter())
    partials = sample.partials
    stream = method(message, timeout=timeout)
    try:
        async for event in stream:
            if event.HasField("partial"):
                partials.append(time.perf_counter())
                sample.steps.append(event.partial.steps)
            else:
                sample.end, sample.result = time.perf_counter(), event.result
    except grpc.aio.AioRpcError as error:
        sample.code = error.code().name
    finally:
        stream.cancel()  # a no-op once the call has ended; else (this task cancelled) ends it
    if not sample.end:
        sample.end = time.perf_counter()
        if sample.code == "OK":
            sample.code = "NO_RESULT"
    return sample


async def unary_call(method, index: int, request, timeout: float) -> Sample:
    """One unary call (`method`: a stub's Translate or Caption)."""
    sample = Sample(index, time.perf_counter())
    try:
        sample.result = await method(request, timeout=timeout)
    except grpc.aio.AioRpcError as error:
        sample.code = error.code().name
    sample.end = time.perf_counter()
    return sample


async def closed_loop(method, messages, clients: int, seconds: float, timeout: float) -> dict:
    """`clients` clients share the requests in order, each sending its next request when its
    previous one is answered; no request is sent after `seconds`."""
    samples, indices = [], iter(range(len(messages)))
    start = time.perf_counter()
    deadline = start + seconds

    async def client():
        for index in indices:  # shared: each client takes the next request
            if time.perf_counter() > deadline:
                return
            samples.append(await call(method, index, messages[index], timeout))

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"samples": samples, "start": start}


async def open_loop(
    method, messages, rate: float, seed: int, seconds: float, drain: float, timeout
):
    """Poisson arrivals at `rate` per second (seeded), none after `seconds`; calls still in
    flight `drain` seconds after the last arrival are cancelled."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, len(messages)))
    tasks, lateness = [], []
    start = time.perf_counter()
    for index, at in enumerate(arrivals):
        if at > seconds:
            break
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lateness.append(time.perf_counter() - start - at)
        tasks.append(asyncio.create_task(call(method, index, messages[index], timeout)))
    pending = (await asyncio.wait(tasks, timeout=drain))[1] if tasks else set()
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    samples = [
        r if isinstance(r, Sample) else Sample(i, start, start, code="NOT_FINISHED")
        for i, r in enumerate(results)
    ]
    lateness = lateness or [0.0]
    late = {"mean_ms": 1000 * float(np.mean(lateness)), "max_ms": 1000 * float(max(lateness))}
    return {"samples": samples, "start": start, "arrival_lateness": late}


# -- summaries ----------------------------------------------------------------------------


def spread(seconds) -> dict | None:
    """p50, p99 and mean in milliseconds (numpy's linear percentiles), and the count."""
    if len(seconds) == 0:
        return None
    values = 1000 * np.asarray(seconds, dtype=np.float64)
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "mean": float(values.mean()), "n": len(values)}


def check(sample: Sample, reference: dict, target: int) -> dict:
    """Whether an answer is right: status OK, the in-process tokens, the server's own token
    count, and partial events for increasing steps up to the last but one (one per step
    unless the server merged the partials of a client that fell behind)."""
    if sample.code != "OK" or sample.result is None:
        return {"correct": False, "identical": False, "tokens": 0}
    result = sample.result
    answer = (result.captions if hasattr(result, "captions") else result.translations)[0]
    best = answer.hypotheses[0]
    pieces, tokens = list(best.tokens), answer.token_counts.output_tokens
    steps = len(pieces) + (1 if best.finished else 0)
    identical = pieces == reference["pieces"]
    if sample.steps:
        streamed = sample.steps == sorted(set(sample.steps)) and sample.steps[-1] == steps - 1
    else:  # a unary call, or a stream whose first step ended it
        streamed = not sample.partials
    consistent = tokens == len(pieces) <= target and streamed
    return {"correct": identical and consistent, "identical": identical, "tokens": tokens}


def _of(labels: tuple, model: str | None) -> bool:
    """Whether a sample counts for `model` (None: every model); one without a model label
    counts for all."""
    return model is None or dict(labels).get("model", model) == model


def _histograms(before: dict, after: dict, model: str | None = None) -> dict:
    """{histogram: (sum, count, {le: cumulative count})} over the level, every label summed
    (of `model`'s samples only, when given)."""
    totals: dict = {}
    for (name, labels), value in after.items():
        base = name.removesuffix("_sum").removesuffix("_count").removesuffix("_bucket")
        if base not in SERVER_METRICS or not _of(labels, model):
            continue
        delta = value - before.get((name, labels), 0.0)
        entry = totals.setdefault(base, [0.0, 0.0, {}])
        if name.endswith("_sum"):
            entry[0] += delta
        elif name.endswith("_count"):
            entry[1] += delta
        elif name.endswith("_bucket"):
            le = float(dict(labels)["le"])
            entry[2][le] = entry[2].get(le, 0.0) + delta
    return totals


def _bucket_quantile(q: float, buckets: dict) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket that holds the quantile."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            share = (rank - below) / (count - below) if count > below else 0.0
            return lower + (bound - lower) * share
        lower, below = bound, count
    return None


def server_numbers(before: dict, after: dict, model: str | None = None) -> dict:
    """Means (and TTFT quantiles from the buckets) of the server's histograms over a level, of
    `model`'s samples only when given (the metrics' model label: its name)."""
    histograms = _histograms(before, after, model)
    numbers: dict = {}
    for name, key in SERVER_METRICS.items():
        total, count, buckets = histograms.get(name, (0.0, 0.0, {}))
        scale = 1 if key.startswith("step_rows") else 1000
        numbers[key] = scale * total / count if count else None
        if name == "attnserve_decode_step_batch_rows":
            numbers["steps"] = int(count)
        if name == "attnserve_time_to_first_token_seconds":
            for q in (0.5, 0.99):
                value = _bucket_quantile(q, buckets)
                numbers[f"ttft_ms_p{round(100 * q)}"] = None if value is None else 1000 * value
    tokens = "attnserve_generated_tokens_total"
    numbers["generated_tokens"] = int(
        sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == tokens and _of(k[1], model))
    )
    restarts = "attnserve_worker_restarts_total"
    numbers["worker_restarts"] = int(
        sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == restarts)
    )
    return numbers


def _window(run: dict, ok: list[Sample], closed_clients: int | None) -> tuple[float, float, bool]:
    """(start, seconds, steady) of a run's throughput window. Closed loop: from the first
    request sent to the last, when it holds at least two answers per client (every client is
    busy all along); else, and for open loops, from the first send to the last answer."""
    start = run["start"]
    end = max((s.end for s in run["samples"]), default=start)
    if closed_clients and len(run["samples"]) > 1:
        last_send = max(s.start for s in run["samples"])
        if _all_busy(start, last_send, [s.end for s in ok], closed_clients):
            return start, last_send - start, True
    return start, end - start, False


def _all_busy(start: float, last_send: float, ends: list[float], clients: int) -> bool:
    """Whether a closed loop's first-to-last-send window holds at least two answers per client
    (every client busy all along): the window its throughput is taken over."""
    return last_send > start and sum(1 for e in ends if e <= last_send) >= 2 * clients


def summarize(runs: list[dict], pool, references, slo: float, closed_clients=None) -> dict:
    """A level's latencies (every round pooled), throughput and goodput (answers in the
    rounds' windows over their summed length), errors and correctness."""
    checked, rates = [], []
    counted = good = tokens_counted = steady = 0
    window_total = duration = 0.0
    for run in runs:
        pairs = [
            (s, check(s, references[s.index], pool[s.index].max_length)) for s in run["samples"]
        ]
        ok = [s for s, _ in pairs if s.code == "OK"]
        start, window, busy = _window(run, ok, closed_clients)
        inside = [(s, c) for s, c in pairs if s.code == "OK" and s.end <= start + window + 1e-9]
        counted += len(inside)
        good += sum(1 for s, c in inside if c["correct"] and s.end - s.start <= slo)
        tokens_counted += sum(c["tokens"] for _, c in inside)
        window_total, steady = window_total + window, steady + busy
        duration += max((s.end for s in run["samples"]), default=start) - start
        rates.append(len(inside) / window if window > 0 else 0.0)
        checked += pairs
    ok = [s for s, _ in checked if s.code == "OK"]
    errors: dict[str, int] = {}
    for s, _ in checked:
        if s.code != "OK":
            errors[s.code] = errors.get(s.code, 0) + 1
    tokens = [c["tokens"] for s, c in checked if s.code == "OK"]
    targets = [pool[s.index].max_length for s in ok]
    per_second = (lambda n: n / window_total) if window_total > 0 else (lambda n: 0.0)
    return {
        "requests": len(checked),
        "rounds": len(runs),
        "ok": len(ok),
        "errors": errors,
        "correct": sum(c["correct"] for _, c in checked),
        "identical_to_in_process": sum(c["identical"] for _, c in checked),
        "ttft_ms": spread([(s.partials[0] if s.partials else s.end) - s.start for s in ok]),
        "itl_ms": spread(
            [
                (b - a) / (sb - sa)  # per token, also across merged partial events
                for s in ok
                for (a, sa), (b, sb) in itertools.pairwise(zip(s.partials, s.steps, strict=True))
            ]
        ),
        "merged_partials": sum((s.steps[-1] - len(s.steps)) if s.steps else 0 for s in ok),
        "e2e_ms": spread([s.end - s.start for s in ok]),
        "duration_s": duration,
        "window_s": window_total,
        "steady_rounds": steady,
        "throughput_rps": per_second(counted),
        "output_tokens_per_s": per_second(tokens_counted),
        "goodput_rps": per_second(good),
        "round_throughput_rps": rates,
        "output_tokens": {
            "total": int(sum(tokens)),
            "mean": float(np.mean(tokens)) if tokens else 0.0,
            "target_mean": float(np.mean(targets)) if targets else 0.0,
            "at_target": sum(t == m for t, m in zip(tokens, targets, strict=True)),
        },
    }


# -- the run ------------------------------------------------------------------------------


@dataclass
class Running:
    """A started server and the client's channel to it, with a stub per model."""

    name: str
    flags: list[str]
    server: Server
    channel: grpc.aio.Channel | None = None
    stubs: dict = field(default_factory=dict)


@dataclass
class Traffic:
    """One model's side of the run: its requests, their in-process answers (the reference),
    and their gRPC messages and methods."""

    model: str  # translator, captioner
    label: str  # the model's name: its label in the server's metrics
    pool: list  # Request or Picture, each with its max_length
    local: Local
    references: list[dict]
    stream: list  # a streaming request per pool entry
    unary: list  # the same as a unary request
    stub: type
    methods: tuple[str, str]  # (streaming, unary)

    def method(self, running: Running, unary: bool = False):
        return getattr(running.stubs[self.model], self.methods[unary])


def translation_traffic(version, pool: list[Request], local: InProcess, references) -> Traffic:
    stream = stream_requests(pool)
    unary = [translation_pb2.TranslateRequest(texts=[m.text], options=m.options) for m in stream]
    stub, methods = translation_pb2_grpc.TranslationServiceStub, ("TranslateStream", "Translate")
    return Traffic(
        "translator", version.name, pool, local, references, stream, unary, stub, methods
    )


def caption_traffic(version, pool: list[Picture], local: InProcessCaptioner, references) -> Traffic:
    options = [decoding_pb2.DecodingOptions(max_length=p.max_length) for p in pool]
    stream = [
        caption_pb2.CaptionStreamRequest(image=p.png, options=o)
        for p, o in zip(pool, options, strict=True)
    ]
    unary = [
        caption_pb2.CaptionRequest(images=[p.png], options=o)
        for p, o in zip(pool, options, strict=True)
    ]
    stub, methods = caption_pb2_grpc.CaptionServiceStub, ("CaptionStream", "Caption")
    return Traffic("captioner", version.name, pool, local, references, stream, unary, stub, methods)


@dataclass(frozen=True)
class Flow:
    """One loop of a level: `value` clients (closed) or requests a second (open) over the
    first `count` requests of a traffic."""

    traffic: Traffic
    load: str  # closed, open
    value: float
    count: int
    seed: int = 0  # added to the open loop's arrival seed

    def __str__(self) -> str:
        if self.load == "closed":
            return f"{self.traffic.model}: closed, {self.value:g} clients, {self.count} requests"
        return f"{self.traffic.model}: open, {self.value:.1f}/s, {self.count} requests"


class Bench:
    """The measurements of one run."""

    def __init__(self, args, traffic: dict[str, Traffic]):
        self.args, self.traffic = args, traffic
        self.translation = traffic["translator"]
        self.paired: dict = {}  # by model
        self.timeout = args.level_seconds + args.drain_seconds + 30.0

    def launch(self, name: str, flags: list[str], directory: Path) -> Running:
        print(f"starting the {name} server", file=sys.stderr)
        (directory / name).mkdir()
        return Running(name, flags, Server(self.args.repository, directory / name, flags))

    async def ready(self, running: Running) -> None:
        """Waits for the server to serve, connects, and warms every model up."""
        await running.server.wait()
        running.channel = grpc.aio.insecure_channel(running.server.address)
        await asyncio.wait_for(running.channel.channel_ready(), 30)
        for model, traffic in self.traffic.items():
            running.stubs[model] = traffic.stub(running.channel)
            warm = traffic.stream[: self.args.warmup]
            run = await closed_loop(
                traffic.method(running), warm, 4, self.args.level_seconds, self.timeout
            )
            failed = [s.code for s in run["samples"] if s.code != "OK"]
            if failed:
                raise RuntimeError(f"{running.name} server: {model} warm-up calls failed: {failed}")

    async def close(self, running: Running) -> dict:
        """Closes the channel and stops the server; its description."""
        if running.channel is not None:
            await running.channel.close()
        exit_code = running.server.stop()
        workers = len(running.server.state.get("workers", []))
        return {"flags": running.flags, "workers": workers, "exit_code": exit_code}

    async def interleaved(self, running: Running, count: int, traffic: Traffic) -> None:
        """The first `count` requests one at a time, each over gRPC (streaming and unary) and
        in process in turn (rotating which goes first), so that all see the machine in the same
        state."""
        print(f"{running.name} server: {count} {traffic.model} requests over gRPC and in process "
              "in turn", file=sys.stderr)  # fmt: skip
        remote, unary, local = [], [], []
        for index in range(count):
            order = ("grpc", "unary", "local")
            for way in order[index % 3 :] + order[: index % 3]:
                if way == "grpc":
                    message, method = traffic.stream[index], traffic.method(running)
                    remote.append(await call(method, index, message, self.timeout))
                elif way == "unary":
                    message, method = traffic.unary[index], traffic.method(running, unary=True)
                    unary.append(await unary_call(method, index, message, self.timeout))
                else:
                    start = time.perf_counter()
                    traffic.local.answer(traffic.pool[index])
                    local.append(time.perf_counter() - start)
        references, pool = traffic.references, traffic.pool
        checks = [  # a request is correct when both its gRPC answers are
            all(check(s, references[s.index], pool[s.index].max_length)["correct"] for s in pair)
            for pair in zip(remote, unary, strict=True)
        ]
        e2e = [s.end - s.start for s in remote]
        e2e_unary = [s.end - s.start for s in unary]
        self.paired[traffic.model] = {
            "requests": count,
            "order": "rotating: each request over gRPC streaming, gRPC unary and in process, "
            "the first way changing from request to request",
            "correct": sum(checks),
            "errors": sum(s.code != "OK" for s in remote + unary),
            "grpc_e2e_ms": spread(e2e),
            "grpc_unary_e2e_ms": spread(e2e_unary),
            "in_process_ms": spread(local),
            "ratio_of_medians": float(np.median(e2e) / np.median(local)),
            "ratio_of_medians_unary": float(np.median(e2e_unary) / np.median(local)),
            "median_of_ratios": float(np.median(np.divide(e2e, local))),
        }

    async def _loop(self, running: Running, flow: Flow) -> dict:
        args, method = self.args, flow.traffic.method(running)
        messages = flow.traffic.stream[: flow.count]
        if flow.load == "closed":
            return await closed_loop(method, messages, flow.value, args.level_seconds, self.timeout)
        return await open_loop(
            method, messages, flow.value, args.seed + flow.count + flow.seed, args.level_seconds,
            args.drain_seconds, self.timeout,
        )  # fmt: skip

    async def measure(self, running: Running, *flows: Flow) -> dict:
        """One round of a level: its flows side by side (a closed loop of clients or an open
        loop of requests a second each); the server's metric and CPU differences over it."""
        print(f"{running.name} server: " + "; ".join(map(str, flows)), file=sys.stderr)
        args, server = self.args, running.server
        # Two requests first, untimed: the caches hold the other server's weights.
        for traffic in {flow.traffic.model: flow.traffic for flow in flows}.values():
            warm = traffic.stream[:2]
            await closed_loop(traffic.method(running), warm, 1, args.level_seconds, self.timeout)
        await asyncio.sleep(0.3)  # the workers' last statistics reach the front
        before, cpu, client = server.metrics(), server.cpu_seconds(), time.process_time()
        busy = _machine_busy()
        runs = await asyncio.gather(*(self._loop(running, flow) for flow in flows))
        client, busy = time.process_time() - client, _machine_busy() - busy
        await asyncio.sleep(0.3)
        after, cpu_after = server.metrics(), server.cpu_seconds()
        cpu_s = {"client": client}
        cpu_s |= {k: cpu_after[k] - cpu[k] for k in ("front", "workers")}
        cpu_s["other"] = max(0.0, busy - sum(cpu_s.values()))
        metrics = {k: v - before.get(k, 0.0) for k, v in after.items()}
        return {"runs": list(runs), "metrics": metrics, "cpu_s": cpu_s}

    def level(self, entry: dict, measured: list[dict], flow: int = 0) -> dict:
        """A level's entry from its rounds: the answers of their `flow`-th flow; the server's
        metrics of that flow's model; the CPU of the whole level."""
        runs = [m["runs"][flow] for m in measured]
        traffic = self.traffic[entry.get("model", "translator")]
        clients = entry.get("clients")
        slo = self.args.slo_ms / 1000
        entry = entry | summarize(runs, traffic.pool, traffic.references, slo, clients)
        cpu_s = {k: sum(m["cpu_s"][k] for m in measured) for k in measured[0]["cpu_s"]}
        entry["cpu_s"] = cpu_s
        entry["cpu_cores"] = {k: v / entry["duration_s"] for k, v in cpu_s.items()}
        metrics: dict = {}
        for m in measured:
            for key, value in m["metrics"].items():
                metrics[key] = metrics.get(key, 0.0) + value
        entry["server_metrics"] = server_numbers({}, metrics, traffic.label)
        if "arrival_lateness" in runs[0]:
            entry["arrival_lateness"] = runs[0]["arrival_lateness"]
        return entry


def _find(levels: list[dict], server: str, load: str, clients: int | None = None):
    for level in levels:
        same = level["server"] == server and level["load"] == load
        if same and (clients is None or level.get("clients") == clients):
            return level
    return None


def _per_round(a: dict, b: dict, key: str = "round_throughput_rps") -> list[float]:
    return [x / y for x, y in zip(a[key], b[key], strict=False) if x is not None and y]


def ratios(
    levels: list[dict], paired: dict, references: list[dict], args, scheduler_loop=None
) -> list[tuple]:
    """(what, ratio, compare, target, per-round ratios) of this run; those with a target
    are goals."""
    rows = []
    clients = [c for c, _ in args.closed]
    one, many = min(clients), 16 if 16 in clients else max(clients)
    single = _find(levels, "continuous", "closed", one)
    multi = _find(levels, "continuous", "closed", many)
    in_process = _find(levels, "continuous", "closed", (scheduler_loop or {}).get("clients"))
    if in_process and scheduler_loop["throughput_rps"]:
        text = (
            f"throughput over gRPC at {in_process['clients']} clients / the same requests "
            f"through the same scheduler in process ({scheduler_loop['processes']} processes)"
        )
        ratio = in_process["throughput_rps"] / scheduler_loop["throughput_rps"]
        per_round = [
            a / b["throughput_rps"]
            for a, b in zip(
                in_process.get("round_throughput_rps", []), scheduler_loop["rounds"], strict=False
            )
        ]
        rows.append((text, ratio, ">=", 0.85, per_round))
    if single and multi and single["throughput_rps"]:
        speedup = multi["throughput_rps"] / single["throughput_rps"]
        text = f"throughput at {many} clients / at {one} client, continuous batching"
        rows.append((text, speedup, ">=", 4.0, _per_round(multi, single)))
    if paired and paired["errors"] == 0:
        count = paired["requests"]
        text = (
            f"e2e p50 over gRPC (Translate) at 1 client / in-process decode p50, the same "
            f"{count} requests in turn"
        )
        rows.append((text, paired["ratio_of_medians_unary"], "<=", 1.15, None))
        text = "the same with TranslateStream (a partial event every step)"
        rows.append((text, paired["ratio_of_medians"], "<=", None, None))
        text = "median per request of e2e over gRPC / in-process decode, in turn"
        rows.append((text, paired["median_of_ratios"], "<=", None, None))
    if single and single["e2e_ms"]:
        local = spread([r["seconds"] for r in references[: single["requests_per_round"]]])
        text = (
            f"e2e p50 of the closed loop at {one} client / in-process decode p50 measured "
            "before the servers started, the same requests"
        )
        rows.append((text, single["e2e_ms"]["p50"] / local["p50"], "<=", None, None))
    top = max(c for c, _ in args.request_level)
    for clients_, _ in args.request_level:
        ours = _find(levels, "continuous", "closed", clients_)
        theirs = _find(levels, "request", "closed", clients_)
        if not (ours and theirs and theirs["throughput_rps"]):
            continue
        speedup = ours["throughput_rps"] / theirs["throughput_rps"]
        text = f"continuous / request-level batching throughput, {clients_} clients"
        target = 1.3 if clients_ == top else None
        rows.append((text, speedup, ">=", target, _per_round(ours, theirs)))
        if ours["e2e_ms"] and theirs["e2e_ms"]:
            tail = ours["e2e_ms"]["p99"] / theirs["e2e_ms"]["p99"]
            text = f"continuous / request-level batching e2e p99, {clients_} clients"
            rows.append((text, tail, "<", 1.0 if clients_ == top else None, None))
    return rows


def caption_ratios(part: dict, args) -> list[tuple]:
    """(what, ratio, compare, target, per-round ratios) of the captioner's part; those with a
    target are goals."""
    rows, paired = [], part["in_process"]["interleaved"]
    if paired and paired["errors"] == 0:
        text = (
            f"caption e2e p50 over gRPC (Caption) at 1 client / in-process p50 (PNG decoding "
            f"included), the same {paired['requests']} images in turn"
        )
        rows.append((text, paired["ratio_of_medians_unary"], "<=", 1.15, None))
        text = "the same with CaptionStream (a partial event every step)"
        rows.append((text, paired["ratio_of_medians"], "<=", None, None))
        text = "median per image of caption e2e over gRPC / in process, in turn"
        rows.append((text, paired["median_of_ratios"], "<=", None, None))
    clients = [c for c, _ in args.caption_closed]
    single = _find(part["levels"], "continuous", "closed", min(clients))
    multi = _find(part["levels"], "continuous", "closed", max(clients))
    if single and multi and single["throughput_rps"] and multi is not single:
        speedup = multi["throughput_rps"] / single["throughput_rps"]
        text = f"caption throughput at {max(clients)} clients / at {min(clients)} client"
        rows.append((text, speedup, ">=", None, _per_round(multi, single)))
    mixed = part["mixed"]
    if mixed and mixed["alone"]["e2e_ms"] and mixed["mixed"]["e2e_ms"]:
        alone, beside = mixed["alone"], mixed["mixed"]
        per_round = _per_round(beside, alone, "round_e2e_p99_ms")
        text = (
            f"translation e2e p99 beside captions / alone, open loop at {mixed['fraction']:.0%} "
            f"of saturation, captions at {args.caption_rate_share:g} x its rate"
        )
        tail = beside["e2e_ms"]["p99"] / alone["e2e_ms"]["p99"]
        rows.append((text, tail, "<=", 1.2, per_round))
        text = "the same at p50"
        rows.append((text, beside["e2e_ms"]["p50"] / alone["e2e_ms"]["p50"], "<=", None, None))
    return rows


def goals(rows: list[tuple]) -> list[dict]:
    judged = []
    for text, ratio, compare, target, per_round in rows:
        if ratio is not None and target is not None:
            met = {"<": ratio < target, "<=": ratio <= target, ">=": ratio >= target}[compare]
            goal = dict(goal=text, ratio=ratio, compare=compare, target=target, met=met)
            if per_round:
                goal["per_round"] = per_round
            judged.append(goal)
    return judged


def _pair(spread_: dict | None) -> str:
    return "–" if spread_ is None else f"{spread_['p50']:.1f} / {spread_['p99']:.1f}"


def _number(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _load(level: dict) -> str:
    if level["load"] == "closed":
        return f"closed, {level['clients']} client{'s' if level['clients'] > 1 else ''}"
    return f"open, {level['rate_rps']:.1f}/s ({level['fraction']:.0%})"


LEVEL_HEADER = [
    "| server | load | requests | errors | correct | TTFT | ITL | e2e | req/s | tokens/s "
    "| goodput |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]
SERVER_HEADER = [
    "| server | load | rows/step | step ms | encoder ms | queue ms | TTFT ms | ITL ms "
    "| CPU client | CPU front | CPU workers | CPU other |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]


def _level_row(level: dict, first: str) -> str:
    """A level's client-side figures, after its first cell (the server, or the traffic)."""
    cells = [first, _load(level), level["requests"]]
    cells += [sum(level["errors"].values()), level["correct"]]
    cells += [_pair(level[key]) for key in ("ttft_ms", "itl_ms", "e2e_ms")]
    cells += [f"{level['throughput_rps']:.1f}", f"{level['output_tokens_per_s']:.0f}"]
    cells.append(f"{level['goodput_rps']:.1f}")
    return "| " + " | ".join(map(str, cells)) + " |"


def _server_row(level: dict, first: str) -> str:
    """A level's server-side figures and CPU, after its first cell."""
    metrics, cores = level["server_metrics"], level["cpu_cores"]
    cells = [first, _load(level), _number(metrics["step_rows_mean"])]
    for key in ("step_ms_mean", "encoder_ms_mean", "queue_wait_ms_mean", "ttft_ms_mean"):
        cells.append(_number(metrics[key], 2 if key == "step_ms_mean" else 1))
    cells.append(_number(metrics["itl_ms_mean"], 2))
    cells += [f"{cores[k]:.2f}" for k in ("client", "front", "workers", "other")]
    return "| " + " | ".join(map(str, cells)) + " |"


def _goal_lines(part: dict) -> list[str]:
    """The goals table and the other ratios of a part of the report."""
    lines = ["| goal | ratio [min, max over rounds] | target | |", "|---|--:|--:|---|"]
    for g in part["goals"]:
        verdict = "met" if g["met"] else "missed"
        ratio = f"{g['ratio']:.2f}"
        if g.get("per_round"):
            ratio += f" [{min(g['per_round']):.2f}, {max(g['per_round']):.2f}]"
        lines.append(f"| {g['goal']} | {ratio} | {g['compare']} {g['target']:g} | {verdict} |")
    judged = {g["goal"] for g in part["goals"]}
    extra = [(k, v) for k, v in part["ratios"].items() if k not in judged and v is not None]
    if extra:
        lines += [""] + [f"- {k}: {v:.2f}" for k, v in extra]
    return lines


def markdown(report: dict) -> str:
    m, s, w = report["machine"], report["settings"], report["workload"]
    local, turn = report["in_process"]["decode_ms"], report["in_process"]["interleaved"]
    lines = [
        f"{m['cpu']}, {m['usable_cpus']} CPUs, shared by the server and the client. Server: "
        f"{s['workers']} workers (one per core), fp32, one compute thread each, max batch rows "
        f"{s['max_batch_rows']}; the continuous and the request-level server both run "
        f"throughout, one loaded at a time. Client: one asyncio loop, one grpc.aio channel per "
        "server, TranslateStream for every request, greedy. Workload: "
        f"{w['pool']} requests, target output {w['targets'][0]} to {w['targets'][1]} tokens "
        f"(mean {w['target_mean']:.0f}) sent as max_length; decoded in process, "
        f"{w['at_target_in_process']:.0%} of the outputs reach it and "
        f"{w['near_target_in_process']:.0%} reach {NEAR:.0%} of it. Closed loops run in "
        f"{s['rounds']} rounds, every level once a round in a rotating order; open loops once "
        "each, after them. Times in ms, p50 / p99 over every round: TTFT to the first partial "
        "event, ITL between partial events, e2e to the final result. req/s and tokens/s: "
        "answers over the windows in which every client was busy (closed loop: first send to "
        "last send) or first send to last answer (open loop), summed over the rounds. Goodput: "
        f"correct answers within {s['slo_ms']:.0f} ms end to end, per second of the same "
        "windows. Correct: identical to the in-process decode, with one partial event per step.",
        "",
        *LEVEL_HEADER,
    ]
    lines += [_level_row(level, level["server"]) for level in report["levels"]]
    lines += [
        "",
        "Server side over each level (Prometheus histograms, means): rows per decode step, "
        "step and encoder time, queue wait, time to first token and inter-token latency as "
        "the server measures them; and CPU cores used during the level by the client, the "
        "front process, all workers together, and every other process on the machine (from "
        "/proc and the client's process time).",
        "",
        *SERVER_HEADER,
    ]
    lines += [_server_row(level, level["server"]) for level in report["levels"]]
    lines += [
        "",
        f"In process (fp32, one thread, one request at a time), before the servers started: "
        f"p50 / p99 {local['p50']:.1f} / {local['p99']:.1f} ms over the {local['n']} requests. "
        f"In turn with gRPC (the first {turn['requests']} requests one at a time, each over "
        f"gRPC to the continuous server, streaming and unary, and in process, in a rotating "
        f"order): gRPC "
        f"e2e {_pair(turn['grpc_e2e_ms'])} ms streaming, {_pair(turn['grpc_unary_e2e_ms'])} "
        f"ms unary, in process {_pair(turn['in_process_ms'])} ms.",
    ]
    loop = report["in_process"].get("scheduler_loop")
    if loop:
        lines += [
            "",
            f"Through the same scheduler in process: the requests of the closed loop at "
            f"{loop['clients']} clients, in {loop['processes']} processes (one per server "
            f"worker, the clients shared), the worker's Scheduler over OnnxEngine, tokenizing "
            f"and detokenizing included: {loop['throughput_rps']:.1f} req/s, "
            f"{loop['tokens_per_s']:.0f} tokens/s (pooled over {len(loop['rounds'])} rounds, "
            "run in the rounds of the closed loops).",
        ]
    level = _find(report["levels"], "continuous", "closed", (loop or {}).get("clients", 16))
    if level and level["output_tokens"]["total"]:
        tokens = level["output_tokens"]["total"]
        cost = ", ".join(
            f"{k} {1e3 * v / tokens:.3f}" for k, v in level["cpu_s"].items()
        )  # every output token of the level's rounds, all answers counted
        lines += ["", f"CPU ms per output token at {level['clients']} clients: {cost}."]
    lines += ["", *_goal_lines(report)]
    if report.get("captioner"):
        lines += ["", *_captioner_markdown(report["captioner"])]
    return "\n".join(lines) + "\n"


def _captioner_markdown(part: dict) -> list[str]:
    w, mixed = part["workload"], part["mixed"]
    local, turn = part["in_process"]["decode_ms"], part["in_process"]["interleaved"]
    rows = [(level, f"captions, {level['server']}") for level in part["levels"]]
    rows += [
        (mixed["alone"], "translations alone"),
        (mixed["mixed"], "translations beside captions"),
        (mixed["captions"], "captions beside translations"),
    ]
    lines = [
        f"Captioner, served by the same servers and workers: {w['pool']} test images (seeded), "
        f"sent as PNG ({w['png_bytes_mean'] / 1024:.1f} KiB on average) with max_length "
        f"{w['max_length']}, the model's own; decoded in process, "
        f"{w['finished_in_process']:.0%} of the captions end with `</s>`, "
        f"{w['output_tokens_in_process_mean']:.1f} tokens on average. Closed loops of "
        "CaptionStream calls in the translator's rounds. Mixed: a translation open loop "
        f"(TranslateStream) at {mixed['rate_rps']:.1f}/s ({mixed['fraction']:.0%} of the "
        "continuous server's closed-loop throughput at the most clients) alone, and beside a "
        f"caption open loop (CaptionStream) at {mixed['caption_rate_rps']:.1f}/s over the same "
        f"span, the two in turn in {mixed['rounds']} round{'s' if mixed['rounds'] > 1 else ''}, "
        "with the same translation "
        "arrivals. Times, rates and correctness as above; a mixed level's server-side figures "
        "are its own model's, its CPU that of the whole level.",
        "",
        LEVEL_HEADER[0].replace("| server |", "| traffic |"),
        LEVEL_HEADER[1],
    ]
    lines += [_level_row(level, first) for level, first in rows]
    lines += ["", SERVER_HEADER[0].replace("| server |", "| traffic |"), SERVER_HEADER[1]]
    lines += [_server_row(level, first) for level, first in rows]
    lines += [
        "",
        f"In process (the PNG decoded and squeezed as the server does, fp32, one thread, one "
        f"image at a time), before the servers started: p50 / p99 {local['p50']:.1f} / "
        f"{local['p99']:.1f} ms over the {local['n']} images. In turn with gRPC (the first "
        f"{turn['requests']} images): gRPC e2e {_pair(turn['grpc_e2e_ms'])} ms streaming, "
        f"{_pair(turn['grpc_unary_e2e_ms'])} ms unary, in process "
        f"{_pair(turn['in_process_ms'])} ms.",
        "",
        *_goal_lines(part),
    ]
    return lines


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="few short requests per level")
    parser.add_argument(
        "--model", choices=("both", "translator"), default="both", help="both: captions too"
    )
    parser.add_argument("--repository", type=Path, default=REPOSITORY, help="repository root")
    parser.add_argument("--sources", type=Path, default=TEST_SOURCES, help="one verse a line")
    parser.add_argument(
        "--captioner-data", type=Path, default=CAPTIONER_DATA, help="its test split's images"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo-ms", type=float, default=1000.0, help="goodput's e2e bound")
    parser.add_argument("--workers", type=int, default=0, help="0: the server's default")
    parser.add_argument("--max-batch-rows", type=int, default=64)
    parser.add_argument(
        "--mixed-fraction",
        type=float,
        default=0.5,
        help="mixed levels: the translation rate, a fraction of the closed-loop throughput",
    )
    parser.add_argument(
        "--caption-rate-share",
        type=float,
        default=1.0,
        help="mixed levels: captions a second per translation a second",
    )
    parser.add_argument("--markdown", type=Path, help="write the results as Markdown")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        setattr(args, key, value)
    args.mixed_captions = max(1, round(args.open_requests * args.caption_rate_share))
    return args


def _model_versions(repository: Path, wanted: list[str]) -> dict:
    """{translator, captioner: the newest version of that kind in the repository}."""
    versions = {}
    for manifest in manifests(repository):
        kind = json.loads(manifest.read_text()).get("model", {}).get("kind")
        if KINDS.get(kind) in wanted:
            versions[KINDS[kind]] = manifest.parent
    for model in wanted:
        if model not in versions:
            raise SystemExit(
                f"no {model} in the model repository {repository}; build one with: attnserve "
                f"export {model} --out {repository} --variants fp32,int8"
            )
    return {model: verify(directory) for model, directory in versions.items()}


async def _mixed(args, bench: Bench, running: Running, top: dict) -> dict:
    """Translation open loops at a fixed rate, alone and beside a caption open loop, in turn
    with the same translation arrivals (rounds alternate which runs first)."""
    saturation = top["throughput_rps"]
    rate = args.mixed_fraction * saturation
    translation = Flow(bench.translation, "open", rate, args.open_requests)
    captions = bench.traffic["captioner"]
    beside = Flow(captions, "open", args.caption_rate_share * rate, args.mixed_captions, seed=1)
    alone: list[dict] = []
    mixed: list[dict] = []
    for r in range(args.mixed_rounds):
        print(f"mixed round {r + 1} of {args.mixed_rounds}", file=sys.stderr)
        for measured in (alone, mixed) if r % 2 == 0 else (mixed, alone):
            flows = (translation,) if measured is alone else (translation, beside)
            measured.append(await bench.measure(running, *flows))
    entry = {"server": "continuous", "load": "open", "fraction": args.mixed_fraction}
    entry |= {"rate_rps": rate, "saturation_rps": saturation}
    result = {"fraction": args.mixed_fraction, "rate_rps": rate, "saturation_rps": saturation}
    result |= {"caption_rate_rps": beside.value, "rounds": args.mixed_rounds}
    for key, measured in (("alone", alone), ("mixed", mixed)):
        level = bench.level(entry | {"beside": "captions" if key == "mixed" else None}, measured)
        runs = [m["runs"][0]["samples"] for m in measured]
        e2e = [[s.end - s.start for s in samples if s.code == "OK"] for samples in runs]
        level["round_e2e_p99_ms"] = [(spread(seconds) or {}).get("p99") for seconds in e2e]
        result[key] = level
    entry = {"server": "continuous", "load": "open", "model": "captioner"}
    entry |= {"fraction": beside.value / saturation, "rate_rps": beside.value}
    result["captions"] = bench.level(entry | {"beside": "translations"}, mixed, flow=1)
    return result


async def _measure_all(args, bench: Bench, directory: Path) -> tuple[dict, dict]:
    """Both servers, every level; ({levels, caption_levels, mixed}, server descriptions). The
    servers are stopped whatever happens."""
    common = ["--workers", str(args.workers), "--max-batch-rows", str(args.max_batch_rows)]
    flags = {
        "continuous": ["--batching", "continuous", *common],
        "request": ["--batching", "request", "--batch-window-ms", "5", *common],
    }
    servers: dict[str, Running] = {}
    descriptions: dict = {}
    captions = bench.traffic.get("captioner")
    try:
        for name, server_flags in flags.items():
            servers[name] = bench.launch(name, server_flags, directory)
        for running in servers.values():
            await bench.ready(running)
        await bench.interleaved(servers["continuous"], args.interleaved, bench.translation)
        if captions:
            await bench.interleaved(servers["continuous"], args.caption_interleaved, captions)
        specs = [("continuous", c, n, "translator") for c, n in args.closed]
        if captions:
            specs += [("continuous", c, n, "captioner") for c, n in args.caption_closed]
        specs += [("request", c, n, "translator") for c, n in args.request_level]
        # the same requests as the continuous server's closed loop at 16 clients, through the
        # same scheduler in processes of their own: the serving overhead, in the same rounds
        clients, count = next(((c, n) for c, n in args.closed if c == 16), args.closed[-1])
        in_process = ("in-process", clients, count, "translator")
        workers = len(servers["continuous"].server.state.get("workers", [])) or 1
        specs.append(in_process)
        measured: dict = {spec: [] for spec in specs}
        for r in range(args.rounds):
            print(f"round {r + 1} of {args.rounds}", file=sys.stderr)
            for spec in specs[r % len(specs) :] + specs[: r % len(specs)]:
                name, clients, count, model = spec
                if spec == in_process:
                    print(f"in process: {count} requests, {clients} in flight, {workers} "
                          "schedulers", file=sys.stderr)  # fmt: skip
                    measured[spec].append(await asyncio.get_running_loop().run_in_executor(
                        None, in_process_closed_loop, bench.translation.local.version,
                        bench.translation.pool[:count], clients, workers, args.max_batch_rows,
                    ))  # fmt: skip
                    continue
                flow = Flow(bench.traffic[model], "closed", clients, count)
                measured[spec].append(await bench.measure(servers[name], flow))
        runs = measured.pop(in_process)
        specs.remove(in_process)
        # pooled over the rounds as a level is: each process's answers over its windows
        pooled = [[r["parts"][w] for r in runs] for w in range(workers)]
        scheduler_loop = {
            "clients": in_process[1], "processes": workers, "rounds": runs,
            "throughput_rps": sum(_pooled(parts, "requests") for parts in pooled),
            "tokens_per_s": sum(_pooled(parts, "tokens") for parts in pooled),
            "failed": sum(r["failed"] for r in runs),
        }  # fmt: skip
        closed = {}
        for spec in specs:
            entry = {"server": spec[0], "load": "closed", "clients": spec[1]}
            entry["requests_per_round"] = spec[2]
            if spec[3] != "translator":
                entry["model"] = spec[3]
            closed[spec] = bench.level(entry, measured[spec])
        top = closed["continuous", *args.closed[-1], "translator"]
        opened = []
        for fraction in args.open_fractions:
            rate = fraction * top["throughput_rps"]
            entry = {"server": "continuous", "load": "open", "fraction": fraction}
            entry |= {"rate_rps": rate, "saturation_rps": top["throughput_rps"]}
            flow = Flow(bench.translation, "open", rate, args.open_requests)
            opened.append(bench.level(entry, [await bench.measure(servers["continuous"], flow)]))
        mixed = await _mixed(args, bench, servers["continuous"], top) if captions else None
        translator = [s for s in specs if s[3] == "translator"]
        levels = [closed[s] for s in translator if s[0] == "continuous"] + opened
        levels += [closed[s] for s in translator if s[0] == "request"]
        caption_levels = [closed[s] for s in specs if s[3] == "captioner"]
    finally:
        for name, running in servers.items():
            descriptions[name] = await bench.close(running)
    measured = {"levels": levels, "caption_levels": caption_levels, "mixed": mixed}
    return measured | {"scheduler_loop": scheduler_loop}, descriptions


def _captioner_part(args, bench: Bench, measured: dict) -> dict:
    """The captioner's part of the report."""
    traffic = bench.traffic["captioner"]
    outputs = [len(r["pieces"]) for r in traffic.references]
    settings = {
        "repository": str(traffic.local.directory),
        "data": str(args.captioner_data),
        "closed": [{"clients": c, "requests_per_round": n} for c, n in args.caption_closed],
        "interleaved_requests": args.caption_interleaved,
        "mixed_fraction": args.mixed_fraction,
        "caption_rate_share": args.caption_rate_share,
        "mixed_rounds": args.mixed_rounds,
        "mixed_requests": {"translations": args.open_requests, "captions": args.mixed_captions},
        "decoding": "greedy, max_length = the model's own",
        "client": "CaptionStream in the levels; Caption and CaptionStream in turn",
    }
    workload = {
        "pool": len(traffic.pool),
        "split": "test",
        "max_length": traffic.local.limit,
        "png_bytes_mean": float(np.mean([len(p.png) for p in traffic.pool])),
        "finished_in_process": float(np.mean([r["finished"] for r in traffic.references])),
        "output_tokens_in_process_mean": float(np.mean(outputs)),
    }
    part = {"settings": settings, "workload": workload}
    part["in_process"] = {
        "engine": "OnnxEngine fp32, one thread, CPU; the PNG decoded and squeezed to the "
        "model's side, caption_images, one image at a time",
        "decode_ms": spread([r["seconds"] for r in traffic.references]),
        "interleaved": bench.paired["captioner"],
    }
    part |= {"levels": measured["caption_levels"], "mixed": measured["mixed"]}
    rows = caption_ratios(part, args)
    part["ratios"] = {text: ratio for text, ratio, *_ in rows}
    part["goals"] = goals(rows)
    return part


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers are stopped on exit
    os.environ.update(dict.fromkeys(machine.THREAD_VARIABLES, "1"))
    print("measuring the machine", file=sys.stderr)
    limits = machine.measure_in_subprocess(args.quick)
    wanted = ["translator", "captioner"] if args.model == "both" else ["translator"]
    versions = _model_versions(args.repository, wanted)
    version = versions["translator"]
    local = InProcess(version)
    lines = [line for line in args.sources.read_text(encoding="utf-8").splitlines() if line]
    sizes = [n for _, n in args.closed + args.request_level]
    sizes += [args.open_requests, args.interleaved]
    print(f"choosing {max(sizes)} requests", file=sys.stderr)
    pool = make_pool(lines, local, max(sizes), args.targets, args.seed)
    print(f"in-process decode of {len(pool)} requests", file=sys.stderr)
    references = local.references(pool)
    traffic = {"translator": translation_traffic(version, pool, local, references)}
    if "captioner" in versions:
        captioner = InProcessCaptioner(versions["captioner"])
        sizes = [n for _, n in args.caption_closed]
        sizes += [args.caption_interleaved, args.mixed_captions]
        print(f"choosing {max(sizes)} images", file=sys.stderr)
        pictures = make_pictures(args.captioner_data, max(sizes), captioner.limit, args.seed)
        print(f"in-process captions of {len(pictures)} images", file=sys.stderr)
        answers = captioner.references(pictures)
        traffic["captioner"] = caption_traffic(versions["captioner"], pictures, captioner, answers)
    bench = Bench(args, traffic)
    with tempfile.TemporaryDirectory(prefix="bench-load-") as directory:
        measured, servers = asyncio.run(_measure_all(args, bench, Path(directory)))
    levels = measured["levels"]
    scheduler_loop = measured["scheduler_loop"]
    rows = ratios(levels, bench.paired["translator"], references, args, scheduler_loop)
    targets = [r.max_length for r in pool]
    outputs = [len(r["pieces"]) for r in references]
    workload = {
        "pool": len(pool),
        "targets": list(args.targets),
        "target_mean": float(np.mean(targets)),
        "source_tokens_mean": float(np.mean([r.source_tokens for r in pool])),
        "at_target_in_process": float(np.mean(np.equal(outputs, targets))),
        "near_target_in_process": float(
            np.mean(np.greater_equal(outputs, NEAR * np.array(targets)))
        ),
        "output_tokens_in_process_mean": float(np.mean(outputs)),
    }
    settings = {
        "quick": args.quick,
        "model": args.model,
        "seed": args.seed,
        "repository": str(version.directory),
        "sources": str(args.sources),
        "workers": servers["continuous"].get("workers"),
        "max_batch_rows": args.max_batch_rows,
        "slo_ms": args.slo_ms,
        "rounds": args.rounds,
        "closed": [{"clients": c, "requests_per_round": n} for c, n in args.closed],
        "request_level": [{"clients": c, "requests_per_round": n} for c, n in args.request_level],
        "open_fractions": args.open_fractions,
        "open_requests": args.open_requests,
        "interleaved_requests": args.interleaved,
        "warmup_requests": args.warmup,
        "level_seconds": args.level_seconds,
        "drain_seconds": args.drain_seconds,
        "decoding": "greedy, max_length = target",
        "client": "one asyncio loop, one grpc.aio channel per server, TranslateStream",
        "percentiles": "numpy linear interpolation",
        "servers": servers,
    }
    report = {"machine": limits, "settings": settings, "workload": workload}
    report["in_process"] = {
        "engine": "OnnxEngine fp32, one thread, CPU; translate_ids, one request at a time",
        "decode_ms": spread([r["seconds"] for r in references]),
        "output_tokens_per_s": sum(outputs) / sum(r["seconds"] for r in references),
        "interleaved": bench.paired["translator"],
        "scheduler_loop": scheduler_loop
        | {
            "engine": "the worker's Scheduler over OnnxEngine fp32, one thread, CPU, in as many "
            "processes as the server has workers, the closed loop's clients and requests shared "
            "among them; tokenizing and detokenizing included"
        },
    }
    report |= {"levels": levels}
    report["ratios"] = {text: ratio for text, ratio, *_ in rows}
    report["goals"] = goals(rows)
    if "captioner" in traffic:
        report["captioner"] = _captioner_part(args, bench, measured)
    text = markdown(report)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text, encoding="utf-8")
    print(json.dumps(report, indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
