"""A level's figures from its rounds' samples: latencies (p50, p99, mean), throughput and
goodput over the rounds' windows, errors, and whether every answer is right."""

from __future__ import annotations

import itertools

import numpy as np

from bench.lib.stream_loads import Sample


def spread(seconds) -> dict | None:
    """p50, p99 and mean in milliseconds (numpy's linear percentiles), and the count."""
    if len(seconds) == 0:
        return None
    values = 1000 * np.asarray(seconds, dtype=np.float64)
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "mean": float(values.mean()), "n": len(values)}


def check(sample: Sample, reference: dict, target: int) -> dict:
    """Whether an answer is right: status OK, the in-process tokens, the server's own token
    count, and partial events for increasing steps up to the last but one (one per step
    unless the server merged the partials of a client that fell behind)."""
    if sample.code != "OK" or sample.result is None:
        return {"correct": False, "identical": False, "tokens": 0}
    result = sample.result
    answer = (result.captions if hasattr(result, "captions") else result.translations)[0]
    best = answer.hypotheses[0]
    pieces, tokens = list(best.tokens), answer.token_counts.output_tokens
    steps = len(pieces) + (1 if best.finished else 0)
    identical = pieces == reference["pieces"]
    if sample.steps:
        streamed = sample.steps == sorted(set(sample.steps)) and sample.steps[-1] == steps - 1
    else:  # a unary call, or a stream whose first step ended it
        streamed = not sample.partials
    consistent = tokens == len(pieces) <= target and streamed
    return {"correct": identical and consistent, "identical": identical, "tokens": tokens}


def _window(run: dict, ok: list[Sample], closed_clients: int | None) -> tuple[float, float, bool]:
    """(start, seconds, steady) of a run's throughput window. Closed loop: from the first
    request sent to the last, when it holds at least two answers per client (every client is
    busy all along); else, and for open loops, from the first send to the last answer."""
    start = run["start"]
    end = max((s.end for s in run["samples"]), default=start)
    if closed_clients and len(run["samples"]) > 1:
        last_send = max(s.start for s in run["samples"])
        if all_busy(start, last_send, [s.end for s in ok], closed_clients):
            return start, last_send - start, True
    return start, end - start, False


def all_busy(start: float, last_send: float, ends: list[float], clients: int) -> bool:
    """Whether a closed loop's first-to-last-send window holds at least two answers per client
    (every client busy all along): the window its throughput is taken over."""
    return last_send > start and sum(1 for e in ends if e <= last_send) >= 2 * clients


def _round(run: dict, pool, references, slo: float, closed_clients) -> tuple[list, dict]:
    """A round's samples each with its check, and its counts inside its throughput window."""
    pairs = [(s, check(s, references[s.index], pool[s.index].max_length)) for s in run["samples"]]
    ok = [s for s, _ in pairs if s.code == "OK"]
    start, window, busy = _window(run, ok, closed_clients)
    inside = [(s, c) for s, c in pairs if s.code == "OK" and s.end <= start + window + 1e-9]
    counts = {
        "counted": len(inside),
        "good": sum(1 for s, c in inside if c["correct"] and s.end - s.start <= slo),
        "tokens": sum(c["tokens"] for _, c in inside),
        "window": window,
        "steady": busy,
        "duration": max((s.end for s in run["samples"]), default=start) - start,
        "rate": len(inside) / window if window > 0 else 0.0,
    }
    return pairs, counts


def _answers(checked: list) -> dict:
    """Errors, correctness and latencies of every answer of a level, its rounds pooled."""
    ok = [s for s, _ in checked if s.code == "OK"]
    errors: dict[str, int] = {}
    for s, _ in checked:
        if s.code != "OK":
            errors[s.code] = errors.get(s.code, 0) + 1
    gaps = [
        (b - a) / (sb - sa)  # per token, also across merged partial events
        for s in ok
        for (a, sa), (b, sb) in itertools.pairwise(zip(s.partials, s.steps, strict=True))
    ]
    return {
        "ok": len(ok),
        "errors": errors,
        "correct": sum(c["correct"] for _, c in checked),
        "identical_to_in_process": sum(c["identical"] for _, c in checked),
        "ttft_ms": spread([(s.partials[0] if s.partials else s.end) - s.start for s in ok]),
        "itl_ms": spread(gaps),
        "merged_partials": sum((s.steps[-1] - len(s.steps)) if s.steps else 0 for s in ok),
        "e2e_ms": spread([s.end - s.start for s in ok]),
    }


def _output_tokens(checked: list, pool) -> dict:
    tokens = [c["tokens"] for s, c in checked if s.code == "OK"]
    targets = [pool[s.index].max_length for s, _ in checked if s.code == "OK"]
    return {
        "total": int(sum(tokens)),
        "mean": float(np.mean(tokens)) if tokens else 0.0,
        "target_mean": float(np.mean(targets)) if targets else 0.0,
        "at_target": sum(t == m for t, m in zip(tokens, targets, strict=True)),
    }


def summarize(runs: list[dict], pool, references, slo: float, closed_clients=None) -> dict:
    """A level's latencies (every round pooled), throughput and goodput (answers in the
    rounds' windows over their summed length), errors and correctness."""
    checked, rounds = [], []
    for run in runs:
        pairs, counts = _round(run, pool, references, slo, closed_clients)
        checked += pairs
        rounds.append(counts)
    total = {key: sum((r[key] for r in rounds), 0) for key in ("counted", "good", "tokens")}
    window_total = sum((r["window"] for r in rounds), 0.0)
    per_second = (lambda n: n / window_total) if window_total > 0 else (lambda n: 0.0)
    return {
        "requests": len(checked),
        "rounds": len(runs),
        **_answers(checked),
        "duration_s": sum((r["duration"] for r in rounds), 0.0),
        "window_s": window_total,
        "steady_rounds": sum((r["steady"] for r in rounds), 0),
        "throughput_rps": per_second(total["counted"]),
        "output_tokens_per_s": per_second(total["tokens"]),
        "goodput_rps": per_second(total["good"]),
        "round_throughput_rps": [r["rate"] for r in rounds],
        "output_tokens": _output_tokens(checked, pool),
    }
