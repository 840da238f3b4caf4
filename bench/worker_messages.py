"""What reading a front's messages costs a worker's loop, per message: the connection's own
`recv` and `poll(0)` (three system calls a message) against `Inbox.read` (one read for all
that waits: service.worker.inbox).

    python -m bench.worker_messages [--messages 6000] [--burst 1,3] [--rounds 3]

A front process sends Submit messages of a one-sentence translation (a 30-token source) in
bursts of `--burst`, a pause after each, so that each wake of the reader finds one burst;
the reader, the worker's side, waits for its link as the loop does and is timed from the
wake to the last message of the burst taken (unpickled), in CPU time of its thread and in
wall time. The two ways take turns, round by round, in one run. Prints microseconds a
message and the ratio of the connection's way over the inbox's.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from multiprocessing.connection import wait

import numpy as np

from service.runtime.decoding import DecodingOptions
from service.worker.inbox import Inbox, one_by_one
from service.worker.messages import Job, Submit

PAUSE = 0.0005  # seconds after each burst, so that a wake finds one burst


def _message(job_id: int) -> Submit:
    ids = np.arange(4, 34, dtype=np.int64)[None]
    job = Job(job_id, {"src_ids": ids, "src_mask": np.ones_like(ids)}, DecodingOptions())
    return Submit("translator/1", job, time.monotonic())


def _front(link, messages: int, burst: int) -> None:
    sent = 0
    while sent < messages:
        for _ in range(min(burst, messages - sent)):
            link.send(_message(sent))
            sent += 1
        time.sleep(PAUSE)
    link.send(None)  # the end


def _round(way: str, messages: int, burst: int) -> dict:
    reader, writer = mp.Pipe()
    front = mp.get_context("spawn").Process(target=_front, args=(writer, messages, burst))
    front.start()
    writer.close()
    inbox = Inbox(reader) if way == "inbox" else None
    cpu = wall = 0.0
    taken, ended = 0, False
    while not ended:
        wait([reader])
        cpu_from, wall_from = time.thread_time(), time.perf_counter()
        got = inbox.read() if inbox is not None else one_by_one(reader)
        cpu += time.thread_time() - cpu_from
        wall += time.perf_counter() - wall_from
        ended = bool(got) and got[-1] is None
        taken += len(got) - ended
    front.join(30)
    if inbox is not None:
        inbox.close()
    reader.close()
    if taken != messages:
        raise RuntimeError(f"{way}: {taken} of {messages} messages read")
    return {"cpu_us": 1e6 * cpu / taken, "wall_us": 1e6 * wall / taken}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=6000, help="a round's, each way")
    parser.add_argument("--burst", default="1,3", help="messages a wake finds, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    args = parser.parse_args(argv)
    results = []
    for burst in (int(b) for b in args.burst.split(",")):
        rounds = {"connection": [], "inbox": []}
        for _ in range(args.rounds):
            for way in rounds:
                rounds[way].append(_round(way, args.messages, burst))
        row = {"burst": burst}
        for way, measured in rounds.items():
            for key in ("cpu_us", "wall_us"):
                row[f"{way}_{key}"] = statistics.median(m[key] for m in measured)
        row["cpu_ratio"] = row["connection_cpu_us"] / row["inbox_cpu_us"]
        row["wall_ratio"] = row["connection_wall_us"] / row["inbox_wall_us"]
        results.append(row)
        if not args.json:
            print(
                f"burst {burst}: connection {row['connection_cpu_us']:.1f} us CPU "
                f"({row['connection_wall_us']:.1f} wall) a message, inbox "
                f"{row['inbox_cpu_us']:.1f} ({row['inbox_wall_us']:.1f}): "
                f"{row['cpu_ratio']:.2f}x CPU, {row['wall_ratio']:.2f}x wall"
            )
    if args.json:
        report = {"messages": args.messages, "rounds": args.rounds, "results": results}
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
