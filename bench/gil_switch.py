"""What a worker's encoder thread waits for the GIL while the loop is busy, by the
interpreter's switch interval.

    python -m bench.gil_switch [--rows 256] [--seconds 5] [--max-length 40] [--run-ms 0.5]
        [--intervals 5,0.5] [--rounds 2] [--repository VERSION_DIR]

A GPU worker's loop at 256 clients is busy nearly all of the time, most of it in Python; it
lets the GIL go while the device runs a step and in its system calls. A thread that wants
the GIL back (the encoder thread after each onnxruntime run) gets it at once only when the
loop lets it go and the waiting thread wakes first; else it waits out the switch interval
(5 ms by default), when the interpreter makes the loop hand it over. An admission round makes
several such calls, and one round runs at a time, so jobs wait in the queue for rounds.

Here the scheduler steps a stand-in batch (service's Scheduler over `InstantBatch`: random
candidates, a run that sleeps `--run-ms` with the GIL let go, as a device's step; the rows'
bookkeeping the scheduler's own), fed by a closed loop of `--rows` jobs, and the encoder
thread runs a small random translator's encoder (the tiny preset, the shipped tokenizer) with
onnxruntime. Each round runs every interval of `--intervals` in turn; prints a line each:
steps a second, jobs a second, the admission rounds' wall time on the encoder thread against
the encoder's own run time, and the jobs' wait in the queue (p50, p99).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.lib.paths import REPOSITORY
from bench.profile_scheduler import random_translator
from bench.scheduler_step import ClosedLoop, InstantBatch
from service.runtime.batching import source_batch
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import verify
from service.worker.messages import Admitted
from service.worker.scheduler import Scheduler

SOURCE = [[17, 250, 31, 980, 44, 3011, 12, 5]]  # one sentence's ids: the encoder's input


def measure(engine, rows: int, seconds: float, max_length: int, run_seconds: float) -> dict:
    """The closed loop for `seconds` at the present switch interval -> its figures."""
    scheduler = Scheduler(
        engine,
        max_rows=rows,
        batch=InstantBatch(rows, 2, run_seconds=run_seconds),
        encoder_thread=True,
    )
    src_ids, src_mask = source_batch(SOURCE, 512)
    loop = ClosedLoop(scheduler, rows, max_length, {"src_ids": src_ids, "src_mask": src_mask})
    waits: list[float] = []
    try:
        end = time.monotonic() + seconds
        started, steps_from = time.monotonic(), scheduler.stats.tokens
        while time.monotonic() < end:
            waits += [e.waited for e in loop.iterate() if isinstance(e, Admitted)]
        elapsed = time.monotonic() - started
    finally:
        scheduler.close()
    rounds = scheduler.stats.encoder_seconds
    steps = len(scheduler.stats.step_seconds)
    return {
        "steps_per_second": steps / elapsed,
        "jobs_per_second": loop.finished / elapsed,
        "tokens": scheduler.stats.tokens - steps_from,
        "admission_rounds": len(rounds),
        "round_ms_mean": 1e3 * statistics.fmean(rounds) if rounds else None,
        "jobs_per_round": len(waits) / max(1, len(rounds)),
        "queue_wait_ms_p50": 1e3 * float(np.percentile(waits, 50)) if waits else None,
        "queue_wait_ms_p99": 1e3 * float(np.percentile(waits, 99)) if waits else None,
    }


def encoder_alone_ms(engine, jobs: int, repeats: int = 50) -> float:
    """The encoder's own run over `jobs` copies of the sentence, nothing beside it (median)."""
    src_ids, src_mask = source_batch(SOURCE * jobs, 512)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.encode(src_ids=src_ids, src_mask=src_mask)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--run-ms", type=float, default=0.5, help="a step's device run")
    parser.add_argument(
        "--intervals", default="5,0.5", help="switch intervals to compare, ms, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--repository",
        type=Path,
        default=REPOSITORY / "translator" / "1",
        help="the shipped translator version whose tokenizer the random one takes",
    )
    args = parser.parse_args(argv)
    intervals = [float(i) for i in args.intervals.split(",")]
    default = sys.getswitchinterval()
    with tempfile.TemporaryDirectory() as folder:
        version = verify(random_translator(Path(folder), args.repository))
        engine = OnnxEngine(version, "fp32")
        try:
            for round_ in range(1, args.rounds + 1):
                for interval in intervals:
                    sys.setswitchinterval(interval / 1e3)
                    got = measure(
                        engine, args.rows, args.seconds, args.max_length, args.run_ms / 1e3
                    )
                    alone = encoder_alone_ms(engine, max(1, round(got["jobs_per_round"])))
                    print(
                        f"round {round_}, switch interval {interval:g} ms: "
                        f"{got['steps_per_second']:.0f} steps/s, "
                        f"{got['jobs_per_second']:.0f} jobs/s, "
                        f"{got['admission_rounds']} admission rounds of "
                        f"{got['jobs_per_round']:.1f} jobs, {got['round_ms_mean']:.2f} ms each "
                        f"(the encoder alone {alone:.2f} ms), queue wait p50 "
                        f"{got['queue_wait_ms_p50']:.2f} ms, p99 {got['queue_wait_ms_p99']:.2f} ms",
                        flush=True,
                    )
        finally:
            sys.setswitchinterval(default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
