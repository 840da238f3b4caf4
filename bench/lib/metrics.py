"""The server's Prometheus histograms over a level: their means, and TTFT quantiles from the
buckets, of one model's samples or of all; the workers' loop seconds by phase."""

from __future__ import annotations

import math

SERVER_METRICS = {  # histogram: what its mean is reported as
    "attnserve_decode_step_batch_rows": "step_rows_mean",
    "attnserve_decode_step_duration_seconds": "step_ms_mean",
    "attnserve_encoder_duration_seconds": "encoder_ms_mean",
    "attnserve_queue_wait_seconds": "queue_wait_ms_mean",
    "attnserve_time_to_first_token_seconds": "ttft_ms_mean",
    "attnserve_inter_token_latency_seconds": "itl_ms_mean",
    "attnserve_request_duration_seconds": "request_ms_mean",
}


def _of(labels: tuple, model: str | None) -> bool:
    """Whether a sample counts for `model` (None: every model); one without a model label
    counts for all."""
    return model is None or dict(labels).get("model", model) == model


def _histograms(before: dict, after: dict, model: str | None = None) -> dict:
    """{histogram: (sum, count, {le: cumulative count})} over the level, every label summed
    (of `model`'s samples only, when given)."""
    totals: dict = {}
    for (name, labels), value in after.items():
        base = name.removesuffix("_sum").removesuffix("_count").removesuffix("_bucket")
        if base not in SERVER_METRICS or not _of(labels, model):
            continue
        delta = value - before.get((name, labels), 0.0)
        entry = totals.setdefault(base, [0.0, 0.0, {}])
        if name.endswith("_sum"):
            entry[0] += delta
        elif name.endswith("_count"):
            entry[1] += delta
        elif name.endswith("_bucket"):
            le = float(dict(labels)["le"])
            entry[2][le] = entry[2].get(le, 0.0) + delta
    return totals


def _bucket_quantile(q: float, buckets: dict) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket that holds the quantile."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            share = (rank - below) / (count - below) if count > below else 0.0
            return lower + (bound - lower) * share
        lower, below = bound, count
    return None


def _growth(before: dict, after: dict, counter: str, keep=lambda labels: True) -> float:
    """How much `counter` grew over the level, over its samples whose labels `keep` holds."""
    return sum(
        value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == counter and keep(labels)
    )


def server_numbers(before: dict, after: dict, model: str | None = None) -> dict:
    """Means (and TTFT quantiles from the buckets) of the server's histograms over a level, of
    `model`'s samples only when given (the metrics' model label: its name)."""
    histograms = _histograms(before, after, model)
    numbers: dict = {}
    for name, key in SERVER_METRICS.items():
        total, count, buckets = histograms.get(name, (0.0, 0.0, {}))
        scale = 1 if key.startswith("step_rows") else 1000
        numbers[key] = scale * total / count if count else None
        if name == "attnserve_decode_step_batch_rows":
            numbers["steps"] = int(count)
        if name == "attnserve_encoder_duration_seconds":
            numbers["encoder_runs"] = int(count)  # admission rounds
        if name == "attnserve_time_to_first_token_seconds":
            for q in (0.5, 0.99):
                value = _bucket_quantile(q, buckets)
                numbers[f"ttft_ms_p{round(100 * q)}"] = None if value is None else 1000 * value
    numbers["generated_tokens"] = int(
        _growth(before, after, "attnserve_generated_tokens_total", lambda k: _of(k, model))
    )
    loop = "attnserve_worker_loop_seconds_total"
    phases = {dict(labels)["phase"] for name, labels in after if name == loop}
    numbers["loop_seconds"] = {
        phase: _growth(before, after, loop, lambda k, p=phase: dict(k)["phase"] == p)
        for phase in phases
    }
    numbers["outbox_seconds"] = _growth(before, after, "attnserve_worker_outbox_seconds_total")
    # runs that held a worker's device alone (CUDA graphs recorded) and their seconds
    alone = "attnserve_worker_device_alone_"
    numbers["device_alone_runs"] = int(_growth(before, after, alone + "runs_total"))
    numbers["device_alone_seconds"] = _growth(before, after, alone + "seconds_total")
    numbers["worker_restarts"] = int(_growth(before, after, "attnserve_worker_restarts_total"))
    return numbers
