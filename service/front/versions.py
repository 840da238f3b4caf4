"""Model versions while serving: the front watches the repository.

Every `watch_seconds` it lists `<model>/<version>/manifest.json`. A version directory it has
not seen is verified before anything of it is served: the manifest's hashes
(service.runtime.repository.verify), a parity certificate that passed, and then every worker
loads it and decodes its golden set. Only then do calls reach it (a call naming no version gets the
newest). A version that fails any check is refused with a log line and
`attnserve_model_versions_refused_total`, and the versions being served are untouched; it is
looked at again when its manifest changes. A version whose directory goes away, or that falls
outside `max_versions` (the newest N of each model; 0: all), is retired: calls stop reaching
it, its calls in flight finish (at most `drain_seconds`; a call counts from when it named the
version, `Front.resolved`, before any job of it reaches the pool), then the workers drop it.

A served version whose manifest changes (the directory replaced in place: removed and
published again between two looks, or renamed over) is checked and loaded like a new one,
under another worker key (ServedModel.worker_key: the manifest's revision), beside the content
it replaces; once loaded it takes the version's calls and the old content drains as a retired
version does. A replacement that fails a check is refused, and the content loaded before stays
served until the manifest changes again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from service.runtime.errors import ModelRepositoryError, Unavailable
from service.runtime.kinds import served_model
from service.runtime.repository import manifests, read_manifest, revision, verify

log = logging.getLogger("attnserve")
LOAD_TRIES = 3  # loads of a version cut by a worker's death before the version is refused


def version_order(version: str):
    """Numeric versions in number order, before named ones."""
    return (0, int(version), "") if version.isdigit() else (1, 0, version)


def newest(versions, keep: int) -> list:
    """The `keep` newest of `versions` (strings); every one when keep is 0."""
    ordered = sorted(versions, key=version_order)
    return ordered if keep <= 0 else ordered[-keep:]


def certified(version) -> None:
    """Raises ModelRepositoryError unless the version's parity certificate passed."""
    parity = version.manifest.get("parity") or {}
    if parity.get("passed") is not True:
        raise ModelRepositoryError(
            f"{version.directory}: no passing parity certificate in its manifest"
        )


def _stamp(manifest: Path) -> tuple:
    stat = manifest.stat()
    return stat.st_mtime_ns, stat.st_size


class VersionWatcher:
    """Keeps the front's models in step with the repository (see the module doc)."""

    def __init__(self, front, config, health=None):
        self.front, self.config = front, config
        # writes gRPC health again after each look (service.front.server.set_health): a
        # service's last version may have gone, or its first come back
        self.health = health
        self.served = {  # directory -> ServedModel
            Path(m.version.directory): m
            for names in front.models.values()
            for versions in names.values()
            for m in versions.values()
        }
        self.seen: dict[Path, tuple] = {}  # directories looked at and not served: stamp
        self.retiring: set[str] = set()
        self.cut: dict[Path, int] = {}  # directory -> its loads cut by a worker's death
        self.tasks: set[asyncio.Task] = set()

    def _manifests(self) -> dict[Path, Path]:
        root = Path(self.config.repository)
        return {m.parent: m for m in manifests(root)}

    async def run(self) -> None:
        for directory, manifest in self._manifests().items():  # held back at start-up
            if directory not in self.served:
                self.seen[directory] = _stamp(manifest)
        while True:
            await asyncio.sleep(self.config.watch_seconds)
            await self.scan()

    async def scan(self) -> None:
        """One look at the repository: new versions loaded, replaced ones loaded again, gone
        ones retired."""
        manifests = self._manifests()
        for directory, model in list(self.served.items()):
            if directory not in manifests:
                self._retire(directory, model, "its directory is gone")
        for directory, manifest in manifests.items():
            try:
                stamp = _stamp(manifest)
            except OSError:
                continue
            if self.seen.get(directory) == stamp or self._unchanged(directory):
                continue
            self.seen[directory] = stamp
            await self._add(directory)
        if self.health is not None:
            await self.health()

    def _unchanged(self, directory: Path) -> bool:
        """Whether `directory` is served as its manifest now describes it. A version
        replaced in place (removed and published again within one look, or renamed over)
        has the same directory and another manifest."""
        model = self.served.get(directory)
        if model is None:
            return False
        try:
            now = revision(read_manifest(directory))
        except ModelRepositoryError:
            return False  # refused by verify
        if now == model.version.revision:
            self.seen.pop(directory, None)  # a refused replacement taken back
            return True
        return False

    async def _add(self, directory: Path) -> None:
        """Verifies, loads and serves the version at `directory`: a new one, or the new
        content of a served one (which then drains)."""
        front, replaced = self.front, self.served.get(directory)
        try:
            version = await asyncio.to_thread(verify, directory)
            certified(version)
            model = await asyncio.to_thread(served_model, version, self.config)
            if model.service not in front.services:
                raise ModelRepositoryError(
                    f"{directory}: a {model.kind} model needs {model.service}, which this "
                    "server did not start with; restart it to serve this version"
                )
            if model.worker_key in self.retiring:  # its calls in flight still drain: a scan later
                self.seen.pop(directory, None)
                log.info("%s waits for the version it replaces to drain", model.key)
                return
            names = front.models.get(model.service, {}).get(version.name, {})
            other = names.get(version.version)
            if other is not None and other is not replaced:
                raise ModelRepositoryError(
                    f"{directory}: {version.name} version {version.version} is already served "
                    f"from {other.version.directory}"
                )
            keep = newest([*names, version.version], self.config.max_versions)
            if version.version not in keep:
                log.info(
                    "model version %s/%s held back: older than the %d newest",
                    version.name,
                    version.version,
                    self.config.max_versions,
                )
                return
            variant, why = self.config.variant_choice(front.device, version.manifest)
            started = time.monotonic()
            await front.pool.load(model.worker_key, version, variant)
        except Unavailable as error:  # a worker died while it loaded: not the version's fault
            cut = self.cut[directory] = self.cut.get(directory, 0) + 1
            if cut < LOAD_TRIES:
                self.seen.pop(directory, None)
                log.warning(
                    "model version at %s not loaded (%s): at the next look", directory, error
                )
                return
            self._refuse(directory, f"{error}, at each of {cut} loads")
            return
        except (ModelRepositoryError, OSError, ValueError, KeyError, TimeoutError) as error:
            self._refuse(directory, error)
            return
        self.cut.pop(directory, None)
        if replaced is not None and replaced.key != model.key:  # renumbered in its manifest
            self._retire(directory, replaced, f"{directory} holds {model.key} now")
            replaced = None
        front.pool.models[model.worker_key] = version.name
        front.models.setdefault(model.service, {}).setdefault(version.name, {})[version.version] = (
            model
        )
        self.served[directory] = model
        self.seen.pop(directory, None)
        front.describe(model, variant)
        log.info(
            "serving %s (%s, variant %s: %s%s), loaded and checked in %.1f s",
            model.key,
            model.kind,
            variant,
            why,
            "; replaced in place" * (replaced is not None),
            time.monotonic() - started,
        )
        if replaced is not None:  # its calls now reach the new content
            self._drain_later(replaced, "its directory holds a new one")
        served = front.models[model.service][version.name]
        keep = newest(served, self.config.max_versions)
        for other in [m for v, m in served.items() if v not in keep]:
            self._retire(Path(other.version.directory), other, "a newer version came")

    def _refuse(self, directory: Path, error) -> None:
        self.cut.pop(directory, None)
        if self.front.pool.parent:  # every front checks it; the first one counts it
            self.front.metrics.versions_refused.labels(directory.parent.name).inc()
        served = self.served.get(directory)
        kept = f"; {served.key} stays served as it was loaded" if served is not None else ""
        log.error("model version at %s refused: %s%s", directory, error, kept)

    def _retire(self, directory: Path, model, why: str) -> None:
        if model.worker_key in self.retiring:
            return
        versions = self.front.models.get(model.service, {}).get(model.version.name, {})
        versions.pop(model.version.version, None)  # no call reaches it from now on
        if not versions:
            self.front.models[model.service].pop(model.version.name, None)
        self.served.pop(directory, None)
        # the model's versions held back by max_versions are looked at again: one may be
        # among the newest now (a rollback: the newest removed)
        self.seen = {d: stamp for d, stamp in self.seen.items() if d.parent != directory.parent}
        self._drain_later(model, why)

    def _drain_later(self, model, why: str) -> None:
        """`model`, which no call reaches any more, is dropped once its calls finish."""
        self.retiring.add(model.worker_key)
        log.info("retiring %s: %s; its calls in flight finish first", model.key, why)
        task = asyncio.get_running_loop().create_task(self._drain(model))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _in_flight(self, key: str) -> int:
        """Calls of a version still going: those that named it (counted from then on, while
        their inputs are prepared, before any job is sent) and the jobs workers still hold."""
        return max(self.front.resolved.get(key, 0), self.front.pool.calls_of(key))

    async def _drain(self, model) -> None:
        front, end = self.front, time.monotonic() + self.config.drain_seconds
        key = model.worker_key
        while self._in_flight(key) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        left = self._in_flight(key)
        front.pool.unload(key)
        versions = front.models.get(model.service, {}).get(model.version.name, {})
        if model.version.version not in versions:  # not served again since (replaced, put back)
            front.forget(model)
        self.retiring.discard(key)
        log.info("retired %s%s", key, f" ({left} calls cut at drain_seconds)" * bool(left))
