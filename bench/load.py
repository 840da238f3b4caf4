"""Load benchmark: the gRPC server under closed- and open-loop streaming traffic.

    python -m bench.load --json [--quick] [--model both|translator] [--repository ROOT]
        [--sources FILE] [--captioner-data DIR] [--seed N] [--slo-ms MS] [--workers N]
        [--max-batch-rows R] [--mixed-fraction F] [--caption-rate-share S] [--markdown FILE]

One script, one run, traffic to 127.0.0.1 only. The workload is a pool of Spanish test verses
(several concatenated for the long ones), each with a target output length drawn from 8..128
tokens (seeded) sent as its max_length; a source is kept when greedy decoding in process
reaches 90% of its target (most run to max_length). Every request is a TranslateStream call,
so the client sees every decoding step: time to first token is the first partial event,
inter-token latency the gaps between successive partial events, end-to-end the call's start
to its final result.

The run, in this order:
- in process: the pool decoded one request at a time with `OnnxEngine` (fp32, one thread,
  CPU) and `translate_ids` (tokenizing and detokenizing included): the reference answers;
- two servers started side by side (the default worker count, 64 batch rows), one with
  continuous batching, one with request-level batching (`--batching request
  --batch-window-ms 5`), both warmed up; only one is loaded at a time;
- the first requests one at a time, each over gRPC (continuous server) and in process in
  turn, alternating which goes first: the gRPC overhead with both on the same machine state;
- rounds: in each, closed loops at 1, 4, 16 and 32 clients on the continuous server and at
  16 and 32 on the request-level one (each client sends its next request when its previous
  one ends), in an order that rotates from round to round, so that a machine whose speed
  drifts (a shared host) weighs on every level alike; each level's figures pool its rounds;
- open loops on the continuous server with Poisson arrivals (the same seeded pattern,
  scaled) at fractions of its closed-loop throughput at the most clients.

With the captioner (--model both, the default; the repository holds both models and every
server serves both, in the same workers), also:
- a pool of test images of --captioner-data (seeded), each encoded as PNG and sent as it is
  with max_length the model's own (captions end where the model ends them), decoded in
  process one at a time with `OnnxEngine` (fp32, one thread) after the PNG decoding and the
  squeeze to the model's side that the server does: the reference answers;
- the first images one at a time over gRPC (CaptionStream and Caption) and in process in
  turn, as the translations are;
- closed loops of captions (CaptionStream) at 1 and 16 clients, in the same rounds as the
  translator's levels;
- mixed traffic: a translation open loop at a fixed rate (--mixed-fraction of the closed-loop
  throughput at the most clients), alone and beside a caption open loop (CaptionStream,
  Poisson, --caption-rate-share times that rate, over the same span), the two in turn with
  the same translation arrivals, in rounds that alternate which runs first.

Every level is bounded in requests and in time; both servers are stopped (SIGTERM, then
kill) whatever happens. The client is one asyncio loop with one grpc.aio channel per server;
its CPU time, that of the server's front and workers, and that of every other process (from
/proc) are reported per level, as are a few numbers from the server's Prometheus endpoint
(differences over the level's rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
from functools import partial
from pathlib import Path

from bench import machine
from bench.lib.levels import Bench
from bench.lib.load_markdown import markdown
from bench.lib.load_report import report
from bench.lib.paths import CAPTIONER_DATA, REPOSITORY, TEST_SOURCES
from bench.lib.repository import model_versions
from bench.lib.scheduler_loop import in_process_closed_loop, pooled
from bench.lib.summaries import spread
from bench.lib.traffic import Flow, Running, Traffic, caption_traffic, translation_traffic
from bench.lib.workload import InProcess, InProcessCaptioner, make_pictures, make_pool

FULL = {
    "closed": [(1, 16), (4, 32), (16, 64), (32, 128)],  # (clients, requests) per round
    "request_level": [(16, 64), (32, 128)],
    "rounds": 4,  # every closed-loop level of both servers once a round, in a rotating order
    "interleaved": 64,  # requests over gRPC and in process in turn, one at a time
    "open_fractions": [0.25, 0.5, 0.75, 1.0],  # of the closed-loop throughput at most clients
    "open_requests": 160,
    "targets": (8, 128),
    "warmup": 16,
    "level_seconds": 120.0,  # closed loop: no new request after; open loop: no arrival after
    "drain_seconds": 60.0,  # open loop: in-flight calls after the last arrival
    "caption_closed": [(1, 32), (16, 128)],  # captions: (clients, requests) per round
    "caption_interleaved": 64,  # images over gRPC and in process in turn
    "mixed_rounds": 2,  # translation open loops alone and beside captions, each once a round
}
QUICK = {
    "closed": [(1, 2), (4, 4), (16, 16), (32, 32)],
    "request_level": [(32, 32)],
    "rounds": 2,
    "interleaved": 4,
    "open_fractions": [0.5, 1.0],
    "open_requests": 12,
    "targets": (8, 24),
    "warmup": 4,
    "level_seconds": 30.0,
    "drain_seconds": 30.0,
    "caption_closed": [(1, 2), (16, 16)],
    "caption_interleaved": 4,
    "mixed_rounds": 1,
}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="few short requests per level")
    parser.add_argument(
        "--model", choices=("both", "translator"), default="both", help="both: captions too"
    )
    parser.add_argument("--repository", type=Path, default=REPOSITORY, help="repository root")
    parser.add_argument("--sources", type=Path, default=TEST_SOURCES, help="one verse a line")
    parser.add_argument(
        "--captioner-data", type=Path, default=CAPTIONER_DATA, help="its test split's images"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo-ms", type=float, default=1000.0, help="goodput's e2e bound")
    parser.add_argument("--workers", type=int, default=0, help="0: the server's default")
    parser.add_argument("--max-batch-rows", type=int, default=64)
    parser.add_argument(
        "--mixed-fraction",
        type=float,
        default=0.5,
        help="mixed levels: the translation rate, a fraction of the closed-loop throughput",
    )
    parser.add_argument(
        "--caption-rate-share",
        type=float,
        default=1.0,
        help="mixed levels: captions a second per translation a second",
    )
    parser.add_argument("--markdown", type=Path, help="write the results as Markdown")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        setattr(args, key, value)
    args.mixed_captions = max(1, round(args.open_requests * args.caption_rate_share))
    return args


# -- the traffic --------------------------------------------------------------------------


def _translations(args, version) -> Traffic:
    """The translation requests, each decoded in process: the reference answers."""
    local = InProcess(version)
    lines = [line for line in args.sources.read_text(encoding="utf-8").splitlines() if line]
    sizes = [n for _, n in args.closed + args.request_level]
    sizes += [args.open_requests, args.interleaved]
    print(f"choosing {max(sizes)} requests", file=sys.stderr)
    pool = make_pool(lines, local, max(sizes), args.targets, args.seed)
    print(f"in-process decode of {len(pool)} requests", file=sys.stderr)
    references = local.references(pool)
    return translation_traffic(version, pool, local, references)


def _captions(args, version) -> Traffic:
    """The test images, each captioned in process: the reference answers."""
    captioner = InProcessCaptioner(version)
    sizes = [n for _, n in args.caption_closed]
    sizes += [args.caption_interleaved, args.mixed_captions]
    print(f"choosing {max(sizes)} images", file=sys.stderr)
    pictures = make_pictures(args.captioner_data, max(sizes), captioner.limit, args.seed)
    print(f"in-process captions of {len(pictures)} images", file=sys.stderr)
    answers = captioner.references(pictures)
    return caption_traffic(version, pictures, captioner, answers)


# -- the levels ---------------------------------------------------------------------------


async def _mixed_rounds(args, bench: Bench, running: Running, *flows: Flow) -> tuple[list, list]:
    """The translation flow alone and beside the caption flow, in turn, in rounds that
    alternate which runs first: (alone, beside) measurements."""
    translation, beside = flows
    alone: list[dict] = []
    mixed: list[dict] = []
    for r in range(args.mixed_rounds):
        print(f"mixed round {r + 1} of {args.mixed_rounds}", file=sys.stderr)
        for measured in (alone, mixed) if r % 2 == 0 else (mixed, alone):
            flows = (translation,) if measured is alone else (translation, beside)
            measured.append(await bench.measure(running, *flows))
    return alone, mixed


async def _mixed(args, bench: Bench, running: Running, top: dict) -> dict:
    """Translation open loops at a fixed rate, alone and beside a caption open loop, in turn
    with the same translation arrivals (rounds alternate which runs first)."""
    saturation = top["throughput_rps"]
    rate = args.mixed_fraction * saturation
    translation = Flow(bench.translation, "open", rate, args.open_requests)
    captions = bench.traffic["captioner"]
    beside = Flow(captions, "open", args.caption_rate_share * rate, args.mixed_captions, seed=1)
    alone, mixed = await _mixed_rounds(args, bench, running, translation, beside)
    entry = {"server": "continuous", "load": "open", "fraction": args.mixed_fraction}
    entry |= {"rate_rps": rate, "saturation_rps": saturation}
    result = {"fraction": args.mixed_fraction, "rate_rps": rate, "saturation_rps": saturation}
    result |= {"caption_rate_rps": beside.value, "rounds": args.mixed_rounds}
    for key, measured in (("alone", alone), ("mixed", mixed)):
        level = bench.level(entry | {"beside": "captions" if key == "mixed" else None}, measured)
        runs = [m["runs"][0]["samples"] for m in measured]
        e2e = [[s.end - s.start for s in samples if s.code == "OK"] for samples in runs]
        level["round_e2e_p99_ms"] = [(spread(seconds) or {}).get("p99") for seconds in e2e]
        result[key] = level
    entry = {"server": "continuous", "load": "open", "model": "captioner"}
    entry |= {"fraction": beside.value / saturation, "rate_rps": beside.value}
    result["captions"] = bench.level(entry | {"beside": "translations"}, mixed, flow=1)
    return result


async def _in_process(args, bench: Bench, clients: int, count: int, workers: int) -> dict:
    """The closed loop's requests through the same scheduler in processes of their own."""
    what = f"{count} requests, {clients} in flight, {workers} schedulers"
    print(f"in process: {what}", file=sys.stderr)
    pool, version = bench.translation.pool[:count], bench.translation.local.version
    run = partial(in_process_closed_loop, version, pool, clients, workers, args.max_batch_rows)
    return await asyncio.get_running_loop().run_in_executor(None, run)


async def _rounds(args, bench: Bench, servers: dict, specs: list, workers: int) -> dict:
    """Every closed-loop level of `specs` (server, clients, requests, model) once a round, in
    an order that rotates from round to round: {spec: its rounds' measurements}."""
    measured: dict = {spec: [] for spec in specs}
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr)
        for spec in specs[r % len(specs) :] + specs[: r % len(specs)]:
            name, clients, count, model = spec
            if name == "in-process":
                measured[spec].append(await _in_process(args, bench, clients, count, workers))
                continue
            flow = Flow(bench.traffic[model], "closed", clients, count)
            measured[spec].append(await bench.measure(servers[name], flow))
    return measured


def _closed_entry(spec: tuple) -> dict:
    entry = {"server": spec[0], "load": "closed", "clients": spec[1]}
    entry["requests_per_round"] = spec[2]
    if spec[3] != "translator":
        entry["model"] = spec[3]
    return entry


async def _open_levels(args, bench: Bench, running: Running, top: dict) -> list[dict]:
    """Open loops at fractions of the closed-loop throughput at the most clients."""
    opened = []
    for fraction in args.open_fractions:
        rate = fraction * top["throughput_rps"]
        entry = {"server": "continuous", "load": "open", "fraction": fraction}
        entry |= {"rate_rps": rate, "saturation_rps": top["throughput_rps"]}
        flow = Flow(bench.translation, "open", rate, args.open_requests)
        opened.append(bench.level(entry, [await bench.measure(running, flow)]))
    return opened


async def _levels(args, bench: Bench, servers: dict[str, Running]) -> dict:
    """Every level against the started servers: {levels, caption_levels, mixed,
    scheduler_loop}."""
    captions = bench.traffic.get("captioner")
    await bench.interleaved(servers["continuous"], args.interleaved, bench.translation)
    if captions:
        await bench.interleaved(servers["continuous"], args.caption_interleaved, captions)
    specs = [("continuous", c, n, "translator") for c, n in args.closed]
    if captions:
        specs += [("continuous", c, n, "captioner") for c, n in args.caption_closed]
    specs += [("request", c, n, "translator") for c, n in args.request_level]
    # the same requests as the continuous server's closed loop at 16 clients, through the
    # same scheduler in processes of their own: the serving overhead, in the same rounds
    clients, count = next(((c, n) for c, n in args.closed if c == 16), args.closed[-1])
    in_process = ("in-process", clients, count, "translator")
    workers = len(servers["continuous"].server.state.get("workers", [])) or 1
    measured = await _rounds(args, bench, servers, [*specs, in_process], workers)
    scheduler_loop = pooled(measured.pop(in_process), clients, workers)
    closed = {spec: bench.level(_closed_entry(spec), measured[spec]) for spec in specs}
    top = closed["continuous", *args.closed[-1], "translator"]
    opened = await _open_levels(args, bench, servers["continuous"], top)
    mixed = await _mixed(args, bench, servers["continuous"], top) if captions else None
    translator = [s for s in specs if s[3] == "translator"]
    levels = [closed[s] for s in translator if s[0] == "continuous"] + opened
    levels += [closed[s] for s in translator if s[0] == "request"]
    caption_levels = [closed[s] for s in specs if s[3] == "captioner"]
    measured = {"levels": levels, "caption_levels": caption_levels, "mixed": mixed}
    return measured | {"scheduler_loop": scheduler_loop}


async def _measure_all(args, bench: Bench, directory: Path) -> tuple[dict, dict]:
    """Both servers, every level; ({levels, caption_levels, mixed, scheduler_loop}, server
    descriptions). The servers are stopped whatever happens."""
    common = ["--workers", str(args.workers), "--max-batch-rows", str(args.max_batch_rows)]
    flags = {
        "continuous": ["--batching", "continuous", *common],
        "request": ["--batching", "request", "--batch-window-ms", "5", *common],
    }
    servers: dict[str, Running] = {}
    descriptions: dict = {}
    try:
        for name, server_flags in flags.items():
            servers[name] = bench.launch(name, server_flags, directory)
        for running in servers.values():
            await bench.ready(running)
        measured = await _levels(args, bench, servers)
    finally:
        for name, running in servers.items():
            descriptions[name] = await bench.close(running)
    return measured, descriptions


# -- the run ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers are stopped on exit
    os.environ.update(dict.fromkeys(machine.THREAD_VARIABLES, "1"))
    print("measuring the machine", file=sys.stderr)
    limits = machine.measure_in_subprocess(args.quick)
    wanted = ["translator", "captioner"] if args.model == "both" else ["translator"]
    versions = model_versions(args.repository, wanted)
    traffic = {"translator": _translations(args, versions["translator"])}
    if "captioner" in versions:
        traffic["captioner"] = _captions(args, versions["captioner"])
    bench = Bench(args, traffic)
    with tempfile.TemporaryDirectory(prefix="bench-load-") as directory:
        measured, servers = asyncio.run(_measure_all(args, bench, Path(directory)))
    result = report(args, limits, bench, measured, servers)
    text = markdown(result)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text, encoding="utf-8")
    print(json.dumps(result, indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
