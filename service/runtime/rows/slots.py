"""Rows written into slots of the static step's buffers, on the device where they live.

The version's place op writes every memory tensor of a run of consecutive slots in one run,
padded on the way; else the gather graph writes a tensor at a time. Either binds its outputs
to the slots' addresses (`SlotBuffer.bind_rows`), so nothing is copied twice.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from service.runtime.onnx_runtime import consecutive_runs
from service.runtime.rows.buckets import SlotBuffer
from service.runtime.static_step import StaticStep
from service.runtime.tensors import shape_of


class SlotWriter:
    """Writes rows (numpy arrays or OrtValues) into slots of `SlotBuffer`s."""

    def __init__(self, step: StaticStep):
        self.step = step
        self.axes = step.interface.growing_axes()  # a memory tensor's memory axis

    def fit(self, rows, target: ort.OrtValue):
        """`rows` (numpy or OrtValue) right-padded with zeros to `target`'s row shape."""
        shape, have = target.shape(), shape_of(rows)
        if any(h > s for h, s in zip(have[1:], shape[1:], strict=True)):
            raise ValueError(f"rows of shape {list(have[1:])} do not fit slots of {shape[1:]}")
        return self.step.tensors.pad(rows, [have[0], *shape[1:]])

    def place(self, sources: dict, index, targets: dict[str, SlotBuffer], slots, pad=False):
        """Rows `index` of every tensor of `sources` (by name) into `slots` of `targets` (by
        name): by the place op where it applies, else tensor by tensor (`pad`: memory
        tensors, padded or cut on their memory axis to the target's)."""
        if self._placed(sources, index, targets, slots):
            return
        for name, tensor in sources.items():
            if pad:
                self._move_memory(name, tensor, index, targets[name], slots)
            else:
                self.gather(tensor, index, targets[name], slots)

    def gather(self, source, index, target: SlotBuffer, slots) -> None:
        """Rows `index` of `source` (numpy or OrtValue, `target`'s row shape) into slots
        `slots` of `target`, in place: the gather graph writes each run of consecutive
        slots straight into their memory. Source and target may be the same buffer when the
        slots read and written differ."""
        index, slots = np.asarray(index, np.int64), np.asarray(slots, np.int64)
        if len(slots) == 0:
            return
        session, device = self.step.gather[target.dtype.name], self.step.device
        for start, end in consecutive_runs(slots):
            binding = session.io_binding()
            if isinstance(source, np.ndarray):
                binding.bind_cpu_input("data", np.ascontiguousarray(source))
            else:
                binding.bind_ortvalue_input("data", source)
            binding.bind_cpu_input("indices", index[start:end].copy())
            target.bind_rows(binding, "output", device, int(slots[start]), end - start)
            session.run_with_iobinding(binding)

    def _move_memory(self, name: str, source, index, target: SlotBuffer, slots) -> None:
        """`gather` of the memory tensor `name`, its memory axis padded or cut to
        `target`'s (positions beyond every row's memory are padding)."""
        if shape_of(source)[1:] == target.row:
            self.gather(source, index, target, slots)
            return
        rows, tensors = source, self.step.tensors
        if len(index) != shape_of(source)[0] or not np.array_equal(index, np.arange(len(index))):
            rows = tensors.take(source, np.asarray(index, np.int64))
        axis = self.axes[name]
        size = target.row[axis - 1]
        if shape_of(rows)[axis] > size:
            rows = tensors.narrow(rows, axis, 0, size)
        count = shape_of(rows)[0]
        self.gather(self.fit(rows, target.value), np.arange(count), target, slots)

    def _placed(self, sources: dict, index, targets: dict[str, SlotBuffer], slots) -> bool:
        """Rows `index` of every tensor of `sources` (numpy or OrtValue), right-padded to its
        target's row shape, written into `slots` of `targets`: one run of the version's
        place op a run of consecutive slots, its outputs bound to the slots' memory. False,
        nothing done, where the version ships no place op, it takes another number of
        tensors, or a row is longer than its target's."""
        op = self.step.place
        if op is None or len(sources) != len(op.get_outputs()) or set(sources) != set(targets):
            return False
        shapes = [(shape_of(sources[n]), targets[n].row) for n in sources]
        for have, row in shapes:
            if len(have) != len(row) + 1 or any(h > t for h, t in zip(have[1:], row, strict=True)):
                return False
        index, slots = np.asarray(index, np.int64), np.asarray(slots, np.int64)
        if len(slots) == 0:
            return True
        binding, kept = op.io_binding(), []  # kept: host arrays bound, alive until run
        for i, (name, (have, row)) in enumerate(zip(sources, shapes, strict=True)):
            source = sources[name]
            if isinstance(source, np.ndarray):
                kept.append(np.ascontiguousarray(source))
                binding.bind_cpu_input(f"data_{i}", kept[-1])
            else:
                binding.bind_ortvalue_input(f"data_{i}", source)
            ends = [0, *(t - h for t, h in zip(row, have[1:], strict=True))]
            kept.append(np.array([0] * len(have) + ends, dtype=np.int64))
            binding.bind_cpu_input(f"pads_{i}", kept[-1])
        device = self.step.device
        for start, end in consecutive_runs(slots):
            kept.append(index[start:end].copy())
            binding.bind_cpu_input("indices", kept[-1])
            for i, name in enumerate(sources):
                first = int(slots[start])
                targets[name].bind_rows(binding, f"output_{i}", device, first, end - start)
            op.run_with_iobinding(binding)
        return True
