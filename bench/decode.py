"""Decode benchmark: PyTorch eager, onnxruntime and CTranslate2 on the same weights and inputs.

    python -m bench.decode --json [--quick] [--model translator|captioner|both] [--rounds N]
        [--lengths 16,32] [--batches 1,16] [--caption-batches 1,16]
        [--engines onnx-fp32,ct2-float32] [--repository VERSION_DIR]
        [--captioner-repository VERSION_DIR] [--markdown FILE]

The checkpoint is exported (unless --repository is a version made from it) and converted to
CTranslate2 in a process of its own; onnx-fp32-built and onnx-int8-built run graphs written op
by op (export.builder) from the same checkpoint, onnx-int8-built-per-tensor the same graphs
quantised with one int8 scale per weight instead of one per output channel (onnxruntime 1.32
fuses either kind into DynamicQuantizeMatMul at load), the others the traced export. The
built engines decode as the server does: the lean step (no cross-attention output), and for
int8 its one-row form at batch 1, all with the cache written in place;
onnx-fp32-built-full-step and onnx-int8-built-full-step run the same versions with the full
step every time, as served before those graphs, and onnx-fp32-built-growing and
onnx-int8-built-growing with the cache growing (the past concatenated every step). Each
engine then runs in a spawned process with one compute thread (onnx-fp32-2threads, run on the
greedy cases of the middle length, has two): it loads once, decodes the sentences greedily
(parity with PyTorch), then runs warm-up and timed rounds in which every engine runs the same
case in turn; torch-uncached runs batch 1 only by default. A case (batch, beam, length) decodes
the first `batch` sentences of --sources to exactly `length` tokens, `</s>` suppressed.
tokens/s counts batch × length tokens per second of the whole call; ms per step is the time
after the encoder over `length`. CTranslate2 has no encoder-only call: its encoder time is a
length-1 translation less one step. This process never imports torch, so the RSS high-water
mark of a worker (ru_maxrss, which starts from its parent's) is the engine's own.

The captioner (--model captioner or both, after the translator) runs the same way: its
checkpoint exported (unless --captioner-repository is a version made from it), then
torch-cached (PyTorch eager, the LSTM step with its state carried), onnx-fp32 and onnx-int8
(traced and built), one compute thread each, greedy parity with PyTorch first, then warm-up and
timed rounds. A case (batch, beam) captions the first `batch` images of the test split of
--captioner-data, every caption to its natural end (`</s>` is not suppressed; at most the
model's max_length tokens, `</s>` included), so every engine decodes as the server does and a
caption costs what it costs. captions/s counts the batch per second of the whole call (the
conversion to pixels and the encoder included); ms per step is the time after the encoder over
the steps taken."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from bench import machine
from bench.engines import (
    CAPTION_ENGINES,
    ENGINES,
    FULL_STEP,
    GROWING,
    PER_TENSOR,
    THREAD_CHECK,
    Worker,
    graphs_of,
    stdout_to_stderr,
)
from bench.lib.decode_markdown import markdown
from bench.lib.paths import CAPTIONER_DATA, TEST_SOURCES
from models.caption_data import read_scenes
from models.config import CaptionerConfig, TransformerConfig
from models.shipped import SHIPPED_CAPTIONER, SHIPPED_TRANSLATOR
from service.runtime.repository import sha256, verify
from service.runtime.tokenizer import Tokenizer

MODELS = ("translator", "captioner", "both")
# the served engines (graphs built op by op) over CTranslate2's, by (ours, at the smallest
# batch): at least this many tokens/s, geometric mean over beams and lengths
BUILT_OVER_CT2 = {"onnx-fp32": {True: 1.2, False: 1.0}, "onnx-int8": {True: 1.0, False: 1.0}}
INT8_OVER_FP32 = 1.5  # our int8 over our fp32, at the largest batch
# a batch-1 greedy step over the time to read its weights once at the measured copy bandwidth
BOUND_TARGETS = {"onnx-fp32-built": 1.3, "onnx-int8-built": 2.0, "onnx-fp32": None}
WEIGHT_BYTES = {"fp32": 4, "float32": 4, "int8": 1}
BEAMS = (1, 4)
FULL = {
    "rounds": 5,
    "warmup": 1,
    "lengths": [16, 32, 64, 128, 256],
    "batches": [1, 16],
    "caption_batches": [1, 16],
    "caption_rounds": 40,  # a caption takes milliseconds: more rounds against a noisy host
}
QUICK = {
    "rounds": 1,
    "warmup": 1,
    "lengths": [4, 8],
    "batches": [1, 2],
    "caption_batches": [1, 2],
    "caption_rounds": 1,
}


def _prepare(
    model: str,
    checkpoint: str,
    repository: str | None,
    workdir: str,
    ct2: list,
    methods: list[str],
    source,
):
    """Exports the checkpoint of `model` (translator, captioner) for the onnx engines, once per
    way of making the graphs in `methods` (traced, built), unless `repository` is a traced
    version made from it; converts it to the CTranslate2 variants `ct2`. Runs in a process of
    its own."""
    stdout_to_stderr()
    setup = {"model": model, "checkpoint": checkpoint, "repositories": {}, "ct2": {}}
    if repository is not None:
        recorded = verify(Path(repository)).manifest.get("source", {}).get("sha256")
        if recorded not in (None, source["sha256"]):
            raise ValueError(f"{repository} was not exported from {checkpoint}")
        setup["repositories"]["traced"] = repository
    for method in methods:
        if method in setup["repositories"]:
            continue
        from export.repository import write_version
        from models.checkpoint import load_checkpoint

        loaded, tokenizer = load_checkpoint(Path(checkpoint))
        directory = Path(workdir) / "repository" / method / model / "1"
        graphs, scales, variants = "built", "per-tensor", ("int8",)
        if method != PER_TENSOR:
            graphs, scales, variants = method, "per-channel", ("fp32", "int8")
        write_version(
            loaded, tokenizer.model_file, directory, model, "1", variants, source, graphs, scales
        )
        setup["repositories"][method] = str(directory)
    if ct2:
        from bench.ctranslate2_convert import convert

        for variant in ct2:
            setup["ct2"][variant] = str(convert(Path(checkpoint), Path(workdir) / variant, variant))
    return setup


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    def listed(kind):
        return lambda text: [kind(item) for item in text.split(",")]

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="batches 1,2, lengths 4,8, 1 round")
    parser.add_argument("--model", choices=MODELS, default="both", help="default: both")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--warmup", type=int, help="untimed rounds first")
    parser.add_argument("--lengths", type=listed(int), help="output tokens, e.g. 16,32,64")
    parser.add_argument("--batches", type=listed(int), help="sentences per call, e.g. 1,16")
    parser.add_argument(
        "--engines", type=listed(str), default=list(ENGINES), help=",".join(ENGINES)
    )
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED_TRANSLATOR)
    parser.add_argument("--repository", type=Path, help="a model version exported from it")
    parser.add_argument("--workdir", type=Path, help="keep exports here (default: temporary)")
    parser.add_argument("--sources", type=Path, default=TEST_SOURCES, help="one sentence a line")
    parser.add_argument("--uncached-max-batch", type=int, default=1)
    parser.add_argument("--caption-batches", type=listed(int), help="images per call, e.g. 1,16")
    parser.add_argument("--caption-rounds", type=int, help="timed rounds of the captioner")
    parser.add_argument("--captioner-checkpoint", type=Path, default=SHIPPED_CAPTIONER)
    parser.add_argument("--captioner-repository", type=Path, help="a version exported from it")
    parser.add_argument(
        "--captioner-data", type=Path, default=CAPTIONER_DATA, help="its test split's images"
    )
    parser.add_argument("--markdown", type=Path, help="write the results as Markdown")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        setattr(args, key, value if getattr(args, key) is None else getattr(args, key))
    if set(args.engines) - set(ENGINES) or min(args.lengths) < 2:
        parser.error(f"engines are some of {list(ENGINES)}; lengths are at least 2")
    args.engines = [name for name in ENGINES if name in args.engines]
    return args


class Translation:
    """The translator's cases (batch, beam, length): the first `batch` sentences, each decoded
    to exactly `length` tokens."""

    unit = "sentences"

    def __init__(self, args, inputs: tuple[list, list]):
        self.args, self.inputs = args, inputs
        self.cases = [(b, k, n) for b in args.batches for k in BEAMS for n in args.lengths]

    def runs(self, name: str, case: tuple[int, int, int]) -> bool:
        batch, beam, length = case
        if name == "torch-uncached":
            return batch <= self.args.uncached_max_batch
        middle = self.args.lengths[len(self.args.lengths) // 2]
        return name != THREAD_CHECK or (beam == 1 and length == middle)

    def sample(self, worker: Worker, name: str, case: tuple[int, int, int]) -> dict:
        (batch, beam, length), (ids, pieces) = case, self.inputs
        sample = worker.call("time", ids[:batch], pieces[:batch], beam, length)
        if sample["tokens"] != batch * length:
            raise RuntimeError(f"{name}: {sample['tokens']} tokens, not {batch * length}")
        return sample

    def greedy(self, worker: Worker) -> list[list[int]]:
        return worker.call("greedy", *self.inputs, max(self.args.lengths))


class Captioning:
    """The captioner's cases (batch, beam, max_length): the first `batch` images, every
    caption decoded to its natural end."""

    unit = "images"

    def __init__(self, args, images, max_length: int):
        self.images, self.max_length = images, max_length
        self.cases = [(b, k, max_length) for b in args.caption_batches for k in BEAMS]

    def runs(self, name: str, case: tuple[int, int, int]) -> bool:
        return True

    def sample(self, worker: Worker, name: str, case: tuple[int, int, int]) -> dict:
        batch, beam, length = case
        sample = worker.call("time", self.images[:batch], None, beam, length, False)
        if sample["outputs"] != batch or not 0 < sample["tokens"] <= batch * length:
            raise RuntimeError(f"{name}: {sample['outputs']} captions of {sample['tokens']} tokens")
        return sample

    def greedy(self, worker: Worker) -> list[list[int]]:
        return worker.call("greedy", self.images, None, self.max_length)


def _rounds(workers: dict, rounds: range, task) -> dict:
    """{(engine, case): samples}; in round r every engine runs each case in turn, from the r-th.
    A case no engine runs (no caption engine named, torch-uncached alone past its batch) has
    no samples."""
    samples = defaultdict(list)
    for r in rounds:
        print("warm-up" if r < 0 else f"round {r + 1}", file=sys.stderr)
        for case in task.cases:
            names = [name for name in workers if task.runs(name, case)]
            if not names:
                continue
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name, case].append(task.sample(workers[name], name, case))
    return samples


def _parity(workers: dict, task) -> dict:
    """How many greedy outputs are identical to PyTorch's (torch-cached), per engine."""
    if "torch-cached" not in workers:
        return {}
    reference = task.greedy(workers["torch-cached"])
    parity = {}
    for name in [n for n in workers if n not in ("torch-cached", "torch-uncached", THREAD_CHECK)]:
        tokens = task.greedy(workers[name])
        identical = sum(a == b for a, b in zip(tokens, reference, strict=True))
        parity[name] = {"identical": identical, task.unit: len(reference)}
    return parity


def _spreads(values: dict[str, list[float]]) -> dict:
    return {
        key: {"median": statistics.median(series), "min": min(series), "max": max(series)}
        for key, series in values.items()
    }


def _case(name: str, case: tuple, samples: list, config: dict, limits: dict, ids: list) -> dict:
    """Medians and spreads of one engine on one case, and the share of the machine's bound."""
    batch, beam, length = case
    source = max(len(s) for s in ids[:batch]) + 1  # padded, `</s>` included
    weight_bytes = WEIGHT_BYTES[ENGINES[name][1]]
    bound = machine.step_bound_seconds(config, batch * beam, length, source, weight_bytes, limits)
    values = {
        "tokens_per_s": [s["tokens"] / (s["encoder_s"] + s["decode_s"]) for s in samples],
        "ms_per_step": [1000 * s["decode_s"] / length for s in samples],
        "encoder_ms": [1000 * s["encoder_s"] for s in samples],
        "decode_ms": [1000 * s["decode_s"] for s in samples],
    }
    result = {"batch": batch, "beam": beam, "length": length, "tokens": samples[0]["tokens"]}
    result |= _spreads(values)
    result["bound_ms_per_step"] = 1000 * bound
    result["bound_fraction"] = 1000 * bound / result["ms_per_step"]["median"]
    return result


def _caption_case(case: tuple, samples: list) -> dict:
    """Medians and spreads of one captioner engine on one case (batch, beam, max_length)."""
    batch, beam, max_length = case
    seconds = [s["encoder_s"] + s["decode_s"] for s in samples]
    values = {
        "captions_per_s": [batch / t for t in seconds],
        "ms_per_caption": [1000 * t / batch for t in seconds],
        "ms_per_step": [1000 * s["decode_s"] / s["steps"] for s in samples],
        "encoder_ms": [1000 * s["encoder_s"] for s in samples],
        "decode_ms": [1000 * s["decode_s"] for s in samples],
    }
    result = {"batch": batch, "beam": beam, "max_length": max_length, "captions": batch}
    result |= {"tokens": samples[0]["tokens"], "steps": samples[0]["steps"]}
    return result | _spreads(values)


def _speedup(
    table: dict, fast: str, slow: str, cases: list, key: str = "tokens_per_s"
) -> float | None:
    """Geometric mean over `cases` of the median `key` of `fast` over `slow`."""
    pairs = [(table.get((fast, *c)), table.get((slow, *c))) for c in cases]
    pairs = [(a[key]["median"], b[key]["median"]) for a, b in pairs if a and b]
    return math.exp(statistics.fmean(math.log(a / b) for a, b in pairs)) if pairs else None


def _growth(table: dict, name: str, batch: int, long: int, short: int) -> float | None:
    """Greedy decode time (encoder excluded) of `long` tokens over that of `short` tokens."""
    times = [table.get((name, batch, 1, n), {}).get("decode_ms") for n in (long, short)]
    return times[0]["median"] / times[1]["median"] if all(times) else None


def _ratios(engines: dict, args) -> list[tuple]:
    """(what, ratio, compare, target) of this run; those with a target are goals."""
    table = {
        (n, c["batch"], c["beam"], c["length"]): c for n in engines for c in engines[n]["cases"]
    }
    small, large, lengths = min(args.batches), max(args.batches), args.lengths
    greedy = [(small, 1, n) for n in lengths]
    speedup = _speedup(table, "onnx-fp32", "torch-cached", greedy)
    rows = [(f"onnx-fp32 / torch-cached tokens/s, batch {small} greedy", speedup, ">=", 3.0)]
    speedup = _speedup(table, "onnx-fp32-built", "torch-cached", greedy)
    rows.append(
        (f"onnx-fp32-built / torch-cached tokens/s, batch {small} greedy", speedup, ">=", 4.0)
    )
    for batch in sorted({small, large}):
        every = [(batch, beam, n) for beam in BEAMS for n in lengths]
        for ours, theirs in (("onnx-fp32", "ct2-float32"), ("onnx-int8", "ct2-int8")):
            speedup = _speedup(table, ours, theirs, every)  # traced: reported, not served
            rows.append((f"{ours} / {theirs} tokens/s, batch {batch}", speedup, ">=", None))
            speedup = _speedup(table, f"{ours}-built", theirs, every)
            text = f"{ours}-built / {theirs} tokens/s, batch {batch}"
            rows.append((text, speedup, ">=", BUILT_OVER_CT2[ours][batch == small]))
        speedup = _speedup(table, "onnx-int8-built", "onnx-fp32-built", every)
        text = f"onnx-int8-built / onnx-fp32-built tokens/s, batch {batch}"
        rows.append((text, speedup, ">=", INT8_OVER_FP32 if batch == large else None))
        speedup = _speedup(table, "onnx-int8-built-per-tensor", "ct2-int8", every)
        rows.append(
            (f"onnx-int8-built-per-tensor / ct2-int8 tokens/s, batch {batch}", speedup, ">=", None)
        )
        speedup = _speedup(table, "onnx-int8-built-per-tensor", "onnx-int8-built", every)
        rows.append(
            (
                f"onnx-int8-built-per-tensor / onnx-int8-built tokens/s, batch {batch}",
                speedup,
                ">=",
                None,
            )
        )
        speedup = _speedup(table, "onnx-fp32-built", "onnx-fp32", every)
        rows.append((f"onnx-fp32-built / onnx-fp32 tokens/s, batch {batch}", speedup, ">=", None))
        for variant in ("fp32", "int8"):  # the lean step (and int8's one-row form) at work,
            ours = f"onnx-{variant}-built"  # and the cache written in place
            for other in (FULL_STEP, GROWING):
                speedup = _speedup(table, ours, ours + other, every)
                rows.append(
                    (f"{ours} / {ours}{other} tokens/s, batch {batch}", speedup, ">=", None)
                )
    short = 32 if 32 in lengths else min(lengths)
    long = 256 if 256 in lengths else max(lengths)
    for name in ("onnx-fp32", "torch-cached", "torch-uncached"):
        limit = None if name == "torch-uncached" else 9.0 * long / short / 8  # 9x for 8x tokens
        growth = _growth(table, name, small, long, short)
        rows.append(
            (f"{name} decode ms {long} / {short} tokens, batch {small} greedy", growth, "<=", limit)
        )
    for name, target in BOUND_TARGETS.items():  # the roofline: ms/step over the bound
        cases = [table.get((name, small, 1, n)) for n in lengths]
        over = [c["ms_per_step"]["median"] / c["bound_ms_per_step"] for c in cases if c]
        text = f"{name} ms/step over the weight-read bound, batch {small} greedy (median)"
        rows.append((text, statistics.median(over) if over else None, "<=", target))
    middle = lengths[len(lengths) // 2]
    for batch in args.batches:
        speedup = _speedup(table, THREAD_CHECK, "onnx-fp32", [(batch, 1, middle)])
        text = f"{THREAD_CHECK} / onnx-fp32 tokens/s, batch {batch} greedy {middle} tokens"
        rows.append((text, speedup, ">=", None))
    return rows


def _caption_ratios(engines: dict, args, max_length: int) -> list[tuple]:
    """(what, ratio, compare, target) of the captioner; per caption against PyTorch eager."""
    table = {
        (n, c["batch"], c["beam"], c["max_length"]): c for n in engines for c in engines[n]["cases"]
    }
    small, rows = min(args.caption_batches), []
    for batch in sorted(set(args.caption_batches)):
        for beam in BEAMS:
            way = "greedy" if beam == 1 else f"beam {beam}"
            for ours in ("onnx-fp32", "onnx-int8", "onnx-fp32-built", "onnx-int8-built"):
                case = [(batch, beam, max_length)]
                speedup = _speedup(table, ours, "torch-cached", case, "captions_per_s")
                target = 3.0 if ours == "onnx-fp32" and batch == small else None
                text = f"captioner {ours} / torch-cached captions/s, batch {batch} {way}"
                rows.append((text, speedup, ">=", target))
    return rows


def _goals(rows: list[tuple]) -> list[dict]:
    goals = []
    for text, ratio, compare, target in rows:
        if ratio is not None and target is not None:
            met = ratio <= target if compare == "<=" else ratio >= target
            goals.append(dict(goal=text, ratio=ratio, compare=compare, target=target, met=met))
    return goals


def _inputs(args, config: dict) -> tuple[list, list]:
    """Token ids and pieces (no `</s>`) of the first max(batches) sentences of --sources."""
    tokenizer = Tokenizer(args.checkpoint / "tokenizer.model")
    text = args.sources.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()][: max(args.batches)]
    if len(lines) < max(args.batches):
        raise SystemExit(f"{args.sources}: {len(lines)} sentences, {max(args.batches)} needed")
    ids = [s[: config["max_length"] - 1] for s in tokenizer.encode_batch(lines)]
    return ids, [tokenizer.pieces(s) for s in ids]


def _images(args) -> np.ndarray:
    """The first max(caption batches) images (N, H, W, 3) uint8 of the captioner's test split."""
    _, images = read_scenes(args.captioner_data, "test")
    count = max(args.caption_batches)
    if len(images) < count:
        raise SystemExit(f"{args.captioner_data}: {len(images)} test images, {count} needed")
    return np.ascontiguousarray(images[:count])


def _measure(args, setup: dict, names: list[str], task, rounds: int) -> tuple[dict, dict]:
    """Per engine its settings, peak RSS and samples per case; greedy parity."""
    context, workers = get_context("spawn"), {}
    try:
        for name in names:
            print(f"loading {name}", file=sys.stderr)
            workers[name] = Worker(context, name, setup)
        parity = _parity(workers, task)
        _rounds(workers, range(-args.warmup, 0), task)
        samples = _rounds(workers, range(rounds), task)
        memory = {name: worker.call("peak_rss_mb") for name, worker in workers.items()}
    finally:
        for worker in workers.values():
            worker.pool.shutdown(cancel_futures=True)
    engines = {}
    for name in names:
        engines[name] = dict(zip(("kind", "variant", "threads"), ENGINES[name], strict=True))
        engines[name] |= {"library": workers[name].library, "peak_rss_mb": memory[name]}
        engines[name]["cases"] = [(c, samples[name, c]) for c in task.cases if samples[name, c]]
    return engines, parity


def _setup(model: str, checkpoint: Path, repository, workdir: Path, ct2: list, methods: list):
    """(setup of the workers, the weights' sha256): the checkpoint exported and converted in a
    process of its own."""
    weights = sha256(checkpoint / "model.safetensors")
    source = {"checkpoint": str(checkpoint), "sha256": weights}
    prepare = (model, str(checkpoint), repository and str(repository), str(workdir))
    with ProcessPoolExecutor(1, get_context("spawn")) as pool:
        setup = pool.submit(_prepare, *prepare, ct2, methods, source).result()
    return setup, weights


def _methods(names: list[str]) -> list[str]:
    """The ways of making graphs that the onnx engines among `names` need."""
    return sorted({graphs_of(name) for name in names if ENGINES[name][0] == "onnx"})


def _translator(args, limits: dict, workdir: Path) -> dict:
    """The translator's part of the report."""
    config = TransformerConfig.load(args.checkpoint / "config.json").to_dict()
    inputs = _inputs(args, config)
    ct2 = sorted({ENGINES[name][1] for name in args.engines if ENGINES[name][0] == "ct2"})
    methods = _methods(args.engines)
    setup, weights = _setup("translator", args.checkpoint, args.repository, workdir, ct2, methods)
    engines, parity = _measure(args, setup, args.engines, Translation(args, inputs), args.rounds)
    for name, engine in engines.items():
        engine["cases"] = [_case(name, c, s, config, limits, inputs[0]) for c, s in engine["cases"]]
    rows = _ratios(engines, args)
    ratios, goals = {text: ratio for text, ratio, _, _ in rows}, _goals(rows)
    settings = {k: getattr(args, k) for k in ("rounds", "warmup", "lengths", "batches", "engines")}
    settings |= {"beams": list(BEAMS), "sentences": len(inputs[0]), "sources": str(args.sources)}
    settings |= {"checkpoint": str(args.checkpoint), "weights_sha256": weights}
    settings["repository"] = str(args.repository or "exported from the checkpoint")
    settings["uncached_max_batch"] = args.uncached_max_batch
    model = {"config": config, **machine.model_summary(config, len(inputs[0][0]) + 1)}
    part = {"settings": settings, "model": model, "parity": parity}
    return part | {"engines": engines, "ratios": ratios, "goals": goals}


def _captioner(args, workdir: Path) -> dict:
    """The captioner's part of the report."""
    config = CaptionerConfig.load(args.captioner_checkpoint / "config.json")
    images = _images(args)
    names = [name for name in CAPTION_ENGINES if name in args.engines]
    checkpoint, repository = args.captioner_checkpoint, args.captioner_repository
    setup, weights = _setup("captioner", checkpoint, repository, workdir, [], _methods(names))
    task = Captioning(args, images, config.max_length)
    engines, parity = _measure(args, setup, names, task, args.caption_rounds)
    for engine in engines.values():
        engine["cases"] = [_caption_case(c, s) for c, s in engine["cases"]]
    rows = _caption_ratios(engines, args, config.max_length)
    settings = {"rounds": args.caption_rounds, "warmup": args.warmup}
    settings["batches"] = args.caption_batches
    settings |= {"beams": list(BEAMS), "engines": names, "images": len(images)}
    settings |= {"data": str(args.captioner_data), "split": "test"}
    settings |= {"max_length": config.max_length, "length": "natural end, `</s>` kept"}
    settings |= {"checkpoint": str(checkpoint), "weights_sha256": weights}
    settings["repository"] = str(repository or "exported from the checkpoint")
    model = {"config": config.to_dict(), "grid_locations": config.grid**2}
    part = {"settings": settings, "model": model, "parity": parity, "engines": engines}
    return part | {"ratios": {text: ratio for text, ratio, _, _ in rows}, "goals": _goals(rows)}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    os.environ.update(dict.fromkeys(machine.THREAD_VARIABLES, "1"))  # for every child process
    print("measuring the machine", file=sys.stderr)
    report = {"machine": machine.measure_in_subprocess(args.quick)}
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if args.model in ("translator", "both"):
            report |= _translator(args, report["machine"], workdir)
        if args.model in ("captioner", "both"):
            print("captioner", file=sys.stderr)
            report["captioner"] = _captioner(args, workdir)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(report), encoding="utf-8")
    print(json.dumps(report, indent=2) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
