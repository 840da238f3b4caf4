"""Decode speed of a Hugging Face Marian model of OPUS-MT's size, three ways side by side: our
ONNX engine over the version export.hf writes from the model's directory, `transformers`' own
`generate` on that directory, and CTranslate2 converted from it by its own converter.

    python -m bench.hf_speed [--batches 1,16] [--length 64] [--threads 2] [--rounds 3]
        [--sentences 16] [--engines NAME,...] [--max-others 0.2] [--workdir DIR [--reuse]]
        [--json PATH] [--markdown PATH] [--quick]

The model is random and built here (nothing is downloaded): OPUS-MT's configuration, 6 + 6
layers, d_model 512, 8 heads, a feed-forward of 2048, swish, scaled embeddings, a vocabulary
of 58,101 (`</s>` 0, `<unk>` 1, `<pad>` 58,100, the decoder's start). It is saved with
`save_pretrained` beside a Marian tokenizer: two SentencePiece models trained here on the
translator's test sentences and a `vocab.json` padded with made-up pieces. Its final logits
bias keeps `</s>` out of reach, so every engine writes exactly `length` tokens a source;
that is checked, and a run whose engines wrote other lengths fails (its ratios compare
nothing). The sources are the same random ids for every engine, 20 to 30 of them and `</s>`,
sorted by length and decoded `batch` at a time in that order, greedy.

Engines (ENGINES): ours fp32 and int8 (OnnxEngine, translate_batches without alignments, as
a server decodes requests that keep none: the lean step where the version ships it) over the
version with its graphs built op by op (export.hf's default), the same over the version with
its graphs traced (`ours-traced-*`: the encoder and the growing step alone), transformers fp32
(`generate`, greedy, `forced_eos_token_id` off so that the last step writes a token like the
others'), CTranslate2 float32 and int8 (converted once in float32, int8 its compute type at
load). Each runs in a process of its own with the same intra-op thread count. One untimed
round, then rounds in which every engine decodes the sources at every batch size, the
engines' order rotating; each case's median seconds. tokens/s is the tokens written over
those seconds, the encoder included; each engine's process's peak resident memory once every
round ran. "as transformers'": the sources whose tokens are
transformers' own. "others' CPUs": how many CPUs processes other than the engine's kept busy
over a case's timed rounds (the machine's busy time less the engine's own, in clock ticks of
10 ms: meaningless for short cases); "stolen CPUs": how many the hypervisor held from this
virtual machine meanwhile (steal time: an engine whose threads sleep and wake between
steps pays it, one whose threads spin does not). On a shared machine a thread that waits
for a busy core stalls every parallel section of the engine's, so a timed decode starts
once others keep at most `--max-others` CPUs busy (or after QUIET_WAIT_S), and one during
which they kept more is run again, up to RETRIES more times (then the quietest is kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from bench.lib.paths import TRANSLATOR_DATA
from bench.lib.reports import table_row

EOS, UNK = 0, 1  # OPUS-MT's ids; `<pad>` is the last id
NO_END = -1e4  # the final logits bias of `</s>`: never the greedy choice
SOURCE_LENGTHS = (20, 30)  # random ids a source, `</s>` not counted
TRAINING_LINES = 300  # of each side of the translator's test split, for the tokenizer
RETRIES = 4  # more tries of a timed decode while other processes keep CPUs busy
QUIET_WAIT_S = 300.0  # the longest wait for a quiet machine before a timed decode


@dataclass(frozen=True)
class MarianSize:
    """A random Marian model's dimensions and its tokenizer's."""

    vocab_size: int  # `<pad>` is the last id
    d_model: int
    layers: int  # encoder layers, and as many decoder layers
    heads: int
    ffn: int  # the feed-forward network's inner width
    pieces: int  # each SentencePiece model's own vocabulary


OPUS_MT = MarianSize(vocab_size=58101, d_model=512, layers=6, heads=8, ffn=2048, pieces=500)
TINY = MarianSize(vocab_size=400, d_model=32, layers=2, heads=4, ffn=64, pieces=120)

ENGINES = {  # name: (kind, variant)
    "ours-fp32": ("onnx", "fp32"),
    "ours-int8": ("onnx", "int8"),
    "ours-traced-fp32": ("onnx-traced", "fp32"),
    "ours-traced-int8": ("onnx-traced", "int8"),
    "transformers-fp32": ("transformers", "fp32"),
    "ct2-float32": ("ct2", "float32"),
    "ct2-int8": ("ct2", "int8"),
}
REFERENCE = "transformers-fp32"  # the engine whose tokens the others are compared with
RATIOS = (  # (faster, slower, the goal's target or None)
    ("ours-fp32", "transformers-fp32", 3.0),
    ("ours-int8", "transformers-fp32", None),
    ("ours-fp32", "ct2-float32", 1.0),
    ("ours-int8", "ct2-int8", 1.0),
    ("ours-fp32", "ours-traced-fp32", None),
    ("ours-int8", "ours-traced-int8", None),
)


# -- the model directory ------------------------------------------------------------------------


def build_model(size: MarianSize, seed: int = 0):
    """A random MarianMTModel of `size` whose `</s>` is never the greedy choice."""
    import torch
    import transformers

    pad = size.vocab_size - 1
    config = transformers.MarianConfig(
        vocab_size=size.vocab_size,
        d_model=size.d_model,
        encoder_layers=size.layers,
        decoder_layers=size.layers,
        encoder_attention_heads=size.heads,
        decoder_attention_heads=size.heads,
        encoder_ffn_dim=size.ffn,
        decoder_ffn_dim=size.ffn,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=512,
        pad_token_id=pad,
        eos_token_id=EOS,
        decoder_start_token_id=pad,
        forced_eos_token_id=EOS,
        bad_words_ids=[[pad]],
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, EOS] = NO_END
    return model


def train_pieces(lines: list[str], prefix: Path, size: int) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
    )


def vocabulary(piece_files: list[Path], size: int) -> dict[str, int]:
    """OPUS-MT's layout: `</s>` 0, `<unk>` 1, every piece of the SentencePiece models, made-up
    pieces up to `size` - 1, then `<pad>`."""
    import sentencepiece as spm

    pieces = {"</s>": EOS, "<unk>": UNK}
    for path in piece_files:
        model = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(model.get_piece_size()):
            pieces.setdefault(model.id_to_piece(i), len(pieces))
    if len(pieces) >= size:
        raise ValueError(f"{len(pieces)} pieces do not fit a vocabulary of {size}")
    for i in range(size - 1 - len(pieces)):
        pieces[f"▁made{i}"] = len(pieces)
    pieces["<pad>"] = len(pieces)
    return pieces


def write_tokenizer(directory: Path, work: Path, size: MarianSize) -> None:
    """source.spm, target.spm, vocab.json and tokenizer_config.json (Spanish to English) as
    transformers' MarianTokenizer saves them; the SentencePiece training's files in `work`."""
    import transformers

    work.mkdir(parents=True, exist_ok=True)
    for side, language in (("source", "es"), ("target", "en")):
        lines = (TRANSLATOR_DATA / f"test.{language}").read_text(encoding="utf-8").splitlines()
        train_pieces(lines[:TRAINING_LINES], work / side, size.pieces)
    files = [work / "source.model", work / "target.model"]
    (work / "vocab.json").write_text(json.dumps(vocabulary(files, size.vocab_size)))
    tokenizer = transformers.MarianTokenizer(
        vocab=str(work / "vocab.json"),
        source_spm=str(files[0]),
        target_spm=str(files[1]),
        source_lang="es",
        target_lang="en",
    )
    tokenizer.save_pretrained(str(directory))


def write_model_directory(workdir: Path, size: MarianSize, seed: int = 0) -> Path:
    """`workdir`/marian, a Hugging Face model directory: the random model (safetensors) and
    its tokenizer."""
    directory = workdir / "marian"
    build_model(size, seed).save_pretrained(str(directory))
    write_tokenizer(directory, workdir / "pieces", size)
    return directory


def convert_ct2(directory: Path, out_dir: Path) -> Path:
    """CTranslate2's own conversion of the model directory, float32."""
    from ctranslate2.converters import TransformersConverter

    return Path(TransformersConverter(str(directory)).convert(str(out_dir), force=True))


def export_ours(directory: Path, repository: Path, method: str = "built") -> Path:
    """The model version (fp32 and int8) export.hf writes from the model directory, its
    graphs made by `method` (built op by op, or traced)."""
    from export.hf.version import export_hf

    return export_hf(directory, repository, "marian", method=method).directory


def random_sources(count: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """`count` sources of random ids (no special token) ending in `</s>`, shortest first."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(SOURCE_LENGTHS[0], SOURCE_LENGTHS[1] + 1, size=count)
    sources = [[*rng.integers(UNK + 1, vocab_size - 1, size=n).tolist(), EOS] for n in lengths]
    return sorted(sources, key=len)


# -- the engines, each in a process of its own --------------------------------------------------


def chunks(sources: list, batch: int) -> list[list]:
    return [sources[i : i + batch] for i in range(0, len(sources), batch)]


class TransformersRunner:
    """`generate` on the model directory: greedy, `length` new tokens, no forced `</s>`."""

    def __init__(self, directory: Path, variant: str, threads: int):
        import torch
        import transformers

        if variant != "fp32":
            raise ValueError(f"transformers runs fp32 here, not {variant}")
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        self.torch = torch
        self.model = transformers.MarianMTModel.from_pretrained(str(directory)).eval()
        self.library = f"transformers {transformers.__version__} (torch {torch.__version__})"

    def decode(self, sources: list[list[int]], batch: int, length: int) -> list[list[int]]:
        pad, outputs = self.model.config.pad_token_id, []
        for chunk in chunks(sources, batch):
            ids = np.full((len(chunk), max(map(len, chunk))), pad, dtype=np.int64)  # (B, S)
            for row, source in enumerate(chunk):
                ids[row, : len(source)] = source
            input_ids = self.torch.from_numpy(ids)
            with self.torch.inference_mode():
                generated = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=(input_ids != pad).long(),
                    num_beams=1,
                    do_sample=False,
                    max_new_tokens=length,
                    forced_eos_token_id=None,
                )  # (B, 1 + length): the start first
            outputs += [[t for t in row[1:].tolist() if t != pad] for row in generated]
        return outputs


class Ct2Runner:
    """A CTranslate2 Translator over the converted model; sources as pieces with `</s>`."""

    def __init__(self, model_dir: Path, directory: Path, variant: str, threads: int):
        import ctranslate2

        self.translator = ctranslate2.Translator(
            str(model_dir),
            device="cpu",
            compute_type=variant,
            intra_threads=threads,
            inter_threads=1,
        )
        ids = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
        self.ids, self.pieces = ids, sorted(ids, key=ids.__getitem__)
        self.library = f"ctranslate2 {ctranslate2.__version__}"

    def decode(self, sources: list[list[int]], batch: int, length: int) -> list[list[int]]:
        outputs = []
        for chunk in chunks(sources, batch):
            results = self.translator.translate_batch(
                [[self.pieces[t] for t in source] for source in chunk],
                beam_size=1,
                max_decoding_length=length,
                min_decoding_length=0,
            )
            outputs += [[self.ids[p] for p in result.hypotheses[0]] for result in results]
        return outputs


class OnnxRunner:
    """Our engine over the exported version, decoded by translate_batches as served."""

    def __init__(self, version_dir: Path, variant: str, threads: int):
        import onnxruntime

        from service.runtime.onnx_engine import OnnxEngine
        from service.runtime.repository import verify

        version = verify(version_dir)
        self.engine = OnnxEngine(version, variant, "cpu", threads)
        self.max_source = int(version.config["max_length"])
        self.library = f"onnxruntime {onnxruntime.__version__}"

    def decode(self, sources: list[list[int]], batch: int, length: int) -> list[list[int]]:
        from service.runtime.decoding import DecodingOptions
        from service.runtime.translation import translate_batches

        options = DecodingOptions(max_length=length, max_length_ratio=0.0)
        without_end = [source[:-1] for source in sources]  # the runtime appends `</s>`
        nbest = translate_batches(  # no alignments: the server's step for requests without
            self.engine, without_end, options, self.max_source, batch, attention=False
        )
        return [hypotheses[0].tokens for hypotheses in nbest]


RUNNERS = {
    "transformers": TransformersRunner,
    "ct2": Ct2Runner,
    "onnx": OnnxRunner,
    "onnx-traced": OnnxRunner,  # over the version with its graphs traced
}
_runner = None  # a worker process's runner


def _start(kind: str, arguments: tuple) -> None:
    global _runner
    _runner = RUNNERS[kind](*arguments)


def _library() -> str:
    return _runner.library


def _peak_memory() -> float:
    """The most resident memory this process has held, in MB (its model, its buffers and
    the interpreter)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(sources: list[list[int]], batch: int, length: int):
    """(seconds, CPU seconds of this process, tokens) of one decode."""
    start, cpu = time.perf_counter(), time.process_time()
    tokens = _runner.decode(sources, batch, length)
    return time.perf_counter() - start, time.process_time() - cpu, tokens


def machine_cpu() -> tuple[float, float]:
    """(CPU seconds every process of the machine ran, CPU seconds its hypervisor held its
    virtual CPUs from it: steal), from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n")[0].split()[1:9]
    user, nice, system, _, _, irq, softirq, steal = map(int, fields)
    ticks = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / ticks, steal / ticks


@dataclass(frozen=True)
class Timing:
    """One timed decode."""

    seconds: float
    others: float  # CPU seconds other processes ran meanwhile
    stolen: float  # CPU seconds the hypervisor held the machine's CPUs meanwhile


class Worker:
    """One runner in a spawned process of its own, one call at a time."""

    def __init__(self, kind: str, *arguments):
        self.pool = ProcessPoolExecutor(1, get_context("spawn"), _start, (kind, arguments))
        self.library = self.pool.submit(_library).result()

    def decode(self, sources, batch: int, length: int) -> tuple[Timing, list[list[int]]]:
        """The timing of one decode of every source, and the tokens written for each. This
        process waits, idle, meanwhile."""
        busy, stolen = machine_cpu()
        seconds, cpu, tokens = self.pool.submit(_timed, sources, batch, length).result()
        after, stolen_after = machine_cpu()
        return Timing(seconds, after - busy - cpu, stolen_after - stolen), tokens

    def peak_memory(self) -> float:
        return self.pool.submit(_peak_memory).result()

    def close(self) -> None:
        self.pool.shutdown()


# -- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    """What the engines load: the model directory, its conversion, our versions (graphs
    built, graphs traced)."""

    directory: Path
    ct2: Path | None
    version: Path | None
    traced: Path | None = None


PREPARED = "prepared.json"  # in the workdir: what prepare() made, from what


def prepare(workdir: Path, size: MarianSize, names: list[str], seed: int) -> Paths:
    """The model directory, and what the chosen engines load converted or exported from it;
    PREPARED records them."""
    directory = write_model_directory(workdir, size, seed)
    kinds = {ENGINES[name][0] for name in names}
    ct2 = convert_ct2(directory, workdir / "ct2") if "ct2" in kinds else None
    ours = export_ours(directory, workdir / "repository") if "onnx" in kinds else None
    traced = None
    if "onnx-traced" in kinds:
        traced = export_ours(directory, workdir / "repository-traced", "traced")
    made = {"model": asdict(size), "seed": seed, "kinds": sorted(kinds)}
    files = {
        "ct2": ct2 and str(ct2),
        "version": ours and str(ours),
        "traced": traced and str(traced),
    }
    (workdir / PREPARED).write_text(json.dumps({**made, **files}))
    return Paths(directory, ct2, ours, traced)


def prepared(workdir: Path, size: MarianSize, names: list[str], seed: int) -> Paths | None:
    """What an earlier prepare() in `workdir` made for the same model and seed, where it made
    what the chosen engines load; else None."""
    try:
        made = json.loads((workdir / PREPARED).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    kinds = {ENGINES[name][0] for name in names}
    if (made["model"], made["seed"]) != (asdict(size), seed) or kinds - set(made["kinds"]):
        return None
    ct2, version, traced = (
        made.get(key) and Path(made[key]) for key in ("ct2", "version", "traced")
    )
    return Paths(workdir / "marian", ct2, version, traced)


def start_worker(name: str, paths: Paths, threads: int) -> Worker:
    kind, variant = ENGINES[name]
    if kind == "ct2":
        return Worker(kind, paths.ct2, paths.directory, variant, threads)
    loaded = {"onnx": paths.version, "onnx-traced": paths.traced}.get(kind, paths.directory)
    return Worker(kind, loaded, variant, threads)


@dataclass(frozen=True)
class Plan:
    """What one run times."""

    batches: tuple[int, ...]
    length: int  # tokens written a source
    rounds: int  # timed rounds, each engine at each batch size once
    warmup: int  # untimed rounds first
    max_others: float | None  # a timed decode is run again while others kept more CPUs busy


def wait_for_quiet(max_others: float, patience: float = QUIET_WAIT_S) -> None:
    """Returns once the machine kept at most `max_others` CPUs busy over a second (every
    engine waits meanwhile), or after `patience` seconds."""
    end = time.monotonic() + patience
    while time.monotonic() < end:
        busy = machine_cpu()[0]
        time.sleep(1.0)
        if machine_cpu()[0] - busy <= max_others:
            return


def quiet_decode(worker: Worker, sources, batch: int, plan: Plan):
    """The first of at most 1 + RETRIES decodes, each once the machine is quiet, during which
    other processes kept at most `plan.max_others` CPUs busy (None: the first at once), else
    the quietest; (its timing, its tokens)."""
    tries = []
    for _ in range(1 + RETRIES):
        if plan.max_others is not None:
            wait_for_quiet(plan.max_others)
        tries.append(worker.decode(sources, batch, plan.length))
        timing = tries[-1][0]
        if plan.max_others is None or timing.others <= plan.max_others * timing.seconds:
            break
    return min(tries, key=lambda t: t[0].others / t[0].seconds)


def measure(workers: dict[str, Worker], sources, plan: Plan):
    """({engine: {batch: [Timing of each timed round]}}, {engine: {batch: tokens}}): every
    engine at every batch size a round, the engines' order rotating."""
    names = list(workers)
    timings = {name: {batch: [] for batch in plan.batches} for name in names}
    tokens: dict[str, dict[int, list]] = {name: {} for name in names}
    for index in range(plan.warmup + plan.rounds):
        shift = index % len(names)
        for batch in plan.batches:
            for name in names[shift:] + names[:shift]:
                if index < plan.warmup:
                    _, tokens[name][batch] = workers[name].decode(sources, batch, plan.length)
                    continue
                timing, tokens[name][batch] = quiet_decode(workers[name], sources, batch, plan)
                timings[name][batch].append(timing)
        print(f"round {index + 1} of {plan.warmup + plan.rounds} done", file=sys.stderr)
    return timings, tokens


def case_figures(timings: list[Timing], tokens: list[list[int]], reference) -> dict:
    """One engine at one batch size: its median, its rate, its outputs' lengths, and how
    many CPUs other processes kept busy and the hypervisor held meanwhile, on average."""
    seconds = [t.seconds for t in timings]
    median = statistics.median(seconds)
    written = sum(map(len, tokens))
    return {
        "seconds": median,
        "rounds_s": seconds,
        "others_cpus": max(sum(t.others for t in timings), 0.0) / sum(seconds),
        "stolen_cpus": sum(t.stolen for t in timings) / sum(seconds),
        "tokens": written,
        "tokens_per_s": written / median,
        "lengths": sorted({len(t) for t in tokens}),
        "identical_to_reference": None
        if reference is None
        else sum(a == b for a, b in zip(tokens, reference, strict=True)),
    }


def ratio_rows(cases: dict, batches) -> list[dict]:
    """Each ratio of RATIOS whose engines ran (tokens/s of the first over the second), at
    every batch size, with its goal."""
    rows = []
    for fast, slow, target in RATIOS:
        if fast not in cases or slow not in cases:
            continue
        for batch in batches:
            ratio = cases[fast][batch]["tokens_per_s"] / cases[slow][batch]["tokens_per_s"]
            met = None if target is None else ratio >= target
            rows.append(
                {
                    "fast": fast,
                    "slow": slow,
                    "batch": batch,
                    "ratio": ratio,
                    "target": target,
                    "met": met,
                }
            )
    return rows


def summary(timings: dict, tokens: dict, batches, length: int) -> dict:
    """Every case's figures, the ratios and goals, and whether the comparison holds: every
    engine wrote exactly `length` tokens for every source."""
    cases = {}
    for name in timings:
        cases[name] = {}
        for batch in batches:
            reference = tokens.get(REFERENCE, {}).get(batch) if name != REFERENCE else None
            cases[name][batch] = case_figures(timings[name][batch], tokens[name][batch], reference)
    lengths = {length_ for c in cases.values() for f in c.values() for length_ in f["lengths"]}
    return {
        "cases": cases,
        "ratios": ratio_rows(cases, batches),
        "same_length": lengths == {length},
    }


def markdown(report: dict) -> str:
    """The cases as a table, then the ratios with their goals."""
    s = report["settings"]
    lines = [
        f"{s['sentences']} sources of {SOURCE_LENGTHS[0]}-{SOURCE_LENGTHS[1]} ids, "
        f"{s['length']} tokens written each, {s['threads']} threads an engine, median of "
        f"{s['rounds']} rounds:",
        "",
        "| engine | library | batch | seconds | tokens/s | as transformers' | others' CPUs "
        "| stolen CPUs |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, by_batch in report["cases"].items():
        for batch, c in by_batch.items():
            same = c["identical_to_reference"]
            same = "-" if same is None else f"{same}/{s['sentences']}"
            cells = (name, report["libraries"][name], batch, f"{c['seconds']:.3f}")
            load = f"{c['others_cpus']:.2f}", f"{c['stolen_cpus']:.2f}"
            lines.append(table_row((*cells, f"{c['tokens_per_s']:.0f}", same, *load)))
    lines += [
        "",
        "| ratio of tokens/s | batch | figure | target | status |",
        "|---|--:|--:|--:|---|",
    ]
    for r in report["ratios"]:
        target = "-" if r["target"] is None else f">= {r['target']:g}"
        status = "-" if r["met"] is None else ("met" if r["met"] else "missed")
        what = f"{r['fast']} / {r['slow']}"
        lines.append(table_row((what, r["batch"], f"{r['ratio']:.2f}", target, status)))
    memory = report.get("peak_memory_mb", {})
    if memory:
        lines += ["", "| engine | peak resident MB |", "|---|--:|"]
        lines += [table_row((name, f"{mb:.0f}")) for name, mb in memory.items()]
    return "\n".join(lines) + "\n"


def run(args, workdir: Path) -> dict:
    size = TINY if args.tiny else OPUS_MT
    names = args.engines.split(",")
    paths = args.reuse and prepared(workdir, size, names, args.seed)
    paths = paths or prepare(workdir, size, names, args.seed)
    sources = random_sources(args.sentences, size.vocab_size, args.seed)
    workers = {name: start_worker(name, paths, args.threads) for name in names}
    plan = Plan(tuple(args.batches), args.length, args.rounds, args.warmup, args.max_others)
    try:
        timings, tokens = measure(workers, sources, plan)
        memory = {name: worker.peak_memory() for name, worker in workers.items()}
    finally:
        for worker in workers.values():
            worker.close()
    settings = {**asdict(plan), "threads": args.threads, "seed": args.seed}
    return {
        "settings": {**settings, "sentences": len(sources)},
        "model": asdict(size),
        "libraries": {name: worker.library for name, worker in workers.items()},
        "peak_memory_mb": memory,
        **summary(timings, tokens, args.batches, args.length),
    }


def arguments(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    parser.add_argument("--length", type=int, default=64, help="tokens written a source")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads an engine")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-others",
        type=float,
        default=0.2,
        help=f"CPUs other processes may keep busy during a timed decode (else up to {RETRIES} "
        "more tries)",
    )
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--workdir", type=Path, help="keep the model and its conversions here")
    parser.add_argument("--reuse", action="store_true", help="the workdir's, if made alike")
    parser.add_argument("--tiny", action="store_true", help="a tiny model instead of OPUS-MT's")
    parser.add_argument("--quick", action="store_true", help="--tiny, 4 tokens, 1 round, no retry")
    parser.add_argument("--json", type=Path, help="the figures as JSON")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.tiny, args.length, args.rounds, args.sentences = True, 4, 1, 4
        args.max_others = None  # its decodes are too short to measure others' share
        args.batches = "1,2"
    args.batches = [int(b) for b in args.batches.split(",")]
    unknown = sorted(set(args.engines.split(",")) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        report = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="hf_speed_") as workdir:
            report = run(args, Path(workdir))
    text = markdown(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    if not report["same_length"]:
        lengths = {n: [c["lengths"] for c in by.values()] for n, by in report["cases"].items()}
        print(f"void: not every engine wrote {args.length} tokens a source: {lengths}")
        return 1
    return 0 if all(math.isfinite(r["ratio"]) for r in report["ratios"]) else 1


if __name__ == "__main__":
    sys.exit(main())
