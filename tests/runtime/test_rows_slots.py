"""SlotWriter: rows (numpy or OrtValues) written into slots of the static step's buffers, by
the scatter op at any slots in one run, the place op a run of consecutive slots or the
gather graph a tensor at a time, memory padded or cut to the bucket's size."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from service.runtime.onnx_engine import OnnxEngine
from service.runtime.rows.buckets import SlotBuffer
from service.runtime.rows.slots import SlotWriter


@pytest.fixture(scope="module")
def step(tiny_translator):
    return OnnxEngine(tiny_translator[1], "fp32", cache="static").static_step


def rows(shape, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) + 3).astype(np.float32)


def test_fit_pads_rows_to_the_slots_shape_and_refuses_longer_ones(step):
    writer = SlotWriter(step)
    target = SlotBuffer.allocate("cpu", [4, 4, 16, 8], np.float32).value
    short = rows((2, 4, 5, 8))
    fitted = writer.fit(short, target)
    assert fitted.shape == (2, 4, 16, 8)
    np.testing.assert_array_equal(fitted[:, :, :5], short)
    assert not fitted[:, :, 5:].any()
    device = writer.fit(ort.OrtValue.ortvalue_from_numpy(short, "cpu", 0), target)
    np.testing.assert_array_equal(device.numpy(), fitted)
    with pytest.raises(ValueError, match=r"rows of shape \[4, 17, 8\] do not fit"):
        writer.fit(rows((1, 4, 17, 8)), target)


@pytest.mark.parametrize("on_device", [False, True])
def test_gather_writes_rows_into_scattered_slots_and_leaves_the_rest(step, on_device):
    writer = SlotWriter(step)
    target = SlotBuffer.allocate("cpu", [6, 3, 2], np.float32)
    source = rows((4, 3, 2))
    given = ort.OrtValue.ortvalue_from_numpy(source, "cpu", 0) if on_device else source
    writer.gather(given, [3, 1, 0], target, [5, 1, 2])  # runs: slot 5, then slots 1..2
    written = target.value.numpy()
    np.testing.assert_array_equal(written[[5, 1, 2]], source[[3, 1, 0]])
    assert not written[[0, 3, 4]].any()
    writer.gather(source, [], target, [])  # no rows: nothing run
    np.testing.assert_array_equal(target.value.numpy(), written)


def _memory_targets(step, slots: int, size: int) -> dict[str, SlotBuffer]:
    return {
        name: SlotBuffer.allocate("cpu", [slots, 4, size, 8], np.float32)
        for name in step.interface.memory_tensors
    }


def _without(step, ops: str):
    """`step` as in a version that ships none of `ops` ("scatter", "place")."""
    return replace(step, **dict.fromkeys(ops.split(), None))


@pytest.mark.parametrize(
    "without", ["", "scatter", "scatter place"], ids=["scatter", "place", "gather"]
)
def test_memory_is_placed_padded_or_cut_to_the_buckets_size(step, without):
    """Every memory tensor's rows into slots 3, 0 and 1 (two runs of slots); a shorter memory
    is padded with zeros, a longer one cut to the bucket's size, by the scatter op, the place
    op or neither. What is in the other slots stays."""
    writer = SlotWriter(_without(step, without))
    names = step.interface.memory_tensors
    short = {n: rows((3, 4, 5, 8), seed=i) for i, n in enumerate(names)}
    targets = _memory_targets(step, 4, 16)
    for name in names:
        targets[name].value.numpy()[:] = 9  # what the slots held
    writer.place(short, [2, 0, 1], targets, [3, 0, 1], pad=True)
    for name in names:
        written = targets[name].value.numpy()
        np.testing.assert_array_equal(written[[3, 0, 1]][:, :, :5], short[name][[2, 0, 1]])
        assert not written[[3, 0, 1], :, 5:].any() and (written[2] == 9).all()
    long = {n: rows((2, 4, 20, 8), seed=10 + i) for i, n in enumerate(names)}
    targets = _memory_targets(step, 2, 16)
    writer.place(long, [1, 0], targets, [0, 1], pad=True)
    for name in names:
        np.testing.assert_array_equal(targets[name].value.numpy(), long[name][[1, 0]][:, :, :16])


class Counting:
    """A session whose runs with IO binding are counted into `runs`."""

    def __init__(self, session, runs: list):
        self.session, self.runs = session, runs

    def __getattr__(self, name):
        return getattr(self.session, name)

    def run_with_iobinding(self, binding, options=None):
        self.runs.append(1)
        return self.session.run_with_iobinding(binding, options)


@pytest.mark.parametrize(("op", "expected"), [("scatter", 1), ("place", 2)])
def test_a_memory_op_runs_once_or_once_a_run_of_slots_for_every_tensor(step, op, expected):
    """Slots 1, 2 and 6: the scatter op writes them in one run, the place op in one a run of
    consecutive slots (1..2, then 6); neither takes another number of tensors."""
    runs: list = []
    counted = {op: Counting(getattr(step, op), runs)}
    writer = SlotWriter(replace(step, **({"scatter": None} | counted)))
    names = step.interface.memory_tensors
    sources = {n: rows((3, 4, 6, 8), seed=i) for i, n in enumerate(names)}
    writer.place(sources, [0, 1, 2], _memory_targets(step, 8, 16), [1, 2, 6], pad=True)
    assert len(runs) == expected
    partial = dict(list(sources.items())[:1])  # another number of tensors: neither op
    runs.clear()
    writer.place(partial, [0], _memory_targets(step, 2, 16), [0], pad=True)
    assert runs == []


def test_one_run_of_slots_takes_the_place_op_and_several_the_scatter_op(step):
    """The place op writes consecutive slots straight into their memory, where the scatter
    op would copy its padded rows once more: each where it writes in one run."""
    runs: dict[str, list] = {"scatter": [], "place": []}
    writer = SlotWriter(replace(step, **{o: Counting(getattr(step, o), runs[o]) for o in runs}))
    names = step.interface.memory_tensors
    sources = {n: rows((3, 4, 6, 8), seed=i) for i, n in enumerate(names)}
    targets = _memory_targets(step, 8, 16)
    writer.place(sources, [0, 1, 2], targets, [4, 5, 6], pad=True)
    assert (len(runs["place"]), len(runs["scatter"])) == (1, 0)
    writer.place(sources, [0, 1, 2], targets, [0, 2, 3], pad=True)
    assert (len(runs["place"]), len(runs["scatter"])) == (1, 1)
    for name in names:
        written = targets[name].value.numpy()
        np.testing.assert_array_equal(written[[0, 2, 3], :, :6], sources[name])
        np.testing.assert_array_equal(written[[4, 5, 6], :, :6], sources[name])
        assert not written[[1, 7]].any() and not written[:, :, 6:].any()


def test_states_are_gathered_tensor_by_tensor_in_their_own_shape(step):
    writer = SlotWriter(step)
    names = [s.input for s in step.interface.states][:2]
    targets = {n: SlotBuffer.allocate("cpu", [4, 2, 3], np.float32) for n in names}
    sources = {n: rows((2, 2, 3), seed=i) for i, n in enumerate(names)}
    writer.place(sources, [1, 1], targets, [0, 3])  # a row repeated into two slots
    for name in names:
        written = targets[name].value.numpy()
        np.testing.assert_array_equal(written[[0, 3]], sources[name][[1, 1]])
        assert not written[[1, 2]].any()
