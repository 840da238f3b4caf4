"""Rows written into slots of the static step's buffers, on the device where they live.

The version's place op writes every memory tensor of a run of consecutive slots in one run,
padded on the way, its outputs bound to the slots' addresses (`SlotBuffer.bind_rows`), so
nothing is copied twice. Slots in several runs take one run of its scatter op, which writes
any slots into each target's whole buffer bound as its input and its output (its padded rows
copied once more, where place took a run a run of slots); else the place op runs once a run
of slots, or the gather graph a tensor at a time.
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
        name): by the place op (one run of slots) or the scatter op (several), where they
        apply, else tensor by tensor (`pad`: memory tensors, padded or cut on their memory
        axis to the target's)."""
        index, slots = np.asarray(index, np.int64), np.asarray(slots, np.int64)
        pads = self._fitting(sources, targets)
        if pads is not None:
            step, runs = self.step, consecutive_runs(slots)
            if step.scatter is not None and (step.place is None or len(runs) > 1):
                self._scatter(sources, index, targets, slots, pads)
            else:
                self._place(sources, index, targets, slots, runs, pads)
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

    def _fitting(self, sources: dict, targets: dict[str, SlotBuffer]) -> dict | None:
        """Each tensor of `sources` by name -> its pads to its target's row shape (rank
        begins, then rank ends, as ONNX Pad reads them), where the version's memory ops take
        `sources`: as many tensors as they write, none longer than its target's rows. None
        where they do not (or the version ships neither op)."""
        op = self.step.scatter or self.step.place
        if op is None or len(sources) != len(op.get_outputs()) or set(sources) != set(targets):
            return None
        pads = {}
        for name, source in sources.items():
            have, row = shape_of(source), targets[name].row
            if len(have) != len(row) + 1 or any(h > t for h, t in zip(have[1:], row, strict=True)):
                return None
            ends = [0, *(t - h for t, h in zip(row, have[1:], strict=True))]
            pads[name] = np.array([0] * len(have) + ends, dtype=np.int64)
        return pads

    @staticmethod
    def _bind_sources(binding: ort.IOBinding, sources: dict, pads: dict) -> list:
        """Binds data_i and pads_i of every tensor of `sources` (numpy or OrtValue), in its
        order; returns the host arrays bound, to keep alive until the run."""
        kept = []
        for i, (name, source) in enumerate(sources.items()):
            if isinstance(source, np.ndarray):
                kept.append(np.ascontiguousarray(source))
                binding.bind_cpu_input(f"data_{i}", kept[-1])
            else:
                binding.bind_ortvalue_input(f"data_{i}", source)
            kept.append(pads[name])
            binding.bind_cpu_input(f"pads_{i}", kept[-1])
        return kept

    def _scatter(self, sources: dict, index, targets: dict[str, SlotBuffer], slots, pads):
        """Rows `index` of every tensor of `sources`, padded by `pads`, into `slots` of
        `targets` in one run of the scatter op, each target's whole buffer both its input and
        its output: only the rows are written (a kernel that copied its input to its output
        first would copy the buffer onto itself, and the result would be the same)."""
        if len(slots) == 0:
            return
        op = self.step.scatter
        binding = op.io_binding()
        kept = self._bind_sources(binding, sources, pads)
        kept += [index.copy(), slots[:, None].copy()]  # (rows,), (rows, 1)
        binding.bind_cpu_input("indices", kept[-2])
        binding.bind_cpu_input("slots", kept[-1])
        for i, name in enumerate(sources):
            binding.bind_ortvalue_input(f"target_{i}", targets[name].value)
            binding.bind_ortvalue_output(f"output_{i}", targets[name].value)
        op.run_with_iobinding(binding)

    def _place(self, sources: dict, index, targets: dict[str, SlotBuffer], slots, runs, pads):
        """Rows `index` of every tensor of `sources`, padded by `pads`, into `slots` of
        `targets`: one run of the place op a run of consecutive slots (`runs`: their (start,
        end) in `slots`), its outputs bound to the slots' memory."""
        if len(slots) == 0:
            return
        op, device = self.step.place, self.step.device
        binding = op.io_binding()
        kept = self._bind_sources(binding, sources, pads)
        for start, end in runs:
            kept.append(index[start:end].copy())
            binding.bind_cpu_input("indices", kept[-1])
            for i, name in enumerate(sources):
                first = int(slots[start])
                targets[name].bind_rows(binding, f"output_{i}", device, first, end - start)
            op.run_with_iobinding(binding)
