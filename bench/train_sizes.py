"""What a larger translator costs to train here: step time of the base model and larger ones
on the same batches, and what the base run had reached in the steps a larger one would make.

    python -m bench.train_sizes [--data data/translator-modern] [--run runs/translator-modern]
        [--tokenizer FILE] [--batches 10] [--rounds 3] [--threads 2] [--json]

Every size trains (forward, backward, Adam step; dropout on) on the same `--batches`
batches of the training split (4,000 tokens each, as `attnserve train` makes them); the
sizes run in turn within a round, the first batch of each untimed; median seconds per step
over the rounds. The base run's dev history (`--run`: its `last.pt`) gives the dev BLEU it
had after the steps a larger model would have made in the same minutes (the base run's steps
over the step-time ratio; a step is a batch of 4,000 tokens for every size), read at the
last evaluation at or before them: what the larger model must beat there to win within the
budget.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (name, TransformerConfig fields beside the base's)
SIZES = (
    ("base", {}),
    ("wide", {"d_model": 384, "n_heads": 6, "d_ff": 1536}),
    ("wide-deep", {"d_model": 384, "n_heads": 6, "d_ff": 1536, "encoder_layers": 6,
                   "decoder_layers": 4}),
)  # fmt: skip


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "translator-modern")
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "translator-modern")
    parser.add_argument("--tokenizer", type=Path, default=None, help="default: the run's")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=20000, help="training pairs sampled")
    parser.add_argument("--sizes", default=",".join(name for name, _ in SIZES))
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def step_seconds(model, batches, optimizer) -> list[float]:
    """Seconds of one training step on every batch but the first (untimed)."""
    import torch.nn.functional as F

    from service.runtime.tokenizer import PAD_ID

    times = []
    for index, batch in enumerate(batches):
        start = time.perf_counter()
        logits = model(batch["src"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            batch["tgt_out"].reshape(-1),
            ignore_index=PAD_ID,
            label_smoothing=0.1,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if index:
            times.append(time.perf_counter() - start)
    return times


def base_history(run: Path) -> list[dict]:
    """The dev evaluations of the run in `run` (its last state), oldest first."""
    from models.run_state import load_state

    if not (run / "last.pt").exists():
        return []
    return list(load_state(run, None)["progress"]["history"])


def budget_rows(history: list[dict], seconds: dict[str, float]) -> dict[str, tuple]:
    """For every size (seconds per step, "base" among them): the steps it makes in the
    minutes of the base run's last evaluation, and the base run's dev BLEU at its last
    evaluation at or before that many steps (None before the first)."""
    last, base = history[-1], seconds["base"]
    result = {}
    for name, time_ in seconds.items():
        steps = last["step"] * base / time_
        before = [h for h in history if h["step"] <= steps]
        result[name] = (round(steps), before[-1]["dev_bleu"] if before else None)
    return result


def run(args) -> dict:
    import torch

    from models.config import TransformerConfig
    from models.corpus import read_split
    from models.tokenizer import Tokenizer
    from models.train import collate, make_batches
    from models.transformer import Transformer

    torch.set_num_threads(args.threads)
    tokenizer = Tokenizer(args.tokenizer or args.run / "tokenizer.model")
    spanish, english = read_split(args.data, "train")
    chosen = random.Random(0).sample(range(len(spanish)), min(args.pairs, len(spanish)))
    sources = tokenizer.encode_batch([spanish[i] for i in chosen])
    targets = tokenizer.encode_batch([english[i] for i in chosen])
    pairs = [(s[:200], t[:200]) for s, t in zip(sources, targets, strict=True)]
    batches = [collate([pairs[i] for i in batch]) for batch in make_batches(pairs, 4000, 1)][
        : args.batches + 1
    ]
    wanted = args.sizes.split(",")
    models, times = {}, {}
    for name, fields in SIZES:
        if name in wanted:
            torch.manual_seed(0)
            config = TransformerConfig(vocab_size=tokenizer.vocab_size, **fields)
            model = Transformer(config).train()
            models[name] = (model, torch.optim.Adam(model.parameters(), lr=1e-4), config)
            times[name] = []
    for round_ in range(args.rounds):
        order = list(models)
        order = order[round_ % len(order) :] + order[: round_ % len(order)]
        for name in order:
            model, optimizer, _ = models[name]
            times[name].append(statistics.median(step_seconds(model, batches, optimizer)))
    history = base_history(args.run)
    last = history[-1] if history else None
    medians = {name: statistics.median(t) for name, t in times.items()}
    base_seconds = medians.get("base")
    budget = budget_rows(history, medians) if last is not None and base_seconds else {}
    rows = []
    for name, (model, _, config) in models.items():
        params = sum(p.numel() for p in model.parameters())
        seconds = medians[name]
        row = {
            "size": name,
            "d_model": config.d_model,
            "layers": f"{config.encoder_layers}+{config.decoder_layers}",
            "d_ff": config.d_ff,
            "parameters": params,
            "fp16_mb": round(params * 2 / 1e6, 1),
            "s_per_step": round(seconds, 3),
            "step_ratio": round(seconds / base_seconds, 2) if base_seconds else None,
        }
        if name in budget:
            row["steps_in_budget"], row["base_dev_bleu_then"] = budget[name]
        rows.append(row)
    return {
        "threads": args.threads,
        "batches": args.batches,
        "rounds": args.rounds,
        "base_run": {
            "steps": last["step"],
            "dev_bleu": last["dev_bleu"],
            "minutes": last["minutes"],
        }
        if last
        else None,
        "rows": rows,
    }


def markdown(report: dict) -> str:
    lines = [
        "| size | d_model | layers | d_ff | parameters | fp16 MB | s/step | x base | "
        "steps in the base run's time | base dev BLEU then |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['size']} | {r['d_model']} | {r['layers']} | {r['d_ff']} | "
            f"{r['parameters']:,} | {r['fp16_mb']} | {r['s_per_step']} | {r['step_ratio']} | "
            f"{r.get('steps_in_budget', '')} | {r.get('base_dev_bleu_then', '')} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = _arguments(argv)
    report = run(args)
    print(json.dumps(report, indent=2) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
