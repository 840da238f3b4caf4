"""The captioner's torch-side commands of `attnserve`: data, train, evaluate, and the decoding of
`caption --engine torch`."""

from __future__ import annotations

import json
import time
from argparse import Namespace
from dataclasses import asdict, replace

import numpy as np

from models.caption_data import SPLITS, DataOptions, build_captioner_data
from models.commands import decoding_options
from models.config import CAPTIONER_PRESETS
from service.paths import file_name
from service.runtime.decoding import Hypothesis
from service.runtime.tokenizer import Tokenizer


def data(args: Namespace) -> int:
    options = DataOptions(
        train=args.train_scenes,
        test_per_part=args.test_scenes,
        families=args.families,
        styles=args.styles,
    )
    meta = build_captioner_data(args.out, options)
    print(json.dumps({"out": str(args.out), **meta}, indent=2))
    return 0


def train(args: Namespace) -> int:
    from models.caption_train import CaptionTrainOptions, train_captioner

    options = CaptionTrainOptions(
        data_dir=args.data,
        run_dir=args.run_dir,
        out_dir=args.out,
        model=CAPTIONER_PRESETS[args.preset],
        batch_size=args.batch_size,
        max_minutes=args.max_minutes,
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        decay_steps=args.decay_steps,
        checkpoint_every=args.checkpoint_every,
        evaluate_every=args.evaluate_every,
        threads=args.threads,
        leg_minutes=args.leg_minutes,
        rand_conv=args.rand_conv,
        mixstyle=args.mixstyle,
    )
    if args.vocab_size:
        options.model = replace(options.model, vocab_size=args.vocab_size)
    shipped = train_captioner(options)
    if shipped is None:
        print(f"leg done: {args.run_dir} holds the run; the same command goes on")
    else:
        print(f"checkpoint written to {shipped}")
    return 0


def evaluate(args: Namespace) -> int:
    from models.caption_data import read_glyphs, read_scenes
    from models.caption_eval import goals, part_report
    from models.checkpoint import load_checkpoint
    from service.runtime.captioning import caption_batches

    split = _split(args.split)
    start = time.perf_counter()
    model, tokenizer = load_checkpoint(args.checkpoint)
    options = decoding_options(args, model.config.max_length)
    scenes, images = read_scenes(args.data, split)
    if args.limit:
        scenes, images = scenes[: args.limit], images[: args.limit]
    engine = _engine(model, tokenizer, args)
    best = [n[0] for n in caption_batches(engine, images, options, 64)]
    hypotheses = [tokenizer.decode(h.tokens) for h in best]
    attentions = [h.alignment for h in best]
    glyphs, grid = read_glyphs(args.data), model.config.grid
    parts = {"all": part_report(hypotheses, attentions, scenes, glyphs, grid)}
    for part in dict.fromkeys(s.part for s in scenes if s.part):
        chosen = [i for i, s in enumerate(scenes) if s.part == part]
        parts[part] = part_report(
            [hypotheses[i] for i in chosen],
            [attentions[i] for i in chosen],
            [scenes[i] for i in chosen],
            glyphs,
            grid,
        )
    report = {
        "system": f"attnserve captioner ({file_name(args.checkpoint)})",
        "engine": "torch",
        "grammar": engine.grammar is not None,
        "split": split,
        "parts": parts,
        "goals": goals(parts),
        "decoding": asdict(options),
        "seconds": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    for part, scores in parts.items():
        print(f"{split}/{part}: " + ", ".join(f"{k} {v}" for k, v in scores.items()))
    for name, goal in report["goals"].items():
        print(
            f"goal {name}: {goal['measured']} (target {goal['target']}) "
            + ("met" if goal["met"] else "missed")
        )
    return 0


def _split(split: str) -> str:
    """The captioner's split to score: `all` is the test split, whose every part is scored;
    the translator's test parts are refused."""
    if split == "all":
        return "test"
    if split not in SPLITS:
        raise SystemExit(f"error: the captioner has no {split} split (dev, test or all)")
    return split


def caption(args: Namespace, images: list) -> tuple[Tokenizer, int, list[list[Hypothesis]]]:
    """The tokenizer, the side of the attention grid and every image's n-best hypotheses by the
    checkpoint `args.checkpoint` (`images`: PIL images, squeezed to the model's square), as
    `attnserve caption --engine torch` shows them."""
    from models.checkpoint import load_checkpoint
    from service.runtime.captioning import caption_images, resize

    model, tokenizer = load_checkpoint(args.checkpoint)
    options = decoding_options(args, model.config.max_length, n_best=args.n_best)
    pixels = np.stack([resize(image, model.config.image_size) for image in images])
    engine = _engine(model, tokenizer, args)
    return tokenizer, model.config.grid, caption_images(engine, pixels, options)


def _engine(model, tokenizer, args: Namespace):
    """The PyTorch reference engine of the checkpoint, with its caption grammar as the served
    model has it (not with `--free`)."""
    from models.checkpoint import checkpoint_grammar
    from models.reference import reference_engine
    from service.runtime.grammar import Grammar

    free = getattr(args, "free", False)
    grammar = None if free else checkpoint_grammar(args.checkpoint, tokenizer)
    return reference_engine(model, grammar=Grammar.from_manifest(grammar))
