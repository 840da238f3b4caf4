"""Where a busy worker's time goes: one scheduler over one engine, kept full by a closed loop
of single-sentence greedy jobs (as a server at many clients), under cProfile.

    python -m bench.profile_scheduler [--device cpu|cuda] [--repository VERSION_DIR]
        [--variant fp32] [--cache in_place|growing|static] [--io-binding]
        [--rows 256] [--seconds 20] [--top 30]

Prints the share of the wall time spent inside onnxruntime's runs, how many runs a step takes
(the step, the search, the encoder and the helper graphs of admissions and rebuilds: on a
GPU each costs the host a launch), and the functions with the most time of their own.
`--io-binding` runs a CPU engine through the device path (tensors as OrtValues, rows moved by
the helper graphs), as a GPU worker runs.
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
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--cache", choices=("in_place", "growing", "static"))
    parser.add_argument("--io-binding", action="store_true")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    version = verify(args.repository)
    engine = OnnxEngine(version, args.variant, args.device, cache=args.cache,
                        io_binding=True if args.io_binding else None)  # fmt: skip
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
    steps, tokens = len(scheduler.stats.step_seconds), scheduler.stats.tokens
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(run)
    wall = time.perf_counter() - start
    stats = pstats.Stats(profile, stream=(out := io.StringIO()))
    runs = [
        (calls, t)
        for (_, _, name), (_, calls, t, _, _) in stats.stats.items()
        if "onnxruntime_pybind11_state.run" in name  # run and run_with_iobinding
    ]
    inside, count = sum(t for _, t in runs), sum(c for c, _ in runs)
    steps = len(scheduler.stats.step_seconds) - steps
    tokens = scheduler.stats.tokens - tokens
    print(f"{engine.variant} {engine.device}, cache {engine.cache}, "
          f"{'IO binding' if engine.io_binding else 'host arrays'}, {args.rows} rows")  # fmt: skip
    jobs = done - args.rows  # ended within the profiled time
    print(f"{jobs} jobs ({jobs / wall:.1f}/s), "
          f"{steps} steps, {tokens} tokens in {wall:.1f} s")  # fmt: skip
    print(f"onnxruntime runs: {inside:.1f} s ({inside / wall:.0%} of the wall time), "
          f"{count / max(steps, 1):.1f} runs a step")  # fmt: skip
    stats.sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
