"""The load benchmark's ratios, each (what, ratio, compare, target, per-round ratios), and its
goals: the ratios with a target, met or missed."""

from __future__ import annotations

from bench.lib.summaries import spread


def find_level(levels: list[dict], server: str, load: str, clients: int | None = None):
    """The first level of `server` under `load` (at `clients`, when given), else None."""
    for level in levels:
        same = level["server"] == server and level["load"] == load
        if same and (clients is None or level.get("clients") == clients):
            return level
    return None


def _per_round(a: dict, b: dict, key: str = "round_throughput_rps") -> list[float]:
    return [x / y for x, y in zip(a[key], b[key], strict=False) if x is not None and y]


def _in_process_rows(levels: list[dict], scheduler_loop: dict | None) -> list[tuple]:
    """The closed loop over gRPC against the same requests through the same scheduler."""
    in_process = find_level(levels, "continuous", "closed", (scheduler_loop or {}).get("clients"))
    if not (in_process and scheduler_loop["throughput_rps"]):
        return []
    text = (
        f"throughput over gRPC at {in_process['clients']} clients / the same requests "
        f"through the same scheduler in process ({scheduler_loop['processes']} processes)"
    )
    ratio = in_process["throughput_rps"] / scheduler_loop["throughput_rps"]
    rounds = zip(in_process.get("round_throughput_rps", []), scheduler_loop["rounds"], strict=False)
    per_round = [a / b["throughput_rps"] for a, b in rounds]
    return [(text, ratio, ">=", 0.85, per_round)]


def _turn_rows(paired: dict) -> list[tuple]:
    """gRPC against in process, the same requests in turn."""
    if not (paired and paired["errors"] == 0):
        return []
    count = paired["requests"]
    text = (
        f"e2e p50 over gRPC (Translate) at 1 client / in-process decode p50, the same "
        f"{count} requests in turn"
    )
    rows = [(text, paired["ratio_of_medians_unary"], "<=", 1.15, None)]
    text = "the same with TranslateStream (a partial event every step)"
    rows.append((text, paired["ratio_of_medians"], "<=", None, None))
    text = "median per request of e2e over gRPC / in-process decode, in turn"
    rows.append((text, paired["median_of_ratios"], "<=", None, None))
    return rows


def _request_level_rows(levels: list[dict], args) -> list[tuple]:
    """Continuous against request-level batching, at every client count of the latter."""
    rows = []
    top = max(c for c, _ in args.request_level)
    for clients_, _ in args.request_level:
        ours = find_level(levels, "continuous", "closed", clients_)
        theirs = find_level(levels, "request", "closed", clients_)
        if not (ours and theirs and theirs["throughput_rps"]):
            continue
        speedup = ours["throughput_rps"] / theirs["throughput_rps"]
        text = f"continuous / request-level batching throughput, {clients_} clients"
        target = 1.3 if clients_ == top else None
        rows.append((text, speedup, ">=", target, _per_round(ours, theirs)))
        if ours["e2e_ms"] and theirs["e2e_ms"]:
            tail = ours["e2e_ms"]["p99"] / theirs["e2e_ms"]["p99"]
            text = f"continuous / request-level batching e2e p99, {clients_} clients"
            rows.append((text, tail, "<", 1.0 if clients_ == top else None, None))
    return rows


def ratios(
    levels: list[dict], paired: dict, references: list[dict], args, scheduler_loop=None
) -> list[tuple]:
    """(what, ratio, compare, target, per-round ratios) of this run; those with a target
    are goals."""
    clients = [c for c, _ in args.closed]
    one, many = min(clients), 16 if 16 in clients else max(clients)
    single = find_level(levels, "continuous", "closed", one)
    multi = find_level(levels, "continuous", "closed", many)
    rows = _in_process_rows(levels, scheduler_loop)
    if single and multi and single["throughput_rps"]:
        speedup = multi["throughput_rps"] / single["throughput_rps"]
        text = f"throughput at {many} clients / at {one} client, continuous batching"
        rows.append((text, speedup, ">=", 4.0, _per_round(multi, single)))
    rows += _turn_rows(paired)
    if single and single["e2e_ms"]:
        local = spread([r["seconds"] for r in references[: single["requests_per_round"]]])
        text = (
            f"e2e p50 of the closed loop at {one} client / in-process decode p50 measured "
            "before the servers started, the same requests"
        )
        rows.append((text, single["e2e_ms"]["p50"] / local["p50"], "<=", None, None))
    return rows + _request_level_rows(levels, args)


def caption_ratios(part: dict, args) -> list[tuple]:
    """(what, ratio, compare, target, per-round ratios) of the captioner's part; those with a
    target are goals."""
    rows, paired = [], part["in_process"]["interleaved"]
    if paired and paired["errors"] == 0:
        text = (
            f"caption e2e p50 over gRPC (Caption) at 1 client / in-process p50 (PNG decoding "
            f"included), the same {paired['requests']} images in turn"
        )
        rows.append((text, paired["ratio_of_medians_unary"], "<=", 1.15, None))
        text = "the same with CaptionStream (a partial event every step)"
        rows.append((text, paired["ratio_of_medians"], "<=", None, None))
        text = "median per image of caption e2e over gRPC / in process, in turn"
        rows.append((text, paired["median_of_ratios"], "<=", None, None))
    clients = [c for c, _ in args.caption_closed]
    single = find_level(part["levels"], "continuous", "closed", min(clients))
    multi = find_level(part["levels"], "continuous", "closed", max(clients))
    if single and multi and single["throughput_rps"] and multi is not single:
        speedup = multi["throughput_rps"] / single["throughput_rps"]
        text = f"caption throughput at {max(clients)} clients / at {min(clients)} client"
        rows.append((text, speedup, ">=", None, _per_round(multi, single)))
    mixed = part["mixed"]
    if mixed and mixed["alone"]["e2e_ms"] and mixed["mixed"]["e2e_ms"]:
        alone, beside = mixed["alone"], mixed["mixed"]
        per_round = _per_round(beside, alone, "round_e2e_p99_ms")
        text = (
            f"translation e2e p99 beside captions / alone, open loop at {mixed['fraction']:.0%} "
            f"of saturation, captions at {args.caption_rate_share:g} x its rate"
        )
        tail = beside["e2e_ms"]["p99"] / alone["e2e_ms"]["p99"]
        rows.append((text, tail, "<=", 1.2, per_round))
        text = "the same at p50"
        rows.append((text, beside["e2e_ms"]["p50"] / alone["e2e_ms"]["p50"], "<=", None, None))
    return rows


def goals(rows: list[tuple]) -> list[dict]:
    judged = []
    for text, ratio, compare, target, per_round in rows:
        if ratio is not None and target is not None:
            met = {"<": ratio < target, "<=": ratio <= target, ">=": ratio >= target}[compare]
            goal = dict(goal=text, ratio=ratio, compare=compare, target=target, met=met)
            if per_round:
                goal["per_round"] = per_round
            judged.append(goal)
    return judged
