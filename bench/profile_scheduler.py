"""Where a busy worker's time goes: one scheduler over one engine, kept full by a closed loop
of single-sentence greedy jobs (as a server at many clients), under cProfile.

    python -m bench.profile_scheduler [--device cpu|cuda] [--repository VERSION_DIR]
        [--rows 256] [--seconds 20] [--top 30]

Prints the share of the wall time spent inside onnxruntime's runs and the functions with the
most time of their own.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

from service.batching import source_batch
from service.decoding import DecodingOptions
from service.onnx_engine import OnnxEngine
from service.repository import verify
from service.scheduler import Job, Scheduler
from service.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repository", type=Path, default=ROOT / "data/repository/translator/1")
    parser.add_argument("--sources", type=Path, default=ROOT / "data/translator/test.es")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    version = verify(args.repository)
    engine = OnnxEngine(version, "fp32", args.device)
    ids = Tokenizer(version.tokenizer_file).encode_batch(
        args.sources.read_text(encoding="utf-8").splitlines()[:2000]
    )
    scheduler = Scheduler(engine, max_rows=args.rows)
    options = DecodingOptions(max_length=128)
    submitted = done = 0

    def submit() -> None:
        nonlocal submitted
        src, mask = source_batch([ids[submitted % len(ids)]], 512)
        scheduler.submit(Job(submitted, {"src_ids": src, "src_mask": mask}, options))
        submitted += 1

    def run() -> None:
        nonlocal done
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            while submitted - done < args.rows:
                submit()
            scheduler.iterate()
            done += sum(type(e).__name__ in ("Result", "Failure") for e in scheduler.events)
            scheduler.events.clear()

    for _ in range(args.rows):  # warm-up
        submit()
    while scheduler.busy:
        scheduler.iterate()
    done = submitted
    scheduler.events.clear()
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(run)
    wall = time.perf_counter() - start
    stats = pstats.Stats(profile, stream=(out := io.StringIO()))
    inside = sum(
        t
        for (_, _, name), (_, _, t, _, _) in stats.stats.items()
        if "onnxruntime_pybind11_state.run" in name  # run and run_with_iobinding
    )
    steps, tokens = len(scheduler.stats.step_seconds), scheduler.stats.tokens
    print(f"{done - args.rows} jobs, {steps} steps, {tokens} tokens in {wall:.1f} s")
    print(f"onnxruntime runs: {inside:.1f} s ({inside / wall:.0%} of the wall time)")
    stats.sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
