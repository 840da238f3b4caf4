"""Model versions while serving, by the front's watcher over a repository on disk and a stand-in
for the front's worker pool: a new certified version is loaded and served, a failing one is
refused, counted and not looked at again until its manifest changes, versions beyond
max_versions and versions whose directory goes away are retired once their calls drain."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import SHIPPED_CAPTIONER

from service.front.caption import CaptionServicer
from service.front.config import ServerConfig
from service.front.metrics import Metrics
from service.front.versions import (
    LOAD_TRIES,
    VersionWatcher,
    certified,
    newest,
    version_order,
)
from service.runtime.errors import ModelRepositoryError, Unavailable
from service.runtime.kinds import served_model
from service.runtime.repository import ModelVersion, verify, write_manifest

SERVICE = CaptionServicer.service
PIECES = [("pad", "<blank>"), ("bos", "<s>"), ("eos", "</s>"), ("unk", "<unk>")]


def publish(
    root: Path, directory: str, version: str | None = None, passed: bool = True, limit: int = 24
) -> Path:
    """A captioner version in `root`/captioner/`directory` (its manifest naming `version`)
    with the tokenizer, no graphs, a parity certificate that passed or not, and at most
    `limit` output tokens (what tells two contents of one version apart)."""
    out = root / "captioner" / directory
    out.mkdir(parents=True)
    shutil.copy(SHIPPED_CAPTIONER / "tokenizer.model", out)
    manifest = {
        "model": {"name": "captioner", "version": version or directory, "kind": "captioner"},
        "tokenizer": "tokenizer.model",
        "special_tokens": {n: {"id": i, "piece": p} for i, (n, p) in enumerate(PIECES)},
        "limits": {"max_output_tokens": limit},
        "preprocessor": {"type": "image", "size": [96, 96], "grid": [12, 12]},
        "graphs": {"fp32": {}},
        "parity": {"passed": passed},
    }
    write_manifest(out, manifest)
    return out


def worker_key(directory: Path) -> str:
    """What the workers hold the version published at `directory` under."""
    return served_model(verify(directory), _config(directory.parents[1])).worker_key


@dataclass
class Pool:
    """The front's worker pool as the watcher uses it: loads recorded, calls in flight set."""

    parent: bool = True
    models: dict = field(default_factory=dict)
    loaded: list = field(default_factory=list)
    unloaded: list = field(default_factory=list)
    calls: dict = field(default_factory=dict)
    failing: bool = False
    deaths: int = 0  # loads still to be cut by a worker's death

    async def load(self, key, version, variant):
        if self.failing:
            raise TimeoutError(f"{key}: the golden set did not decode in time")
        if self.deaths:
            self.deaths -= 1
            raise Unavailable("worker exited with code -9")
        self.loaded.append((key, variant))

    def calls_of(self, key) -> int:
        return self.calls.get(key, 0)

    def unload(self, key) -> None:
        self.unloaded.append(key)


@dataclass
class Front:
    pool: Pool = field(default_factory=Pool)
    services: set = field(default_factory=lambda: {SERVICE})
    models: dict = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    device: str = "cpu"
    described: list = field(default_factory=list)
    forgotten: list = field(default_factory=list)
    resolved: dict = field(default_factory=dict)  # worker key -> calls that named it

    def describe(self, model, variant) -> None:
        self.described.append((model.key, variant))

    def forget(self, model) -> None:
        self.forgotten.append(model.key)

    def served(self) -> list[str]:
        return sorted(self.models.get(SERVICE, {}).get("captioner", {}))

    def refused(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "attnserve_model_versions_refused_total", {"model": "captioner"}
        )
        return value or 0.0


def _config(root: Path, **kw) -> ServerConfig:
    return ServerConfig(repository=root, variant="fp32", watch_seconds=0.05, **kw)


def test_numbered_versions_sort_as_numbers_before_named_ones():
    assert sorted(["10", "9", "b", "2", "a"], key=version_order) == ["2", "9", "10", "a", "b"]
    assert newest(["3", "10", "2"], 2) == ["3", "10"]
    assert newest(["3", "10", "2"], 0) == ["2", "3", "10"]  # 0: every one


def test_only_a_passed_parity_certificate_is_certified(tmp_path):
    certified(ModelVersion(tmp_path, {"parity": {"passed": True}}))
    for manifest in ({}, {"parity": {"passed": False}}, {"parity": {"passed": "yes"}}):
        with pytest.raises(ModelRepositoryError, match="no passing parity certificate"):
            certified(ModelVersion(tmp_path, manifest))


def test_a_new_version_is_loaded_then_served(tmp_path):
    publish(tmp_path, "1")
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path))
    asyncio.run(watcher.scan())
    key = worker_key(tmp_path / "captioner" / "1")
    assert front.pool.loaded == [(key, "fp32")]
    assert front.served() == ["1"] and front.pool.models == {key: "captioner"}
    assert front.described == [("captioner/1", "fp32")]
    model = front.models[SERVICE]["captioner"]["1"]
    assert model.kind == "captioner" and watcher.served == {tmp_path / "captioner" / "1": model}
    asyncio.run(watcher.scan())  # served already: not loaded again
    assert len(front.pool.loaded) == 1


def test_a_failing_version_is_refused_once_until_its_manifest_changes(tmp_path):
    directory = publish(tmp_path, "2", passed=False)
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path))

    async def scans():
        await watcher.scan()
        assert front.refused() == 1 and front.served() == [] and not front.pool.loaded
        await watcher.scan()  # the same manifest: not looked at again
        assert front.refused() == 1
        manifest = json.loads((directory / "manifest.json").read_text())
        manifest["parity"]["passed"] = True
        (directory / "manifest.json").write_text(json.dumps(manifest))
        await watcher.scan()

    asyncio.run(scans())
    assert front.served() == ["2"] and front.refused() == 1
    assert watcher.seen == {}  # served: no longer among the refused


def test_a_load_cut_by_a_worker_s_death_is_tried_again_at_the_next_look(tmp_path):
    publish(tmp_path, "2")
    front = Front()
    front.pool.deaths = 1
    watcher = VersionWatcher(front, _config(tmp_path))

    async def scans():
        await watcher.scan()
        assert front.served() == [] and front.refused() == 0  # the version is not at fault
        await watcher.scan()  # the same manifest, looked at again

    asyncio.run(scans())
    assert front.served() == ["2"] and front.refused() == 0
    key = worker_key(tmp_path / "captioner" / "2")
    assert front.pool.loaded == [(key, "fp32")] and watcher.cut == {}


def test_a_version_whose_every_load_a_worker_dies_in_is_refused(tmp_path):
    publish(tmp_path, "2")
    front = Front()
    front.pool.deaths = LOAD_TRIES + 1
    watcher = VersionWatcher(front, _config(tmp_path))

    async def scans():
        for _ in range(LOAD_TRIES + 1):
            await watcher.scan()

    asyncio.run(scans())
    assert front.served() == [] and front.refused() == 1
    assert front.pool.deaths == 1  # refused after LOAD_TRIES loads, then left alone


@pytest.mark.parametrize(
    "problem", ["load", "service", "same version", "hashes"], ids=lambda p: p.replace(" ", "-")
)
def test_a_version_that_fails_a_check_leaves_the_served_ones_alone(tmp_path, problem):
    publish(tmp_path, "1")
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path))
    asyncio.run(watcher.scan())
    if problem == "load":
        front.pool.failing = True
        publish(tmp_path, "2")
    elif problem == "service":
        front.services = {"attnserve.v1.TranslationService"}
        publish(tmp_path, "2")
    elif problem == "same version":
        publish(tmp_path, "1-copy", version="1")
    else:
        with open(publish(tmp_path, "2") / "tokenizer.model", "ab") as f:
            f.write(b"\0")
    asyncio.run(watcher.scan())
    assert front.refused() == 1
    key = worker_key(tmp_path / "captioner" / "1")
    assert front.served() == ["1"] and front.pool.loaded == [(key, "fp32")]
    assert front.pool.unloaded == [] and front.forgotten == []


def test_beyond_max_versions_the_oldest_is_retired_and_an_older_one_held_back(tmp_path):
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path, max_versions=1))

    async def scans():
        publish(tmp_path, "1")
        await watcher.scan()
        publish(tmp_path, "2")
        await watcher.scan()
        assert front.served() == ["2"]  # at once: no call reaches 1 from now on
        await asyncio.gather(*watcher.tasks)
        publish(tmp_path, "0")  # older than the newest one: not loaded, not refused
        await watcher.scan()

    asyncio.run(scans())
    first, second = (worker_key(tmp_path / "captioner" / v) for v in ("1", "2"))
    assert front.pool.loaded == [(first, "fp32"), (second, "fp32")]
    assert front.pool.unloaded == [first] and front.forgotten == ["captioner/1"]
    assert front.served() == ["2"] and front.refused() == 0
    assert front.pool.models[second] == "captioner"


def test_a_version_whose_directory_goes_away_is_retired_once_its_calls_finish(tmp_path):
    directory = publish(tmp_path, "1")
    key = worker_key(directory)
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path, drain_seconds=10.0))

    async def scans():
        await watcher.scan()
        front.pool.calls[key] = 2
        shutil.rmtree(directory)
        await watcher.scan()
        assert front.served() == [] and SERVICE in front.models
        assert "captioner" not in front.models[SERVICE]  # its last version gone
        await asyncio.sleep(0.2)
        assert front.pool.unloaded == []  # its calls still in flight
        front.pool.calls[key] = 0
        await asyncio.wait_for(asyncio.gather(*watcher.tasks), 5)

    asyncio.run(scans())
    assert front.pool.unloaded == [key] and front.forgotten == ["captioner/1"]
    assert watcher.retiring == set() and watcher.served == {}


def test_a_version_put_back_while_it_drains_is_loaded_once_the_drain_ends(tmp_path):
    """A version removed and put back (a replacement renamed into place) while its calls
    drain: the drain's end unloaded the key the new one was loaded under, and the workers
    answered its every call "not loaded". It is loaded after the drain, never before."""
    directory = publish(tmp_path, "1")
    key = worker_key(directory)
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path, drain_seconds=10.0))

    async def scans():
        await watcher.scan()
        front.pool.calls[key] = 1
        shutil.rmtree(directory)
        await watcher.scan()  # retired: draining
        publish(tmp_path, "1")
        await watcher.scan()  # waits for the drain
        assert front.served() == [] and front.pool.loaded == [(key, "fp32")]
        front.pool.calls[key] = 0
        await asyncio.wait_for(asyncio.gather(*watcher.tasks), 5)
        await watcher.scan()

    asyncio.run(scans())
    assert front.pool.loaded == [(key, "fp32")] * 2
    assert front.pool.unloaded == [key] and front.served() == ["1"]
    assert watcher.retiring == set()


def test_the_newest_removed_the_one_held_back_is_served_again(tmp_path):
    """max_versions 1: version 1 held back behind 2 (and looked at once since); 2 removed
    (a rollback), 1 is served at the same scan."""
    publish(tmp_path, "1")
    newest_one = publish(tmp_path, "2")
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path, max_versions=1))

    async def scans():
        await watcher.scan()
        await watcher.scan()  # 1 held back, and not looked at again unchanged
        assert front.served() == ["2"]
        shutil.rmtree(newest_one)
        await watcher.scan()

    asyncio.run(scans())
    assert front.served() == ["1"]


def test_calls_that_outlast_drain_seconds_do_not_hold_a_retired_version(tmp_path):
    directory = publish(tmp_path, "1")
    key = worker_key(directory)
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path, drain_seconds=0.2))

    async def scans():
        await watcher.scan()
        front.pool.calls[key] = 1  # never finishes
        shutil.rmtree(directory)
        await watcher.scan()
        await asyncio.wait_for(asyncio.gather(*watcher.tasks), 5)

    asyncio.run(scans())
    assert front.pool.unloaded == [key]


def test_versions_present_at_start_up_are_held_back_and_new_ones_watched(tmp_path):
    publish(tmp_path, "1")  # there at start-up, not served by the front: left alone
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path))

    async def watch():
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.1)
        publish(tmp_path, "2")
        for _ in range(100):
            await asyncio.sleep(0.05)
            if front.served():
                break
        task.cancel()

    asyncio.run(watch())
    key = worker_key(tmp_path / "captioner" / "2")
    assert front.served() == ["2"] and front.pool.loaded == [(key, "fp32")]
    assert set(watcher.seen) == {tmp_path / "captioner" / "1"}


BROKEN = {  # a manifest of another shape, by what is wrong with it
    "not an object": lambda manifest: [manifest],
    "files a list": lambda manifest: {**manifest, "files": sorted(manifest["files"])},
    "a variant a path": lambda manifest: {**manifest, "graphs": {"fp32": "fp32/decoder.onnx"}},
    "model a text": lambda manifest: {**manifest, "model": "captioner"},
    "special tokens a list": lambda manifest: {**manifest, "special_tokens": []},
    "limits a list": lambda manifest: {**manifest, "limits": []},
    "languages a list": lambda manifest: {**manifest, "languages": ["en"]},
    "a certificate a list": lambda manifest: {**manifest, "parity": [True]},
    "its graphs a list": lambda manifest: {**manifest, "parity": {"passed": True, "graphs": []}},
}


@pytest.mark.parametrize("broken", sorted(BROKEN), ids=lambda b: b.replace(" ", "-"))
def test_a_manifest_of_another_shape_is_refused_and_the_watch_goes_on(tmp_path, broken):
    """Every problem a refusal of that version alone: the served one stays, and a good version
    published after it is still loaded."""
    publish(tmp_path, "1")
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path))
    asyncio.run(watcher.scan())
    path = publish(tmp_path, "2") / "manifest.json"
    path.write_text(json.dumps(BROKEN[broken](json.loads(path.read_text()))))
    asyncio.run(watcher.scan())
    assert front.refused() == 1 and front.served() == ["1"]
    publish(tmp_path, "3")
    asyncio.run(watcher.scan())
    assert front.served() == ["1", "3"] and front.refused() == 1


def test_a_service_whose_last_version_is_retired_is_not_serving(tmp_path):
    """Health said SERVING for a service whose every version had been retired, while each
    call to it was refused NOT_FOUND: a service is SERVING while it serves a version, and
    each look at the repository writes gRPC health again (the HTTP routes read the same)."""
    from grpc_health.v1 import health_pb2
    from grpc_health.v1.health import aio

    from service.front.server import set_health
    from service.front.state import LIVENESS
    from service.front.state import Front as ServingFront

    pool = Pool()
    pool.serving = True
    config = _config(tmp_path, drain_seconds=1.0)
    front = ServingFront(config, {}, pool, Metrics())
    front.services = frozenset({SERVICE})  # started with a captioner
    front.describe = lambda model, variant: None  # its metrics read the workers
    front.serving = True
    servicer, names = aio.HealthServicer(), ("", LIVENESS, SERVICE)
    watcher = VersionWatcher(front, config, lambda: set_health(servicer, front, names))

    async def said() -> list[str]:
        answers = [
            await servicer.Check(health_pb2.HealthCheckRequest(service=n), None) for n in names
        ]
        return [health_pb2.HealthCheckResponse.ServingStatus.Name(a.status) for a in answers]

    async def run() -> list[list[str]]:
        seen = []
        publish(tmp_path, "1")
        await watcher.scan()
        seen.append(await said())
        shutil.rmtree(tmp_path / "captioner" / "1")
        await watcher.scan()
        seen.append(await said())
        publish(tmp_path, "2")
        await watcher.scan()
        seen.append(await said())
        await asyncio.gather(*watcher.tasks)
        return seen

    assert asyncio.run(run()) == [
        ["SERVING", "SERVING", "SERVING"],
        ["SERVING", "SERVING", "NOT_SERVING"],  # the server serves its other services
        ["SERVING", "SERVING", "SERVING"],
    ]


def _limit(front) -> int:
    """The output limit of the captioner version 1 that calls reach."""
    return front.models[SERVICE]["captioner"]["1"].version.manifest["limits"]["max_output_tokens"]


def test_a_version_replaced_in_place_is_loaded_and_the_one_it_replaces_drains(tmp_path):
    """A version directory removed and published again under the same number within one look
    (or renamed over): the server served the weights it had loaded while the repository showed
    the new ones. The new content is verified and loaded beside the old, calls naming the
    version reach it at once, and the old one is dropped once its calls in flight finish."""
    directory = publish(tmp_path, "1")
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path, drain_seconds=10.0))

    async def scans():
        await watcher.scan()
        old = front.models[SERVICE]["captioner"]["1"]
        front.pool.calls[old.worker_key] = 1  # a call in flight on the weights loaded first
        shutil.rmtree(directory)
        publish(tmp_path, "1", limit=30)
        await watcher.scan()
        assert _limit(front) == 30 and front.served() == ["1"]
        new = front.models[SERVICE]["captioner"]["1"]
        assert new.worker_key != old.worker_key and watcher.served[directory] is new
        await asyncio.sleep(0.2)
        assert front.pool.unloaded == []  # the old one's call still in flight
        front.pool.calls[old.worker_key] = 0
        await asyncio.wait_for(asyncio.gather(*watcher.tasks), 5)
        await watcher.scan()  # served as it is on disk: nothing more to do
        return old, new

    old, new = asyncio.run(scans())
    assert front.pool.loaded == [(old.worker_key, "fp32"), (new.worker_key, "fp32")]
    assert front.pool.unloaded == [old.worker_key]
    assert front.pool.models[new.worker_key] == "captioner"
    assert front.forgotten == []  # its model_info sample is the new one's now
    assert front.described == [("captioner/1", "fp32")] * 2 and front.refused() == 0
    assert watcher.retiring == set() and watcher.seen == {}


def test_a_replacement_that_fails_a_check_is_refused_and_the_loaded_one_stays(tmp_path):
    directory = publish(tmp_path, "1")
    front = Front()
    watcher = VersionWatcher(front, _config(tmp_path))

    async def scans():
        await watcher.scan()
        old = front.models[SERVICE]["captioner"]["1"]
        shutil.rmtree(directory)
        publish(tmp_path, "1", passed=False, limit=30)
        await watcher.scan()
        await watcher.scan()  # the same manifest: refused once
        assert front.refused() == 1 and front.models[SERVICE]["captioner"]["1"] is old
        assert front.pool.unloaded == [] and not watcher.tasks
        shutil.rmtree(directory)
        publish(tmp_path, "1", limit=30)
        await watcher.scan()
        await asyncio.gather(*watcher.tasks)
        return old

    old = asyncio.run(scans())
    assert _limit(front) == 30 and front.refused() == 1
    assert front.pool.unloaded == [old.worker_key]


def test_a_call_that_named_a_version_holds_it_through_its_retirement(tmp_path):
    """A call names its version, then prepares its inputs (tokenises a text, decodes an
    image) before any of its jobs reaches the pool: a drain that counted only the pool's
    calls dropped the version meanwhile, and the call's jobs found it unloaded."""
    from stand_in import CONTEXT

    from service.front.state import Front as ServingFront

    config = _config(tmp_path, drain_seconds=10.0)
    pool = Pool()
    front = ServingFront(config, {}, pool, Metrics())
    front.services = frozenset({SERVICE})
    front.describe = lambda model, variant: None  # its metrics read the workers
    front.serving = True
    servicer, request = CaptionServicer(front), SimpleNamespace(model="captioner", version="")
    directory = publish(tmp_path, "1")
    watcher = VersionWatcher(front, config)

    async def run():
        await watcher.scan()
        async with servicer._accounted("Caption", request, CONTEXT) as (model, _, _):
            shutil.rmtree(directory)
            await watcher.scan()  # retired: no new call reaches it
            await asyncio.sleep(0.2)
            assert pool.unloaded == []  # this call's jobs are still to come
        await asyncio.wait_for(asyncio.gather(*watcher.tasks), 5)
        return model

    model = asyncio.run(run())
    assert pool.unloaded == [model.worker_key] and front.resolved == {}
