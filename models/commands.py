"""The translator's torch-side commands of `attnserve`: data, train, evaluate, and the decoding of
`translate --engine torch`."""

from __future__ import annotations

import json
import time
from argparse import Namespace
from dataclasses import asdict, replace
from pathlib import Path

from models.checkpoint import load_checkpoint
from models.config import PRESETS
from models.corpus import build_translator_data, read_split
from models.evaluate import apertium_translate, corpus_scores
from models.modern import PART_NAMES, TEST_PARTS
from models.reference import TorchEngine
from service.paths import file_name
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.tokenizer import Tokenizer
from service.runtime.translation import translate_documents, translate_texts


def data(args: Namespace) -> int:
    if getattr(args, "modern", None):
        from models.modern import build_modern_data

        counts = build_modern_data(args.out, args.modern)
        print(json.dumps({"out": str(args.modern), **counts}, indent=2))
        return 0
    if getattr(args, "catalogs", False):
        from models.catalogs import build_catalog_data

        counts = build_catalog_data(args.out)
        print(json.dumps({"out": str(args.out), **counts}, indent=2))
        return 0
    stats = build_translator_data(args.out)
    print(json.dumps({"out": str(args.out), **asdict(stats)}, indent=2))
    return 0


def train(args: Namespace) -> int:
    from models.train import TrainOptions
    from models.train import train as run_training

    model = PRESETS[args.preset]
    if args.vocab_size:
        model = replace(model, vocab_size=args.vocab_size)
    options = TrainOptions(
        data_dir=args.data,
        run_dir=args.run_dir,
        out_dir=args.out,
        model=model,
        vocab_size=model.vocab_size,
        max_tokens=args.max_tokens,
        warmup_steps=args.warmup_steps,
        lr_scale=args.lr_scale,
        max_minutes=args.max_minutes,
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        checkpoint_every=args.checkpoint_every,
        dev_sentences=args.dev_sentences,
        threads=args.threads,
        init_from=args.init_from,
        average=args.average,
        snapshot_every=args.snapshot_every,
    )
    shipped = run_training(options)
    if shipped is not None:
        print(f"checkpoint written to {shipped}")
    return 0


def decoding_options(args: Namespace, max_length_limit: int, n_best: int = 1) -> DecodingOptions:
    """The command line's decoding options, checked; an unset max length is the model's."""
    options = DecodingOptions(
        beam_size=args.beam_size,
        max_length=max_length_limit if args.max_length is None else args.max_length,
        length_penalty=args.length_penalty,
        num_hypotheses=n_best,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        min_length=args.min_length,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
        repetition_penalty=args.repetition_penalty,
        max_length_ratio=args.max_length_ratio,
    )
    options.validate(max_length_limit)
    return options


def _splits(args: Namespace) -> list[str]:
    """The splits to score: one, or with `all` every test part the data directory has."""
    if args.split != "all":
        return [args.split]
    present = [s for s in TEST_PARTS if (Path(args.data) / f"{s}.es").exists()]
    if not present:
        raise SystemExit(f"error: no test part in {args.data}")
    return present


def _score(system: str, spanish_by_split: dict, english_by_split: dict, translate) -> dict:
    parts = {}
    for split, spanish in spanish_by_split.items():
        start = time.perf_counter()
        scores = corpus_scores(translate(spanish), english_by_split[split])
        parts[PART_NAMES.get(split, split)] = scores | {
            "seconds": round(time.perf_counter() - start, 1)
        }
    return {"system": system, "parts": parts}


def _load_translator(checkpoint: Path):
    """A shipped checkpoint directory, or a training run's weights (`.pt`, models.run_state);
    UnreadableCheckpoint where it holds no checkpoint."""
    if checkpoint.suffix == ".pt":
        from models.run_state import load_run_weights

        return load_run_weights(checkpoint)
    return load_checkpoint(checkpoint)


def evaluate(args: Namespace) -> int:
    spanish, english = {}, {}
    for split in _splits(args):
        spanish[split], english[split] = read_split(args.data, split)
        if args.limit:
            spanish[split] = spanish[split][: args.limit]
            english[split] = english[split][: args.limit]
    start = time.perf_counter()
    apertium = ("apertium spa-eng", {"command": "apertium -u spa-eng"}, apertium_translate)
    if args.baseline == "apertium":
        system, settings, translate = apertium
    else:
        model, tokenizer = _load_translator(args.checkpoint)
        options = decoding_options(args, model.config.max_length)
        name = file_name(args.checkpoint)
        system, settings = f"attnserve translator ({name})", asdict(options)
        settings["sentence_splitting"] = args.sentence_splitting

        def translate(texts: list[str]) -> list[str]:
            engine, length = TorchEngine(model), model.config.max_length
            return translate_documents(
                engine, tokenizer, texts, options, length, args.sentence_splitting
            )

    scored = _score(system, spanish, english, translate)
    report = {
        **scored,
        "engine": "apertium" if args.baseline else "torch",
        "split": args.split,
        "decoding": settings,
    }
    if args.versus == "apertium":
        report["versus"] = _score(apertium[0], spanish, english, apertium[2])
    report["seconds"] = round(time.perf_counter() - start, 1)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    rows = [(report["system"], report["parts"])]
    if "versus" in report:
        rows.append((report["versus"]["system"], report["versus"]["parts"]))
    for name, parts in rows:
        for part, scores in parts.items():
            print(
                f"{name} {part}: BLEU {scores['bleu']} chrF {scores['chrf']} "
                f"({scores['sentences']} sentences)"
            )
    signatures = next(iter(report["parts"].values()))
    print(f"BLEU {signatures['bleu_signature']}\nchrF {signatures['chrf_signature']}")
    return 0


def translate(args: Namespace, texts: list[str]) -> tuple[Tokenizer, list[list[Hypothesis]]]:
    """The tokenizer and every text's n-best hypotheses by the checkpoint `args.checkpoint`
    (each text decoded whole), as `attnserve translate --engine torch` shows them."""
    model, tokenizer = _load_translator(args.checkpoint)
    options = decoding_options(args, model.config.max_length, n_best=args.n_best)
    engine, length = TorchEngine(model), model.config.max_length
    return tokenizer, translate_texts(engine, tokenizer, texts, options, length)
