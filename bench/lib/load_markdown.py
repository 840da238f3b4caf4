"""The load benchmark's report as Markdown: what ran, a table of each level's client-side
figures and one of its server-side figures and CPU, the in-process reference, the goals; the
same for the captioner."""

from __future__ import annotations

from bench.lib.load_goals import find_level
from bench.lib.reports import table_row
from bench.lib.workload import NEAR


def _pair(spread_: dict | None) -> str:
    return "–" if spread_ is None else f"{spread_['p50']:.1f} / {spread_['p99']:.1f}"


def _number(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _load(level: dict) -> str:
    if level["load"] == "closed":
        return f"closed, {level['clients']} client{'s' if level['clients'] > 1 else ''}"
    return f"open, {level['rate_rps']:.1f}/s ({level['fraction']:.0%})"


LEVEL_HEADER = [
    "| server | load | requests | errors | correct | TTFT | ITL | e2e | req/s | tokens/s "
    "| goodput |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]
SERVER_HEADER = [
    "| server | load | rows/step | step ms | encoder ms | queue ms | TTFT ms | ITL ms "
    "| CPU client | CPU front | CPU workers | CPU other |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]


def _level_row(level: dict, first: str) -> str:
    """A level's client-side figures, after its first cell (the server, or the traffic)."""
    cells = [first, _load(level), level["requests"]]
    cells += [sum(level["errors"].values()), level["correct"]]
    cells += [_pair(level[key]) for key in ("ttft_ms", "itl_ms", "e2e_ms")]
    cells += [f"{level['throughput_rps']:.1f}", f"{level['output_tokens_per_s']:.0f}"]
    cells.append(f"{level['goodput_rps']:.1f}")
    return table_row(cells)


def _server_row(level: dict, first: str) -> str:
    """A level's server-side figures and CPU, after its first cell."""
    metrics, cores = level["server_metrics"], level["cpu_cores"]
    cells = [first, _load(level), _number(metrics["step_rows_mean"])]
    for key in ("step_ms_mean", "encoder_ms_mean", "queue_wait_ms_mean", "ttft_ms_mean"):
        cells.append(_number(metrics[key], 2 if key == "step_ms_mean" else 1))
    cells.append(_number(metrics["itl_ms_mean"], 2))
    cells += [f"{cores[k]:.2f}" for k in ("client", "front", "workers", "other")]
    return table_row(cells)


def _goal_lines(part: dict) -> list[str]:
    """The goals table and the other ratios of a part of the report."""
    lines = ["| goal | ratio [min, max over rounds] | target | |", "|---|--:|--:|---|"]
    for g in part["goals"]:
        verdict = "met" if g["met"] else "missed"
        ratio = f"{g['ratio']:.2f}"
        if g.get("per_round"):
            ratio += f" [{min(g['per_round']):.2f}, {max(g['per_round']):.2f}]"
        lines.append(f"| {g['goal']} | {ratio} | {g['compare']} {g['target']:g} | {verdict} |")
    judged = {g["goal"] for g in part["goals"]}
    extra = [(k, v) for k, v in part["ratios"].items() if k not in judged and v is not None]
    if extra:
        lines += [""] + [f"- {k}: {v:.2f}" for k, v in extra]
    return lines


def _intro(report: dict) -> str:
    """What the machine, the servers, the client and the workload were, and what the figures
    mean."""
    m, s, w = report["machine"], report["settings"], report["workload"]
    return (
        f"{m['cpu']}, {m['usable_cpus']} CPUs, shared by the server and the client. Server: "
        f"{s['workers']} workers (one per core), fp32, one compute thread each, max batch rows "
        f"{s['max_batch_rows']}; the continuous and the request-level server both run "
        f"throughout, one loaded at a time. Client: one asyncio loop, one grpc.aio channel per "
        "server, TranslateStream for every request, greedy. Workload: "
        f"{w['pool']} requests, target output {w['targets'][0]} to {w['targets'][1]} tokens "
        f"(mean {w['target_mean']:.0f}) sent as max_length; decoded in process, "
        f"{w['at_target_in_process']:.0%} of the outputs reach it and "
        f"{w['near_target_in_process']:.0%} reach {NEAR:.0%} of it. Closed loops run in "
        f"{s['rounds']} rounds, every level once a round in a rotating order; open loops once "
        "each, after them. Times in ms, p50 / p99 over every round: TTFT to the first partial "
        "event, ITL between partial events, e2e to the final result. req/s and tokens/s: "
        "answers over the windows in which every client was busy (closed loop: first send to "
        "last send) or first send to last answer (open loop), summed over the rounds. Goodput: "
        f"correct answers within {s['slo_ms']:.0f} ms end to end, per second of the same "
        "windows. Correct: identical to the in-process decode, with one partial event per step."
    )


SERVER_SIDE = (
    "Server side over each level (Prometheus histograms, means): rows per decode step, "
    "step and encoder time, queue wait, time to first token and inter-token latency as "
    "the server measures them; and CPU cores used during the level by the client, the "
    "front process, all workers together, and every other process on the machine (from "
    "/proc and the client's process time)."
)


def _in_process_lines(report: dict) -> list[str]:
    """The in-process decode, alone and in turn with gRPC; the same scheduler in process."""
    local, turn = report["in_process"]["decode_ms"], report["in_process"]["interleaved"]
    lines = [
        "",
        f"In process (fp32, one thread, one request at a time), before the servers started: "
        f"p50 / p99 {local['p50']:.1f} / {local['p99']:.1f} ms over the {local['n']} requests. "
        f"In turn with gRPC (the first {turn['requests']} requests one at a time, each over "
        f"gRPC to the continuous server, streaming and unary, and in process, in a rotating "
        f"order): gRPC "
        f"e2e {_pair(turn['grpc_e2e_ms'])} ms streaming, {_pair(turn['grpc_unary_e2e_ms'])} "
        f"ms unary, in process {_pair(turn['in_process_ms'])} ms.",
    ]
    loop = report["in_process"].get("scheduler_loop")
    if loop:
        lines += [
            "",
            f"Through the same scheduler in process: the requests of the closed loop at "
            f"{loop['clients']} clients, in {loop['processes']} processes (one per server "
            f"worker, the clients shared), the worker's Scheduler over OnnxEngine, tokenizing "
            f"and detokenizing included: {loop['throughput_rps']:.1f} req/s, "
            f"{loop['tokens_per_s']:.0f} tokens/s (pooled over {len(loop['rounds'])} rounds, "
            "run in the rounds of the closed loops).",
        ]
    return lines


def _cpu_per_token(report: dict) -> list[str]:
    """CPU ms per output token at the closed loop the scheduler ran in process (16 clients)."""
    loop = report["in_process"].get("scheduler_loop")
    level = find_level(report["levels"], "continuous", "closed", (loop or {}).get("clients", 16))
    if not (level and level["output_tokens"]["total"]):
        return []
    tokens = level["output_tokens"]["total"]
    # every output token of the level's rounds, all answers counted
    cost = ", ".join(f"{k} {1e3 * v / tokens:.3f}" for k, v in level["cpu_s"].items())
    return ["", f"CPU ms per output token at {level['clients']} clients: {cost}."]


def markdown(report: dict) -> str:
    lines = [_intro(report), "", *LEVEL_HEADER]
    lines += [_level_row(level, level["server"]) for level in report["levels"]]
    lines += ["", SERVER_SIDE, "", *SERVER_HEADER]
    lines += [_server_row(level, level["server"]) for level in report["levels"]]
    lines += _in_process_lines(report) + _cpu_per_token(report)
    lines += ["", *_goal_lines(report)]
    if report.get("captioner"):
        lines += ["", *_captioner_markdown(report["captioner"])]
    return "\n".join(lines) + "\n"


def _captioner_markdown(part: dict) -> list[str]:
    w, mixed = part["workload"], part["mixed"]
    local, turn = part["in_process"]["decode_ms"], part["in_process"]["interleaved"]
    rows = [(level, f"captions, {level['server']}") for level in part["levels"]]
    rows += [
        (mixed["alone"], "translations alone"),
        (mixed["mixed"], "translations beside captions"),
        (mixed["captions"], "captions beside translations"),
    ]
    lines = [
        f"Captioner, served by the same servers and workers: {w['pool']} test images (seeded), "
        f"sent as PNG ({w['png_bytes_mean'] / 1024:.1f} KiB on average) with max_length "
        f"{w['max_length']}, the model's own; decoded in process, "
        f"{w['finished_in_process']:.0%} of the captions end with `</s>`, "
        f"{w['output_tokens_in_process_mean']:.1f} tokens on average. Closed loops of "
        "CaptionStream calls in the translator's rounds. Mixed: a translation open loop "
        f"(TranslateStream) at {mixed['rate_rps']:.1f}/s ({mixed['fraction']:.0%} of the "
        "continuous server's closed-loop throughput at the most clients) alone, and beside a "
        f"caption open loop (CaptionStream) at {mixed['caption_rate_rps']:.1f}/s over the same "
        f"span, the two in turn in {mixed['rounds']} round{'s' if mixed['rounds'] > 1 else ''}, "
        "with the same translation "
        "arrivals. Times, rates and correctness as above; a mixed level's server-side figures "
        "are its own model's, its CPU that of the whole level.",
        "",
        LEVEL_HEADER[0].replace("| server |", "| traffic |"),
        LEVEL_HEADER[1],
    ]
    lines += [_level_row(level, first) for level, first in rows]
    lines += ["", SERVER_HEADER[0].replace("| server |", "| traffic |"), SERVER_HEADER[1]]
    lines += [_server_row(level, first) for level, first in rows]
    lines += [
        "",
        f"In process (the PNG decoded and squeezed as the server does, fp32, one thread, one "
        f"image at a time), before the servers started: p50 / p99 {local['p50']:.1f} / "
        f"{local['p99']:.1f} ms over the {local['n']} images. In turn with gRPC (the first "
        f"{turn['requests']} images): gRPC e2e {_pair(turn['grpc_e2e_ms'])} ms streaming, "
        f"{_pair(turn['grpc_unary_e2e_ms'])} ms unary, in process "
        f"{_pair(turn['in_process_ms'])} ms.",
        "",
        *_goal_lines(part),
    ]
    return lines
