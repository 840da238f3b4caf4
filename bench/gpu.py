"""GPU benchmark: the translator on one GPU, engine level and service level, against goals.

    python -m bench.gpu --out DIR [--quick] [--repository VERSION_DIR] [--device cuda|cpu]
        [--load | --no-load] [--no-engine] [--workdir DIR] [--checkpoint DIR]
        [--beam-max-batch N] [--engine-seconds S] [--export-sentences N]
        [--server-variant V] [--server-rows N]
        [--server-fronts N] [--server-workers N] [--server-cache in_place|growing|static]
        [--clients 1,256]
        [--level-seconds S]

Writes DIR/benchmarks-gpu.json and DIR/benchmarks-gpu.md (bench/gpu.sh runs it on the GPU
machine). Torch runs in spawned processes (the GPU's measurement, every engine), and in this
process only to export. Sections, in this order:

Machine. cuda: the GPU's name (torch, nvidia-smi), the memory bandwidth (the best of many
device-to-device copies of a 1 GiB tensor, bytes read + written over the time between CUDA
events) and the matrix rate (the best of ten 8192³ matmuls in fp32, TF32 and fp16, 2 n³
FLOPs each), measured with torch in a process of its own. cpu: bench.machine (a numpy copy
and a one-thread fp32 matmul; fp16 takes the fp32 rate).

Model repository. --repository (a version exported from --checkpoint), or --checkpoint (the
shipped translator by default) exported with fp32 and fp16 graphs by `export.commands.export`,
the function of `attnserve export`, with its parity certificate and golden set: over 200
sentences of every test part, the export's minimum, or 8 of each in --quick or as many as
--export-sentences says (the minimum lowered for that call: a smoke test, not a
certificate). With --workdir the export lies there and a later run with the same --workdir
reuses it, as it reports the sections it does not run again (so the export, the engine level
and the service level can run as separate commands).

Engine level. Every engine runs in a spawned process of its own and decodes through the
server's loop: `service.runtime.decoding.decode` over `CachedInference(engine, engine.encode(...))`,
without alignments where `decode` offers that switch (`attention=False`), as for a request
that asks for none.
Engines: onnxruntime fp32 and fp16 (`OnnxEngine`, IO binding on cuda) and PyTorch fp32 eager
(`models.reference.reference_engine`), one compute thread each on the CPU. First the parity
check: the first 200 test sentences (16 in --quick) decoded greedily to their natural end (at
most the forced length) in one batch by every engine and by PyTorch fp32 on the CPU, the
reference; an engine below PARITY_FLOOR identical outputs is not timed. Then the batch-1
decoder step: the median of many `CachedInference.step` calls (the graph, the cache
bookkeeping, logits to the host; the search excluded). Then the cases (batch, beam), greedy
before beam 4, each batch the first `batch` lines of data/translator/test.es (repeated as
needed, tokenised by service.runtime.tokenizer), every row decoded to exactly `length` tokens
(`</s>` hidden from the search by bench.engines.Stepped): one warm-up round, then up to 3
timed rounds (fewer when a round takes more than a case's share of time), every engine once
a round in a rotating order. tokens/s: batch × length over the whole call (encoder included;
torch synchronised before every clock read); ms/step: the time after the encoder over
length. The physical limit of a step at mid-decode (past = length / 2): max(bytes /
bandwidth, FLOPs / matrix rate), bytes = the decoder weights at the variant's precision + the
self-attention cache and the cross keys/values of every row (at the same precision), FLOPs =
2 per multiply-add (bench.machine's count); "of limit" is that limit over the measured
ms/step. The section is time-boxed (--engine-seconds): a case whose predicted cost (twice a
round of the previous case of its beam, scaled by the batch) no longer fits is recorded as not
run; beam 4 at batch 1,024 runs only when it fits.

Service level (--load; default on, off in --quick). `attnserve serve` started by
bench.load.Server on the device (cuda: fp16, the server's default workers, 1,024 batch rows;
cpu: fp32, the server's default workers and rows; --server-workers N: N workers), warmed up
at the most clients, then closed loops of unary Translate calls (test sentences, max_length
128, natural ends) at 1, 16, 64, 256 and 1,024 clients (quick: 1 and 4; --clients names
others) for a fixed time each (--level-seconds), the clients spread over client processes
(one asyncio loop and CHANNELS connections each; one process per 64 clients, at most a
quarter of the CPUs; --server-fronts N serves with N front processes, --server-cache with
that key/value cache, e.g. static): requests/s and tokens/s (answers within the level's time
over it), p50/p99 latency, CPU seconds of the front, the workers and the clients. Then the
end-to-end latency of one sentence whose translation reaches 30 tokens (sent with max_length
30), one client, one call at a time. A server that cannot start (e.g. grpcio-health-checking
missing) is recorded as "not run: <reason>".

Goals: each met, missed, or not measured, with the measured figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import inspect
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "models" / "checkpoints" / "translator"
DATA = ROOT / "data" / "translator"
SOURCES = DATA / "test.es"
REPORT = "benchmarks-gpu"
PARITY_FLOOR = 0.9  # identical greedy outputs below this share: the engine is not timed
VARIANT_BYTES = {"fp32": 4, "fp16": 2}
SERVER_MAX_LENGTH = 128  # max_length of the service level's requests
SENTENCE_TOKENS = 30  # the single-sentence latency's output length
CALL_TIMEOUT = 120.0  # seconds, one gRPC call
CHANNELS = 8  # connections per client process


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how long it may take."""

    batches: tuple[int, ...]
    beams: tuple[int, ...]
    length: int  # forced output tokens of every row
    rounds: int  # timed rounds per case, at most
    case_seconds: float  # a case's timed rounds share; fewer rounds when one takes longer
    engine_seconds: float  # the whole engine section (parity, steps, cases)
    beam_max_batch: int  # beam 4 runs batches up to this
    parity_sentences: int
    export_sentences: int
    single_steps: int  # batch-1 decoder steps timed (after SINGLE_WARMUP)
    clients: tuple[int, ...]
    level_seconds: float
    warmup_seconds: float  # service level, untimed, at the most clients
    latency_requests: int  # the single sentence, one call at a time


FULL = Plan(
    batches=(1, 16, 64, 256, 1024),
    beams=(1, 4),
    length=64,
    rounds=3,
    case_seconds=30.0,
    engine_seconds=330.0,
    beam_max_batch=1024,  # when the time box leaves room for it
    parity_sentences=200,
    export_sentences=200,
    single_steps=200,
    clients=(1, 16, 64, 256, 1024),
    level_seconds=15.0,
    warmup_seconds=8.0,
    latency_requests=100,
)
QUICK = Plan(
    batches=(1, 16),
    beams=(1, 4),
    length=16,
    rounds=2,
    case_seconds=10.0,
    engine_seconds=240.0,
    beam_max_batch=16,
    parity_sentences=16,
    export_sentences=8,
    single_steps=30,
    clients=(1, 4),
    level_seconds=4.0,
    warmup_seconds=2.0,
    latency_requests=10,
)
SINGLE_WARMUP = 5


@dataclass(frozen=True)
class EngineSpec:
    """One engine of the engine level."""

    name: str  # ort-fp32, ort-fp16, torch-fp32, reference
    kind: str  # onnx, torch
    variant: str  # fp32, fp16
    device: str  # cuda, cpu
    io_binding: bool
    threads: int  # compute threads on the CPU (0: the library's default)
    cache: str | None = None  # onnx: OnnxEngine's cache (None: its default on the device)

    @property
    def label(self) -> str:
        device = self.device.upper()
        if self.kind == "torch":
            return f"PyTorch {device} {self.variant} eager"
        label = f"ORT {device} {self.variant}" + (" + IO binding" if self.io_binding else "")
        return label + (" + cache in place" if self.cache == "in_place" else "")


def engine_specs(device: str, in_place: bool = False) -> list[EngineSpec]:
    """The timed engines: onnxruntime fp32 and fp16, PyTorch fp32 eager, on `device`; with
    `in_place` on CUDA also fp16 with its cache written in place (GroupQueryAttention over a
    shared buffer: a step reads each row's own length only, where the growing cache's step
    attends over the longest row's)."""
    binding = device == "cuda"
    specs = [
        EngineSpec("ort-fp32", "onnx", "fp32", device, binding, 1),
        EngineSpec("ort-fp16", "onnx", "fp16", device, binding, 1),
        EngineSpec("torch-fp32", "torch", "fp32", device, False, 1),
    ]
    if in_place and device == "cuda":
        specs.insert(2, EngineSpec("ort-fp16-in-place", "onnx", "fp16", device, True, 1,
                                   "in_place"))  # fmt: skip
    return specs


FP16_ENGINES = ("ort-fp16", "ort-fp16-in-place")  # the goals take the faster at each batch


REFERENCE = EngineSpec("reference", "torch", "fp32", "cpu", False, 0)


# -- the machine ---------------------------------------------------------------------------


def _nvidia_smi() -> dict:
    fields = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": str(error)}
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    return dict(zip(fields.split(","), (v.strip() for v in first.split(",")), strict=False))


def measure_gpu(quick: bool) -> dict:
    """Name, bandwidth and matrix rates of CUDA device 0, with torch (run in a process of its
    own, so that its memory is given back)."""
    import torch

    device = torch.device("cuda")
    properties = torch.cuda.get_device_properties(0)

    def best_seconds(run, repeats: int) -> float:
        run()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        return min(times)

    def copy_seconds(size: int) -> float:
        source = torch.ones(size // 4, dtype=torch.float32, device=device)
        target = torch.empty_like(source)
        return best_seconds(lambda: target.copy_(source), 5 if quick else 30)

    size = (64 if quick else 1024) * 2**20
    copy = copy_seconds(size)
    n = 2048 if quick else 8192
    rates = {}
    for name, dtype, tf32 in (
        ("fp32", torch.float32, False),
        ("tf32", torch.float32, True),
        ("fp16", torch.float16, False),
    ):
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = best_seconds(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out), 10)
        rates[name] = 2 * n**3 / seconds / 1e12
        torch.backends.cuda.matmul.allow_tf32 = previous
        del a, b, out
    torch.cuda.empty_cache()
    return {
        "device": "cuda",
        "name": torch.cuda.get_device_name(0),
        "memory_gib": properties.total_memory / 2**30,
        "multiprocessors": properties.multi_processor_count,
        "bandwidth_gb_s": 2 * size / copy / 1e9,
        "bandwidth_method": f"device-to-device copy of {size // 2**20} MiB, read + write",
        "matmul_tflop_s": rates,
        "matmul_method": f"{n}x{n} @ {n}x{n}, best of 10; fp32 with TF32 off",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "nvidia_smi": _nvidia_smi(),
        "cpu_count": os.cpu_count(),
    }


def measure_machine(device: str, quick: bool) -> dict:
    """The machine's limits, as the engine level's physical-limit column reads them."""
    if device == "cuda":
        with ProcessPoolExecutor(1, get_context("spawn")) as pool:
            measured = pool.submit(measure_gpu, quick).result()
    else:
        from bench import machine

        cpu = machine.measure_in_subprocess(quick)
        rate = cpu["matmul_gflop_s"] / 1000
        measured = {
            "device": "cpu",
            "name": cpu["cpu"],
            "bandwidth_gb_s": cpu["copy_bandwidth_gb_s"],
            "bandwidth_method": "bench.machine: numpy copy, read + write",
            "matmul_tflop_s": {"fp32": rate, "fp16": rate},
            "matmul_method": "bench.machine: numpy fp32 matmul, one thread (fp16: the same)",
            "cpu": cpu,
        }
    import onnxruntime

    measured["onnxruntime"] = onnxruntime.__version__
    build = getattr(onnxruntime, "get_build_info", None)
    measured["onnxruntime_build"] = build() if build else None
    measured["providers"] = onnxruntime.get_available_providers()
    measured["python"] = sys.version.split()[0]
    return measured


# -- the model repository ------------------------------------------------------------------


def _usable(
    directory: Path, variants: tuple[str, ...], checkpoint: Path, graphs: str
) -> dict | None:
    """The manifest of a verified version exported from `checkpoint` with every variant made
    by `graphs` and a golden set, else None."""
    from models.checkpoint import WEIGHTS
    from service.runtime.errors import ModelRepositoryError
    from service.runtime.repository import GOLDEN, sha256, verify

    try:
        version = verify(directory)
    except ModelRepositoryError:
        return None
    source = version.manifest.get("source", {}).get("sha256")
    if source != sha256(checkpoint / WEIGHTS) or not (directory / GOLDEN).is_file():
        return None
    made = version.manifest.get("graphs_made", {})
    if any(made.get(v, "traced") != graphs for v in variants):
        return None
    return version.manifest if set(variants) <= set(version.manifest["graphs"]) else None


def export_repository(
    root: Path, variants: tuple[str, ...], sentences: int, checkpoint: Path, graphs: str
) -> dict:
    """Exports the translator `checkpoint` into root/translator/1 with `attnserve export`'s
    own function (graphs, parity certificate over `sentences` test sentences, golden set)."""
    from export import certify
    from export.commands import export

    arguments = argparse.Namespace(
        checkpoint=checkpoint,
        out=root,
        name="translator",
        version="1",
        variants=",".join(variants),
        data=DATA,
        sentences=sentences,
        graphs=graphs,
    )
    start = time.perf_counter()
    floor = min(certify.MIN_SENTENCES, sentences)
    with (
        contextlib.redirect_stdout(sys.stderr),
        _attribute(certify, "MIN_SENTENCES", floor),
    ):
        status = export(arguments)
    seconds = time.perf_counter() - start
    return {"export_status": status, "export_seconds": seconds}


@contextlib.contextmanager
def _attribute(owner, name: str, value):
    """`owner.name` set to `value` inside the block."""
    previous = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, previous)


def repository_section(args, plan: Plan, workdir: Path, variants: tuple[str, ...]) -> dict:
    """The version the benchmark runs (given, reused from --workdir, or exported), and a
    repository root holding only it, for the server."""
    from models.checkpoint import WEIGHTS
    from service.runtime.repository import sha256, verify

    served = workdir / "served"
    if args.repository is not None:
        version = verify(args.repository)
        missing = set(variants) - set(version.manifest["graphs"])
        if missing:
            raise SystemExit(f"{args.repository}: no {sorted(missing)} graphs")
        recorded = version.manifest.get("source", {}).get("sha256")
        if recorded not in (None, sha256(args.checkpoint / WEIGHTS)):
            raise SystemExit(f"{args.repository} was not exported from {args.checkpoint}")
        shutil.rmtree(served, ignore_errors=True)
        shutil.copytree(args.repository, served / "translator" / "1")
        part = {"directory": str(args.repository), "exported": False}
    else:
        directory = workdir / "repository" / "translator" / "1"
        part = {"directory": str(directory), "exported": False}
        if _usable(directory, variants, args.checkpoint, args.graphs) is None:
            print(f"exporting {args.checkpoint} ({', '.join(variants)})", file=sys.stderr)
            part |= {"exported": True} | export_repository(
                directory.parents[1],
                variants,
                plan.export_sentences,
                args.checkpoint,
                args.graphs,
            )
        served = directory.parents[1]
    version = verify(Path(part["directory"]))
    parity = version.manifest.get("parity", {})
    part |= {
        "checkpoint": str(args.checkpoint),
        "served_root": str(served),
        "variants": sorted(version.manifest["graphs"]),
        "graphs_made": version.manifest.get("graphs_made", {}),
        "config": version.config,
        "certificate": {
            "passed": parity.get("passed"),
            "sentences": parity.get("sentences"),
            "parts": parity.get("parts"),
            "seconds": parity.get("seconds"),
            "decodes": {
                d["setting"]: f"{d['identical']}/{d['sentences']} identical"
                for d in parity.get("decodes", [])
            },
        },
        "versions": version.manifest.get("versions", {}),
    }
    return part


# -- the engine level: workers -------------------------------------------------------------


class Runner:
    """One engine in a worker process: loads it, decodes as the server does."""

    def __init__(self, spec: EngineSpec, repository: str, checkpoint: str):
        from service.runtime.repository import verify

        self.spec = spec
        version = verify(Path(repository))
        self.max_source = int(version.config["max_length"])
        self.sync = lambda: None
        self.in_runs: float | None = None  # onnxruntime's: seconds inside its runs
        if spec.kind == "torch":
            import torch

            from models.checkpoint import load_checkpoint
            from models.reference import reference_engine

            if spec.threads:
                torch.set_num_threads(spec.threads)
            model, _ = load_checkpoint(Path(checkpoint))
            self.engine = reference_engine(model, spec.device, device_search=spec.device == "cuda")
            if spec.device == "cuda":
                self.sync = torch.cuda.synchronize
            self.library = f"torch {torch.__version__}"
            self.providers = [f"torch {spec.device}"]
        else:
            import onnxruntime

            from service.runtime.onnx_engine import OnnxEngine

            self.engine = OnnxEngine(
                version, spec.variant, spec.device, spec.threads, spec.io_binding, cache=spec.cache
            )
            self.library = f"onnxruntime {onnxruntime.__version__}"
            session = getattr(self.engine, "decoder", None)  # the step's session
            self.providers = session.get_providers() if session is not None else []
            self.in_runs = 0.0  # the step, the search and helper graphs
            run = self.engine._run

            def timed(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return run(*args, **kwargs)
                finally:
                    self.in_runs += time.perf_counter() - start

            self.engine._run = timed

    def info(self) -> dict:
        return {"library": self.library, "providers": self.providers}

    def _decode(self, ids: list[list[int]], beam: int, length: int, forced: bool):
        from bench.engines import Stepped
        from service.runtime.batching import source_batch
        from service.runtime.decoding import DecodingOptions, decode
        from service.runtime.inference import CachedInference

        engine = self.engine
        bos, eos = engine.special_tokens.bos, engine.special_tokens.eos
        gc.collect()
        self.sync()
        start = time.perf_counter()
        encoder = engine.encode(*source_batch(ids, self.max_source))
        self.sync()
        encoded = time.perf_counter()
        inference = CachedInference(engine, encoder, len(ids))
        if forced:
            inference = Stepped(inference, eos)
        options = DecodingOptions(beam_size=beam, max_length=length)
        before = self.in_runs
        hypotheses = decode(inference, len(ids), options, bos, eos, **decode_keywords())
        self.sync()
        end = time.perf_counter()
        runs = None if before is None else self.in_runs - before
        return [n[0].tokens for n in hypotheses], encoded - start, end - encoded, runs

    def greedy(self, ids: list[list[int]], length: int) -> list[list[int]]:
        """Greedy tokens of every source, each to its natural end (at most `length`)."""
        return self._decode(ids, 1, length, forced=False)[0]

    def sample(self, ids: list[list[int]], beam: int, length: int) -> dict:
        """One timed decode of the batch, every row to exactly `length` tokens."""
        tokens, encoder, decoding, runs = self._decode(ids, beam, length, forced=True)
        return {"encoder_s": encoder, "decode_s": decoding, "tokens": sum(map(len, tokens)),
                "runs_s": runs}  # fmt: skip

    def single_step(self, ids: list[int], steps: int) -> dict:
        """Seconds of each `CachedInference.step` of one row, after SINGLE_WARMUP steps."""
        from service.runtime.batching import source_batch
        from service.runtime.inference import CachedInference

        engine = self.engine
        inference = CachedInference(engine, engine.encode(*source_batch([ids], self.max_source)), 1)
        token, eos = engine.special_tokens.bos, engine.special_tokens.eos
        times = []
        for _ in range(SINGLE_WARMUP + steps):
            self.sync()
            start = time.perf_counter()
            logits, _ = inference.step(np.array([[token]], dtype=np.int64))
            self.sync()
            times.append(time.perf_counter() - start)
            logits[0, eos] = -np.inf
            token = int(np.argmax(logits[0]))
        return {"seconds": times[SINGLE_WARMUP:]}


def decode_keywords() -> dict:
    """`attention=False` where `service.runtime.decoding.decode` takes it: the engine level
    decodes as a request that asks for no alignment (the cross-attention may then stay on the
    device)."""
    from service.runtime.decoding import decode

    return {"attention": False} if "attention" in inspect.signature(decode).parameters else {}


_runner: Runner | None = None
_failure: str | None = None


def _start(spec: EngineSpec, repository: str, checkpoint: str) -> None:
    global _runner, _failure
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # library prints stay off stdout
    try:
        _runner = Runner(spec, repository, checkpoint)
    except Exception:  # reported by `info`, so that one broken engine leaves the others
        _failure = traceback.format_exc(limit=3)


def _call(method: str, *args):
    if _runner is None:
        raise RuntimeError(f"the engine did not load: {_failure}")
    return getattr(_runner, method)(*args)


class Worker:
    """One engine in a spawned process of its own, answering one call at a time."""

    def __init__(self, spec: EngineSpec, repository: str, checkpoint: str):
        self.spec = spec
        arguments = (spec, repository, checkpoint)
        self.pool = ProcessPoolExecutor(1, get_context("spawn"), _start, arguments)

    def call(self, method: str, *args):
        return self.pool.submit(_call, method, *args).result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


# -- the engine level: measurements --------------------------------------------------------


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def step_limit(
    config: dict, rows: int, past: int, source: int, variant: str, machine_: dict
) -> dict:
    """The least time of one decode step over `rows` rows after `past` tokens, attending over
    `source` encoder positions, everything at the variant's precision."""
    from bench.machine import decoder_weights

    width, layers = config["d_model"], config["decoder_layers"]
    matrices, vectors = decoder_weights(config)
    size = VARIANT_BYTES[variant]
    positions = past + 1 + source  # self-attention keys (the new one included) + cross keys
    weights = (matrices + vectors) * size
    caches = rows * layers * 2 * positions * width * size
    flops = 2.0 * rows * (matrices + layers * 2 * positions * width)
    memory_ms = 1000 * (weights + caches) / (machine_["bandwidth_gb_s"] * 1e9)
    compute_ms = 1000 * flops / (machine_["matmul_tflop_s"][variant] * 1e12)
    return {
        "weight_bytes": weights,
        "cache_bytes": caches,
        "flops": flops,
        "memory_ms": memory_ms,
        "compute_ms": compute_ms,
        "ms": max(memory_ms, compute_ms),
    }


def _batch(ids: list[list[int]], batch: int) -> list[list[int]]:
    """The first `batch` sources, repeated from the start as needed."""
    return [ids[i % len(ids)] for i in range(batch)]


class EngineBench:
    """The engine section: workers, parity, batch-1 steps, then the time-boxed cases."""

    def __init__(self, args, plan: Plan, repository: dict, machine_: dict, ids: list):
        self.args, self.plan, self.repository, self.machine = args, plan, repository, machine_
        self.ids = ids
        self.deadline = time.monotonic() + plan.engine_seconds
        self.engines: dict[str, dict] = {}
        self.workers: dict[str, Worker] = {}

    def run(self) -> dict:
        start = time.perf_counter()
        directory, checkpoint = self.repository["directory"], self.repository["checkpoint"]
        in_place = (Path(directory) / "fp16" / "in_place_decoder.onnx").exists()
        specs = engine_specs(self.args.device, in_place)
        print("loading the engines", file=sys.stderr)
        reference = Worker(REFERENCE, directory, checkpoint)
        for spec in specs:
            self.workers[spec.name] = Worker(spec, directory, checkpoint)
        try:
            expected = self._reference(reference)
            reference.close()
            for spec in specs:
                self.engines[spec.name] = self._prepare(spec, expected)
            cases, skipped = self._cases()
        finally:
            for worker in [reference, *self.workers.values()]:
                worker.close()
        return {
            "settings": {
                "batches": list(self.plan.batches),
                "beams": list(self.plan.beams),
                "length": self.plan.length,
                "rounds": self.plan.rounds,
                "warmup_rounds": 1,
                "case_seconds": self.plan.case_seconds,
                "engine_seconds": self.plan.engine_seconds,
                "beam_max_batch": self.plan.beam_max_batch,
                "parity_sentences": self.plan.parity_sentences,
                "parity_floor": PARITY_FLOOR,
                "single_steps": self.plan.single_steps,
                "sources": str(SOURCES),
                "reference": REFERENCE.label,
                "decode_keywords": decode_keywords(),
            },
            "engines": self.engines,
            "cases": cases,
            "skipped": skipped,
            "seconds": time.perf_counter() - start,
        }

    def _reference(self, worker: Worker) -> list[list[int]]:
        print("parity reference (PyTorch fp32, CPU)", file=sys.stderr)
        sources = self.ids[: self.plan.parity_sentences]
        return worker.call("greedy", sources, self.plan.length)

    def _prepare(self, spec: EngineSpec, expected: list[list[int]]) -> dict:
        """The engine's description, parity and batch-1 step; `trusted` when it is timed."""
        entry: dict[str, Any] = {"label": spec.label, "spec": asdict(spec), "trusted": False}
        worker = self.workers[spec.name]
        try:
            entry |= worker.call("info")
            print(f"{spec.name}: parity", file=sys.stderr)
            tokens = worker.call("greedy", self.ids[: len(expected)], self.plan.length)
            identical = sum(a == b for a, b in zip(tokens, expected, strict=True))
            entry["parity"] = {"identical": identical, "sentences": len(expected)}
            entry["trusted"] = identical >= PARITY_FLOOR * len(expected)
            if not entry["trusted"]:
                entry["not_timed"] = f"parity {identical}/{len(expected)} below {PARITY_FLOOR:.0%}"
                return entry
            print(f"{spec.name}: batch-1 steps", file=sys.stderr)
            seconds = worker.call("single_step", self.ids[0], self.plan.single_steps)["seconds"]
            milliseconds = [1000 * s for s in seconds]
            entry["single_step_ms"] = {
                **_spread(milliseconds),
                "p10": float(np.percentile(milliseconds, 10)),
                "p90": float(np.percentile(milliseconds, 90)),
                "steps": len(milliseconds),
            }
        except Exception as error:  # a broken engine is recorded, the others go on
            entry["error"] = f"{type(error).__name__}: {error}"
            entry["trusted"] = False
        return entry

    def _case_list(self) -> list[tuple[int, int]]:
        cases = []
        for beam in self.plan.beams:
            for batch in self.plan.batches:
                if beam == 1 or batch <= self.plan.beam_max_batch:
                    cases.append((batch, beam))
        return cases

    def _cases(self) -> tuple[list[dict], list[dict]]:
        names = [n for n, e in self.engines.items() if e["trusted"]]
        planned = self._case_list()
        skipped = [
            {
                "batch": b,
                "beam": k,
                "reason": f"beam {k} runs batches up to {self.plan.beam_max_batch}",
            }
            for k in self.plan.beams
            for b in self.plan.batches
            if (b, k) not in planned
        ]
        if not names:
            skipped += [
                {"batch": b, "beam": k, "reason": "no engine passed parity"} for b, k in planned
            ]
            return [], skipped
        results: list[dict] = []
        last: dict[int, tuple[int, float]] = {}  # beam: (batch, seconds of one round)
        for batch, beam in planned:
            left = self.deadline - time.monotonic()
            previous_batch, previous = last.get(beam, (1, 0.0))
            predicted = 2 * previous * batch / previous_batch  # warm-up and one round
            if predicted > left or left <= 0:
                reason = f"engine time box: about {predicted:.0f} s needed, {left:.0f} s left"
                skipped.append({"batch": batch, "beam": beam, "reason": reason})
                continue
            print(f"case: batch {batch}, beam {beam}", file=sys.stderr)
            try:
                case, seconds = self._case(names, batch, beam)
            except Exception as error:  # e.g. out of memory: recorded, the next case goes on
                reason = f"failed: {type(error).__name__}: {error}"[:2000]
                skipped.append({"batch": batch, "beam": beam, "reason": reason})
                continue
            last[beam] = (batch, seconds)
            results += case
        self._ratios(results)
        return results, skipped

    def _case(self, names: list[str], batch: int, beam: int) -> tuple[list[dict], float]:
        """Every engine's figures on one case, and the seconds of one round of all of them."""
        ids, length = _batch(self.ids, batch), self.plan.length
        start = time.perf_counter()
        for name in names:  # warm-up: allocations, kernel choices of these shapes
            self._sample(name, ids, beam)
        warm = time.perf_counter() - start
        left = self.deadline - time.monotonic()
        rounds = max(
            1, min(self.plan.rounds, int(self.plan.case_seconds // warm), int(left // warm))
        )
        samples: dict[str, list[dict]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name].append(self._sample(name, ids, beam))
        source = min(max(len(s) for s in ids) + 1, int(self.repository["config"]["max_length"]))
        rows = []
        for name in names:
            variant = self.engines[name]["spec"]["variant"]
            config = self.repository["config"]
            limit = step_limit(config, batch * beam, length // 2, source, variant, self.machine)
            series = samples[name]
            step = _spread([1000 * s["decode_s"] / length for s in series])
            runs = [s.get("runs_s") for s in series]  # onnxruntime's part; None for PyTorch
            in_runs = None if None in runs else _spread([1000 * r / length for r in runs])
            rows.append(
                {
                    "engine": name,
                    "batch": batch,
                    "beam": beam,
                    "length": length,
                    "tokens": batch * length,
                    "rounds": len(series),
                    "tokens_per_s": _spread(
                        [s["tokens"] / (s["encoder_s"] + s["decode_s"]) for s in series]
                    ),
                    "ms_per_step": step,
                    "runtime_ms_per_step": in_runs,
                    "encoder_ms": _spread([1000 * s["encoder_s"] for s in series]),
                    "source_positions": source,
                    "limit": limit,
                    "of_limit": limit["ms"] / step["median"],
                }
            )
        return rows, warm

    def _sample(self, name: str, ids: list[list[int]], beam: int) -> dict:
        sample = self.workers[name].call("sample", ids, beam, self.plan.length)
        if sample["tokens"] != len(ids) * self.plan.length:
            raise RuntimeError(
                f"{name}: {sample['tokens']} tokens, not {len(ids) * self.plan.length}"
            )
        return sample

    @staticmethod
    def _ratios(rows: list[dict]) -> None:
        """Each row's tokens/s over PyTorch's on the same case."""
        torch_rate = {
            (r["batch"], r["beam"]): r["tokens_per_s"]["median"]
            for r in rows
            if r["engine"] == "torch-fp32"
        }
        for r in rows:
            base = torch_rate.get((r["batch"], r["beam"]))
            r["vs_torch"] = r["tokens_per_s"]["median"] / base if base else None


def sources(tokenizer_file: Path, count: int) -> list[list[int]]:
    """Token ids of the first `count` test sentences (all of them when fewer)."""
    from service.runtime.tokenizer import Tokenizer

    lines = [line for line in SOURCES.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Tokenizer(tokenizer_file).encode_batch(lines[:count])


# -- the service level ---------------------------------------------------------------------


def _missing_for_server() -> str | None:
    """Why the server cannot start here, when something it imports is missing."""
    for module, package in (
        ("grpc", "grpcio"),
        ("grpc_health", "grpcio-health-checking"),
        ("grpc_reflection", "grpcio-reflection"),
        ("prometheus_client", "prometheus-client"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed"
    try:
        from attnserve.v1 import translation_pb2, translation_pb2_grpc  # noqa: F401
    except ImportError as error:
        return f"the generated gRPC code attnserve/v1 cannot be imported ({error})"
    return None


def _client_ping() -> int:
    import grpc  # noqa: F401

    from attnserve.v1 import translation_pb2_grpc  # noqa: F401

    return os.getpid()


def client_run(
    address: str,
    texts: list[str],
    max_length: int,
    clients: int,
    seconds: float,
    start_at: float,
    offset: int = 0,
    count: int = 0,
) -> dict:
    """A closed loop of `clients` Translate callers in one asyncio loop (over CHANNELS
    connections: the kernel spreads connections over a server's fronts), from
    wall-clock time `start_at` for `seconds` (and at most `count` calls when given). Runs in a
    client process."""
    return asyncio.run(
        _closed_loop(address, texts, max_length, clients, seconds, start_at, offset, count)
    )


async def _closed_loop(address, texts, max_length, clients, seconds, start_at, offset, count):
    import grpc

    from attnserve.v1 import decoding_pb2, translation_pb2, translation_pb2_grpc

    options = decoding_pb2.DecodingOptions(max_length=max_length)
    requests = [translation_pb2.TranslateRequest(texts=[t], options=options) for t in texts]
    local = [("grpc.use_local_subchannel_pool", 1)]  # a connection per channel
    channels = [grpc.aio.insecure_channel(address, options=local) for _ in range(CHANNELS)]
    for channel in channels:
        await asyncio.wait_for(channel.channel_ready(), 30)
    stubs = [translation_pb2_grpc.TranslationServiceStub(channel) for channel in channels]
    calls = itertools.count(offset)
    answers: list[tuple[float, float, int, int]] = []  # (latency, end, index, output tokens)
    errors: dict[str, int] = {}
    await asyncio.sleep(max(0.0, start_at - time.time()))
    deadline = start_at + seconds
    cpu = time.process_time()

    async def client(stub) -> None:
        while time.time() < deadline:
            call = next(calls)
            if count and call - offset >= count:
                return
            index = call % len(requests)
            begin = time.perf_counter()
            try:
                response = await stub.Translate(requests[index], timeout=CALL_TIMEOUT)
            except grpc.aio.AioRpcError as error:
                errors[error.code().name] = errors.get(error.code().name, 0) + 1
                await asyncio.sleep(0.01)
                continue
            latency = time.perf_counter() - begin
            tokens = response.translations[0].token_counts.output_tokens
            answers.append((latency, time.time(), index, tokens))

    await asyncio.gather(*(client(stubs[i % CHANNELS]) for i in range(clients)))
    cpu = time.process_time() - cpu
    for channel in channels:
        await channel.close()
    return {"answers": answers, "errors": errors, "cpu_s": cpu, "pid": os.getpid()}


class LoadBench:
    """The service section: one server, closed loops over client processes."""

    def __init__(self, args, plan: Plan, repository: dict, texts: list[str], workdir: Path):
        self.args, self.plan, self.repository = args, plan, repository
        self.texts, self.workdir = texts, workdir
        cores = os.cpu_count() or 2
        self.max_processes = max(1, cores // 4)
        if args.device == "cuda":  # the server's own choice of workers (one per GPU)
            self.flags = {"variant": "auto", "max-batch-rows": "1024"}
        else:
            self.flags = {"variant": "fp32", "workers": "0", "max-batch-rows": "64"}
        if args.server_variant:
            self.flags["variant"] = args.server_variant
        if args.server_rows:
            self.flags["max-batch-rows"] = str(args.server_rows)
        if args.server_fronts:
            self.flags["fronts"] = str(args.server_fronts)
        if args.server_workers:
            self.flags["workers"] = str(args.server_workers)
        if args.server_cache:
            self.flags["cache"] = args.server_cache
        self.flags["device"] = args.device
        self.flags["max-queued-requests"] = str(4 * max(plan.clients))

    def processes(self, clients: int) -> int:
        return max(1, min(self.max_processes, clients // 64))

    def run(self) -> dict:
        missing = _missing_for_server()
        if missing:
            return {"status": f"not run: {missing}"}
        from bench.load import Server

        directory = self.workdir / "server"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        flags = [item for key, value in self.flags.items() for item in (f"--{key}", value)]
        print(f"starting the server: {' '.join(flags)}", file=sys.stderr)
        started = time.perf_counter()
        server = Server(Path(self.repository["served_root"]), directory, flags)
        pool = ProcessPoolExecutor(self.max_processes, get_context("spawn"))
        try:
            try:
                asyncio.run(server.wait())
            except RuntimeError as error:
                return {"status": f"not run: {error}"[:3000], "flags": self.flags}
            startup = time.perf_counter() - started
            for ping in [pool.submit(_client_ping) for _ in range(self.max_processes)]:
                ping.result()
            try:
                result = self._measure(server, pool)
            except Exception as error:  # the engine level's results are kept all the same
                failure = f"failed: {type(error).__name__}: {error}"[:3000]
                return {"status": failure, "flags": self.flags, "startup_s": startup}
            fronts = 1 + len(server.state.get("fronts", []))  # the default: by the cores
            workers = len(server.state.get("workers", []))
            return result | {"status": "run", "flags": self.flags, "startup_s": startup,
                             "fronts": fronts, "workers": workers}  # fmt: skip
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            code = server.stop()
            print(f"server stopped ({code})", file=sys.stderr)

    @staticmethod
    def _metrics(server) -> dict | None:
        try:
            return server.metrics()
        except OSError:  # the metrics endpoint did not answer: the level goes on without
            return None

    def _loop(
        self,
        server,
        pool: ProcessPoolExecutor,
        clients: int,
        seconds: float,
        texts: list[str] | None = None,
        max_length: int = SERVER_MAX_LENGTH,
        count: int = 0,
    ) -> dict:
        """A closed loop of `clients` over client processes for `seconds` (with `count`: until
        that many calls are answered); the server's CPU and metrics around it."""
        from bench.load import server_numbers

        texts = texts or self.texts
        processes = self.processes(clients)
        shares = [clients // processes + (p < clients % processes) for p in range(processes)]
        metrics_before, cpu_before = self._metrics(server), server.cpu_seconds()
        start_at = time.time() + 0.5  # every client process starts then
        futures = [
            pool.submit(
                client_run, server.address, texts, max_length, share, seconds, start_at,
                p * 7919, count,
            )
            for p, share in enumerate(shares)
        ]  # fmt: skip
        parts = [f.result() for f in futures]
        cpu_after, metrics_after = server.cpu_seconds(), self._metrics(server)
        answers = [a for part in parts for a in part["answers"]]
        errors: dict[str, int] = {}
        for part in parts:
            for code, n in part["errors"].items():
                errors[code] = errors.get(code, 0) + n
        if count:  # every answer, over the time to the last one
            inside = answers
            window = max([a[1] for a in answers], default=start_at) - start_at
        else:  # answers within the level's time
            inside = [a for a in answers if a[1] <= start_at + seconds]
            window = seconds
        latencies = np.array([1000 * a[0] for a in answers])
        cpu = {k: cpu_after[k] - cpu_before[k] for k in ("front", "workers")}
        cpu["client"] = sum(part["cpu_s"] for part in parts)
        level = {
            "clients": clients,
            "client_processes": processes,
            "seconds": window,
            "requests": len(answers),
            "errors": errors,
            "requests_per_s": len(inside) / window if window > 0 else 0.0,
            "tokens_per_s": sum(a[3] for a in inside) / window if window > 0 else 0.0,
            "output_tokens_mean": float(np.mean([a[3] for a in answers])) if answers else 0.0,
            "latency_ms": None,
            "cpu_s": cpu,
            "cpu_cores": {k: v / window for k, v in cpu.items()} if window > 0 else None,
            "outputs": [(a[2], a[3]) for a in answers],  # (text index, tokens), popped
        }
        if len(latencies):
            level["latency_ms"] = {
                "p50": float(np.percentile(latencies, 50)),
                "p99": float(np.percentile(latencies, 99)),
                "mean": float(latencies.mean()),
            }
        if metrics_before is not None and metrics_after is not None:
            numbers = server_numbers(metrics_before, metrics_after)
            keys = ("step_rows_mean", "step_ms_mean", "queue_wait_ms_mean", "steps")
            level["server"] = {k: numbers.get(k) for k in keys}
        return level

    def _measure(self, server, pool) -> dict:
        plan = self.plan
        print(f"warm-up: {max(plan.clients)} clients", file=sys.stderr)
        warm = self._loop(server, pool, max(plan.clients), plan.warmup_seconds)
        outputs = dict(warm.pop("outputs"))
        levels = []
        for clients in plan.clients:
            print(f"level: {clients} clients, {plan.level_seconds:g} s", file=sys.stderr)
            level = self._loop(server, pool, clients, plan.level_seconds)
            level.pop("outputs")
            levels.append(level)
        sentence = self._sentence(server, pool, outputs)
        return {
            "settings": {
                "clients": list(plan.clients),
                "level_seconds": plan.level_seconds,
                "warmup_seconds": plan.warmup_seconds,
                "max_length": SERVER_MAX_LENGTH,
                "requests": "unary Translate, one test sentence each, greedy, natural end",
                "client": f"closed loop; one asyncio loop and {CHANNELS} grpc.aio channels "
                "(a connection each) per client process; requests/s and tokens/s count "
                "answers within the level's time",
            },
            "warmup": {"requests": warm["requests"], "errors": warm["errors"]},
            "levels": levels,
            "sentence": sentence,
        }

    def _sentence(self, server, pool, outputs: dict[int, int]) -> dict:
        """One call at a time of a sentence whose translation reaches SENTENCE_TOKENS."""
        if not outputs:
            return {"status": "not run: no answers in the warm-up"}

        def distance(i: int) -> tuple[bool, int]:  # at least the length first, then nearest
            return outputs[i] < SENTENCE_TOKENS, abs(outputs[i] - SENTENCE_TOKENS)

        index = min(outputs, key=distance)
        text = self.texts[index]
        print(f"single sentence: {self.plan.latency_requests} calls", file=sys.stderr)
        self._loop(server, pool, 1, 60.0, [text], SENTENCE_TOKENS, count=3)  # warm-up
        level = self._loop(
            server, pool, 1, 120.0, [text], SENTENCE_TOKENS, count=self.plan.latency_requests
        )
        level.pop("outputs")
        return {
            "text": text,
            "natural_output_tokens": outputs[index],
            "max_length": SENTENCE_TOKENS,
            "output_tokens": level["output_tokens_mean"],
            "calls": level["requests"],
            "errors": level["errors"],
            "latency_ms": level["latency_ms"],
        }


# -- goals ---------------------------------------------------------------------------------


def _case(report: dict, engine: str, batch: int, beam: int = 1) -> dict | None:
    for row in report.get("engine", {}).get("cases", []):
        if (row["engine"], row["batch"], row["beam"]) == (engine, batch, beam):
            return row
    return None


def _fastest_fp16(report: dict, batch: int) -> dict | None:
    """The greedy case at `batch` of the fp16 engine with the most tokens/s."""
    cases = [c for c in (_case(report, name, batch) for name in FP16_ENGINES) if c is not None]
    return max(cases, key=lambda c: c["tokens_per_s"]["median"], default=None)


def _goal(text: str, measured, compare: str, target: float, unit: str, note: str = "") -> dict:
    if measured is None:
        status = "not measured"
    else:
        met = measured >= target if compare == ">=" else measured <= target
        status = "met" if met else "missed"
    return {
        "goal": text,
        "measured": measured,
        "compare": compare,
        "target": target,
        "unit": unit,
        "status": status,
        "note": note,
    }


def goals(report: dict) -> list[dict]:
    """The goals table: each met, missed, or not measured."""
    rows = []
    for batch, target in ((256, 400_000), (1024, 1_000_000)):
        case = _fastest_fp16(report, batch)
        rate = case["tokens_per_s"]["median"] if case else None
        text = f"engine fp16 greedy tokens/s at batch {batch}"
        rows.append(_goal(text, rate, ">=", target, "tokens/s", case["engine"] if case else ""))
    case = _fastest_fp16(report, 256)
    ratio = case["vs_torch"] if case else None
    text = "engine fp16 greedy / PyTorch eager tokens/s at batch 256"
    rows.append(_goal(text, ratio, ">=", 5.0, "x", case["engine"] if case else ""))
    steps = {
        name: e["single_step_ms"]["median"]
        for name, e in report.get("engine", {}).get("engines", {}).items()
        if name.startswith("ort-") and "single_step_ms" in e
    }
    best = min(steps, key=steps.get) if steps else None
    text = "batch-1 decoder step (median, fastest onnxruntime engine)"
    rows.append(_goal(text, steps.get(best), "<=", 0.25, "ms", best or ""))
    load = report.get("load", {})
    sentence = load.get("sentence", {}) if load.get("status") == "run" else {}
    latency = (sentence.get("latency_ms") or {}).get("p50")
    text = f"{SENTENCE_TOKENS}-token sentence over gRPC at 1 client, p50"
    status = load.get("status", "not run")
    rows.append(_goal(text, latency, "<=", 20.0, "ms", "" if status == "run" else status))
    level = next((v for v in load.get("levels", []) if v["clients"] == 256), None)
    rate = level["tokens_per_s"] if level else None
    p99 = level["latency_ms"]["p99"] if level and level["latency_ms"] else None
    rows.append(_goal("server tokens/s at 256 clients", rate, ">=", 100_000, "tokens/s"))
    rows.append(_goal("server p99 latency at 256 clients", p99, "<=", 1000.0, "ms"))
    return rows


# -- the report ----------------------------------------------------------------------------


def _number(value, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:,.{digits}f}"


def _machine_line(m: dict) -> str:
    if m["device"] == "cuda":
        smi = m.get("nvidia_smi", {})
        driver = f", driver {smi['driver_version']}" if "driver_version" in smi else ""
        return (
            f"**{m['name']}** ({m['memory_gib']:.0f} GiB{driver}), CUDA {m['cuda']} (torch's "
            f"build), onnxruntime {m['onnxruntime']} ({', '.join(m['providers'])}), torch "
            f"{m['torch']}, Python {m['python']}, {m['cpu_count']} CPUs."
        )
    return (
        f"**{m['name']}** (CPU only, {m['cpu']['usable_cpus']} usable CPUs), onnxruntime "
        f"{m['onnxruntime']}, Python {m['python']}."
    )


def markdown(report: dict) -> str:
    m = report["machine"]
    rates = m["matmul_tflop_s"]
    lines = [
        "# GPU benchmark" if m["device"] == "cuda" else "# GPU benchmark, run on the CPU",
        "",
        _machine_line(m),
        "",
        "## Machine",
        "",
        "| what | measured | how |",
        "|---|--:|---|",
        f"| memory bandwidth | {m['bandwidth_gb_s']:,.0f} GB/s | {m['bandwidth_method']} |",
    ]
    for name, rate in rates.items():
        lines.append(f"| matmul {name} | {rate:,.2f} TFLOP/s | {m['matmul_method']} |")
    r = report["repository"]
    c = r["certificate"]
    exported = f"yes, {r['export_seconds']:.0f} s" if r["exported"] else "no"
    made = r.get("graphs_made", {})
    lines += [
        "",
        "## Model repository",
        "",
        "| directory | exported here | variants (graphs) | certificate | decodes |",
        "|---|---|---|---|---|",
        f"| {r['directory']} | {exported} | "
        f"{', '.join(f'{v} ({made.get(v, chr(63))})' for v in r['variants'])} "
        f"| passed {c['passed']} over {c['sentences']} sentences "
        f"| {'; '.join(f'{k}: {v}' for k, v in c['decodes'].items())} |",
    ]
    lines += _engine_markdown(report.get("engine"))
    lines += _load_markdown(report.get("load"))
    lines += [
        "",
        "## Goals",
        "",
        "| goal | measured | target | status |",
        "|---|--:|--:|---|",
    ]
    for g in report["goals"]:
        digits = 2 if g["unit"] in ("ms", "x") else 0
        note = f" ({g['note']})" if g["note"] else ""
        lines.append(
            f"| {g['goal']} | {_number(g['measured'], digits)} {g['unit']} "
            f"| {g['compare']} {_number(g['target'], digits)} | {g['status']}{note} |"
        )
    return "\n".join(lines) + "\n"


def _section_head(title: str, part: dict | None, flag: str) -> list[str]:
    """A section's title, and where its figures come from (or that it was not run)."""
    lines = ["", f"## {title}", ""]
    if not part:
        return [*lines, f"not run ({flag})"]
    if part.get("from"):
        lines += [f"From {part['from']}.", ""]
    return lines


def _engine_markdown(part: dict | None) -> list[str]:
    lines = _section_head("Engine level (translator)", part, "--no-engine")
    if not part:
        return lines
    s = part["settings"]
    lines += [
        f"Through service.runtime.decoding over CachedInference, every row forced to {s['length']} "
        f"tokens; {s['rounds']} timed rounds at most after 1 warm-up, median [min, max]. "
        "tokens/s: batch × length over the whole call (encoder included); ms/step: after the "
        "encoder, over length; limit: the least time of a step at mid-decode on this machine "
        "(weights + caches over bandwidth, or FLOPs over matrix rate); of limit: limit over "
        "ms/step; in runs: the part of ms/step inside onnxruntime's runs (the step, the search "
        "and helper graphs, synchronised), the rest being the host's decoding loop. "
        f"Parity: greedy outputs of the first {s['parity_sentences']} test sentences "
        f"identical to {s['reference']}. decode keywords: {s.get('decode_keywords') or 'none'}.",
        "",
        "| engine | library | parity | batch-1 step ms (median) |",
        "|---|---|--:|--:|",
    ]
    for e in part["engines"].values():
        parity = e.get("parity")
        same = f"{parity['identical']}/{parity['sentences']} identical" if parity else "–"
        step = e.get("single_step_ms", {}).get("median")
        extra = f" ({e.get('error') or e.get('not_timed')})" if not e["trusted"] else ""
        lines.append(
            f"| {e['label']} | {e.get('library', '–')} | {same}{extra} | {_number(step, 3)} |"
        )
    lines += [
        "",
        "| engine | batch | beam | rounds | tokens/s | ms/step | in runs ms/step | encoder ms "
        "| vs PyTorch | limit ms | of limit |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in part["cases"]:
        t, step, runs = c["tokens_per_s"], c["ms_per_step"], c.get("runtime_ms_per_step")
        cells = [
            part["engines"][c["engine"]]["label"],
            c["batch"],
            c["beam"],
            c["rounds"],
            f"{_number(t['median'])} [{_number(t['min'])}, {_number(t['max'])}]",
            f"{step['median']:.3f} [{step['min']:.3f}, {step['max']:.3f}]",
            "–" if runs is None else f"{runs['median']:.3f}",
            f"{c['encoder_ms']['median']:.2f}",
            "–" if c["vs_torch"] is None else f"{c['vs_torch']:.2f}x",
            f"{c['limit']['ms']:.4f}",
            f"{c['of_limit']:.1%}",
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    for skip in part["skipped"]:
        lines.append(f"\nNot run: batch {skip['batch']}, beam {skip['beam']}: {skip['reason']}.")
    lines.append(f"\nEngine section: {part['seconds']:.0f} s.")
    return lines


def _load_markdown(part: dict | None) -> list[str]:
    lines = _section_head("Service level (gRPC)", part, "--no-load")
    if not part:
        return lines
    if part["status"] != "run":
        return [*lines, part["status"]]
    s, flags = part["settings"], part["flags"]
    lines += [
        f"`attnserve serve` with {' '.join(f'--{k} {v}' for k, v in flags.items())}, "
        f"{part.get('fronts', 1)} front process(es), {part.get('workers', '?')} worker(s) "
        f"(serving after {part['startup_s']:.1f} "
        f"s). {s['requests']}, max_length "
        f"{s['max_length']}; {s['client']}. {s['level_seconds']:g} s per level after a "
        f"{s['warmup_seconds']:g} s warm-up. CPU: seconds over the level.",
        "",
        "| clients | client procs | requests | errors | req/s | tokens/s | tokens/answer "
        "| p50 ms | p99 ms | rows/step | step ms | CPU front | CPU workers | CPU clients |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for v in part["levels"]:
        latency, server = v["latency_ms"] or {}, v.get("server") or {}
        cells = [
            v["clients"],
            v["client_processes"],
            v["requests"],
            sum(v["errors"].values()),
            _number(v["requests_per_s"], 1),
            _number(v["tokens_per_s"]),
            _number(v["output_tokens_mean"], 1),
            _number(latency.get("p50"), 1),
            _number(latency.get("p99"), 1),
            _number(server.get("step_rows_mean"), 1),
            _number(server.get("step_ms_mean"), 2),
            *(_number(v["cpu_s"][k], 1) for k in ("front", "workers", "client")),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    sentence = part["sentence"]
    if sentence.get("latency_ms"):
        latency = sentence["latency_ms"]
        lines += [
            "",
            f"One sentence, one client, one call at a time ({sentence['calls']} calls, "
            f"{sentence['output_tokens']:.0f} output tokens, max_length "
            f"{sentence['max_length']}): p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} "
            f"ms, mean {latency['mean']:.2f} ms.",
        ]
    else:
        lines += ["", f"One sentence: {sentence.get('status')}"]
    return lines


# -- the run -------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the report goes")
    parser.add_argument("--quick", action="store_true", help="batches 1,16, 16 tokens, no load")
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT, help="a translator's")
    parser.add_argument("--repository", type=Path, help="a version of it (fp32, fp16)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--load",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the service level (default: on, off with --quick)",
    )
    parser.add_argument(
        "--engine", action=argparse.BooleanOptionalAction, default=True, help="the engine level"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the export and each section's results here; a later run with the same "
        "workdir reuses the export and reports the sections it does not run again",
    )
    parser.add_argument("--beam-max-batch", type=int, help="beam 4 up to this batch")
    parser.add_argument(
        "--export-sentences",
        type=int,
        help="certify the export over this many sentences a test part (fewer than 200: a "
        "smoke test, not a certificate)",
    )
    parser.add_argument("--engine-seconds", type=float, help="time box of the engine level")
    parser.add_argument("--server-variant", choices=("fp32", "fp16", "int8"))
    parser.add_argument("--server-rows", type=int, help="the server's --max-batch-rows")
    parser.add_argument("--server-fronts", type=int, help="the server's --fronts")
    parser.add_argument("--server-workers", type=int, help="the server's --workers")
    parser.add_argument("--server-cache", choices=("in_place", "growing", "static"))
    parser.add_argument("--clients", help="the service level's client counts, e.g. 1,256")
    parser.add_argument("--level-seconds", type=float, help="each service level's duration")
    parser.add_argument(
        "--graphs",
        choices=("traced", "built"),
        default="built",
        help="how the exported graphs are made (attnserve export --graphs)",
    )
    args = parser.parse_args(argv)
    if args.load is None:
        args.load = not args.quick
    return args


def _plan(args) -> Plan:
    plan = QUICK if args.quick else FULL
    if args.beam_max_batch is not None:
        plan = replace(plan, beam_max_batch=args.beam_max_batch)
    if args.engine_seconds is not None:
        plan = replace(plan, engine_seconds=args.engine_seconds)
    if args.export_sentences is not None:
        plan = replace(plan, export_sentences=args.export_sentences)
    if args.clients:
        plan = replace(plan, clients=tuple(int(c) for c in args.clients.split(",")))
    if args.level_seconds is not None:
        plan = replace(plan, level_seconds=args.level_seconds)
    return plan


def _saved(workdir: Path, name: str) -> dict | None:
    path = workdir / "sections" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _save(workdir: Path, name: str, part: dict) -> None:
    path = workdir / "sections" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(part, indent=2) + "\n")


def run(args, workdir: Path) -> dict:
    plan = _plan(args)
    if args.device == "cuda":
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            raise SystemExit(
                f"--device cuda: onnxruntime {onnxruntime.__version__} has no CUDA provider "
                f"({onnxruntime.get_available_providers()}); see ../shared/gpu/README.md"
            )
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print("measuring the machine", file=sys.stderr)
    report: dict[str, Any] = {"machine": measure_machine(args.device, args.quick)}
    variants = ("fp32", "fp16")
    report["repository"] = repository_section(args, plan, workdir, variants)
    directory = Path(report["repository"]["directory"])
    report["settings"] = {
        "quick": args.quick,
        "device": args.device,
        "command": " ".join(["python -m bench.gpu", *sys.argv[1:]]),
    }
    tokenizer = directory / "tokenizer.model"
    if args.engine:
        ids = sources(tokenizer, max(max(plan.batches), plan.parity_sentences))
        bench = EngineBench(args, plan, report["repository"], report["machine"], ids)
        report["engine"] = bench.run()
        _save(workdir, "engine", report["engine"])
    elif _saved(workdir, "engine"):
        report["engine"] = _saved(workdir, "engine") | {"from": "an earlier run (--workdir)"}
    if args.load:
        lines = [line for line in SOURCES.read_text(encoding="utf-8").splitlines() if line.strip()]
        report["load"] = LoadBench(args, plan, report["repository"], lines, workdir).run()
        _save(workdir, "load", report["load"])
    elif _saved(workdir, "load"):
        report["load"] = _saved(workdir, "load") | {"from": "an earlier run (--workdir)"}
    report["goals"] = goals(report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    with contextlib.ExitStack() as stack:
        if args.workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-gpu-")))
        else:
            workdir = args.workdir.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
        report = run(args, workdir)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{REPORT}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / f"{REPORT}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
