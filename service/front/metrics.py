"""The server's Prometheus metrics, in a registry of their own, served on their own port.

Buckets are declared once here. Names carry their unit (seconds, rows, tokens) and counters
end in `_total`, as `promtool check metrics` wants. Workers measure encoder and step times and
send them with their events; the front process owns every metric.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import hashlib
import hmac
import socket
import ssl
import threading
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, make_wsgi_app

from service.front.config import cannot_listen
from service.runtime.errors import InvalidArgument

# 0.5 ms to 5 minutes: a decode step at the low end; a long beam decode under load, a call
# within the command line's deadlines (120 s a caption call) and a file translated whole above
SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
# a worker's batch: 64 rows by default, 1,024 for a GPU (docs/benchmarks-gpu.md), 4 times that
ROWS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# Request metrics are labelled by model name and gRPC method; a model's batch metrics (encoder,
# steps, rows, tokens) by model alone, since requests of every method share its batch.
REQUEST_LABELS = ("model", "method")


CHILDREN_KEPT = 4096  # a labelled metric's children kept by their values (labels, below)


def _children_kept(metric):
    """`metric` whose `labels(...)` answers a child met before from a cache: prometheus_client
    checks the values and takes the metric's lock at every call (some 3 us), and a call's
    answer and its worker's reports ask for some fifteen children. Whatever removes children
    (`remove`, `remove_by_labels`, `clear`: the cluster's replicas by node are set anew)
    empties the cache first, so a kept child is always one the metric exposes."""
    if not metric._labelnames:
        return metric
    kept = functools.lru_cache(maxsize=CHILDREN_KEPT)(metric.labels)
    metric.labels = kept
    for name in ("remove", "remove_by_labels", "clear"):
        removing = getattr(metric, name)

        def forgetting(*args, _removing=removing, **kwargs):
            kept.cache_clear()
            return _removing(*args, **kwargs)

        setattr(metric, name, forgetting)
    return metric


FEW = 16  # values observe_all places one by one


def observe_all(histogram, values) -> None:
    """Observes each of `values` in one labelled histogram (a child: `labels(...)`), as many
    `observe` calls would, with each bucket and the sum counted once: a request's token gaps
    are tens of observations, each a lock and a walk of the bounds. Reads the child's
    per-bucket counters, which `observe` counts into (the first bound at or above a value; the
    exposition sums them). A few values are placed one by one (numpy's calls cost more than
    they save below some sixteen: a report's encoder runs and steps at one client)."""
    if not len(values):
        return
    bounds = histogram._upper_bounds
    if len(values) <= FEW:
        counts: dict[int, int] = {}
        for value in values:
            i = bisect.bisect_left(bounds, value)
            if i < len(bounds) and value <= bounds[i]:  # NaN in no bucket, as `observe` does
                counts[i] = counts.get(i, 0) + 1
        histogram._sum.inc(float(sum(values)))
        for i, count in counts.items():
            histogram._buckets[i].inc(count)
        return
    values = np.asarray(values, dtype=np.float64)
    index = np.searchsorted(bounds, values, side="left")  # the first bound >= each value
    counts = np.bincount(index, minlength=len(bounds) + 1)
    histogram._sum.inc(float(values.sum()))
    for i in np.flatnonzero(counts[: len(bounds)]).tolist():
        histogram._buckets[i].inc(int(counts[i]))


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()

        def histogram(name: str, text: str, labels=("model",), buckets=SECONDS_BUCKETS):
            return _children_kept(Histogram(name, text, labels, buckets=buckets, registry=registry))

        self.request_duration = histogram(
            "attnserve_request_duration_seconds",
            "Time from receiving a call to its answer, by model, method and gRPC status code.",
            ("model", "method", "code"),
        )
        self.queue_wait = histogram(
            "attnserve_queue_wait_seconds",
            "Time a request's job waited for a place in the batch (one job a batch's worth of "
            "the request's inputs).",
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
            return _children_kept(Counter(name, text, labels, registry=registry))

        def gauge(name: str, text: str, labels=("model",)):
            return _children_kept(Gauge(name, text, labels, registry=registry))

        self.cache_hits = counter(
            "attnserve_response_cache_hits", "Inputs answered from the response cache."
        )
        self.cache_misses = counter(
            "attnserve_response_cache_misses",
            "Inputs that could be cached but were not there, so were decoded.",
        )
        self.cache_entries = gauge(
            "attnserve_response_cache_entries", "Inputs held in the response cache.", ()
        )
        self.cache_bytes = gauge(
            "attnserve_response_cache_bytes", "Estimated bytes of the response cache.", ()
        )
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
            "attnserve_requests_queued",
            "Jobs of requests waiting for a place in a batch (one job a batch's worth of a "
            "request's inputs; what max_queued_requests bounds).",
            REQUEST_LABELS,
        )
        self.admission_limit = gauge(
            "attnserve_admission_limit_rows",
            "Batch rows in flight the latency budget admits now (0: no latency_budget_seconds).",
            (),
        )
        self.batch_rows_in_use = gauge(
            "attnserve_batch_rows_in_use",
            "Batch rows (hypotheses) held by running requests, over all workers.",
        )
        self.worker_loop = counter(
            "attnserve_worker_loop_seconds",
            "Seconds the workers' loops spent in each phase, over all workers: idle (no job "
            "held), messages, admit, encoder, prepare, run, outputs (a step's three), schedule "
            "and reports (service.worker.loop_clock).",
            ("phase",),
        )
        self.worker_outbox = counter(
            "attnserve_worker_outbox_seconds",
            "Seconds the workers' outbox threads spent pickling and sending reports, beside "
            "their loops (and sharing their GIL).",
            (),
        )
        self.device_alone_runs = counter(
            "attnserve_worker_device_alone_runs",
            "Runs that held a worker's device alone (on CUDA: steps that recorded a CUDA "
            "graph), every other run of the worker waiting meanwhile.",
            (),
        )
        self.device_alone = counter(
            "attnserve_worker_device_alone_seconds",
            "Seconds of those runs, from asking for the device to letting it go.",
            (),
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
        self.versions_refused = counter(
            "attnserve_model_versions_refused",
            "Model version directories that failed their checks (hashes, parity certificate, "
            "golden set) and are not served, by the model directory's name.",
        )
        self.workers_ready = gauge(
            "attnserve_workers_ready", "Worker processes ready to decode.", ()
        )
        self.cluster_replicas = gauge(
            "attnserve_cluster_replicas",
            "Ray Serve replicas ready to decode (workers on a Ray cluster), by Ray node id.",
            ("node",),
        )
        self.model = Info(
            "attnserve_model",
            "A served model version: its kind, service, precision and execution provider.",
            ("model", "version"),
            registry=registry,
        )

    def observe_worker_stats(self, model: str, stats) -> None:
        """Adds a worker's `scheduler.Stats` report."""
        if stats.encoder_seconds:  # a model's series appear with its first run
            observe_all(self.encoder_duration.labels(model), stats.encoder_seconds)
        if len(stats.step_seconds) != len(stats.step_rows):
            raise ValueError("a report's step times and rows differ in number")
        if stats.step_seconds:
            observe_all(self.decode_step_duration.labels(model), stats.step_seconds)
            observe_all(self.batch_rows.labels(model), stats.step_rows)
        if stats.tokens:
            self.generated_tokens.labels(model).inc(stats.tokens)
        for phase, seconds in stats.loop_seconds.items():
            self.worker_loop.labels(phase).inc(max(seconds, 0.0))
        if stats.outbox_seconds:
            self.worker_outbox.inc(stats.outbox_seconds)
        if stats.alone_runs:
            self.device_alone_runs.inc(stats.alone_runs)
            self.device_alone.inc(stats.alone_seconds)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


HANDSHAKE_SECONDS = 10.0  # a TLS client's time to finish its handshake


class _Server(ThreadingMixIn, WSGIServer):
    """One thread a connection; with `tls` (an SSLContext) each connection's TLS handshake
    is done in its own thread, so that a client that connects and says nothing holds up
    no other (done on accept, it would stop the server from accepting)."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def get_request(self):
        connection, address = self.socket.accept()
        if self.tls is not None:
            connection = self.tls.wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        return connection, address

    def finish_request(self, request, client_address):
        if self.tls is not None:
            try:
                request.settimeout(HANDSHAKE_SECONDS)
                request.do_handshake()
                request.settimeout(None)
            except OSError:  # not TLS, too slow, or gone: only this connection ends
                return
        super().finish_request(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


def _basic_auth(app, credentials: list[bytes]):
    """`app` behind HTTP basic authentication: `credentials` are SHA-256 digests of
    "user:password", compared with every one in constant time."""

    def guarded(environ, start_response):
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, encoded = header.partition(" ")
        try:
            presented = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            presented = b""
        digest, found = hashlib.sha256(presented).digest(), False
        for known in credentials:
            found |= hmac.compare_digest(known, digest)
        if scheme.lower() != "basic" or not found:
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="metrics"'), ("Content-Type", "text/plain")],
            )
            return [b"unauthorized\n"]
        return app(environ, start_response)

    return guarded


def serve_metrics(config, registry) -> tuple[WSGIServer, threading.Thread]:
    """The /metrics endpoint on `config.metrics_listen`: plain HTTP, or HTTPS with
    `metrics_tls_cert` and `metrics_tls_key`; behind basic authentication when
    `metrics_basic_auth_file` holds "user:password" lines. Bind it to 127.0.0.1 to keep it
    on the machine. The TLS pair is checked with the configuration (security.tls_problems)."""
    host, _, port = config.metrics_listen.rpartition(":")
    app = make_wsgi_app(registry)
    if config.metrics_basic_auth_file is not None:
        path = Path(config.metrics_basic_auth_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidArgument(f"metrics_basic_auth_file {path}: {error}") from error
        entries = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        if not entries or any(":" not in e for e in entries):
            raise InvalidArgument(f"metrics_basic_auth_file {path}: user:password lines expected")
        app = _basic_auth(app, [hashlib.sha256(e.encode()).digest() for e in entries])
    host = host.strip("[]")
    kind = _Server6 if ":" in host else _Server  # an IPv6 address, [::] or [::1]
    try:
        server = make_server(host, int(port), app, kind, handler_class=_QuietHandler)
    except OSError as error:  # in use, or not an address of this machine
        raise cannot_listen("metrics_listen", config.metrics_listen, error.strerror) from None
    if config.metrics_tls_cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(config.metrics_tls_cert, config.metrics_tls_key)
        except (OSError, ssl.SSLError) as error:
            raise InvalidArgument(f"metrics TLS: {error}") from error
        server.tls = context
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return server, thread
