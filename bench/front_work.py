"""What a front's own work costs a Translate call, outside gRPC and the worker: the message
read, the typed request (parse), its inputs (prepare: sentences, protected items, tokens),
and, from one hypothesis per input, the response built and serialised.

    python -m bench.front_work [--calls 2000] [--rounds 3] [--baseline CHECKOUT] [--json]

The newest translator of `--repository` (default data/repository) takes four requests: one
sentence, a text of three sentences, a sentence with two glossary entries, and an HTML
sentence; each input's hypothesis is one fixed English sentence's tokens. Prints
microseconds of CPU a call (the thread's time, the median of the rounds). With `--baseline`
(another checkout of the project, a `git worktree add` of an earlier commit), each round
runs both trees in turn, each in a process of its own over the same repository, and the
report gives the baseline's time over this tree's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.lib.repository import model_versions
from service.front.config import ServerConfig
from service.front.translate import parse_translate, translate_response
from service.runtime.decoding import Hypothesis
from service.runtime.translation import TranslationModel
from service.wire.v1 import translation_pb2

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = "The dog eats the bread that my brothers bought at the market this morning."
# kind: (TranslateRequest fields, in text form for a process that builds the message)
REQUESTS = {
    "sentence": {"texts": ["El perro come el pan que mis hermanos compraron esta mañana."]},
    "document": {
        "texts": ["El perro come pan. Mis hermanos fueron al mercado. Mañana iremos con ellos."]
    },
    "glossary": {
        "texts": ["La casa de mi hermano está cerca del mercado."],
        "glossary": [
            {"source": "casa", "target": "home"},
            {"source": "mercado", "target": "market"},
        ],
    },
    "html": {
        "texts": ["<p>El <b>perro</b> come pan en <a href='/casa'>la casa</a>.</p>"],
        "text_format": "TEXT_FORMAT_HTML",
    },
}


def measure(repository: Path, calls: int) -> dict:
    """{kind: microseconds of this thread's CPU a call} over `calls` calls each."""
    version = model_versions(repository, ["translator"])["translator"]
    model = TranslationModel(version, ServerConfig())
    tokens = model.tokenizer.encode(OUTPUT)
    steps = len(tokens) + 1
    hypothesis = Hypothesis(tokens, -0.1 * steps, -0.1, token_log_probs=[-0.1] * steps)

    async def call(wire: bytes) -> bytes:
        message = translation_pb2.TranslateRequest.FromString(wire)
        prepared = await model.prepare(parse_translate(message, model))
        results = [[hypothesis] for _ in range(prepared.inputs)]
        return translate_response(model.response(prepared, results)).SerializeToString()

    async def run(wire: bytes, count: int) -> float:
        start = time.thread_time()
        for _ in range(count):
            await call(wire)
        return time.thread_time() - start

    costs = {}
    for kind, fields in REQUESTS.items():
        wire = translation_pb2.TranslateRequest(**fields).SerializeToString()
        asyncio.run(run(wire, max(calls // 10, 1)))  # warm: caches, first calls
        costs[kind] = 1e6 * asyncio.run(run(wire, calls)) / calls
    return costs


def _in_process_of(tree: Path, repository: Path, calls: int) -> dict:
    """`measure` in a process of its own, on the checkout `tree`'s code (this file run as a
    script: an earlier checkout need not have it)."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, __file__, "--child", "--calls", str(calls)]
    command += ["--repository", str(repository)]
    done = subprocess.run(
        command, cwd=tree, env=environment, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{tree}: bench.front_work failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="a round's, each request")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repository", type=Path, default=ROOT / "data" / "repository")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured in turn")
    parser.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    repository = args.repository.resolve()
    if args.child:  # one tree's measure, for a parent that compares trees
        print(json.dumps(measure(repository, args.calls)))
        return 0
    trees = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            rounds[name].append(_in_process_of(tree, repository, args.calls))
    report: dict = {"calls": args.calls, "rounds": args.rounds, "us_a_call": {}}
    for name, measured in rounds.items():
        report["us_a_call"][name] = {
            kind: statistics.median(m[kind] for m in measured) for kind in REQUESTS
        }
    if args.baseline:
        this, baseline = report["us_a_call"]["this"], report["us_a_call"]["baseline"]
        report["baseline_over_this"] = {kind: baseline[kind] / this[kind] for kind in REQUESTS}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for kind in REQUESTS:
        line = f"{kind}: {report['us_a_call']['this'][kind]:.1f} us of CPU a call"
        if args.baseline:
            line += (
                f", baseline {report['us_a_call']['baseline'][kind]:.1f} "
                f"({report['baseline_over_this'][kind]:.2f}x)"
            )
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
