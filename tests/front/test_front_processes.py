"""The pieces of several fronts that need no server: the merged /metrics, the workers'
sockets, the setting."""

from __future__ import annotations

import multiprocessing
import stat
import threading
import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.front import fronts as front_processes
from service.front.config import ServerConfig, load_config
from service.front.fronts import FrontProcesses, MergedRegistry, worker_sockets
from service.front.metrics import Metrics
from service.runtime.errors import InvalidArgument
from service.worker.settings import WorkerSettings


def _samples(registry) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }


def test_merged_metrics_add_every_front_and_count_the_workers_once():
    first, second, third = Metrics(), Metrics(), Metrics()
    for metrics, calls in ((first, 3), (second, 5), (third, 0)):
        for i in range(calls):
            labels = ("translator", "Translate", "OK")
            metrics.request_duration.labels(*labels).observe(0.01 * (i + 1))
        metrics.requests_in_flight.labels("translator", "Translate").set(calls)
    # the workers' metrics are the first front's alone
    first.workers_ready.set(2)
    first.generated_tokens.labels("translator").inc(40)
    first.model.labels("translator", "1").info({"kind": "transformer"})
    third.model.labels("translator", "1").info({"kind": "transformer"})  # a version both load
    pickled = [list(second.registry.collect()), list(third.registry.collect())]
    merged = _samples(MergedRegistry(first.registry, lambda: pickled))
    alone = _samples(first.registry)
    duration = "attnserve_request_duration_seconds"
    labels = (("code", "OK"), ("method", "Translate"), ("model", "translator"))
    assert merged[(duration + "_count", labels)] == 8
    assert merged[(duration + "_sum", labels)] == pytest.approx(0.06 + 0.15)
    bucket = (("code", "OK"), ("le", "0.02"), ("method", "Translate"), ("model", "translator"))
    assert merged[(duration + "_bucket", bucket)] == 2 + 2  # 0.01 and 0.02 in each
    in_flight = (("method", "Translate"), ("model", "translator"))
    assert merged[("attnserve_requests_in_flight", in_flight)] == 8
    assert merged[("attnserve_workers_ready", ())] == 2
    assert merged[("attnserve_generated_tokens_total", (("model", "translator"),))] == 40
    info = (("kind", "transformer"), ("model", "translator"), ("version", "1"))
    assert merged[("attnserve_model_info", info)] == 1
    created = (duration + "_created", labels)
    assert merged[created] == alone[created]  # the earliest: the first front's
    # nothing is lost or invented: the same samples as one front's, with other values
    assert set(merged) == set(alone) | set(_samples(second.registry))


class _Served:
    """A front's `ready` future, done."""

    def done(self) -> bool:
        return True


def test_fronts_that_do_not_answer_cost_a_scrape_one_wait_in_all(monkeypatch):
    """Before, the first front asked the other fronts one after the other and gave each
    SCRAPE_SECONDS (2 s): with four fronts, two stalled ones made /metrics take 4 s, the
    compose stack's scrape_timeout, and Prometheus lost the whole scrape (`up` 0) instead
    of the stalled fronts' samples alone."""
    monkeypatch.setattr(front_processes, "SCRAPE_SECONDS", 0.5)
    processes = FrontProcesses(ServerConfig(fronts=4), [], "cpu", main=None)
    answering = Metrics()
    answering.requests_in_flight.labels("translator", "Translate").set(3)
    theirs = []
    for front in processes.fronts:
        front.scrape, their_end = multiprocessing.Pipe()
        front.ready = _Served()
        theirs.append(their_end)

    def answer(pipe):  # the second front answers; the third and fourth are stalled
        pipe.recv()
        pipe.send(list(answering.registry.collect()))

    thread = threading.Thread(target=answer, args=(theirs[0],))
    thread.start()
    started = time.monotonic()
    gathered = processes.collect()
    took = time.monotonic() - started
    thread.join(5)
    assert len(gathered) == 1
    merged = _samples(MergedRegistry(Metrics().registry, lambda: gathered))
    in_flight = (("method", "Translate"), ("model", "translator"))
    assert merged[("attnserve_requests_in_flight", in_flight)] == 3
    assert 0.5 <= took < 0.9, took  # one SCRAPE_SECONDS, not one per stalled front
    for end in theirs:
        end.close()


def test_worker_sockets_are_private_and_only_with_several_fronts():
    settings = [WorkerSettings(index=i, models=()) for i in range(3)]
    assert worker_sockets(settings, 1) == (settings, None)
    shared, directory = worker_sockets(settings, 2)
    try:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert [s.socket for s in shared] == [str(directory / f"worker-{i}.sock") for i in range(3)]
        assert len({s.authkey for s in shared}) == 1 and len(shared[0].authkey) == 32
    finally:
        directory.rmdir()


def test_fronts_setting(monkeypatch):
    chosen = load_config(environ={"ATTNSERVE_FRONTS": "4"}).front_choice()
    assert chosen == (4, "set by the configuration")
    with pytest.raises(InvalidArgument, match=r"fronts must be 0 \(one per 4 CPU cores\) or more"):
        load_config(environ={}, overrides={"fronts": "-1"})
    options = dict(load_config(environ={}, overrides={"fronts": "2"}).grpc_options())
    assert options["grpc.so_reuseport"] == 1
    assert dict(ServerConfig(fronts=1).grpc_options())["grpc.so_reuseport"] == 0
    # the default: one front per 4 cores this process may use, at least 1, at most 4
    assert ServerConfig().fronts == 0
    monkeypatch.setattr("service.front.config.cpu_quota", lambda: None)  # no cgroup quota
    for cores, fronts in ((1, 1), (2, 1), (7, 1), (8, 2), (16, 4), (64, 4)):
        monkeypatch.setattr("os.sched_getaffinity", lambda _, n=cores: set(range(n)))
        count, why = ServerConfig().front_choice()
        assert count == fronts and f"one per 4 of the {cores} CPU cores" in why, (cores, why)
        reuse = dict(ServerConfig().grpc_options())["grpc.so_reuseport"]
        assert reuse == int(fronts > 1)
    monkeypatch.setattr("service.front.config.cpu_quota", lambda: 2.5)  # a container's --cpus 2.5
    assert ServerConfig().front_choice()[0] == 1  # 3 usable cores of the 64
    assert ServerConfig().worker_count("cpu") == 3
