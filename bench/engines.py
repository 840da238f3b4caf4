"""Engine workers of the decode benchmark: each engine loads once in a process of its own and
answers timing requests (see bench.decode). A worker holds a translator or a captioner, as
its setup's "model" says."""

from __future__ import annotations

import os
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from service.runtime.batching import source_batch
from service.runtime.captioning import pixels
from service.runtime.decoding import DecodingOptions, decode
from service.runtime.inference import CachedInference, Inference, UncachedInference
from service.runtime.repository import verify
from service.runtime.search import SearchRequest
from service.runtime.tokenizer import Tokenizer

THREAD_CHECK = "onnx-fp32-2threads"  # only the greedy cases at the middle length
ENGINES = {  # name: (kind, variant, compute threads)
    "torch-uncached": ("torch", "fp32", 1),
    "torch-cached": ("torch", "fp32", 1),
    "onnx-fp32": ("onnx", "fp32", 1),
    "onnx-int8": ("onnx", "int8", 1),
    "ct2-float32": ("ct2", "float32", 1),
    "ct2-int8": ("ct2", "int8", 1),
    THREAD_CHECK: ("onnx", "fp32", 2),
    "onnx-fp32-built": ("onnx", "fp32", 1),
    "onnx-int8-built": ("onnx", "int8", 1),
    "onnx-int8-built-per-tensor": ("onnx", "int8", 1),
    "onnx-fp32-built-full-step": ("onnx", "fp32", 1),
    "onnx-int8-built-full-step": ("onnx", "int8", 1),
    "onnx-fp32-built-growing": ("onnx", "fp32", 1),
    "onnx-int8-built-growing": ("onnx", "int8", 1),
}
# an LSTM's state has no uncached form
CAPTION_ENGINES = ("torch-cached", "onnx-fp32", "onnx-int8", "onnx-fp32-built", "onnx-int8-built")


PER_TENSOR = "built-per-tensor"  # built graphs, int8 with one scale per weight
# built graphs, every step the full one (its attention output unfetched), as served before
# the lean step and its one-row form (the versions they run from ship both)
FULL_STEP = "-full-step"
# built graphs, the cache growing (its past concatenated every step) instead of written in
# place, as served before the in-place steps (the versions they run from ship both)
GROWING = "-growing"


def graphs_of(name: str) -> str:
    """How an onnx engine's graphs were made: "built" (export.builder), PER_TENSOR (the same,
    quantised with one int8 scale per weight instead of per output channel) or "traced"."""
    if name.endswith("-" + PER_TENSOR):
        return PER_TENSOR
    name = name.removesuffix(FULL_STEP).removesuffix(GROWING)
    return "built" if name.endswith("-built") else "traced"


class Stepped(Inference):
    """Counts the decoding steps; with `hidden` (the `</s>` id), bans that token in the search,
    so that every row runs to max_length."""

    def __init__(self, inner: Inference, hidden: int | None = None):
        self.inner, self.hidden, self.steps = inner, hidden, 0

    def search_step(self, tokens: np.ndarray, request: SearchRequest):
        self.steps += 1
        if self.hidden is not None:
            request = replace(request, banned=(*request.banned, self.hidden))
        return self.inner.search_step(tokens, request)

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, attention = self.inner.step(tokens)
        self.steps += 1
        if self.hidden is not None:
            logits[:, self.hidden] = -np.inf
        return logits, attention

    def reorder(self, index: np.ndarray) -> None:
        self.inner.reorder(index)


class OurRunner:
    """An `Engine` decoded by service.runtime.decoding, as the server decodes: a translator's token
    ids (padded to a batch here), or a captioner's uint8 images (B, H, W, 3) when
    `max_source_length` is None."""

    def __init__(self, engine, inference_type: type[Inference], max_source_length: int | None):
        self.engine, self.inference_type = engine, inference_type
        self.max_source = max_source_length

    def _encode(self, inputs):
        if self.max_source is None:
            return self.engine.encode(pixels=pixels(inputs))
        return self.engine.encode(*source_batch(inputs, self.max_source))

    def _decode(self, inputs, beam: int, length: int, forced: bool):
        bos, eos = self.engine.special_tokens.bos, self.engine.special_tokens.eos
        start = time.perf_counter()
        encoder = self._encode(inputs)
        encoded = time.perf_counter()
        inference = self.inference_type(self.engine, encoder, len(inputs))
        inference = Stepped(inference, eos if forced else None)
        options = DecodingOptions(beam_size=beam, max_length=length)
        hypotheses = decode(inference, len(inputs), options, bos, eos, attention=False)
        end = time.perf_counter()
        tokens = [nbest[0].tokens for nbest in hypotheses]
        return tokens, encoded - start, end - encoded, inference.steps

    def time(self, inputs, pieces, beam: int, length: int, forced: bool = True) -> dict:
        """One timed decode of a batch; `forced`: exactly `length` tokens a row, else each
        row to its natural end (`</s>`, at most `length` tokens)."""
        tokens, encoder, decoding, steps = self._decode(inputs, beam, length, forced)
        return {
            "encoder_s": encoder,
            "decode_s": decoding,
            "tokens": sum(map(len, tokens)),
            "steps": steps,
            "outputs": len(tokens),
        }

    def greedy(self, inputs, pieces, length: int) -> list[list[int]]:
        return self._decode(inputs, 1, length, forced=False)[0]


class Ct2Runner:
    """A CTranslate2 Translator; sources are pieces without `</s>`."""

    def __init__(self, translator, vocabulary: list[str]):
        self.translator, self.ids = translator, {p: i for i, p in enumerate(vocabulary)}

    def _seconds(self, pieces, beam: int, least: int, most: int) -> tuple[float, list]:
        start = time.perf_counter()
        results = self.translator.translate_batch(
            pieces, beam_size=beam, min_decoding_length=least, max_decoding_length=most
        )
        return time.perf_counter() - start, results

    def time(self, ids, pieces, beam: int, length: int) -> dict:
        """The encoder is a length-1 call less one step; all of it when steps are lost in noise."""
        total, results = self._seconds(pieces, beam, length, length)
        first = min(self._seconds(pieces, beam, 1, 1)[0] for _ in range(2))
        step = (total - first) / (length - 1)
        encoder = min(max(first - step, 0.0), total) if step > 0 else 0.0
        tokens = sum(len(result.hypotheses[0]) for result in results)
        return {"encoder_s": encoder, "decode_s": total - encoder, "tokens": tokens}

    def greedy(self, ids, pieces, length: int) -> list[list[int]]:
        results = self._seconds(pieces, 1, 0, length)[1]
        return [[self.ids[p] for p in result.hypotheses[0]] for result in results]


def _load(name: str, setup: dict):
    """(runner, library and version) of one engine, its thread counts fixed first; the
    captioner's when setup["model"] is "captioner"."""
    kind, variant, threads = ENGINES[name]
    captioner = setup.get("model") == "captioner"
    if kind == "torch":
        import torch

        from models.checkpoint import load_checkpoint
        from models.reference import reference_engine

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        model, _ = load_checkpoint(Path(setup["checkpoint"]))
        inference = UncachedInference if name == "torch-uncached" else CachedInference
        source = None if captioner else model.config.max_length
        runner = OurRunner(reference_engine(model), inference, source)
        return runner, f"torch {torch.__version__}"
    if kind == "onnx":
        import onnxruntime

        from service.runtime.onnx_engine import OnnxEngine

        version = verify(Path(setup["repositories"][graphs_of(name)]))
        cache = "growing" if name.endswith(GROWING) else None
        engine = OnnxEngine(version, variant, "cpu", threads, cache=cache)
        if name.endswith(FULL_STEP):
            engine.lean_decoder = engine.one_row_decoder = None
        source = None if captioner else version.config["max_length"]
        runner = OurRunner(engine, CachedInference, source)
        return runner, f"onnxruntime {onnxruntime.__version__}"
    import ctranslate2

    translator = ctranslate2.Translator(
        setup["ct2"][variant], device="cpu", intra_threads=threads, inter_threads=1
    )
    vocabulary = Tokenizer(Path(setup["checkpoint"]) / "tokenizer.model").vocabulary()
    return Ct2Runner(translator, vocabulary), f"ctranslate2 {ctranslate2.__version__}"


def stdout_to_stderr() -> None:
    """Keeps a child's prints (exporters, libraries) out of the JSON on stdout."""
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr


_worker: tuple = ()  # (runner, library) of a worker process


def _start_worker(name: str, setup: dict) -> None:
    global _worker
    stdout_to_stderr()
    _worker = _load(name, setup)


def _request(method: str, *args):
    """In a worker: a runner method, the library, or the RSS high-water mark in MB."""
    if method == "library":
        return _worker[1]
    if method == "peak_rss_mb":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return getattr(_worker[0], method)(*args)


class Worker:
    """One engine in a process of its own, answering one request at a time."""

    def __init__(self, context, name: str, setup: dict):
        self.pool = ProcessPoolExecutor(1, context, _start_worker, (name, setup))
        self.library = self.call("library")

    def call(self, method: str, *args):
        return self.pool.submit(_request, method, *args).result()
