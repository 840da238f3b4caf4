"""Soak: a server under steady mixed load for minutes, its processes' memory and files watched.

    python -m bench.soak --minutes 30 [--clients 6] [--repository ROOT] [--workers N]
        [--sample-seconds 5] [--warmup-fraction 0.2] [--json FILE]

One server on 127.0.0.1 (bench.lib.server.Server); `--clients` threads send, round robin, unary
translations (a few Spanish sentences, greedy or beam 4), translation streams and captions of
the bundled scene (when the repository serves a captioner), each with a deadline. Every
`--sample-seconds` the resident memory (VmRSS) and open file descriptors of the front and of
every worker (its children at that moment) are sampled. After the warm-up (the first
`--warmup-fraction` of the run), growth is the mean of the last three samples over the mean of
the first three, per process and summed; the goal is at most 5% and zero errors. The run
ends by itself after `--minutes` and stops the server (SIGTERM: drain).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import threading
import time
from pathlib import Path

import grpc

from bench.lib.paths import REPOSITORY, ROOT
from bench.lib.processes import sample
from bench.lib.reports import print_report
from bench.lib.sentence_loads import SENTENCES
from bench.lib.server import Server
from service import client

GOAL_GROWTH = 0.05


def growth(samples: list[dict], warmup: float) -> dict:
    """Relative growth of every measure after the warm-up: mean of the last three samples
    over the mean of the first three."""
    if not samples:
        return {}
    start = samples[0]["t"] + warmup
    steady = [s for s in samples if s["t"] >= start] or samples[-1:]
    head, tail = steady[:3], steady[-3:]
    result = {}
    for process in ("front", "workers"):
        for measure in ("rss_kb", "fds"):
            first = sum(s[process][measure] for s in head) / len(head)
            last = sum(s[process][measure] for s in tail) / len(tail)
            result[f"{process}_{measure}"] = round((last - first) / first, 4) if first else 0.0
    return result


def _client(
    address: str,
    stop: threading.Event,
    deadline: float,
    image: bytes | None,
    counts: collections.Counter,
    lock: threading.Lock,
    index: int,
) -> None:
    with client.connect(address) as channel:
        for turn in range(index, 1 << 62):
            if stop.is_set():
                return
            kind = ("unary", "stream", "beam", "caption")[turn % (4 if image else 3)]
            text = SENTENCES[turn % len(SENTENCES)]
            try:
                if kind == "unary":
                    client.translate(channel, [text, text[::-1]], timeout=deadline)
                elif kind == "beam":
                    client.translate(channel, [text], beam_size=4, timeout=deadline)
                elif kind == "stream":
                    list(client.translate_stream(channel, text, timeout=deadline))
                else:
                    client.caption(channel, [image], timeout=deadline)
                code = "OK"
            except grpc.RpcError as error:
                code = error.code().name
            with lock:
                counts[kind, code] += 1


def soak(args) -> dict:
    directory = Path(tempfile.mkdtemp(prefix="attnserve-soak-"))
    flags = ["--workers", str(args.workers)] if args.workers else []
    server = Server(args.repository, directory, flags)
    try:
        state = asyncio.run(server.wait())
        has_captioner = any(Path(args.repository).glob("captioner/*/manifest.json"))
        image = (ROOT / "examples" / "scene.png").read_bytes() if has_captioner else None
        stop, lock, counts = threading.Event(), threading.Lock(), collections.Counter()
        shared = (server.address, stop, args.deadline, image, counts, lock)
        threads = [
            threading.Thread(target=_client, args=(*shared, i), daemon=True)
            for i in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        samples, end = [], time.monotonic() + args.minutes * 60
        while time.monotonic() < end:
            samples.append(sample(server.process.pid))
            time.sleep(min(args.sample_seconds, max(0.0, end - time.monotonic())))
        samples.append(sample(server.process.pid))
        stop.set()
        for thread in threads:
            thread.join(args.deadline + 5)
    finally:
        exit_code = server.stop()
    by_kind = collections.defaultdict(dict)
    for (kind, code), count in sorted(counts.items()):
        by_kind[kind][code] = count
    errors = sum(c for (_, code), c in counts.items() if code != "OK")
    grew = growth(samples, args.minutes * 60 * args.warmup_fraction)
    return {
        "minutes": args.minutes,
        "clients": args.clients,
        "workers": len(state.get("workers", [])),
        "calls": by_kind,
        "errors": errors,
        "samples": len(samples),
        "first": samples[0] if samples else None,
        "last": samples[-1] if samples else None,
        "growth_after_warmup": grew,
        "goal": {
            "growth_at_most": GOAL_GROWTH,
            "met": errors == 0 and all(v <= GOAL_GROWTH for v in grew.values()),
        },
        "server_exit_code": exit_code,
    }


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--workers", type=int, default=0, help="0: the server's default")
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--warmup-fraction", type=float, default=0.2)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds per call")
    parser.add_argument("--json", type=Path, help="write the report here too")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    report = soak(args)
    print_report(report, args.json)
    return 0 if report["goal"]["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
