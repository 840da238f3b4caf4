"""Workers on a real Ray cluster: two Ray nodes of one CPU each (`ray.cluster_utils.Cluster`,
the nodes as processes of this machine), the front started with `--ray`, its replicas placed
by Ray Serve. Calls go through them and answer as the local pool's workers do; a node removed
under load loses no call; autoscaling goes from one replica to two and back; a version added
while serving reaches every replica."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from helpers import LONG_TEXTS
from PIL import Image
from servers import add_version, is_served

from service import client

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ray_cluster_utils = pytest.importorskip("ray.cluster_utils")  # the ray extra, from ./dev.sh
RAY_PACKAGE = os.fsencode(Path(ray_cluster_utils.__file__).parent) + b"/"

TEXTS = ["Hola, ¿cómo estás?", "El gato duerme en la casa.", *LONG_TEXTS[:6]]
CLIENTS = 8  # the load under which a node goes
MOVED_SECONDS = 30.0  # a lost replica's work answered elsewhere within


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node and a second node, one CPU each; replicas report their load every half
    second (Ray Serve's default is ten), so that autoscaling is seen within a test."""
    saved = os.environ.get("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S")
    os.environ["RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "0.5"
    node = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    # a folder of the cluster's own (short: Ray's socket paths are bounded), not the
    # machine's /tmp/ray, where another Ray of the user may run
    folder = tempfile.mkdtemp(prefix="ray-")
    cluster = _started(node, folder)
    second = cluster.add_node(**node)  # the head's folder
    cluster.wait_for_nodes()
    try:
        yield cluster, second, node
    finally:
        cluster.shutdown()
        # a node whose start Ray gave up waiting for (`_added`) is not the cluster's to stop
        _stop_ray_below(os.getpid())
        shutil.rmtree(folder, ignore_errors=True)
        if saved is None:
            os.environ.pop("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", None)
        else:
            os.environ["RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = saved


def _started(node: dict, folder: str, tries: int = 2):
    """The head node, its files in `folder`: started again where Ray gives up waiting for
    its raylet (30 s, which a loaded machine can pass), the processes of the failed start
    stopped first."""
    head = {**node, "include_dashboard": False, "temp_dir": folder}
    arguments = {"initialize_head": True, "head_node_args": head}
    for _ in range(tries - 1):
        try:
            return ray_cluster_utils.Cluster(**arguments)
        except Exception as error:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(error):
                raise
            _stop_ray_below(os.getpid())
    return ray_cluster_utils.Cluster(**arguments)


def _stop_ray_below(pid: int) -> list[int]:
    """Kills the Ray processes descended from `pid` (this test's nodes and their workers,
    those of a start Ray gave up waiting for among them), not another Ray of the machine
    -> the processes killed."""
    parents = {p: _parent(p) for p in _processes()}
    below, reached = [], [pid]
    while reached:
        parent = reached.pop()
        children = [child for child, of in parents.items() if of == parent]
        below += children
        reached += children
    killed = [p for p in below if _is_ray(_read(Path(f"/proc/{p}/cmdline")))]
    for p in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return killed


def _is_ray(command_line: bytes) -> bool:
    """Whether a process's command line is one of Ray's: a program or script of the
    installed ray package (its gcs_server, raylet and agents), or a worker that named itself
    `ray::...` (not a process that merely has "ray" in a path)."""
    return command_line.startswith(b"ray::") or RAY_PACKAGE in command_line


def _added(cluster, node: dict) -> None:
    """A node added to `cluster`. Where Ray gives up waiting for the node's raylet to
    register (30 s, which a loaded machine can pass), the raylet it started goes on and
    registers later: the caller waits for what the node brings (a replica placed there), and
    the module's cluster stops it with its own processes at its end."""
    try:
        cluster.add_node(**node)
    except Exception as error:  # Ray raises a bare Exception for it
        if "timed out during startup" not in str(error):
            raise


def test_a_head_that_times_out_starting_is_started_once_more(monkeypatch):
    made, stopped = [], []

    def cluster(**arguments):
        made.append(arguments)
        if len(made) == 1:
            raise Exception("The current node timed out during startup. This could happen")
        return "started"

    monkeypatch.setattr(ray_cluster_utils, "Cluster", cluster)
    monkeypatch.setitem(globals(), "_stop_ray_below", stopped.append)
    assert _started({"num_cpus": 1}, "/tmp/ray-x") == "started" and stopped == [os.getpid()]
    assert made[0] == made[1] and made[0]["head_node_args"]["num_cpus"] == 1
    assert made[0]["head_node_args"]["temp_dir"] == "/tmp/ray-x"
    made.clear()
    with pytest.raises(Exception, match="timed out"):  # twice: the second failure is raised
        _started({"num_cpus": 1}, "/tmp/ray-x", tries=1)


def test_only_the_ray_processes_below_this_one_are_stopped():
    """A Ray process of this test's (a child's child, as a node's workers are the raylet's)
    is killed; a process of another kind beside it (with "ray" in a path it names), and one
    of Ray's that is not below this process, are not."""
    sleeping = "import time; time.sleep(60)"
    ray = os.fsdecode(RAY_PACKAGE)
    mark = f"--this-test={os.getpid()}-{time.monotonic_ns()}"  # none but this test's processes
    # a shell whose child is a Ray script; the script's path reaches the shell by its
    # environment, so that the child alone names it
    shell = {**os.environ, "PYTHON": sys.executable, "CODE": sleeping, "MARK": mark}
    nested = subprocess.Popen(
        ["sh", "-c", '"$PYTHON" -c "$CODE" "$SCRIPT" "$MARK"; :'],
        env={**shell, "SCRIPT": f"{ray}_private/workers/default_worker.py"},
    )
    other = subprocess.Popen([sys.executable, "-c", sleeping, "/srv/ray/attnserve", mark])
    outside = subprocess.Popen(  # its own session, then orphaned: not below this process
        ["sh", "-c", '"$PYTHON" -c "$CODE" "$SCRIPT" "$MARK" & :'],
        env={**shell, "SCRIPT": f"{ray}core/src/ray/raylet/raylet"},
        start_new_session=True,
    )
    try:
        outside.wait(10)
        deadline, children = time.monotonic() + 10, []
        while not children and time.monotonic() < deadline:
            time.sleep(0.05)  # the shell's child started
            children = [p for p in _processes() if _parent(p) == nested.pid]
        assert _stop_ray_below(os.getpid()) == children and len(children) == 1
        assert nested.wait(10) == 0  # its child killed, the shell went on
        assert other.poll() is None  # not Ray's
        assert len(_named(os.fsencode(mark))) == 2  # `other`, and Ray's outside this tree
    finally:
        for process in (nested, other):
            process.kill()
            process.wait()
        for stray in _named(os.fsencode(mark)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(stray, signal.SIGKILL)


def _processes() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _parent(pid: int) -> int | None:
    stat = _read(Path(f"/proc/{pid}/stat")).decode(errors="replace")
    return int(stat.rpartition(")")[2].split()[1]) if stat else None


def _named(part: bytes) -> list[int]:
    """The processes whose command line holds `part`."""
    return [p for p in _processes() if part in _read(Path(f"/proc/{p}/cmdline"))]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_a_node_ray_gave_up_waiting_for_is_left_to_register():
    class Cluster:
        def __init__(self, error: str):
            self.error, self.asked = error, []

        def add_node(self, **node):
            self.asked.append(node)
            raise Exception(self.error)

    late = Cluster("The current node timed out during startup. This could happen")
    assert _added(late, {"num_cpus": 1}) is None and late.asked == [{"num_cpus": 1}]
    with pytest.raises(Exception, match="no such resource"):  # any other failure is raised
        _added(Cluster("no such resource"), {"num_cpus": 1})


def test_replicas_that_cannot_be_placed_fail_the_start_in_time(ray_cluster, monkeypatch):
    """The start failed only once the application's deletion had waited out the unplaced
    replica's graceful shutdown (`drain_seconds` + 10 s, 30 s by default), some 43 s after
    its start for a 10 s bound: it deletes the application without waiting now, and the
    front ends as soon as it has said why."""
    from service.front import cluster as front_cluster
    from service.front.metrics import Metrics
    from service.worker.settings import WorkerSettings

    cluster, _, _ = ray_cluster
    monkeypatch.setattr(front_cluster, "READY_SECONDS", 10.0)
    # two CPUs a replica, on nodes of one: Ray Serve waits for a node that never comes
    settings = front_cluster.ClusterSettings(cluster.address, num_cpus=2, drain_seconds=20)
    assert settings.deployment_options()["graceful_shutdown_timeout_s"] == 30
    pool = front_cluster.ClusterPool(WorkerSettings(index=0, models=()), settings, Metrics(), 16)

    async def start() -> tuple[float, float]:
        started = time.monotonic()
        try:
            with pytest.raises(RuntimeError, match="replicas were not ready within 10 s"):
                await asyncio.wait_for(pool.start(), 90)
            failed = time.monotonic() - started
        finally:
            await pool.stop()
        return failed, time.monotonic() - started

    failed, ended = asyncio.run(start())
    assert failed < 10 + 15 and ended < failed + 5


def test_a_front_stopped_while_its_replicas_start_ends_at_once(ray_cluster, start_server):
    """SIGTERM while the replicas started went unheeded until the start ended: with replicas
    that cannot be placed (two CPUs each, nodes of one) the front waited out READY_SECONDS
    (600 s), and a pod's grace period ends in SIGKILL, its application left deployed. The
    start is cancelled now: the front deletes what it deployed and ends at once."""
    cluster, _, _ = ray_cluster
    flags = ("--ray", cluster.address, "--replica-cpus", "2", "--watch-seconds", "0")
    front = start_server(*flags, wait=False)
    front.wait(serving=False)  # bound: its replicas are being deployed
    time.sleep(3.0)
    started = time.monotonic()
    code = front.terminate(timeout=60)
    log = front.log_file.read_text()
    assert code == 0 and time.monotonic() - started < 15, log
    assert "stopped while the workers started" in log


def png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "PNG")
    return buffer.getvalue()


def _replicas(server) -> dict[str, float]:
    """{node id: replicas ready there}, from the front's metrics."""
    return {
        dict(labels)["node"]: value
        for (name, labels), value in server.samples().items()
        if name == "attnserve_cluster_replicas" and value > 0
    }


def _load(server, stop: threading.Event, outcomes: list) -> None:
    """One client's calls until `stop`: (status code, seconds since the epoch at its end)."""
    i = 0
    while not stop.is_set():
        text = TEXTS[i % len(TEXTS)]
        i += 1
        try:
            client.translate(server.channel, [text], timeout=60)
            outcomes.append(("OK", time.time()))
        except grpc.RpcError as error:
            outcomes.append((error.code().name, time.time()))


def test_calls_go_through_replicas_on_two_nodes_and_a_node_may_go(
    ray_cluster, start_server, server
):
    cluster, second, node = ray_cluster
    served = start_server("--ray", cluster.address, "--min-replicas", "2", "--watch-seconds", "0")
    served.wait_for(lambda: len(_replicas(served)) == 2, 30, "a replica on each node")
    assert served.value("attnserve_workers_ready") == 2

    # the same answers as the local pool's workers: decoding is deterministic
    ours = client.translate(served.channel, TEXTS, timeout=60)
    theirs = client.translate(server.channel, TEXTS, timeout=60)
    assert [t.hypotheses[0].text for t in ours.translations] == [
        t.hypotheses[0].text for t in theirs.translations
    ]
    rng = np.random.default_rng(3)
    images = [png(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)) for _ in range(3)]
    ours = client.caption(served.channel, images, timeout=60)
    theirs = client.caption(server.channel, images, timeout=60)
    assert [c.hypotheses[0].text for c in ours.captions] == [
        c.hypotheses[0].text for c in theirs.captions
    ]

    # a node removed under load: every call answered, the lost replica's calls elsewhere
    stop, outcomes = threading.Event(), []
    with ThreadPoolExecutor(CLIENTS) as pool:
        try:
            for _ in range(CLIENTS):
                pool.submit(_load, served, stop, outcomes)
            served.wait_for(lambda: len(outcomes) >= 40, 60, "calls under load")
            removed = time.time()
            cluster.remove_node(second)
            served.wait_for(lambda: len(_replicas(served)) == 1, MOVED_SECONDS, "node gone")
            after = len(outcomes)
            served.wait_for(lambda: len(outcomes) >= after + 40, MOVED_SECONDS, "calls after")
            moved = time.time() - removed
        finally:
            stop.set()
    codes = [code for code, _ in outcomes]
    retried = served.value("attnserve_retried_calls_total")
    print(f"node removed: {len(codes)} calls, {retried:g} retried, work moved in {moved:.1f} s")
    assert codes.count("OK") == len(codes), {c: codes.count(c) for c in set(codes)}
    assert moved < MOVED_SECONDS
    assert retried >= 1  # its calls went elsewhere

    # a node back: Ray Serve places the missing replica there, the front reaches it
    _added(cluster, node)
    served.wait_for(lambda: len(_replicas(served)) == 2, 90, "the replacement replica")
    assert client.translate(served.channel, TEXTS[:2], timeout=60).translations
    assert served.terminate() == 0


def test_autoscaling_goes_to_two_replicas_under_load_and_back(ray_cluster, start_server):
    cluster, _, _ = ray_cluster
    flags = ("--min-replicas", "1", "--max-replicas", "2", "--replica-target-rows", "2")
    delays = ("--replica-upscale-seconds", "1", "--replica-downscale-seconds", "3")
    served = start_server("--ray", cluster.address, *flags, *delays, "--watch-seconds", "0")
    served.wait_for(lambda: sum(_replicas(served).values()) == 1, 30, "one replica")

    stop, outcomes = threading.Event(), []
    with ThreadPoolExecutor(CLIENTS) as pool:
        try:
            for _ in range(CLIENTS):
                pool.submit(_load, served, stop, outcomes)
            loaded = time.time()
            served.wait_for(lambda: sum(_replicas(served).values()) == 2, 90, "a second replica")
            print(f"autoscaled: a second replica ready {time.time() - loaded:.1f} s into the load")
        finally:
            stop.set()
    up = time.time()
    served.wait_for(lambda: sum(_replicas(served).values()) == 1, 90, "back to one replica")
    codes = [code for code, _ in outcomes]
    print(f"autoscaled: {len(codes)} calls, back to one replica {time.time() - up:.1f} s idle")
    assert codes and codes.count("OK") == len(codes), {c: codes.count(c) for c in set(codes)}
    assert client.translate(served.channel, TEXTS[:2], timeout=60).translations
    assert served.terminate() == 0


def test_a_version_added_while_serving_reaches_every_replica(
    ray_cluster, start_server, model_repository, tmp_path
):
    cluster, _, _ = ray_cluster
    repository = tmp_path / "repository"
    shutil.copytree(model_repository, repository, symlinks=False)
    served = start_server(
        "--ray",
        cluster.address,
        "--min-replicas",
        "2",
        "--repository",
        str(repository),
        "--watch-seconds",
        "0.5",
    )
    served.wait_for(lambda: sum(_replicas(served).values()) == 2, 30, "two replicas")
    add_version(repository, "1", "2")
    served.wait_for(lambda: is_served(served, "2"), 120, "version 2 on every replica")
    # calls naming version 2 go to either replica (the one holding fewer rows)
    with ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda text: client.translate(served.channel, [text], version="2", timeout=60),
                TEXTS * 3,
            )
        )
    assert {a.version for a in answers} == {"2"}
    assert served.value("attnserve_retried_calls_total") == 0
    assert served.terminate() == 0
