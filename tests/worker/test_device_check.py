"""The worker's choice of step on CUDA (`cache = "auto"`): the static step where it decodes, on
the device itself, as the growing step does (service.worker.startup.device_check, staggered waves of
the golden inputs), else the growing step and why. On the CPU the same check runs over bound
buffers (the static step uncaptured)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import built_tiny_translator, perturb_near_logits

from service.runtime.batching import source_batch
from service.runtime.inference import CachedInference, parting_margin
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import verify, write_manifest
from service.worker.scheduler import Scheduler
from service.worker.settings import WorkerSettings
from service.worker.startup import (
    CHECK_WAVES,
    choose_engine,
    device_check,
    static_if_checked,
    tie_window,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shipped_translator):
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    _, version = built_tiny_translator(directory, shipped_translator[1], 7, ("fp32",))
    rng = np.random.default_rng(11)
    vocab = int(version.config["vocab_size"])
    inputs = []
    for length in (5, 11, 3, 8):
        src_ids, src_mask = source_batch([list(rng.integers(4, vocab, size=length))], 512)
        inputs.append({"src_ids": src_ids, "src_mask": src_mask})
    return version, inputs


def _on_cpu(version):
    return lambda cache: OnnxEngine(version, "fp32", "cpu", 1, True, cache=cache)


def test_the_static_step_is_chosen_where_it_decodes_as_the_growing_one(tiny):
    version, inputs = tiny
    settings = WorkerSettings(index=0, models=(), max_rows=32)
    engine, why, _ = static_if_checked(_on_cpu(version), inputs, settings)
    assert engine.cache == "static", why
    assert f"{CHECK_WAVES * len(inputs)} staggered decodes" in why


def test_the_check_meets_rows_at_other_positions_and_a_full_batch(tiny):
    """The waves overlap: the batch holds rows of several waves at once, more than one wave's
    rows, at different lengths."""
    version, inputs = tiny
    engine = OnnxEngine(version, "fp32", "cpu", 1, True, cache="static")
    seen: list[int] = []

    class Watching(Scheduler):
        def iterate(self):
            super().iterate()
            seen.extend(self.stats.step_rows)
            self.stats.step_rows.clear()

    reference = Scheduler(OnnxEngine(version, "fp32", cache="growing"), 32)
    assert device_check(Watching(engine, 32), reference, inputs) == (None, 0)
    assert max(seen) > len(inputs)  # rows of more than one wave decoded together


@pytest.fixture(scope="module")
def perturbed(tiny, tmp_path_factory):
    """The tiny version with its static steps' logits moved far off the growing step's."""
    version, _ = tiny
    copy = tmp_path_factory.mktemp("perturbed") / "tiny" / "1"
    shutil.copytree(version.directory, copy)
    for name in ("static_decoder", "static_lean_decoder"):
        perturb_near_logits(copy / "fp32" / f"{name}.onnx", amount=10.0)
    manifest = json.loads((copy / "manifest.json").read_text())
    write_manifest(
        copy, {k: v for k, v in manifest.items() if k not in ("files", "format_version")}
    )
    return verify(copy)


def test_a_static_step_that_decodes_otherwise_falls_back_to_growing(tiny, perturbed):
    _, inputs = tiny
    settings = WorkerSettings(index=0, models=(), max_rows=32)
    engine, why, _ = static_if_checked(_on_cpu(perturbed), inputs, settings)
    assert engine.cache == "growing"
    assert "decodes unlike the growing one" in why and "decodes differ" in why


def test_decodes_that_part_at_a_near_tie_are_not_differences(tiny, perturbed):
    """A decode that parts where the reference's two tokens lie within the tie window counts
    as a near tie; the far-off perturbed step's partings are no near ties of a narrow window,
    and all are in a window wider than any two log-probabilities."""
    _, inputs = tiny

    def check(tie: float):
        static = OnnxEngine(perturbed, "fp32", "cpu", 1, True, cache="static")
        reference = OnnxEngine(perturbed, "fp32", "cpu", 1, True, cache="growing")
        return device_check(Scheduler(static, 32), Scheduler(reference, 32), inputs, tie)

    problem, ties = check(0.0)
    differing = int(problem.split(" of ")[0])
    assert ties == 0 and 0 < differing <= CHECK_WAVES * len(inputs)
    problem, ties = check(1e-6)
    assert problem is not None and problem.startswith(f"{differing} of ") and ties == 0
    assert check(1e9) == (None, differing)
    settings = WorkerSettings(index=0, models=(), max_rows=32)
    engine, why, _ = static_if_checked(_on_cpu(perturbed), inputs, settings, tie=1e9)
    assert engine.cache == "static"
    assert why.endswith(f"staggered decodes, {differing} parting at a near tie (within 1e+09))")


def test_the_tie_window_is_four_times_the_certified_tolerance_or_measured_error():
    manifest = {"parity": {"graphs": {"fp16": {"tolerance": {"atol": 0.05, "rtol": 0.01}}}}}
    assert tie_window(manifest, "fp16") == pytest.approx(0.2)
    assert tie_window(manifest, "fp32") == 0.0  # no certified tolerance: token-identical
    assert tie_window({}, "fp16") == 0.0
    # a Hugging Face claim passed as precise as the model is in float16, its step 0.3 off
    measured = {"tolerance": {"atol": 0.05}, "max_abs": 0.3}
    assert tie_window({"parity": {"graphs": {"fp16": measured}}}, "fp16") == pytest.approx(1.2)
    within = {"tolerance": {"atol": 0.05}, "max_abs": 0.01}
    assert tie_window({"parity": {"graphs": {"fp16": within}}}, "fp16") == pytest.approx(0.2)
    ours = {"tolerance": {"atol": 0.05}, "max_abs": {"decoder": 0.3}}  # a figure a graph
    assert tie_window({"parity": {"graphs": {"fp16": ours}}}, "fp16") == pytest.approx(0.2)


def test_no_inputs_no_static_step(tiny):
    version, _ = tiny
    settings = WorkerSettings(index=0, models=(), max_rows=32)
    engine, why, _ = static_if_checked(_on_cpu(version), [], settings)
    assert engine.cache == "growing" and "no golden inputs" in why


def test_on_the_cpu_auto_keeps_the_engine_default(tiny):
    version, _ = tiny
    engine, why, ahead = choose_engine(WorkerSettings(index=0, models=()), version, "fp32")
    assert engine.cache == "in_place" and why == "the default on cpu" and ahead == 1
    settings = WorkerSettings(index=0, models=(), cache="growing", steps_ahead=3)
    engine, why, ahead = choose_engine(settings, version, "fp32")
    assert ahead == 3  # no trial: the configured steps ahead (a store that cannot, one a step)
    assert engine.cache == "growing" and why == "set by the configuration"


def test_a_static_step_that_cannot_run_falls_back_to_growing(tiny):
    version, inputs = tiny
    settings = WorkerSettings(index=0, models=(), max_rows=32)

    def engine(cache):
        if cache == "static":  # as a device refusing the capture would
            raise RuntimeError("CUDA graph capture failed")
        return OnnxEngine(version, "fp32", "cpu", 1, True, cache=cache)

    chosen, why, _ = static_if_checked(engine, inputs, settings)
    assert chosen.cache == "growing"
    assert why == "the static step failed to run here: RuntimeError: CUDA graph capture failed"


def test_where_two_decodes_part_and_how_close_the_reference_ranks_them(tiny):
    version, inputs = tiny
    engine = OnnxEngine(version, "fp32", "cpu", 1, cache="growing")
    encoder = engine.encode(**inputs[0])
    eos = engine.special_tokens.eos
    step, margin = parting_margin(engine, encoder, [5, 6, 7], [5, 6])  # one ended at step 2
    assert step == 2 and margin >= 0
    assert parting_margin(engine, encoder, [5, 6], [5, 6, 7]) == (2, margin)  # either way
    step, between = parting_margin(engine, encoder, [5, 9, 4], [5, 8])
    assert step == 1 and between == parting_margin(engine, encoder, [5, 8], [5, 9])[1]
    log_probs = CachedInference(engine, encoder, 1)
    for token in (engine.special_tokens.bos, 5, 6):
        logits, _ = log_probs.step(np.asarray([[token]], dtype=np.int64))
    scores = logits[0] - np.logaddexp.reduce(logits[0].astype(np.float64))
    assert margin == pytest.approx(abs(scores[7] - scores[eos]), abs=1e-5)


def test_steps_ahead_are_checked_with_the_static_step(tiny):
    version, inputs = tiny
    settings = WorkerSettings(index=0, models=(), max_rows=32, steps_ahead=4)
    engine, why, ahead = static_if_checked(_on_cpu(version), inputs, settings)
    assert engine.cache == "static" and ahead == 4
    assert f"({CHECK_WAVES * len(inputs)} staggered decodes, 4 steps ahead)" in why


def test_steps_ahead_that_decode_otherwise_leave_the_static_step_one_step_at_a_time(
    tiny, monkeypatch
):
    """Runs ahead whose later steps come back with other ids (as a device that broke the
    chained runs would give): the static step stays, one step at a time, and the log says
    why; so too where a run ahead raises."""
    from service.runtime.rows.buckets import Bucket
    from service.runtime.rows.static import StaticRows
    from service.runtime.search import Candidates
    from service.runtime.tensors import Launch

    version, inputs = tiny
    original = StaticRows.launch_ahead

    def shifted(self, *args, **kwargs):
        launch = original(self, *args, **kwargs)

        def output():
            out = launch.output()
            ids = out.candidates.ids.copy()
            ids[:, 1:] += 1
            return out._replace(candidates=Candidates(ids, out.candidates.log_probs))

        return Launch(launch.run, output, launch.recording)

    monkeypatch.setattr(StaticRows, "launch_ahead", shifted)
    settings = WorkerSettings(index=0, models=(), max_rows=32, steps_ahead=4)
    engine, why, ahead = static_if_checked(_on_cpu(version), inputs, settings)
    assert engine.cache == "static" and ahead == 1
    assert "; 4 steps ahead failed the check (" in why and "decodes differ" in why
    assert why.endswith("): one at a time")

    def broken(self, positions, steps):
        raise RuntimeError("the chained run failed")

    monkeypatch.setattr(Bucket, "write_ahead", broken)
    engine, why, ahead = static_if_checked(_on_cpu(version), inputs, settings)
    assert engine.cache == "static" and ahead == 1
    assert "4 steps ahead failed the check (RuntimeError: the chained run failed)" in why
