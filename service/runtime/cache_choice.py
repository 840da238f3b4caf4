"""How a model version's step carries its key/value cache, chosen in one place for the engine's
default, the worker (service.worker.startup) and `serve --print-config`.

On the CPU the step written in place is the default where the version ships it (no step
copies the past). On CUDA the growing step is, until the static step (replayed as CUDA
graphs, the fastest served step as measured, docs/benchmarks-gpu.md) decodes as the growing
one on the device itself: the choice names it as the `trial`, which the worker checks at
start-up. A configured cache applies where the version ships that step; elsewhere the version
keeps its default.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from service.runtime.choices import AUTO, CACHES, Auto, Cache
from service.runtime.errors import ModelRepositoryError
from service.runtime.graphs import IN_PLACE, STATIC
from service.runtime.repository import ModelVersion

PREFIXES: dict[Cache, str] = {"in_place": IN_PLACE, "growing": "", "static": STATIC}
# the rules, as a choice over every version states them
CUDA_RULE = (
    "the static step replayed as CUDA graphs where a version ships it, once it decodes the "
    "golden inputs as the growing step does on the GPU at start-up (else growing, and the "
    "log says why); growing for the others"
)
CPU_RULE = "written in place where a version ships that step, else growing"


@dataclass(frozen=True)
class CacheChoice:
    cache: Cache  # the step served (where `trial` is set: until it passes its check)
    reason: str  # why, for the log and --print-config
    # a faster step served instead once it decodes as `cache` does on the device itself
    trial: Cache | None = None


def shipped_caches(model: ModelVersion, variant: str) -> frozenset[Cache]:
    """The ways of carrying the cache whose step `variant` of `model` ships."""
    return frozenset(c for c in CACHES if model.has_graph(variant, PREFIXES[c] + "decoder"))


def choose_cache(
    setting: Cache | Auto, device: str, shipped: Collection[Cache] | None = None
) -> CacheChoice:
    """The cache for `setting` on `device` of a version whose variant ships the steps
    `shipped` (shipped_caches). None: any version; the choice is then what a version
    shipping every step gets, and its reason the rule for every version."""
    every = shipped is None
    forms = frozenset(CACHES) if every else frozenset(shipped)
    if setting != AUTO:
        if setting in forms:
            kept = " (a version without that step keeps its default)" if every else ""
            return CacheChoice(setting, "set by the configuration" + kept)
        default = choose_cache(AUTO, device, forms)
        return CacheChoice(
            default.cache, f"{setting} asked for, but this version ships no such step"
        )
    if device == "cuda":  # GroupQueryAttention in place is float16 only there: not measured
        trial = "static" if "static" in forms else None
        return CacheChoice("growing", CUDA_RULE if every else "the default on cuda", trial)
    cache = "in_place" if "in_place" in forms else "growing"
    return CacheChoice(cache, CPU_RULE if every else f"the default on {device}")


def check_cache(
    model: ModelVersion,
    variant: str,
    device: str,
    cache: str,
    io_binding: bool | None,
    capture: bool,
) -> bool:
    """Whether an engine of `cache` (`capture`: its static step replayed as CUDA graphs) on
    `device` runs through IO binding (`io_binding`: as asked, None: on a device other than
    the CPU); raises where `variant` of `model` ships no such step or the combination cannot
    run."""
    shipped = shipped_caches(model, variant)
    if cache == "static":
        if io_binding is False:
            raise ValueError("a static cache is bound to its buffers: it needs IO binding")
        io_binding = True
        if "static" not in shipped:
            raise ModelRepositoryError(f"{model.directory}: {variant} has no static step")
    if capture and cache != "static":
        raise ValueError("CUDA graphs replay the static step: capture needs cache='static'")
    if capture and device != "cuda":
        raise ValueError("CUDA graphs need device cuda")
    io_binding = device != "cpu" if io_binding is None else io_binding
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {CACHES}, got {cache!r}")
    if cache == "in_place" and "in_place" not in shipped:
        raise ModelRepositoryError(f"{model.directory}: {variant} has no in-place step")
    # where an in-place buffer can be bound: host memory on the CPU, an OrtValue anywhere
    if cache == "in_place" and not (device == "cpu" or io_binding):
        raise ValueError(f"an in-place cache on {device} needs IO binding")
    return io_binding
