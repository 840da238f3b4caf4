"""The GPU benchmark's engine level: every engine in a process of its own (bench.lib.
engine_workers), its greedy parity with PyTorch fp32 on the CPU, its batch-1 decoder step, then
the time-boxed cases (batch, beam), every engine once a round in a rotating order, each case
against the physical limit of a step on this machine."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.engine_workers import REFERENCE, EngineSpec, Worker, decode_keywords, engine_specs
from bench.lib.gpu_plan import Plan
from bench.lib.paths import TEST_SOURCES
from bench.machine import decoder_weights
from service.runtime.cache_choice import shipped_caches
from service.runtime.repository import verify

PARITY_FLOOR = 0.9  # identical greedy outputs below this share: the engine is not timed
VARIANT_BYTES = {"fp32": 4, "fp16": 2}


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def step_limit(
    config: dict, rows: int, past: int, source: int, variant: str, machine_: dict
) -> dict:
    """The least time of one decode step over `rows` rows after `past` tokens, attending over
    `source` encoder positions, everything at the variant's precision."""
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
        shipped = shipped_caches(verify(Path(directory)), "fp16")
        specs = engine_specs(self.args.device, "in_place" in shipped, "static" in shipped)
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
            "settings": self._settings(),
            "engines": self.engines,
            "cases": cases,
            "skipped": skipped,
            "seconds": time.perf_counter() - start,
        }

    def _settings(self) -> dict:
        return {
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
            "sources": str(TEST_SOURCES),
            "reference": REFERENCE.label,
            "decode_keywords": decode_keywords(),
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
            case, reason = self._timed_case(names, batch, beam, last)
            if reason:
                skipped.append({"batch": batch, "beam": beam, "reason": reason})
            results += case
        self._ratios(results)
        return results, skipped

    def _timed_case(self, names: list[str], batch: int, beam: int, last: dict) -> tuple:
        """(rows, None) of a case that ran, ([], why not) of one that did not; `last` holds
        each beam's latest (batch, seconds of one round), from which the next is predicted."""
        left = self.deadline - time.monotonic()
        previous_batch, previous = last.get(beam, (1, 0.0))
        predicted = 2 * previous * batch / previous_batch  # warm-up and one round
        if predicted > left or left <= 0:
            return [], f"engine time box: about {predicted:.0f} s needed, {left:.0f} s left"
        print(f"case: batch {batch}, beam {beam}", file=sys.stderr)
        try:
            case, seconds = self._case(names, batch, beam)
        except Exception as error:  # e.g. out of memory: recorded, the next case goes on
            return [], f"failed: {type(error).__name__}: {error}"[:2000]
        last[beam] = (batch, seconds)
        return case, None

    def _case(self, names: list[str], batch: int, beam: int) -> tuple[list[dict], float]:
        """Every engine's figures on one case, and the seconds of one round of all of them."""
        ids = _batch(self.ids, batch)
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
        rows = [self._row(name, batch, beam, samples[name], source) for name in names]
        return rows, warm

    def _row(self, name: str, batch: int, beam: int, series: list[dict], source: int) -> dict:
        """One engine's figures on one case, from its rounds' samples."""
        length, config = self.plan.length, self.repository["config"]
        variant = self.engines[name]["spec"]["variant"]
        limit = step_limit(config, batch * beam, length // 2, source, variant, self.machine)
        step = _spread([1000 * s["decode_s"] / length for s in series])
        runs = [s.get("runs_s") for s in series]  # onnxruntime's part; None for PyTorch
        in_runs = None if None in runs else _spread([1000 * r / length for r in runs])
        rates = [s["tokens"] / (s["encoder_s"] + s["decode_s"]) for s in series]
        return {
            "engine": name,
            "batch": batch,
            "beam": beam,
            "length": length,
            "tokens": batch * length,
            "rounds": len(series),
            "tokens_per_s": _spread(rates),
            "ms_per_step": step,
            "runtime_ms_per_step": in_runs,
            "encoder_ms": _spread([1000 * s["encoder_s"] for s in series]),
            "source_positions": source,
            "limit": limit,
            "of_limit": limit["ms"] / step["median"],
        }

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

    lines = [line for line in TEST_SOURCES.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Tokenizer(tokenizer_file).encode_batch(lines[:count])
