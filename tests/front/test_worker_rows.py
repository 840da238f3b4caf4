"""The batch rows gauge of each model, as the front keeps it from its workers' reports: a
worker serving several models reports each model's batch apart, in whatever order, and the
gauge of a model counts that model's rows in every worker, nothing of the others'."""

from __future__ import annotations

from service.front.metrics import Metrics
from service.front.pool import WorkerPool
from service.worker.messages import Report, Stats
from service.worker.settings import WorkerSettings

MODELS = {"translator/1": "translator", "translator/2": "translator", "captioner/1": "captioner"}


def _gauge(metrics: Metrics, model: str) -> float:
    return metrics.registry.get_sample_value("attnserve_batch_rows_in_use", {"model": model})


def _pool(metrics: Metrics, workers: int) -> WorkerPool:
    """A pool whose workers serve MODELS (no process started)."""
    served = tuple((key, None) for key in MODELS)  # the versions themselves are not read
    pool = WorkerPool([WorkerSettings(index=i, models=served) for i in range(workers)], metrics, 8)
    pool.models = dict(MODELS)
    return pool


def test_each_model_s_gauge_counts_its_own_rows_in_every_worker():
    metrics = Metrics()
    pool = _pool(metrics, 2)
    first, second = pool.workers
    reports = [  # (worker, key, rows): each worker's models reported in turn, interleaved
        (first, "translator/1", 16),
        (second, "captioner/1", 0),
        (first, "captioner/1", 3),
        (second, "translator/2", 5),
        (second, "captioner/1", 0),  # the last report of a model is what counts
        (first, "translator/1", 16),
    ]
    for worker, key, rows in reports:
        pool._handle(worker, Report(key, [], None, rows, 0))
    assert _gauge(metrics, "translator") == 16 + 5  # two versions, two workers
    assert _gauge(metrics, "captioner") == 3
    pool._handle(first, Report("translator/1", [], None, 0, 0))
    assert _gauge(metrics, "translator") == 5 and _gauge(metrics, "captioner") == 3


def test_an_unloaded_version_leaves_the_gauge_and_its_late_reports_count_for_nothing():
    metrics = Metrics()
    pool = _pool(metrics, 1)
    (worker,) = pool.workers
    pool._handle(worker, Report("translator/1", [], None, 4, 0))
    pool._handle(worker, Report("translator/2", [], None, 7, 0))
    assert _gauge(metrics, "translator") == 11
    pool.unload("translator/1")  # its calls cut while it was busy: no report of 0 follows
    assert _gauge(metrics, "translator") == 7
    pool._handle(worker, Report("translator/1", [], None, 4, 0))  # sent before the Unload
    assert _gauge(metrics, "translator") == 7
    assert not pool.serves("translator/1") and pool.serves("translator/2")
    assert [k for k, _ in pool.workers[0].settings.models] == ["translator/2", "captioner/1"]


def test_a_step_of_the_gpu_server_s_batch_shows_its_rows():
    """The rows histogram's buckets stopped at 256, where the CUDA server decodes up to
    1,024 rows a step (docs/benchmarks-gpu.md: 769 rows a step at 1,024 clients): every such
    step fell past the last bucket, and a quantile of them read 256. Its steps now land in
    (512, 1024], and the largest batch that may be set has a bucket of its own."""
    metrics = Metrics()
    pool = _pool(metrics, 1)
    stats = Stats(step_seconds=[0.0025] * 3, step_rows=[769, 1024, 4096])
    pool._handle(pool.workers[0], Report("translator/1", [], stats, 0, 0))

    def steps(le: str) -> float:
        labels = {"model": "translator", "le": le}
        return metrics.registry.get_sample_value("attnserve_decode_step_batch_rows_bucket", labels)

    assert (steps("512.0"), steps("1024.0"), steps("4096.0")) == (0, 2, 3)
