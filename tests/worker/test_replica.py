"""A worker as a Ray Serve replica, the parts that need no cluster: what its worker tells the
replica of the load (the peaks between two samples, an emptied batch at once), and the
autoscaling policy on the rows the replicas report. tests/server/test_cluster.py runs them on
a real cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from service.worker.process import STATS_EVERY, _Load

replica = pytest.importorskip("service.worker.replica", exc_type=ImportError)  # the ray extra


def test_the_parent_hears_the_peak_load_since_it_last_heard():
    load = _Load()
    assert load.tell("m", (3, 1), now=10.0)  # never told: told now
    assert load.peak("m", (3, 1), now=10.0) == (3, 1)
    # within STATS_EVERY: nothing, but the peaks are kept
    assert not load.tell("m", (7, 4), now=10.0 + STATS_EVERY / 4)
    assert not load.tell("m", (2, 0), now=10.0 + STATS_EVERY / 2)
    assert load.tell("m", (0, 0), now=10.0 + 2 * STATS_EVERY)
    assert load.peak("m", (0, 0), now=10.0 + 2 * STATS_EVERY) == (7, 4)  # the peak between
    assert load.tell("m", (0, 0), now=10.0 + 4 * STATS_EVERY)  # and now that it is empty
    assert load.peak("m", (0, 0), now=10.0 + 4 * STATS_EVERY) == (0, 0)
    assert not load.tell("m", (0, 0), now=10.0 + 20 * STATS_EVERY)  # idle: silent


@dataclass
class _Context:  # the fields of Ray Serve's AutoscalingContext the policy reads
    running_replicas: list
    target_num_replicas: int
    aggregated_metrics: dict


@pytest.mark.parametrize(
    ("rows", "expected"),
    [({"a": 0.0}, 1), ({"a": 15.0}, 1), ({"a": 17.0}, 2), ({"a": 30.0, "b": 20.0}, 4)],
)
def test_the_policy_keeps_each_replica_at_its_target_rows(rows, expected):
    policy = replica.RowsPolicy(target_rows=16)
    context = _Context(list(rows), len(rows), {"rows": rows})
    assert policy(context) == (expected, {})


def test_the_policy_counts_running_replicas_and_waits_for_reports():
    policy = replica.RowsPolicy(target_rows=4)
    gone = _Context(["a"], 2, {"rows": {"a": 4.0, "stopped": 40.0}})
    assert policy(gone) == (1, {})  # a stopped replica's last report does not count
    silent = _Context(["a", "b"], 2, {})
    assert policy(silent) == (2, {})  # nothing reported yet: the count stays


def test_a_version_unloaded_while_busy_leaves_the_replica_s_load():
    import threading
    import time
    from multiprocessing import Pipe
    from multiprocessing.connection import Client

    from helpers import tiny_transformer

    from models.reference import TorchEngine
    from service.runtime.batching import source_batch
    from service.runtime.decoding import DecodingOptions
    from service.worker.fronts import Fronts
    from service.worker.messages import Job, Stop, Submit, Unload
    from service.worker.process import _loop
    from service.worker.scheduler import Scheduler
    from service.worker.settings import WorkerSettings

    settings = WorkerSettings(
        index=0, models=(), socket="127.0.0.1:0", authkey=b"key", replica=True
    )
    scheduler = Scheduler(TorchEngine(tiny_transformer(seed=1)), max_rows=8)
    info = {"pid": 1, "models": {"tiny/1": {}}}
    parent, child = Pipe()
    fronts = Fronts(child, {"tiny/1": scheduler}, info, settings)
    # the replica as its constructor leaves it, reading what its worker tells it
    replica_ = object.__new__(replica.WorkerReplica)
    replica_.conn, replica_.rows, replica_.fronts = parent, {}, fronts
    replica_.done = threading.Event()
    # daemons, as the replica's own: a thread left blocked never holds the process at exit
    worker = threading.Thread(target=_loop, args=(fronts, fronts.schedulers, settings), daemon=True)
    reader = threading.Thread(target=replica_._read, daemon=True)
    worker.start()
    reader.start()
    try:
        host, port = info["address"].rsplit(":", 1)
        front = Client((host, int(port)), "AF_INET", authkey=b"key")
        src_ids, src_mask = source_batch([[5, 9, 14]], 512)
        options = DecodingOptions(max_length=500, max_length_ratio=0.0, temperature=5.0)
        job = Job(1, {"src_ids": src_ids, "src_mask": src_mask}, options)
        front.send(Submit("tiny/1", job, time.monotonic()))
        for _ in range(200):  # decoding: the replica hears of its row
            if replica_.load:
                break
            time.sleep(0.01)
        assert replica_.load == 1
        front.send(Unload("tiny/1"))  # its drain over, the version goes with its call
        time.sleep(1.0)  # many reports' time
        assert "tiny/1" not in fronts.schedulers
        assert replica_.load == 0 and not replica_._busy()
        front.close()
    finally:
        parent.send(Stop())
        worker.join(10)
        replica_.done.set()
        fronts.close()
        child.close()  # the reader's recv ends (EOF) before its end is closed
        reader.join(10)
        parent.close()
        assert not worker.is_alive() and not reader.is_alive()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_replica_whose_worker_raises_lets_its_fronts_go_at_once(monkeypatch):
    """A replica's worker runs on a thread of a process that lives on: when its loop raises
    (a fault that recurs whatever the input), every front connected to it sees its
    connection end at once and sends its calls to another replica, rather than waiting for
    Ray Serve's health check to replace the replica."""
    import threading
    import time
    from multiprocessing import Pipe
    from multiprocessing.connection import Client

    from helpers import RefusingEncoder, tiny_transformer

    from models.reference import TorchEngine
    from service.runtime.batching import source_batch
    from service.runtime.decoding import DecodingOptions
    from service.worker.messages import Job, Ready, Submit
    from service.worker.scheduler import Scheduler
    from service.worker.settings import WorkerSettings

    engine = RefusingEncoder(TorchEngine(tiny_transformer(seed=1)), 64, refusals=-1)
    scheduler = Scheduler(engine, max_rows=8)
    info = {"pid": 1, "models": {"tiny/1": {}}}
    monkeypatch.setattr(replica, "load", lambda settings: ({"tiny/1": scheduler}, info))
    replica_ = object.__new__(replica.WorkerReplica)
    replica_.settings = WorkerSettings(
        index=0, models=(), socket="127.0.0.1:0", authkey=b"key", replica=True
    )
    replica_.id, replica_.done, replica_.fronts = "r", threading.Event(), None
    parent, child = Pipe()
    worker = threading.Thread(target=replica_._run, args=(child,), daemon=True)
    worker.start()
    try:
        assert isinstance(parent.recv(), Ready)
        host, port = info["address"].rsplit(":", 1)
        front = Client((host, int(port)), "AF_INET", authkey=b"key")
        assert isinstance(front.recv(), Ready)
        src_ids, src_mask = source_batch([[5, 9, 14]], 512)
        for job_id in (1, 2):  # every run fails, and no input ever encoded: raised
            job = Job(job_id, {"src_ids": src_ids, "src_mask": src_mask}, DecodingOptions())
            front.send(Submit("tiny/1", job, time.monotonic()))
        with pytest.raises(EOFError):
            while front.poll(5):
                front.recv()  # its reports, then the end
            pytest.fail("the front's connection stays open")
        worker.join(5)
        assert replica_.done.is_set() and not worker.is_alive()
    finally:
        parent.close()
        front.close()
