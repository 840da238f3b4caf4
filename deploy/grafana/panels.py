"""Writes deploy/grafana/dashboards/attnserve.json, the attnserve Grafana dashboard:
`python deploy/grafana/panels.py`. Each panel is (title, unit, [(legend, PromQL)]); counters
that may not have been touched yet end in `or vector(0)` so every panel has data."""

from __future__ import annotations

import json
from pathlib import Path

RATE = "$__rate_interval"
MODEL = 'model=~"$model"'
REQUEST = "model, method"


def rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{MODEL}}}[{RATE}]))"


def quantile(q: float, metric: str, by: str) -> str:
    return f"histogram_quantile({q}, {rate(metric + '_bucket', 'le, ' + by)})"


def events(metric: str, selector: str = "") -> str:
    """Events of a counter over the interval, 0 when it has none yet."""
    return f"sum(increase({metric}{selector}[{RATE}])) or vector(0)"


ROWS = "attnserve_decode_step_batch_rows"
OUTBOX = "attnserve_worker_outbox_seconds_total"
HITS, MISSES = "attnserve_response_cache_hits_total", "attnserve_response_cache_misses_total"
PANELS = [
    ("Requests per second by method and status", "reqps", [
        ("{{model}} {{method}} {{code}}",
         rate("attnserve_request_duration_seconds_count", "model, method, code")),
    ]),
    ("Request latency (p50, p99)", "s", [
        ("p50 {{model}} {{method}}", quantile(0.5, "attnserve_request_duration_seconds", REQUEST)),
        ("p99 {{model}} {{method}}", quantile(0.99, "attnserve_request_duration_seconds", REQUEST)),
    ]),
    ("Time to first token (p99)", "s", [
        ("{{model}} {{method}}", quantile(0.99, "attnserve_time_to_first_token_seconds", REQUEST)),
    ]),
    ("Inter-token latency (p99)", "s", [
        ("{{model}} {{method}}", quantile(0.99, "attnserve_inter_token_latency_seconds", REQUEST)),
    ]),
    ("Generated tokens per second", "short", [
        ("{{model}}", rate("attnserve_generated_tokens_total", "model")),
    ]),
    ("Requests in flight and queued", "short", [
        ("in flight {{model}}", f"sum by (model) (attnserve_requests_in_flight{{{MODEL}}})"),
        ("jobs queued {{model}}", f"sum by (model) (attnserve_requests_queued{{{MODEL}}})"),
    ]),
    ("Batch rows in use", "short", [
        ("{{model}} {{instance}}", f"attnserve_batch_rows_in_use{{{MODEL}}}"),
        ("admission limit {{instance}}", "attnserve_admission_limit_rows"),
    ]),
    ("Rows per decode step (mean)", "short", [
        ("{{model}}", f"{rate(ROWS + '_sum', 'model')} / {rate(ROWS + '_count', 'model')}"),
    ]),
    ("Decode step and encoder time (p99)", "s", [
        ("step {{model}}", quantile(0.99, "attnserve_decode_step_duration_seconds", "model")),
        ("encoder {{model}}", quantile(0.99, "attnserve_encoder_duration_seconds", "model")),
    ]),
    ("Queue wait (p99)", "s", [
        ("{{model}} {{method}}", quantile(0.99, "attnserve_queue_wait_seconds", REQUEST)),
    ]),
    ("Response cache: hits over cacheable inputs", "percentunit", [
        ("{{model}}",
         f"{rate(HITS, 'model')} / ({rate(HITS, 'model')} + {rate(MISSES, 'model')})"),
    ]),
    ("Response cache size", "bytes", [
        ("{{instance}}", "attnserve_response_cache_bytes"),
    ]),
    ("Worker loops by phase (seconds a second, all workers)", "short", [
        ("{{phase}}", f"sum by (phase) (rate(attnserve_worker_loop_seconds_total[{RATE}]))"),
        ("outbox (beside)", f"sum(rate({OUTBOX}[{RATE}])) or vector(0)"),
    ]),
    ("Runs that held the device alone (CUDA graphs recorded)", "short", [
        ("runs", events("attnserve_worker_device_alone_runs_total")),
        ("seconds", events("attnserve_worker_device_alone_seconds_total")),
    ]),
    ("Workers ready and restarts", "short", [
        ("ready {{instance}}", "attnserve_workers_ready"),
        ("restarts", events("attnserve_worker_restarts_total")),
    ]),
    ("Calls retried, cut at drain, refused", "short", [
        ("retried", events("attnserve_retried_calls_total", f"{{{MODEL}}}")),
        ("cut at drain", events("attnserve_drain_cancelled_calls_total")),
        ("token refused", events("attnserve_auth_refused_calls_total")),
        ("version refused", events("attnserve_model_versions_refused_total", f"{{{MODEL}}}")),
    ]),
    ("Model versions served", "short", [
        ("{{model}}/{{version}} {{precision}} {{execution_provider}} {{instance}}",
         f"attnserve_model_info{{{MODEL}}}"),
    ]),
]  # fmt: skip
TEMPLATING = [
    {
        "name": "datasource",
        "type": "datasource",
        "query": "prometheus",
        "current": {"text": "Prometheus", "value": "prometheus"},
    },
    {
        "name": "model",
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": "label_values(attnserve_model_info, model)",
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "refresh": 2,
    },
]


def dashboard() -> dict:
    panels = []
    for index, (title, unit, targets) in enumerate(PANELS):
        panels.append({
            "id": index + 1,
            "type": "timeseries",
            "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [
                {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
                for i, (legend, expr) in enumerate(targets)
            ],
        })  # fmt: skip
    return {
        "uid": "attnserve",
        "title": "attnserve",
        "tags": ["attnserve"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": TEMPLATING},
        "panels": panels,
    }


if __name__ == "__main__":
    out = Path(__file__).parent / "dashboards" / "attnserve.json"
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(out)
