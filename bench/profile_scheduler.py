"""Where a busy worker's time goes: one scheduler over one engine, kept full by a closed loop
of single-sentence greedy jobs (as a server at many clients), onnxruntime's runs timed by
graph (and, with --top, the host's functions under cProfile).

    python -m bench.profile_scheduler [--device cpu|cuda] [--repository VERSION_DIR]
        [--random-model] [--variant fp32] [--cache in_place|growing|static] [--io-binding]
        [--no-scatter] [--no-place] [--encoder-thread] [--step-thread] [--admission-interval 1]
        [--steps-ahead 1] [--ahead-wait-ms 2]
        [--rows 256] [--seconds 20] [--max-length 128] [--top 30]

Prints the host's time a step outside the loop's onnxruntime runs (`host:`: the time no run
of the loop's own path is in progress, the time a GPU would idle), the share of the wall time
inside those runs and how many runs a step takes by graph (the step, and the helper graphs of
admissions and rebuilds: on a GPU each costs the host a launch and a synchronisation), the
encoder thread's runs apart (`--encoder-thread`: they run beside the steps), with
`--step-thread` the scheduler's own time a step that ran beside the step (`beside:`), and
with `--top N` a second loop under cProfile with the N functions of most time of their own.
`--io-binding` runs a CPU engine through the device path (tensors as OrtValues, rows moved by
the helper graphs), as a GPU worker runs. `--random-model` profiles a small random
translator (the shipped tokenizer, the tiny preset: width 32, 2 layers each side) built into
a temporary folder, so that onnxruntime's own time does not drown the host's at many rows.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import verify
from service.runtime.tokenizer import Tokenizer
from service.worker.messages import Failure, Job, Result
from service.worker.scheduler import AHEAD_WAIT, Scheduler

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repository", type=Path, default=ROOT / "data/repository/translator/1")
    parser.add_argument("--sources", type=Path, default=ROOT / "data/translator/test.es")
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--cache", choices=("in_place", "growing", "static"))
    parser.add_argument("--io-binding", action="store_true")
    parser.add_argument(
        "--no-scatter",
        action="store_true",
        help="the static step's rows placed a run of slots at a time, as in a version without "
        "the scatter op (its effect, side by side)",
    )
    parser.add_argument(
        "--no-place",
        action="store_true",
        help="the static step's rows placed a tensor at a time, as in a version without the "
        "scatter and place ops (their effect, side by side)",
    )
    parser.add_argument(
        "--random-model", action="store_true", help="a small random translator, not --repository"
    )
    parser.add_argument(
        "--encoder-thread", action="store_true", help="admissions' encoder beside the steps"
    )
    parser.add_argument(
        "--step-thread",
        action="store_true",
        help="greedy steps on a thread, beside the bookkeeping of the step before",
    )
    parser.add_argument(
        "--admission-interval", type=int, default=1, help="steps between admission rounds"
    )
    parser.add_argument(
        "--steps-ahead",
        type=int,
        default=1,
        help="greedy steps run back to back on the device between two looks (the static step)",
    )
    parser.add_argument(
        "--ahead-wait-ms",
        type=float,
        default=AHEAD_WAIT * 1e3,
        help="the longest a run of steps ahead may last, at the last run's pace",
    )
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--max-length",
        type=int,
        default=128,
        help="a job's most tokens: each job's between half of it and it, in turn (a small one "
        "makes an untrained model's jobs end, and rows join, as often and as scattered as a "
        "trained model's)",
    )
    parser.add_argument("--top", type=int, default=0, help="then profile: the N costliest")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        repository = (
            random_translator(Path(folder), args.repository)
            if args.random_model
            else args.repository
        )
        return _profile(args, verify(repository))


def random_translator(folder: Path, shipped: Path) -> Path:
    """A small random translator with the tokenizer of `shipped` (a version folder), its
    fp32 graphs built op by op into `folder`; returns its version folder."""
    import torch

    from export.repository import write_version
    from models.config import PRESETS
    from models.transformer import Transformer

    tokenizer_file = verify(shipped).tokenizer_file
    tokenizer = Tokenizer(tokenizer_file)
    config = replace(PRESETS["tiny"], vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    model = Transformer(config).eval()
    directory = folder / "random" / "1"
    write_version(model, tokenizer_file, directory, "random", "1", ("fp32",), method="built")
    return directory


def _profile(args, version) -> int:
    engine = OnnxEngine(
        version,
        args.variant,
        args.device,
        cache=args.cache,
        io_binding=True if args.io_binding else None,
    )
    if engine.static_step is not None:
        without = {"scatter": args.no_scatter or args.no_place, "place": args.no_place}
        ops = {op: None for op, dropped in without.items() if dropped}
        engine.static_step = replace(engine.static_step, **ops)
    ids = Tokenizer(version.tokenizer_file).encode_batch(
        args.sources.read_text(encoding="utf-8").splitlines()[:2000]
    )
    scheduler = Scheduler(
        engine,
        max_rows=args.rows,
        encoder_thread=args.encoder_thread,
        admission_interval=args.admission_interval,
        step_thread=args.step_thread,
        steps_ahead=args.steps_ahead,
        ahead_wait=args.ahead_wait_ms / 1e3,
    )
    shortest = max(1, args.max_length // 2)
    options = [DecodingOptions(max_length=n) for n in range(shortest, args.max_length + 1)]
    submitted = done = 0

    prepared: dict[int, tuple] = {}  # a sentence's encoder inputs, made once (the front's work)

    def submit() -> None:
        nonlocal submitted
        sentence = submitted % len(ids)
        if sentence not in prepared:
            prepared[sentence] = source_batch([ids[sentence]], 512)
        src, mask = prepared[sentence]
        chosen = options[submitted * 7 % len(options)]  # lengths in a scattered order
        scheduler.submit(Job(submitted, {"src_ids": src, "src_mask": mask}, chosen))
        submitted += 1

    first_token: list[float] = []  # seconds from submission to the first token, a job

    def run(seconds: float = args.seconds) -> None:
        nonlocal done
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            while submitted - done < args.rows:
                submit()
            scheduler.iterate()
            for event in scheduler.events:
                if isinstance(event, Result | Failure):
                    done += 1
                if isinstance(event, Result):
                    timings = event.timings
                    first_token.append(timings.first_token_at - timings.queued_at)
            scheduler.events.clear()

    for _ in range(args.rows):  # warm-up
        submit()
    while scheduler.busy:
        scheduler.iterate()
    done = submitted
    scheduler.events.clear()
    # then the closed loop a while, so that the timed loop starts full: from an empty batch
    # its first admission (every row at once) would wait for its encoder with no row to step
    run(min(2.0, args.seconds / 4))
    first_token.clear()
    done_before = done
    threads = "the encoder beside the steps" if args.encoder_thread else "the encoder inline"
    threads += ", the steps on their thread" if args.step_thread else ", the steps inline"
    if args.steps_ahead > 1:
        threads += f", up to {args.steps_ahead} steps ahead (runs of {args.ahead_wait_ms:g} ms)"
    static = engine.static_step
    ops = [op for op in ("scatter", "place") if getattr(static, op, None) is not None]
    place = "".join(f", {op} op" for op in ops)
    binding = "IO binding" if engine.io_binding else "host arrays"
    print(f"{engine.variant} {engine.device}, cache {engine.cache}, {binding}, {args.rows} rows")
    print(f"  {threads}{place}")
    # timed without a profiler (cProfile misreads onnxruntime's calls on some Pythons):
    # every run and every host-to-device write, by graph, the scheduler's thread apart
    spent: dict[tuple[bool, str], list[float]] = defaultdict(lambda: [0, 0.0])
    originals = _time_onnxruntime(spent)
    steps, tokens = len(scheduler.stats.step_seconds), scheduler.stats.tokens
    beside = scheduler.beside_seconds
    scheduler.take_phases()
    start = time.perf_counter()
    try:
        run()
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    wall = time.perf_counter() - start
    steps = max(len(scheduler.stats.step_seconds) - steps, 1)
    beside = scheduler.beside_seconds - beside
    tokens = scheduler.stats.tokens - tokens
    jobs = done - done_before  # ended within the timed loop
    print(
        f"{jobs} jobs ({jobs / wall:.1f}/s), {steps} steps ({wall / steps * 1e3:.2f} ms "
        f"each), {tokens} tokens in {wall:.1f} s"
    )
    if first_token:
        p50, p99 = np.percentile(first_token, [50, 99]) * 1e3
        print(f"first token: p50 {p50:.1f} ms, p99 {p99:.1f} ms after submission")
    phases = scheduler.take_phases()  # the served loop's phases (service.worker.loop_clock)
    phases["schedule"] = wall - sum(phases.values())  # submissions and events included
    cells = ", ".join(f"{k} {v / steps * 1e3:.3f}" for k, v in phases.items())
    print(f"loop, ms a step: {cells}")
    for loop in (True, False):
        mine = {name: v for (own, name), v in spent.items() if own == loop}
        inside = sum(t for _, t in mine.values())
        count = sum(c for c, _ in mine.values())
        if not loop and not mine:
            continue
        if loop:
            print(f"host: {(wall - inside) / steps * 1e3:.3f} ms a step outside onnxruntime")
            if args.step_thread:
                share = beside / max(beside + wall - inside, 1e-9)
                ms = beside / steps * 1e3
                print(f"beside: {ms:.3f} ms a step of the scheduler's own work ran beside a step")
                print(f"  ({share:.0%} of its host work)")
            print(
                f"onnxruntime: {inside:.1f} s ({inside / wall:.0%} of the wall time), "
                f"{count / steps:.1f} calls a step"
            )
        else:
            print(
                f"encoder thread: {inside:.1f} s of runs beside the steps ({inside / wall:.0%} "
                f"of the wall time), {count / steps:.1f} calls a step"
            )
        for name, (calls, seconds) in sorted(mine.items(), key=lambda kv: -kv[1][1]):
            print(f"  {name}: {calls / steps:.2f} a step, {seconds / steps * 1e3:.3f} ms a step")
    if args.top:  # where the host's time goes, in a second loop as long
        profile = cProfile.Profile()
        profile.runcall(run)
        stats = pstats.Stats(profile, stream=(out := io.StringIO()))
        stats.sort_stats("tottime").print_stats(args.top)
        print(out.getvalue())
    return 0


def _time_onnxruntime(spent: dict) -> list:
    """Wraps onnxruntime's runs and OrtValue.update_inplace to add (calls, seconds) into
    `spent` by (on the loop's own path: the scheduler's thread or the step thread, graph);
    returns what to restore."""
    import onnxruntime as ort

    def timed(original, label):
        def call(self, *args, **kwargs):
            begin = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                own = not threading.current_thread().name.startswith("encoder")
                entry = spent[(own, label(self))]
                entry[0] += 1
                entry[1] += time.perf_counter() - begin

        return call

    def graph(session) -> str:
        return Path(str(getattr(session, "_model_path", "") or "graph")).stem

    patched = [
        (ort.InferenceSession, "run", graph),
        (ort.InferenceSession, "run_with_iobinding", graph),
        (ort.OrtValue, "update_inplace", lambda _: "update_inplace (host to device)"),
    ]
    originals = []
    for owner, name, label in patched:
        original = getattr(owner, name)
        originals.append((owner, name, original))
        setattr(owner, name, timed(original, label))
    return originals


if __name__ == "__main__":
    sys.exit(main())
