"""GPU benchmark: the translator on one GPU, engine level and service level, against goals.

    python -m bench.gpu --out DIR [--quick] [--repository VERSION_DIR] [--device cuda|cpu]
        [--load | --no-load] [--no-engine] [--workdir DIR] [--checkpoint DIR]
        [--beam-max-batch N] [--engine-seconds S] [--export-sentences N]
        [--server-variant V] [--server-rows N]
        [--server-fronts N] [--server-workers N] [--server-cache in_place|growing|static]
        [--server-step inline|thread] [--server-encoder auto|inline|thread]
        [--server-steps-ahead N] [--server-ahead-wait-ms MS]
        [--clients 1,256]
        [--level-seconds S]

Writes DIR/benchmarks-gpu.json and DIR/benchmarks-gpu.md (bench/gpu.sh runs it on the GPU
machine). Torch runs in spawned processes (the GPU's measurement, every engine), and in this
process only to export. Sections, in this order:

Machine. cuda: the GPU's name (torch, nvidia-smi), the memory bandwidth (the best of many
device-to-device copies of a 1 GiB tensor, bytes read + written over the time between CUDA
events) and the matrix rate (the best of ten 8192³ matmuls in fp32, TF32 and fp16, 2 n³
FLOPs each), measured with torch in a process of its own. cpu: bench.machine (a numpy copy
and a one-thread fp32 matmul; fp16 takes the fp32 rate).

Model repository. --repository (a version exported from --checkpoint), or --checkpoint (the
shipped translator by default) exported with fp32 and fp16 graphs by `export.commands.export`,
the function of `attnserve export`, with its parity certificate and golden set: over 200
sentences of every test part, the export's minimum, or 8 of each in --quick or as many as
--export-sentences says (the minimum lowered for that call: a smoke test, not a
certificate). With --workdir the export lies there and a later run with the same --workdir
reuses it, as it reports the sections it does not run again (so the export, the engine level
and the service level can run as separate commands).

Engine level. Every engine runs in a spawned process of its own and decodes through the
server's loop: `service.runtime.decoding.decode` over `CachedInference(engine, engine.encode(...))`,
without alignments where `decode` offers that switch (`attention=False`), as for a request
that asks for none.
Engines: onnxruntime fp32 and fp16 (`OnnxEngine`, IO binding on cuda) and PyTorch fp32 eager
(`models.reference.reference_engine`), one compute thread each on the CPU. First the parity
check: the first 200 test sentences (16 in --quick) decoded greedily to their natural end (at
most the forced length) in one batch by every engine and by PyTorch fp32 on the CPU, the
reference; an engine below PARITY_FLOOR identical outputs is not timed. Then the batch-1
decoder step: the median of many `CachedInference.step` calls (the graph, the cache
bookkeeping, logits to the host; the search excluded). Then the cases (batch, beam), greedy
before beam 4, each batch the first `batch` lines of data/translator/test.es (repeated as
needed, tokenised by service.runtime.tokenizer), every row decoded to exactly `length` tokens
(`</s>` hidden from the search by bench.engines.Stepped): one warm-up round, then up to 3
timed rounds (fewer when a round takes more than a case's share of time), every engine once
a round in a rotating order. tokens/s: batch × length over the whole call (encoder included;
torch synchronised before every clock read); ms/step: the time after the encoder over
length. The physical limit of a step at mid-decode (past = length / 2): max(bytes /
bandwidth, FLOPs / matrix rate), bytes = the decoder weights at the variant's precision + the
self-attention cache and the cross keys/values of every row (at the same precision), FLOPs =
2 per multiply-add (bench.machine's count); "of limit" is that limit over the measured
ms/step. The section is time-boxed (--engine-seconds): a case whose predicted cost (twice a
round of the previous case of its beam, scaled by the batch) no longer fits is recorded as not
run; beam 4 at batch 1,024 runs only when it fits.

Service level (--load; default on, off in --quick). `attnserve serve` started by
bench.lib.server.Server on the device (cuda: fp16, the server's default workers, 1,024 batch rows;
cpu: fp32, the server's default workers and rows; --server-workers N: N workers), warmed up
at the most clients, then closed loops of unary Translate calls (test sentences, max_length
128, natural ends) at 1, 16, 64, 256 and 1,024 clients (quick: 1 and 4; --clients names
others) for a fixed time each (--level-seconds), the clients spread over client processes
(one asyncio loop and CHANNELS connections each; one process per 64 clients, at most a
quarter of the CPUs; --server-fronts N serves with N front processes, --server-cache with
that key/value cache, e.g. static): requests/s and tokens/s (answers within the level's time
over it), p50/p99 latency, CPU seconds of the front, the workers and the clients. Then the
end-to-end latency of one sentence whose translation reaches 30 tokens (sent with max_length
30), one client, one call at a time. A server that cannot start (e.g. grpcio-health-checking
missing) is recorded as "not run: <reason>".

Goals: each met, missed, or not measured, with the measured figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from bench.lib.devices import measure_machine
from bench.lib.engine_level import EngineBench, sources
from bench.lib.gpu_goals import goals
from bench.lib.gpu_markdown import markdown
from bench.lib.gpu_plan import FULL, QUICK, Plan
from bench.lib.paths import TEST_SOURCES
from bench.lib.repository import repository_section
from bench.lib.service_level import LoadBench
from models.shipped import SHIPPED_TRANSLATOR
from service.runtime.choices import THREADING

REPORT = "benchmarks-gpu"


def _section_arguments(parser: argparse.ArgumentParser) -> None:
    """Which sections run, on what, and where their results are kept."""
    parser.add_argument("--out", type=Path, required=True, help="where the report goes")
    parser.add_argument("--quick", action="store_true", help="batches 1,16, 16 tokens, no load")
    parser.add_argument(
        "--checkpoint", type=Path, default=SHIPPED_TRANSLATOR, help="a translator's"
    )
    parser.add_argument("--repository", type=Path, help="a version of it (fp32, fp16)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--load",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the service level (default: on, off with --quick)",
    )
    parser.add_argument(
        "--engine", action=argparse.BooleanOptionalAction, default=True, help="the engine level"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the export and each section's results here; a later run with the same "
        "workdir reuses the export and reports the sections it does not run again",
    )


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan's changes: the export's and the engine level's sizes, the server's flags and
    the service level's client counts and time."""
    parser.add_argument("--beam-max-batch", type=int, help="beam 4 up to this batch")
    parser.add_argument(
        "--export-sentences",
        type=int,
        help="certify the export over this many sentences a test part (fewer than 200: a "
        "smoke test, not a certificate)",
    )
    parser.add_argument("--engine-seconds", type=float, help="time box of the engine level")
    parser.add_argument("--server-variant", choices=("fp32", "fp16", "int8"))
    parser.add_argument("--server-rows", type=int, help="the server's --max-batch-rows")
    parser.add_argument("--server-fronts", type=int, help="the server's --fronts")
    parser.add_argument("--server-workers", type=int, help="the server's --workers")
    parser.add_argument("--server-cache", choices=("in_place", "growing", "static"))
    parser.add_argument("--server-step", choices=THREADING, help="the server's --step")
    parser.add_argument(
        "--server-encoder", choices=("auto", *THREADING), help="the server's --encoder"
    )
    parser.add_argument(
        "--server-steps-ahead", type=int, help="the server's --steps-ahead (the static step)"
    )
    parser.add_argument(
        "--server-ahead-wait-ms", type=float, help="the server's --ahead-wait-ms (its runs' time)"
    )
    parser.add_argument("--clients", help="the service level's client counts, e.g. 1,256")
    parser.add_argument("--level-seconds", type=float, help="each service level's duration")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _section_arguments(parser)
    _plan_arguments(parser)
    parser.add_argument(
        "--graphs",
        choices=("traced", "built"),
        default="built",
        help="how the exported graphs are made (attnserve export --graphs)",
    )
    args = parser.parse_args(argv)
    if args.load is None:
        args.load = not args.quick
    return args


def _plan(args) -> Plan:
    plan = QUICK if args.quick else FULL
    if args.beam_max_batch is not None:
        plan = replace(plan, beam_max_batch=args.beam_max_batch)
    if args.engine_seconds is not None:
        plan = replace(plan, engine_seconds=args.engine_seconds)
    if args.export_sentences is not None:
        plan = replace(plan, export_sentences=args.export_sentences)
    if args.clients:
        plan = replace(plan, clients=tuple(int(c) for c in args.clients.split(",")))
    if args.level_seconds is not None:
        plan = replace(plan, level_seconds=args.level_seconds)
    return plan


def _saved(workdir: Path, name: str) -> dict | None:
    path = workdir / "sections" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _save(workdir: Path, name: str, part: dict) -> None:
    path = workdir / "sections" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(part, indent=2) + "\n")


def _check_cuda() -> None:
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        raise SystemExit(
            f"--device cuda: onnxruntime {onnxruntime.__version__} has no CUDA provider "
            f"({onnxruntime.get_available_providers()}); see ../shared/gpu/README.md"
        )


def _engine(args, plan: Plan, report: dict) -> dict:
    tokenizer = Path(report["repository"]["directory"]) / "tokenizer.model"
    ids = sources(tokenizer, max(max(plan.batches), plan.parity_sentences))
    return EngineBench(args, plan, report["repository"], report["machine"], ids).run()


def _load(args, plan: Plan, report: dict, workdir: Path) -> dict:
    text = TEST_SOURCES.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    return LoadBench(args, plan, report["repository"], lines, workdir).run()


def _section(report: dict, workdir: Path, name: str, measure) -> None:
    """The report's section `name`: measured now (`measure()`) and kept in the workdir, or
    else an earlier run's kept there, when there is one."""
    if measure is not None:
        report[name] = measure()
        _save(workdir, name, report[name])
    elif _saved(workdir, name):
        report[name] = _saved(workdir, name) | {"from": "an earlier run (--workdir)"}


def run(args, workdir: Path) -> dict:
    plan = _plan(args)
    if args.device == "cuda":
        _check_cuda()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print("measuring the machine", file=sys.stderr)
    report: dict[str, Any] = {"machine": measure_machine(args.device, args.quick)}
    variants = ("fp32", "fp16")
    report["repository"] = repository_section(args, plan, workdir, variants)
    report["settings"] = {
        "quick": args.quick,
        "device": args.device,
        "command": " ".join(["python -m bench.gpu", *sys.argv[1:]]),
    }
    engine = partial(_engine, args, plan, report) if args.engine else None
    load = partial(_load, args, plan, report, workdir) if args.load else None
    _section(report, workdir, "engine", engine)
    _section(report, workdir, "load", load)
    report["goals"] = goals(report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    with contextlib.ExitStack() as stack:
        if args.workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-gpu-")))
        else:
            workdir = args.workdir.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
        report = run(args, workdir)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{REPORT}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / f"{REPORT}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
