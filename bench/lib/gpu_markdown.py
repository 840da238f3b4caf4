"""The GPU benchmark's report as Markdown: the machine, the model repository, the engine
level, the service level and the goals."""

from __future__ import annotations

import math

from bench.lib.reports import table_row
from service.worker.loop_clock import PHASES


def _number(value, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:,.{digits}f}"


def _machine_line(m: dict) -> str:
    if m["device"] == "cuda":
        smi = m.get("nvidia_smi", {})
        driver = f", driver {smi['driver_version']}" if "driver_version" in smi else ""
        return (
            f"**{m['name']}** ({m['memory_gib']:.0f} GiB{driver}), CUDA {m['cuda']} (torch's "
            f"build), onnxruntime {m['onnxruntime']} ({', '.join(m['providers'])}), torch "
            f"{m['torch']}, Python {m['python']}, {m['cpu_count']} CPUs."
        )
    return (
        f"**{m['name']}** (CPU only, {m['cpu']['usable_cpus']} usable CPUs), onnxruntime "
        f"{m['onnxruntime']}, Python {m['python']}."
    )


def _machine_lines(m: dict) -> list[str]:
    lines = [
        "# GPU benchmark" if m["device"] == "cuda" else "# GPU benchmark, run on the CPU",
        "",
        _machine_line(m),
        "",
        "## Machine",
        "",
        "| what | measured | how |",
        "|---|--:|---|",
        f"| memory bandwidth | {m['bandwidth_gb_s']:,.0f} GB/s | {m['bandwidth_method']} |",
    ]
    for name, rate in m["matmul_tflop_s"].items():
        lines.append(f"| matmul {name} | {rate:,.2f} TFLOP/s | {m['matmul_method']} |")
    return lines


def _repository_lines(r: dict) -> list[str]:
    c = r["certificate"]
    exported = f"yes, {r['export_seconds']:.0f} s" if r["exported"] else "no"
    made = r.get("graphs_made", {})
    return [
        "",
        "## Model repository",
        "",
        "| directory | exported here | variants (graphs) | certificate | decodes |",
        "|---|---|---|---|---|",
        f"| {r['directory']} | {exported} | "
        f"{', '.join(f'{v} ({made.get(v, chr(63))})' for v in r['variants'])} "
        f"| passed {c['passed']} over {c['sentences']} sentences "
        f"| {'; '.join(f'{k}: {v}' for k, v in c['decodes'].items())} |",
    ]


def _goal_lines(goals: list[dict]) -> list[str]:
    lines = [
        "",
        "## Goals",
        "",
        "| goal | measured | target | status |",
        "|---|--:|--:|---|",
    ]
    for g in goals:
        digits = 2 if g["unit"] in ("ms", "x") else 0
        note = f" ({g['note']})" if g["note"] else ""
        lines.append(
            f"| {g['goal']} | {_number(g['measured'], digits)} {g['unit']} "
            f"| {g['compare']} {_number(g['target'], digits)} | {g['status']}{note} |"
        )
    return lines


def markdown(report: dict) -> str:
    lines = _machine_lines(report["machine"]) + _repository_lines(report["repository"])
    lines += _engine_markdown(report.get("engine"))
    lines += _load_markdown(report.get("load"))
    lines += _goal_lines(report["goals"])
    return "\n".join(lines) + "\n"


def _section_head(title: str, part: dict | None, flag: str) -> list[str]:
    """A section's title, and where its figures come from (or that it was not run)."""
    lines = ["", f"## {title}", ""]
    if not part:
        return [*lines, f"not run ({flag})"]
    if part.get("from"):
        lines += [f"From {part['from']}.", ""]
    return lines


def _engine_intro(s: dict) -> str:
    return (
        f"Through service.runtime.decoding over CachedInference, every row forced to {s['length']} "
        f"tokens; {s['rounds']} timed rounds at most after 1 warm-up, median [min, max]. "
        "tokens/s: batch × length over the whole call (encoder included); ms/step: after the "
        "encoder, over length; limit: the least time of a step at mid-decode on this machine "
        "(weights + caches over bandwidth, or FLOPs over matrix rate); of limit: limit over "
        "ms/step; in runs: the part of ms/step inside onnxruntime's runs (the step, the search "
        "and helper graphs, synchronised), the rest being the host's decoding loop. "
        f"Parity: greedy outputs of the first {s['parity_sentences']} test sentences "
        f"identical to {s['reference']}. decode keywords: {s.get('decode_keywords') or 'none'}."
    )


def _engine_line(e: dict) -> str:
    parity = e.get("parity")
    same = f"{parity['identical']}/{parity['sentences']} identical" if parity else "–"
    step = e.get("single_step_ms", {}).get("median")
    extra = f" ({e.get('error') or e.get('not_timed')})" if not e["trusted"] else ""
    return f"| {e['label']} | {e.get('library', '–')} | {same}{extra} | {_number(step, 3)} |"


CASE_HEADER = [
    "| engine | batch | beam | rounds | tokens/s | ms/step | in runs ms/step | encoder ms "
    "| vs PyTorch | limit ms | of limit |",
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]


def _case_cells(part: dict, c: dict) -> list:
    t, step, runs = c["tokens_per_s"], c["ms_per_step"], c.get("runtime_ms_per_step")
    return [
        part["engines"][c["engine"]]["label"],
        c["batch"],
        c["beam"],
        c["rounds"],
        f"{_number(t['median'])} [{_number(t['min'])}, {_number(t['max'])}]",
        f"{step['median']:.3f} [{step['min']:.3f}, {step['max']:.3f}]",
        "–" if runs is None else f"{runs['median']:.3f}",
        f"{c['encoder_ms']['median']:.2f}",
        "–" if c["vs_torch"] is None else f"{c['vs_torch']:.2f}x",
        f"{c['limit']['ms']:.4f}",
        f"{c['of_limit']:.1%}",
    ]


def _engine_markdown(part: dict | None) -> list[str]:
    lines = _section_head("Engine level (translator)", part, "--no-engine")
    if not part:
        return lines
    lines += [
        _engine_intro(part["settings"]),
        "",
        "| engine | library | parity | batch-1 step ms (median) |",
        "|---|---|--:|--:|",
    ]
    lines += [_engine_line(e) for e in part["engines"].values()]
    lines += ["", *CASE_HEADER]
    lines += [table_row(_case_cells(part, c)) for c in part["cases"]]
    for skip in part["skipped"]:
        lines.append(f"\nNot run: batch {skip['batch']}, beam {skip['beam']}: {skip['reason']}.")
    lines.append(f"\nEngine section: {part['seconds']:.0f} s.")
    return lines


def _load_intro(part: dict) -> str:
    s, flags = part["settings"], part["flags"]
    return (
        f"`attnserve serve` with {' '.join(f'--{k} {v}' for k, v in flags.items())}, "
        f"{part.get('fronts', 1)} front process(es), {part.get('workers', '?')} worker(s) "
        f"(serving after {part['startup_s']:.1f} "
        f"s). {s['requests']}, max_length "
        f"{s['max_length']}; {s['client']}. {s['level_seconds']:g} s per level after a "
        f"{s['warmup_seconds']:g} s warm-up. CPU: seconds over the level."
    )


LEVEL_HEADER = [
    "| clients | client procs | requests | errors | req/s | tokens/s | tokens/answer "
    "| p50 ms | p99 ms | rows/step | step ms | CPU front | CPU workers | CPU clients |",
    "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]


def _level_cells(v: dict) -> list:
    latency, server = v["latency_ms"] or {}, v.get("server") or {}
    return [
        v["clients"],
        v["client_processes"],
        v["requests"],
        sum(v["errors"].values()),
        _number(v["requests_per_s"], 1),
        _number(v["tokens_per_s"]),
        _number(v["output_tokens_mean"], 1),
        _number(latency.get("p50"), 1),
        _number(latency.get("p99"), 1),
        _number(server.get("step_rows_mean"), 1),
        _number(server.get("step_ms_mean"), 2),
        *(_number(v["cpu_s"][k], 1) for k in ("front", "workers", "client")),
    ]


def _sentence_lines(sentence: dict) -> list[str]:
    if not sentence.get("latency_ms"):
        return ["", f"One sentence: {sentence.get('status')}"]
    latency = sentence["latency_ms"]
    return [
        "",
        f"One sentence, one client, one call at a time ({sentence['calls']} calls, "
        f"{sentence['output_tokens']:.0f} output tokens, max_length "
        f"{sentence['max_length']}): p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} "
        f"ms, mean {latency['mean']:.2f} ms.",
    ]


def _loop_lines(part: dict) -> list[str]:
    """The workers' loop a step at each level and at the sentence's one client: where its
    time went, in ms a step (service.worker.loop_clock's phases)."""
    rows = [(str(v["clients"]), v.get("server") or {}) for v in part["levels"]]
    rows.append(("1 (sentence)", part["sentence"].get("server") or {}))
    rows = [(name, server) for name, server in rows if server.get("loop_seconds")]
    if not rows:
        return []
    header = ["clients", "steps", *PHASES, "busy", "outbox"]
    lines = [
        "",
        "The workers' loop, ms a step (the phases of `attnserve_worker_loop_seconds_total`; "
        "busy: all but idle; outbox: its thread's sending beside the loop):",
        "",
        table_row(header),
        "|" + "--:|" * len(header),
    ]
    for name, server in rows:
        seconds, steps = server["loop_seconds"], max(server.get("steps") or 0, 1)
        spent = [seconds.get(phase, 0.0) for phase in PHASES]
        busy = sum(spent) - seconds.get("idle", 0.0)
        outbox = server.get("outbox_seconds") or 0.0
        cells = [_number(1000 * v / steps, 3) for v in (*spent, busy, outbox)]
        lines.append(table_row([name, server.get("steps"), *cells]))
    return lines


def _load_markdown(part: dict | None) -> list[str]:
    lines = _section_head("Service level (gRPC)", part, "--no-load")
    if not part:
        return lines
    if part["status"] != "run":
        return [*lines, part["status"]]
    lines += [_load_intro(part), "", *LEVEL_HEADER]
    lines += [table_row(_level_cells(v)) for v in part["levels"]]
    return lines + _sentence_lines(part["sentence"]) + _loop_lines(part)
