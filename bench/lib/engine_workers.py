"""One engine of the GPU benchmark's engine level in a spawned process of its own: loaded,
then decoding as the server does (`decode` over `CachedInference`), one call at a time."""

from __future__ import annotations

import gc
import inspect
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

SINGLE_WARMUP = 5  # batch-1 steps before the timed ones


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
    ahead: int = 1  # static: greedy steps run back to back when every row runs to the length

    @property
    def label(self) -> str:
        device = self.device.upper()
        if self.kind == "torch":
            return f"PyTorch {device} {self.variant} eager"
        label = f"ORT {device} {self.variant}" + (" + IO binding" if self.io_binding else "")
        label += CACHE_LABELS.get(self.cache or "", "")
        return label + (f", {self.ahead} steps ahead" if self.ahead > 1 else "")


CACHE_LABELS = {
    "in_place": " + cache in place",
    "static": " + static step (CUDA graphs)",
}


def engine_specs(device: str, in_place: bool = False, static: bool = False) -> list[EngineSpec]:
    """The timed engines: onnxruntime fp32 and fp16, PyTorch fp32 eager, on `device`; with
    `in_place` on CUDA also fp16 with its cache written in place (GroupQueryAttention over a
    shared buffer: a step reads each row's own length only, where the growing cache's step
    attends over the longest row's); with `static` on CUDA also fp16 with the static step,
    each bucket's step replayed as a CUDA graph, as the server steps by default there, one
    step at a time and STATIC_AHEAD greedy steps back to back (`steps_ahead`)."""
    binding = device == "cuda"
    specs = [
        EngineSpec("ort-fp32", "onnx", "fp32", device, binding, 1),
        EngineSpec("ort-fp16", "onnx", "fp16", device, binding, 1),
        EngineSpec("torch-fp32", "torch", "fp32", device, False, 1),
    ]
    if device == "cuda":
        caches = [c for c, shipped in (("in_place", in_place), ("static", static)) if shipped]
        for at, cache in enumerate(caches, start=2):
            name = "ort-fp16-" + cache.replace("_", "-")
            specs.insert(at, EngineSpec(name, "onnx", "fp16", device, True, 1, cache))
        if static:
            ahead = EngineSpec(
                "ort-fp16-static-ahead", "onnx", "fp16", device, True, 1, "static", STATIC_AHEAD
            )
            specs.insert(2 + len(caches), ahead)
    return specs


STATIC_AHEAD = 8  # the static engine's greedy steps back to back, where it has them timed
# the goals take the fastest at each batch
FP16_ENGINES = ("ort-fp16", "ort-fp16-in-place", "ort-fp16-static", "ort-fp16-static-ahead")


REFERENCE = EngineSpec("reference", "torch", "fp32", "cpu", False, 0)


class Runner:
    """One engine in a worker process: loads it, decodes as the server does."""

    def __init__(self, spec: EngineSpec, repository: str, checkpoint: str):
        from service.runtime.repository import verify

        self.spec = spec
        version = verify(Path(repository))
        self.max_source = int(version.config["max_length"])
        self.sync = lambda: None
        self.in_runs: float | None = None  # onnxruntime's: seconds inside its runs
        self._store = None  # the static step's rows, kept from decode to decode
        if spec.kind == "torch":
            self._load_torch(spec, checkpoint)
        else:
            self._load_onnx(spec, version)

    def _load_torch(self, spec: EngineSpec, checkpoint: str) -> None:
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

    def _load_onnx(self, spec: EngineSpec, version) -> None:
        import onnxruntime

        from service.runtime.onnx_engine import OnnxEngine

        self.engine = OnnxEngine(
            version, spec.variant, spec.device, spec.threads, spec.io_binding, cache=spec.cache
        )
        self.library = f"onnxruntime {onnxruntime.__version__}"
        session = getattr(self.engine, "decoder", None)  # the step's session
        self.providers = session.get_providers() if session is not None else []
        self.in_runs = 0.0  # the step, the search and helper graphs
        self.engine.runner.run = self._timed(self.engine.runner.run)
        static = self.engine.static_step  # its sessions are run apart from the runner
        if static is not None:
            sessions = [*static.graphs.values(), *static.gather.values()]
            for session in filter(None, [*sessions, static.place, static.scatter]):
                session.run_with_iobinding = self._timed(session.run_with_iobinding)

    def _timed(self, run):
        """`run`, its seconds added to `in_runs`."""

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                self.in_runs += time.perf_counter() - start

        return timed

    def info(self) -> dict:
        return {"library": self.library, "providers": self.providers}

    def _decode(self, ids: list[list[int]], beam: int, length: int, forced: bool):
        from bench.engines import Stepped
        from service.runtime.batching import source_batch
        from service.runtime.decoding import DecodingOptions, decode

        engine = self.engine
        bos, eos = engine.special_tokens.bos, engine.special_tokens.eos
        gc.collect()
        self.sync()
        start = time.perf_counter()
        encoder = engine.encode(*source_batch(ids, self.max_source))
        self.sync()
        encoded = time.perf_counter()
        inference = self._inference(encoder, len(ids))
        before = self.in_runs
        if forced and beam == 1 and self.spec.ahead > 1:
            rows = self._ahead(inference, length, bos, eos)
        else:
            if forced:
                inference = Stepped(inference, eos)
            options = DecodingOptions(beam_size=beam, max_length=length)
            hypotheses = decode(inference, len(ids), options, bos, eos, **decode_keywords())
            rows = [n[0].tokens for n in hypotheses]
        self.sync()
        end = time.perf_counter()
        runs = None if before is None else self.in_runs - before
        return rows, encoded - start, end - encoded, runs

    def _ahead(self, batch, length: int, bos: int, eos: int) -> list[list[int]]:
        """Every row greedily to exactly `length` tokens (`</s>` banned), up to `spec.ahead`
        steps back to back at a time, as a server with `steps_ahead` steps rows that all run
        on."""
        from service.runtime.search import SearchRequest

        request = SearchRequest(1, None, False, banned=(eos,))
        return decode_runs(batch, bos, request, length, self.spec.ahead)[0].tolist()

    def _inference(self, encoder, rows: int):
        """The decode's `Inference` over the encoder's `rows` rows: the engine's cache carried
        from step to step, or with the static step a continuous batch as the server's, its
        rows held in the engine's buckets (one row store from decode to decode, so that each
        bucket's buffers are bound, and its CUDA graph recorded, once)."""
        from service.runtime.batch import ContinuousBatch
        from service.runtime.inference import CachedInference
        from service.runtime.rows import row_store

        if self.spec.cache != "static":
            return CachedInference(self.engine, encoder, rows)
        if self._store is None:
            self._store = row_store(self.engine)
        self._store.clear()  # the last decode's rows let go of; its buckets kept
        batch = ContinuousBatch(self.engine, self._store)
        batch.join(encoder, np.arange(rows))
        return batch

    def greedy(self, ids: list[list[int]], length: int) -> list[list[int]]:
        """Greedy tokens of every source, each to its natural end (at most `length`)."""
        return self._decode(ids, 1, length, forced=False)[0]

    def sample(self, ids: list[list[int]], beam: int, length: int) -> dict:
        """One timed decode of the batch, every row to exactly `length` tokens."""
        rows, encoder, decoding, runs = self._decode(ids, beam, length, forced=True)
        tokens = sum(map(len, rows))
        return {"encoder_s": encoder, "decode_s": decoding, "tokens": tokens, "runs_s": runs}

    def single_step(self, ids: list[int], steps: int) -> dict:
        """Seconds of each `CachedInference.step` of one row, after SINGLE_WARMUP steps."""
        from service.runtime.batching import source_batch

        engine = self.engine
        inference = self._inference(engine.encode(*source_batch([ids], self.max_source)), 1)
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


def decode_runs(batch, bos: int, request, length: int, window: int) -> tuple:
    """Every row of a continuous batch `length` greedy steps from `bos`, at most `window`
    steps back to back at a time (as many as the batch allows: ContinuousBatch.search_step's
    `steps`; 1: one at a time) -> (ids, log_probs), each (rows, length)."""
    tokens = np.full((batch.rows, 1), bos, np.int64)
    ids: list = []
    log_probs: list = []
    while (done := sum(i.shape[1] for i in ids)) < length:
        steps = min(window, length - done, batch.steps_ahead(request))
        found, _ = batch.search_step(tokens, request, steps)
        ids.append(found.ids)
        log_probs.append(found.log_probs)
        tokens = np.ascontiguousarray(found.ids[:, -1:])
    return np.concatenate(ids, 1), np.concatenate(log_probs, 1)
