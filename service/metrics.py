"""The server's Prometheus metrics, in a registry of their own, served on their own port.

Buckets are declared once here. Names carry their unit (seconds, rows, tokens) and counters
end in `_total`, as `promtool check metrics` wants. Workers measure encoder and step times and
send them with their events; the front process owns every metric.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

# 0.5 ms to 60 s: a decode step at the low end, a long beam decode under load at the top
SECONDS_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0
)  # fmt: skip
ROWS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Request metrics are labelled by model name and gRPC method; a model's batch metrics (encoder,
# steps, rows, tokens) by model alone, since requests of every method share its batch.
REQUEST_LABELS = ("model", "method")


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()

        def histogram(name: str, text: str, labels=("model",), buckets=SECONDS_BUCKETS):
            return Histogram(name, text, labels, buckets=buckets, registry=registry)

        self.request_duration = histogram(
            "attnserve_request_duration_seconds",
            "Time from receiving a call to its answer, by model, method and gRPC status code.",
            ("model", "method", "code"),
        )
        self.queue_wait = histogram(
            "attnserve_queue_wait_seconds",
            "Time a request waited for a place in the batch.",
            REQUEST_LABELS,
        )
        self.time_to_first_token = histogram(
            "attnserve_time_to_first_token_seconds",
            "Time from receiving a request to its first decoded token.",
            REQUEST_LABELS,
        )
        self.inter_token_latency = histogram(
            "attnserve_inter_token_latency_seconds",
            "Time between two successive decoded tokens of one request.",
            REQUEST_LABELS,
        )
        self.encoder_duration = histogram(
            "attnserve_encoder_duration_seconds",
            "One encoder run: the inputs of the requests joining the batch at one step.",
        )
        self.decode_step_duration = histogram(
            "attnserve_decode_step_duration_seconds", "One decode step of a whole batch."
        )
        self.batch_rows = histogram(
            "attnserve_decode_step_batch_rows",
            "Rows (hypotheses) decoded together in one step.",
            buckets=ROWS_BUCKETS,
        )

        def counter(name: str, text: str, labels=("model",)):
            return Counter(name, text, labels, registry=registry)

        def gauge(name: str, text: str, labels=("model",)):
            return Gauge(name, text, labels, registry=registry)

        self.generated_tokens = counter(
            "attnserve_generated_tokens",
            "Tokens decoded, one per batch row and step (beam hypotheses included).",
        )
        self.requests_in_flight = gauge(
            "attnserve_requests_in_flight",
            "Requests received and not yet answered.",
            REQUEST_LABELS,
        )
        self.requests_queued = gauge(
            "attnserve_requests_queued", "Requests waiting for a place in a batch.", REQUEST_LABELS
        )
        self.batch_rows_in_use = gauge(
            "attnserve_batch_rows_in_use",
            "Batch rows (hypotheses) held by running requests, over all workers.",
        )
        self.worker_restarts = counter(
            "attnserve_worker_restarts", "Worker processes restarted after they died.", ()
        )
        self.retried_calls = counter(
            "attnserve_retried_calls",
            "Calls sent again to another worker after theirs died before any of their output "
            "had left the front (once per call; the client sees nothing).",
            ("model", "method"),
        )
        self.drain_cancelled_calls = counter(
            "attnserve_drain_cancelled_calls",
            "Calls still running when a drain reached drain_seconds, and so cancelled.",
            (),
        )
        self.auth_refused = counter(
            "attnserve_auth_refused_calls",
            "Calls refused for their bearer token, by gRPC status (UNAUTHENTICATED: none or "
            "unknown; PERMISSION_DENIED: not allowed on that service).",
            ("code",),
        )
        self.workers_ready = gauge(
            "attnserve_workers_ready", "Worker processes ready to decode.", ()
        )
        self.model = Info(
            "attnserve_model",
            "A served model version: its kind, service, precision and execution provider.",
            ("model", "version"),
            registry=registry,
        )

    def observe_worker_stats(self, model: str, stats) -> None:
        """Adds a worker's `scheduler.Stats` report."""
        for seconds in stats.encoder_seconds:
            self.encoder_duration.labels(model).observe(seconds)
        for seconds, rows in zip(stats.step_seconds, stats.step_rows, strict=True):
            self.decode_step_duration.labels(model).observe(seconds)
            self.batch_rows.labels(model).observe(rows)
        if stats.tokens:
            self.generated_tokens.labels(model).inc(stats.tokens)
