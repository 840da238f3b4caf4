"""A line a service level of `bench.gpu` reports, for reading several servers side by side.

    python -m bench.gpu_levels REPORT.json LABEL [REPORT.json LABEL ...]

For each report's levels: clients, tokens/s, p50 and p99 latency, rows a step and a step's
time, the jobs' wait in the worker's queue, the encoder's runs and their mean time, the time
to first token at p50, the runs that held the device alone (CUDA graphs recorded), the
workers restarted, and the fronts' CPU (cores, and ms a call); then the 30-token sentence at
one client (p50, p99) with the worker's loop busy a call, and that loop's time a step by
phase. A report with no service level (its server could not start) prints why.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def level_line(label: str, level: dict) -> str:
    """One level's figures in a line."""
    server = level.get("server") or {}
    cpu, latency = level.get("cpu_s") or {}, level.get("latency_ms") or {}
    calls = level.get("requests_per_s", 0.0) * level.get("seconds", 0.0)
    front = cpu.get("front")
    per_call = None if front is None or not calls else 1000 * front / calls
    cores = (level.get("cpu_cores") or {}).get("front")
    return (
        f"{label} clients={level['clients']} tokens/s={_number(level['tokens_per_s'], 0)}"
        f" p50={_number(latency.get('p50'))} p99={_number(latency.get('p99'))}"
        f" rows/step={_number(server.get('step_rows_mean'))}"
        f" step_ms={_number(server.get('step_ms_mean'), 2)}"
        f" queue_ms={_number(server.get('queue_wait_ms_mean'), 2)}"
        f" encoder_runs={server.get('encoder_runs', '-')}"
        f" encoder_ms={_number(server.get('encoder_ms_mean'), 2)}"
        f" ttft_p50={_number(server.get('ttft_ms_p50'))}"
        f" alone_runs={server.get('device_alone_runs', '-')}"
        f" restarts={server.get('worker_restarts', '-')}"
        f" front_cores={_number(cores, 2)} front_ms_a_call={_number(per_call, 2)}"
    )


def sentence_lines(label: str, sentence: dict) -> list[str]:
    """The 30-token sentence's latency, and the worker's loop: busy ms a call, ms a step by
    phase."""
    if "latency_ms" not in sentence:
        return [f"{label} sentence: {sentence.get('status', 'not run')}"]
    server = sentence.get("server") or {}
    latency, steps = sentence["latency_ms"], server.get("steps") or 0
    phases = server.get("loop_seconds") or {}
    busy = sum(seconds for phase, seconds in phases.items() if phase != "idle")
    calls = sentence.get("calls") or 0
    lines = [
        f"{label} sentence p50={_number(latency.get('p50'), 2)}"
        f" p99={_number(latency.get('p99'), 2)}"
        f" calls={calls} steps/call={_number(steps / calls if calls else None)}"
        f" loop_busy_ms_a_call={_number(1000 * busy / calls if calls else None, 2)}"
    ]
    if steps:
        each = " ".join(f"{p}={1000 * s / steps:.3f}" for p, s in sorted(phases.items()))
        lines.append(f"{label} sentence loop ms a step: {each}")
    return lines


def report_lines(label: str, report: dict) -> list[str]:
    """Every level of one report, then its sentence."""
    load = report.get("load") or {}
    if "levels" not in load:
        return [f"{label}: {load.get('status', 'no service level')}"]
    lines = [level_line(label, level) for level in load["levels"]]
    return lines + sentence_lines(label, load.get("sentence") or {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "reports", nargs="+", metavar="REPORT.json LABEL", help="a report and its label, each"
    )
    args = parser.parse_args(argv)
    if len(args.reports) % 2:
        parser.error("each report needs its label")
    for path, label in zip(args.reports[::2], args.reports[1::2], strict=True):
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            print(f"{label}: no report ({error})")
            continue
        print("\n".join(report_lines(label, report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
