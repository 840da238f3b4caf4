"""A model version loaded while a worker serves: what the calls in flight wait for it.

One worker (its loop on a thread here) serves a translator version to `--clients` closed
loops of single-sentence greedy jobs; after `--before` seconds it is sent the Load of a second
copy of the same version (its sessions made, its golden set decoded), and `--after` seconds
after its answer the round ends. Each round runs twice: the load beside the loop (the worker's
way off CUDA) and between two steps (its way on CUDA, where a CUDA graph's recording fails
beside another thread's run), the ways in turn for `--rounds` rounds. Prints, for each, the
load's seconds, the jobs answered while it ran, the longest wait between two answers then,
and the longest job of those in flight while it ran (the round goes on until each is
answered), beside the same figures before it.

    python -m bench.version_load [--repository VERSION_DIR] [--variant fp32] [--clients 16]
        [--max-length 32] [--rounds 2] [--before 3] [--after 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import sys
import threading
import time
from multiprocessing import Pipe
from pathlib import Path

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.hf_tokenizers import read_tokenizer
from service.runtime.repository import verify
from service.worker.fronts import Fronts
from service.worker.messages import (
    Failure,
    Job,
    Load,
    Loaded,
    NotLoaded,
    Report,
    Result,
    Stop,
    Submit,
)
from service.worker.process import _loop
from service.worker.settings import WorkerSettings
from service.worker.startup import load

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("beside", "between steps")
ROUND_SECONDS = 600.0  # a round that runs longer than this has hung


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "data/repository/translator/1")
    parser.add_argument("--sources", type=Path, default=ROOT / "data/translator/test.es")
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--after", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    version = verify(args.repository)
    ids = read_tokenizer(version).encode_batch(
        args.sources.read_text(encoding="utf-8").splitlines()[:500]
    )
    inputs = [dict(zip(("src_ids", "src_mask"), source_batch([s], 512), strict=True)) for s in ids]
    rounds = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            rounds[way].append(_round(version, inputs, way == "beside", args))
    report = {
        "repository": str(args.repository),
        "variant": args.variant,
        "clients": args.clients,
        "max_length": args.max_length,
        "rounds": rounds,
        "median": {way: _median(runs) for way, runs in rounds.items()},
    }
    _print(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def _round(version, inputs: list[dict], beside: bool, args) -> dict:
    """One worker serving `version` under load while a copy of it loads (`beside` the loop,
    or between two steps): the figures of the answers before and during the load."""
    key, copy = "served/1", "copy/1"
    settings = WorkerSettings(
        index=0, models=((key, version),), variants=((key, args.variant), (copy, args.variant))
    )
    schedulers, info = load(settings)
    front, worker_end = Pipe()
    fronts = Fronts(worker_end, schedulers, info, settings)
    fronts.load_beside = beside
    loop = threading.Thread(target=_serve, args=(fronts, schedulers, settings), daemon=True)
    loop.start()
    options = DecodingOptions(max_length=args.max_length)
    sent: dict[int, float] = {}
    answers: list[tuple[float, float, float]] = []  # (submitted, answered, seconds)
    submitted = 0

    def send_job() -> None:
        nonlocal submitted
        front.send(Submit(key, Job(submitted, inputs[submitted % len(inputs)], options)))
        sent[submitted] = time.monotonic()
        submitted += 1

    start = time.monotonic()
    for _ in range(args.clients):
        send_job()
    load_sent = loaded_at = None
    try:
        while not _ended(loaded_at, args.after, sent):
            now = time.monotonic()
            if now - start > ROUND_SECONDS:
                raise TimeoutError(f"the round ran past {ROUND_SECONDS:g} s")
            if load_sent is None and now - start >= args.before:
                front.send(Load(copy, version, args.variant))
                load_sent = time.monotonic()
            if not front.poll(0.05):
                continue
            message = front.recv()
            if isinstance(message, NotLoaded):
                raise RuntimeError(f"the copy did not load: {message.message}")
            if isinstance(message, Loaded):
                loaded_at = time.monotonic()
            elif isinstance(message, Report):
                for event in message.events:
                    if isinstance(event, Result | Failure):
                        answered = time.monotonic()
                        began = sent.pop(event.job_id)
                        answers.append((began, answered, answered - began))
                        send_job()
    finally:
        front.send(Stop())
        loop.join(30)
    warm = start + min(1.0, args.before / 3)  # the first answers wait for the batch to fill
    before = [a for a in answers if warm <= a[1] < load_sent]
    during = [a for a in answers if load_sent <= a[1] < loaded_at]
    in_flight = [a for a in answers if a[0] < loaded_at and a[1] >= load_sent]
    return {
        "load_seconds": round(loaded_at - load_sent, 3),
        "answered_during": len(during),
        "jobs_per_second_before": round(len(before) / (load_sent - warm), 1),
        "jobs_per_second_during": round(len(during) / (loaded_at - load_sent), 1),
        "longest_gap_ms_before": _longest_gap(before, warm, load_sent),
        "longest_gap_ms_during": _longest_gap(during, load_sent, loaded_at),
        "longest_job_ms_before": round(1000 * max(a[2] for a in before), 1),
        "longest_job_ms_in_flight": round(1000 * max((a[2] for a in in_flight), default=0), 1),
    }


def _ended(loaded_at: float | None, after: float, sent: dict[int, float]) -> bool:
    """Whether a round is over: `after` seconds since the copy's answer, and every job sent
    before that answer answered (those in flight while it loaded, each measured whole)."""
    if loaded_at is None or time.monotonic() - loaded_at < after:
        return False
    return all(submitted >= loaded_at for submitted in sent.values())


def _serve(fronts: Fronts, schedulers: dict, settings: WorkerSettings) -> None:
    """The worker's loop, as run_worker runs it."""
    try:
        with contextlib.suppress(EOFError, BrokenPipeError):
            _loop(fronts, schedulers, settings)
    finally:
        fronts.close()


def _longest_gap(answers: list[tuple], start: float, end: float) -> float:
    """The longest time in ms within [start, end] with no answer."""
    times = [start, *sorted(a[1] for a in answers), end]
    return round(1000 * max(b - a for a, b in itertools.pairwise(times)), 1)


def _median(runs: list[dict]) -> dict:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def _print(report: dict) -> None:
    print(
        f"{report['clients']} clients, greedy to {report['max_length']} tokens, "
        f"{report['variant']}; medians of {len(report['rounds'][WAYS[0]])} rounds"
    )
    columns = list(report["median"][WAYS[0]])
    print("| load | " + " | ".join(c.replace("_", " ") for c in columns) + " |")
    print("|---|" + "--:|" * len(columns))
    for way, figures in report["median"].items():
        print(f"| {way} | " + " | ".join(f"{figures[c]:g}" for c in columns) + " |")


if __name__ == "__main__":
    sys.exit(main())
