"""The static step's buckets: buffers allocated once, slots bound as a graph's output at
their address, the step's int64 inputs written in one copy, a binding per form and k."""

from __future__ import annotations

import numpy as np
import pytest

from service.runtime.onnx_engine import OnnxEngine
from service.runtime.rows.buckets import FED, Bucket, SlotBuffer, SlotBuffers
from service.runtime.static_step import StepGraph


@pytest.fixture(scope="module")
def step(tiny_translator):
    return OnnxEngine(tiny_translator[1], "fp32", cache="static").static_step


def test_a_slot_buffer_knows_its_layout_and_binds_a_run_of_slots_in_place(step):
    buffer = SlotBuffer.allocate("cpu", [4, 2, 3], np.float32)
    assert buffer.row == (2, 3) and buffer.row_bytes == 2 * 3 * 4
    assert buffer.start == buffer.value.data_ptr() and buffer.dtype == np.float32
    source = np.arange(3 * 6, dtype=np.float32).reshape(3, 2, 3) + 1
    gather = step.gather["float32"]
    binding = gather.io_binding()
    binding.bind_cpu_input("data", source)
    binding.bind_cpu_input("indices", np.array([2, 0], np.int64))
    buffer.bind_rows(binding, "output", "cpu", 1, 2)  # slots 1 and 2
    gather.run_with_iobinding(binding)
    written = buffer.value.numpy()
    np.testing.assert_array_equal(written[1:3], source[[2, 0]])
    assert not written[0].any() and not written[3].any()  # the other slots untouched


def test_the_cache_buffers_are_shared_by_every_memory_size_of_a_slot_count(step):
    shared = SlotBuffers(step, 4)
    assert set(shared.buffers) == {s.input for s in step.interface.states}
    keys = shared.buffers["past_key_values.0.key"]
    assert keys.value.shape() == [4, 4, step.capacity, 8]
    small, large = Bucket(step, shared, 4, 16), Bucket(step, shared, 4, 64)
    assert small.state["past_key_values.0.key"] is large.state["past_key_values.0.key"]
    assert small.memory["encoder.0.key"].shape() == [4, 4, 16, 8]
    assert large.memory["encoder.0.key"].shape() == [4, 4, 64, 8]
    assert set(small.memory) == set(step.interface.memory_tensors)


def test_a_steps_int64_inputs_are_written_into_one_buffer(step):
    bucket = Bucket(step, SlotBuffers(step, 2), 2, 16)
    assert bucket.fed.shape() == [2 * (2 + 16)] and FED[0] == "input_ids"
    mask = np.zeros((2, 16), np.int64)
    mask[0, :5], mask[1, :9] = 1, 1
    bucket.write_fed(np.array([[7], [8]]), np.array([[3], [0]]), mask)
    fed = bucket.fed.numpy()
    assert fed[:2].tolist() == [7, 8] and fed[2:4].tolist() == [3, 0]
    np.testing.assert_array_equal(fed[4:].reshape(2, 16), mask)


def test_each_form_and_k_has_one_binding_made_on_first_use_and_it_runs(step):
    bucket = Bucket(step, SlotBuffers(step, 2), 2, 16)
    full = bucket.binding(step, StepGraph.FULL, None)
    assert bucket.binding(step, StepGraph.FULL, None) is full
    lean = bucket.binding(step, StepGraph.LEAN, 3)
    assert lean is not full and bucket.binding(step, StepGraph.LEAN, 3) is lean
    assert full.bias is None and lean.bias is not None and lean.kept[0].tolist() == [3]
    assert lean.bias.shape() == [1, step.vocab] and lean.banned == ()
    states = {s.output for s in step.interface.states}
    assert all(full.outputs[name] is None for name in states)  # written into the cache
    assert full.outputs["logits"].shape() == [2, step.vocab]
    # the search's ids and log-probabilities: one buffer of each k, shared by its bindings
    assert lean.candidates is bucket.candidates[3] and full.candidates is None
    assert lean.candidates.shape == (2, 3) and "ids" not in lean.outputs
    assert lean.candidates.on_host  # read() copies what numpy() only views
    assert set(bucket.outputs) >= {("logits", None), ("logits", 3)}
    bucket.write_fed(np.array([[1], [1]]), np.zeros((2, 1), np.int64), np.ones((2, 16), np.int64))
    session = step.graphs[StepGraph.FULL]
    session.run_with_iobinding(full.binding, full.options)
    logits = full.outputs["logits"].numpy()
    assert np.isfinite(logits).all() and logits.std() > 0
    np.testing.assert_allclose(logits[0], logits[1], atol=1e-6)  # the same inputs, rows alike
    bucket.write_fed(np.array([[1], [1]]), np.zeros((2, 1), np.int64), np.ones((2, 16), np.int64))
    step.graphs[StepGraph.LEAN].run_with_iobinding(lean.binding, lean.options)
    found = lean.candidates.read()
    assert found.ids.dtype == np.int64 and found.ids.shape == (2, 3)
    np.testing.assert_array_equal(found.ids[0], found.ids[1])
    assert (np.diff(found.log_probs, axis=1) <= 0).all()  # best first
    np.testing.assert_array_equal(found.ids[0], np.argsort(-logits[0])[:3])
