"""A worker's start-up: each model version loaded on the engine its cache choice names, the
static step checked on the device where it is a trial, and every golden input decoded as
certified before the worker reports ready."""

from __future__ import annotations

import math
import os
from dataclasses import replace

from service.runtime.cache_choice import choose_cache, shipped_caches
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import ModelRepositoryError
from service.runtime.inference import parting_margin
from service.runtime.kinds import kind_class
from service.runtime.repository import unchanged
from service.worker.messages import Job, Result, Stats
from service.worker.scheduler import Scheduler
from service.worker.settings import WorkerSettings

GOLDEN_AGREEMENT = 0.9  # token agreement a variant without its own golden set must reach
# the start-up check of the static step on CUDA (device_check): the golden inputs submitted
# in waves, a few steps apart, each wave decoding a few tokens further
CHECK_WAVES, CHECK_STAGGER, CHECK_LENGTH = 4, 3, 12
# seconds a run of steps ahead may last in the check: as many steps as steps_ahead allows,
# whatever a step's pace, so that the check meets the runs the fastest steps will make
CHECK_AHEAD_WAIT = 60.0


def golden_check(scheduler: Scheduler, model_version, variant: str) -> int:
    """Decodes the version's golden set; raises ModelRepositoryError on a mismatch. Returns
    the number of inputs checked."""
    golden, cache = model_version.golden(), scheduler.engine.cache
    if cache == "static":  # the in-place step at a fixed capacity, certified token-identical
        cache = "in_place"

    def of(name: str) -> list[dict]:  # a variant's entries made with this cache (older: any)
        return [g for g in golden if g["variant"] == name and g.get("cache", cache) == cache]

    entries = of(variant)
    own = bool(entries)
    entries = entries or of("fp32") or [g for g in golden if g["variant"] == "fp32"]
    if not entries:
        raise ModelRepositoryError(f"{model_version.directory}: no golden set for {variant}")
    kind = kind_class(model_version.manifest["model"]["kind"])
    for i, entry in enumerate(entries):  # one at a time, as they were decoded (the batch a
        options = DecodingOptions(max_length=entry["max_length"])  # row shares moves int8)
        inputs = kind.golden_inputs(model_version, entry)
        controls = kind.golden_controls(entry, options)  # its length bound, as certified
        scheduler.submit(Job(-1 - i, inputs, options, controls=controls))
        while scheduler.busy:
            scheduler.iterate()
    results = _collect(scheduler)
    problems = []
    for i, entry in enumerate(entries):
        event = results.get(-1 - i)
        if not isinstance(event, Result):
            problems.append(f"golden input {i}: {event}")
            continue
        tokens, expected = event.results[0][0].tokens, entry["expected_ids"]
        if own and tokens != expected:
            problems.append(f"golden input {i}: {tokens} instead of {expected}")
        if not own:
            same = sum(a == b for a, b in zip(tokens, expected, strict=False))
            if same < GOLDEN_AGREEMENT * max(len(tokens), len(expected)):
                problems.append(f"golden input {i}: {same} of {len(expected)} tokens agree")
    if problems:
        raise ModelRepositoryError(
            f"{model_version.directory} ({variant}) fails its golden set: " + "; ".join(problems)
        )
    return len(entries)


def _collect(scheduler: Scheduler) -> dict[int, object]:
    """The events of a start-up check's jobs by job id, taken out of the scheduler with its
    measurements (they are not traffic)."""
    events = {e.job_id: e for e in scheduler.events}
    scheduler.events.clear()
    scheduler.stats = Stats()
    return events


def device_check(
    fast: Scheduler, reference: Scheduler, inputs: list[dict], tie: float = 0.0
) -> tuple[str | None, int]:
    """(what differed, or None where `fast` decodes `inputs` greedily as `reference` does;
    how many decodes parted at a near tie). Each scheduler decodes them in CHECK_WAVES waves
    CHECK_STAGGER steps apart (the n-th wave CHECK_LENGTH + n tokens long at most), so that
    rows join a batch whose other rows are at other positions and leave it at other times,
    and up to CHECK_WAVES x len(inputs) rows decode at once: the cases a decode of one input
    at a time (the golden check) never meets. A decode that parts from the reference's where
    the reference's log-probabilities of the two tokens lie within `tie` is a near tie, not a
    difference: two steps within their certified tolerance may rank such tokens either way."""

    def decode(scheduler: Scheduler) -> dict[int, list[int] | str]:
        for wave in range(CHECK_WAVES):
            options = DecodingOptions(max_length=CHECK_LENGTH + wave)
            for i, job_inputs in enumerate(inputs):
                scheduler.submit(Job(-1 - wave * len(inputs) - i, job_inputs, options))
            for _ in range(CHECK_STAGGER):
                if scheduler.busy:
                    scheduler.iterate()
        while scheduler.busy:
            scheduler.iterate()
        return {
            j: e.results[0][0].tokens if isinstance(e, Result) else str(e)
            for j, e in _collect(scheduler).items()
        }

    got, expected = decode(fast), decode(reference)
    if len(expected) != CHECK_WAVES * len(inputs) or got.keys() != expected.keys():
        return f"{len(got)} of {len(expected)} jobs answered", 0
    differing = sorted(j for j in expected if got[j] != expected[j])
    ties = [
        j
        for j in differing
        if tie > 0
        and _near_tie(reference.engine, inputs[(-1 - j) % len(inputs)], expected[j], got[j], tie)
    ]
    differing = [j for j in differing if j not in ties]
    if not differing:
        return None, len(ties)
    first = differing[0]
    return (
        f"{len(differing)} of {len(expected)} decodes differ, e.g. {got[first]} instead "
        f"of {expected[first]}"
    ), len(ties)


def _near_tie(engine, job_inputs: dict, expected, got, tie: float) -> bool:
    """Whether two decodes of one input part where `engine` (the reference) gives the two
    tokens log-probabilities within `tie` of each other."""
    if isinstance(expected, str) or isinstance(got, str):  # a failed job
        return False
    return parting_margin(engine, engine.encode(**job_inputs), expected, got)[1] <= tie


def tie_window(manifest: dict, variant: str) -> float:
    """How close two tokens' log-probabilities may be for two steps certified for `variant`
    (each step's logits within the certificate's `atol` of the model's, or within the one
    error it measured where that is more: a Hugging Face claim passed as precise as the
    model is in its float type, export.hf.certify) to rank them either way: a flip needs the
    model's margin within 2 atol, where a step may see it as 4 atol. 0 where the version
    holds no certified tolerance for it (token-identical then)."""
    graphs = (manifest.get("parity") or {}).get("graphs", {})
    claim = graphs.get(variant, {})
    bound = float(claim.get("tolerance", {}).get("atol", 0.0))
    measured = claim.get("max_abs")  # one figure (our own graphs' certificate: one a graph)
    if bound and isinstance(measured, int | float) and math.isfinite(measured):
        bound = max(bound, float(measured))
    return 4 * bound


def choose_engine(settings: WorkerSettings, model_version, variant: str):
    """(engine, why, steps ahead) of one model version: the cache `choose_cache` gives for
    its variant (service.runtime.cache_choice). Where that names a trial (on CUDA, the static
    step with each bucket replayed as a CUDA graph: the fastest served step as measured,
    docs/benchmarks-gpu.md), the trial once it decodes as the growing step on this very
    device (device_check over the golden inputs), with the configured steps ahead where they
    pass the check too; else the growing step, and why."""
    from service.runtime.onnx_engine import OnnxEngine  # after CUDA_VISIBLE_DEVICES is set

    def engine(cache: str):
        return OnnxEngine(
            model_version, variant, settings.device, 1, settings.io_binding, cache=cache
        )

    shipped = shipped_caches(model_version, variant)
    choice = choose_cache(settings.cache, settings.device, shipped)
    if choice.trial is None:
        return engine(choice.cache), choice.reason, settings.steps_ahead
    inputs_of = kind_class(model_version.manifest["model"]["kind"]).golden_inputs
    inputs = [
        inputs_of(model_version, entry)
        for entry in model_version.golden()
        if entry["variant"] == "fp32" and entry.get("cache", "in_place") == "in_place"
    ]
    tie = tie_window(model_version.manifest, variant)
    return static_if_checked(engine, inputs, settings, tie)


def static_if_checked(engine, inputs: list[dict], settings: WorkerSettings, tie: float = 0.0):
    """(engine, why, steps ahead): `engine("static")` where it decodes `inputs` as
    `engine("growing")` does (device_check, near ties within `tie` allowed), else the
    growing one. With `settings.steps_ahead` above 1 the static step is checked with them
    first (runs as long as they allow); where only they decode otherwise, the static step
    serves one step at a time. `engine`: cache -> an engine on the device."""
    growing = engine("growing")
    if not inputs:
        return growing, "the static step not checked on this device: no golden inputs", 1
    ahead = settings.steps_ahead
    tried = [replace(settings, ahead_wait=CHECK_AHEAD_WAIT)] if ahead > 1 else []
    tried.append(replace(settings, steps_ahead=1))
    failed_ahead = ""
    try:
        static = engine("static")
        for each in tried:
            try:
                problem, ties = _checked(each, static, growing, inputs, tie)
            except Exception as error:
                if each.steps_ahead == 1:
                    raise
                problem = f"{type(error).__name__}: {error}"
            if problem is None or each.steps_ahead == 1:
                break
            failed_ahead = f"; {ahead} steps ahead failed the check ({problem}): one at a time"
    except Exception as error:  # e.g. a capture this onnxruntime or device refuses
        why = f"the static step failed to run here: {type(error).__name__}: {error}"
        return growing, why, 1
    if problem is not None:
        return growing, f"the static step decodes unlike the growing one here: {problem}", 1
    parted = f", {ties} parting at a near tie (within {tie:g})" if ties else ""
    with_ahead = f", {ahead} steps ahead" if each.steps_ahead > 1 else ""
    return (
        static,
        (
            f"the fastest served step, decoding as the growing one on this device "
            f"({CHECK_WAVES * len(inputs)} staggered decodes{with_ahead}{parted}){failed_ahead}"
        ),
        each.steps_ahead,
    )


def _checked(settings: WorkerSettings, static, growing, inputs, tie: float):
    """device_check of `static` against `growing`, each under a scheduler of `settings`."""
    schedulers = [settings.scheduler(e) for e in (static, growing)]
    try:
        return device_check(*schedulers, inputs, tie)
    finally:
        for scheduler in schedulers:
            scheduler.close()


def load(settings: WorkerSettings):
    """(schedulers, info) of the model versions in `settings`, each loaded and checked
    (`load_model`). A version whose directory holds another content than the one the front
    verified is skipped and named in info["skipped"] with why: the content a version replaced
    in place held, which the front serves on while its calls drain (a worker started then
    loads the rest, and the front sends that content's calls to the workers that still hold
    it). Any other failure ends the start."""
    schedulers, info = {}, {"pid": os.getpid(), "models": {}, "skipped": {}}
    for key, model_version in settings.models:
        try:
            unchanged(model_version)
        except ModelRepositoryError as error:
            info["skipped"][key] = str(error)
            continue
        schedulers[key], info["models"][key] = load_model(
            settings, model_version, settings.variant_of(key)
        )
    return schedulers, info


def load_model(settings: WorkerSettings, model_version, variant: str):
    """(scheduler, info) of one model version, its golden set checked; ModelRepositoryError
    when its directory no longer holds the content the front verified."""
    unchanged(model_version)
    engine, why, ahead = choose_engine(settings, model_version, variant)
    scheduler = replace(settings, steps_ahead=ahead).scheduler(engine)
    checked = golden_check(scheduler, model_version, variant)
    info = {
        "provider": engine.decoder.get_providers()[0],
        "cache": engine.cache,
        "cache_reason": why,
        "cuda_graphs": bool(engine.capture),
        "steps_ahead": ahead,
        "kind": engine.kind,
        "golden_inputs": checked,
    }
    return scheduler, info
