"""The static step an engine makes once over a version (`static_step`): its forms, the sizes
its buffers are allocated at, the place op where shipped, and a graph id of its own for each
binding it captures."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from service.runtime.errors import ModelRepositoryError
from service.runtime.graphs import IN_PLACE
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import ModelVersion
from service.runtime.static_step import StaticStep, StepGraph, static_step


@pytest.fixture(scope="module")
def engine(tiny_translator) -> OnnxEngine:
    return OnnxEngine(tiny_translator[1], "fp32", cache="static")


def _session(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_the_step_is_sized_by_its_graph_and_the_versions_limits(engine, tiny_translator):
    _, version = tiny_translator
    step = engine.static_step
    assert isinstance(step, StaticStep)
    assert step.capacity == version.config["max_length"]  # fixed in the static graph
    assert step.memory_limit == version.manifest["limits"]["max_source_tokens"]
    assert step.vocab == version.config["vocab_size"]
    assert (step.device, step.float_dtype, step.capture) == ("cpu", np.dtype(np.float32), False)
    assert step.gather is engine.ops["gather"] and step.tensors is engine.tensors
    assert step.place is not None and len(step.place.get_outputs()) == len(engine.memory_names)
    inputs = step.inputs()
    assert {"input_ids", "positions", "memory_mask"} <= set(inputs)
    assert inputs["past_key_values.0.key"].shape[2] == step.capacity


def test_the_lean_form_runs_where_asked_for_and_shipped(engine):
    step = engine.static_step
    assert set(step.graphs) == {StepGraph.FULL, StepGraph.LEAN}
    assert step.graph_of(lean=True) is StepGraph.LEAN
    assert step.graph_of(lean=False) is StepGraph.FULL
    full_only = replace(step, graphs={StepGraph.FULL: step.graphs[StepGraph.FULL]})
    assert full_only.graph_of(lean=True) is StepGraph.FULL


def test_each_captured_binding_gets_a_graph_id_of_its_own(engine):
    step = engine.static_step
    assert step.run_options() is None  # nothing captured: no options at all
    captured = replace(step, capture=True, graph_ids=iter(range(5)))
    ids = [captured.run_options().get_run_config_entry("gpu_graph_id") for _ in range(3)]
    assert ids == ["0", "1", "2"]


def test_made_over_a_version_without_memory_ops_or_a_step_of_no_fixed_capacity(
    engine, tiny_translator
):
    _, version = tiny_translator
    step = engine.static_step
    full = step.graphs[StepGraph.FULL]
    manifest = {**version.manifest, "ops": {**version.manifest["ops"]}}
    assert step.place is not None and step.scatter is not None
    del manifest["ops"]["place"], manifest["ops"]["scatter"]
    bare = ModelVersion(version.directory, manifest)
    made = static_step(
        bare,
        "fp32",
        np.dtype(np.float32),
        step.interface,
        {StepGraph.FULL: full, StepGraph.LEAN: None},  # a form not shipped: None
        engine.tensors,
        _session,
        capture=False,
    )
    assert made.place is None and made.scatter is None and set(made.graphs) == {StepGraph.FULL}
    assert made.capacity == step.capacity
    growing = _session(version.graph("fp32", IN_PLACE + "decoder"))  # capacity by the rows
    with pytest.raises(ModelRepositoryError, match="fp32 static step: its capacity is not fixed"):
        static_step(
            version,
            "fp32",
            np.dtype(np.float32),
            step.interface,
            {StepGraph.FULL: growing},
            engine.tensors,
            _session,
            capture=False,
        )
