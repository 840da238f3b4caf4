"""Decoding controls in a running batch: what rows with controls cost the rows beside them.

One scheduler over the shipped translator (`--repository`), `--rows` one-sentence greedy jobs
at once from the test split, refilled as they end, for `--jobs` jobs: first every job
without controls, then with every `--every`-th job asking for `no_repeat_ngram_size` 3 and
`min_length` 3 (its rows searched on the host from their own logits), in turn, `--rounds`
times. Reported per setting: jobs/s, output tokens/s, and the mean step time.

    python -m bench.controls --repository data/repository/translator/1 [--device cuda] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.repository import verify
from service.runtime.tokenizer import Tokenizer
from service.worker.messages import Job, Result
from service.worker.scheduler import Scheduler

CONTROLLED = DecodingOptions(no_repeat_ngram_size=3, min_length=3)


def run(engine, sources: list[list[int]], limit: int, rows: int, jobs: int, every: int) -> dict:
    """Jobs/s, tokens/s and step time of `jobs` jobs, `rows` in flight; every `every`-th
    job controlled (0: none)."""
    scheduler = Scheduler(engine, rows)
    submitted = done = tokens = 0

    def submit() -> None:
        nonlocal submitted
        src_ids, src_mask = source_batch([sources[submitted % len(sources)]], limit)
        controlled = every and submitted % every == 0
        options = CONTROLLED if controlled else DecodingOptions()
        scheduler.submit(Job(submitted, {"src_ids": src_ids, "src_mask": src_mask}, options))
        submitted += 1

    start = time.perf_counter()
    for _ in range(min(rows, jobs)):
        submit()
    while scheduler.busy:
        scheduler.iterate()
        for event in scheduler.events:
            if isinstance(event, Result):
                done += 1
                tokens += len(event.results[0][0].tokens)
                if submitted < jobs:
                    submit()
        scheduler.events.clear()
    seconds = time.perf_counter() - start
    steps = scheduler.stats.step_seconds
    return {
        "jobs_per_second": round(done / seconds, 2),
        "tokens_per_second": round(tokens / seconds, 1),
        "step_ms": round(1000 * sum(steps) / max(len(steps), 1), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, required=True, help="a translator version")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=512)
    parser.add_argument("--every", type=int, default=8, help="every n-th job controlled")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--test", type=Path, default=Path("data/translator/test.es"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from service.runtime.onnx_engine import OnnxEngine

    version = verify(args.repository)
    engine = OnnxEngine(version, args.variant, args.device)
    tokenizer = Tokenizer(version.tokenizer_file)
    limit = version.manifest["limits"]["max_source_tokens"]
    lines = args.test.read_text(encoding="utf-8").splitlines()
    sources = [ids for ids in tokenizer.encode_batch(lines) if len(ids) < limit][:256]
    run(engine, sources, limit, args.rows, args.rows, 0)  # warm-up
    report: dict = {"rows": args.rows, "jobs": args.jobs, "every": args.every, "rounds": []}
    for _ in range(args.rounds):
        report["rounds"].append(
            {
                "plain": run(engine, sources, limit, args.rows, args.jobs, 0),
                "controlled": run(engine, sources, limit, args.rows, args.jobs, args.every),
            }
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for i, round_ in enumerate(report["rounds"], 1):
        for name, figures in round_.items():
            print(f"round {i} {name}: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
