"""A decoder step with static shapes over buffers bound once, as the static-step benchmark
runs it (bench.static_step): one bucket of rows decoded from start to end (`FixedCacheDecoder`)
or rows starting in slots of the in-place step (`SlotCacheDecoder`).

A step whose every input and output has a fixed shape for a given number of rows (the
translator's fixed-capacity step of `service.runtime.graphs.decoder_spec(fixed_cache=True)`) can be
run by onnxruntime as a captured CUDA graph: the kernels of the whole step are recorded on its
first runs and replayed after with one launch. Replay needs every tensor at the address it was
captured with, so a `StaticStep` allocates its buffers once, for a bucket of rows (rows are
padded up to the bucket: 1, 2, 4, ...), and:
- writes new inputs (ids, positions, masks, a request's memory) into them in place;
- carries the state through two buffer sets in turn: the step reads set A and writes set B,
  the next reads B and writes A; each direction is a binding of its own and, on CUDA, a
  graph of its own (onnxruntime's `gpu_graph_id`);
- leaves the outputs (logits) in their own buffers for the search graph.
On the CPU the same code runs without capture. The server's static step is
`service.runtime.rows.static.StaticRows`, the continuous batch's rows in buckets of such buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from service.runtime.graphs import StateSpec
from service.runtime.onnx_runtime import (
    PROVIDERS,
    named_shape,
    numpy_type,
    power_of_two,
    session_options,
)


def bucket(rows: int, max_rows: int) -> int:
    """The bucket of `rows`: the next power of two, at most `max_rows` (a bucket too)."""
    if rows < 1 or rows > max_rows:
        raise ValueError(f"{rows} rows: 1 to {max_rows}")
    return min(power_of_two(rows), max_rows)


def cuda_graph_session(path, device: str, threads: int = 1, capture: bool = True):
    """A session for a StaticStep, with the engine's options: on CUDA with onnxruntime's CUDA
    graphs when `capture`."""
    chosen = PROVIDERS[device]
    if device == "cuda":
        flag = "1" if capture else "0"
        chosen = [("CUDAExecutionProvider", {"enable_cuda_graph": flag}), *chosen[1:]]
    return ort.InferenceSession(str(path), session_options(threads, device), providers=chosen)


class StaticStep:
    """One bucket's buffers and bindings for one step session."""

    def __init__(
        self,
        session: ort.InferenceSession,
        rows: int,
        sizes: dict[str, int],
        states: Sequence[StateSpec],
        device: str = "cpu",
        graph_ids: tuple[int, int] | None = None,
        in_place: bool = False,
    ):
        """`sizes`: the size of every named axis the graph leaves open but `batch` (e.g.
        {"memory": 128}); `states`: what each step reads and returns for the next (the model
        interface's); `graph_ids`: the CUDA graph ids of the two directions (None: no
        capture); `in_place`: the step writes its state into the buffers it reads (one
        buffer set, bound as input and output; `decoder_spec(in_place=True)`)."""
        self.session, self.rows, self.device = session, rows, device
        self.carried = list(states)
        carried_in = {c.input for c in self.carried}
        carried_out = {c.output for c in self.carried}
        sizes = {"batch": rows, **sizes}

        # on the CPU a buffer is the numpy array it was made from (onnxruntime keeps and
        # reads that memory), so single rows can be written into it without a copy
        self.host: dict[str, np.ndarray] = {}

        def allocate(meta, name: str | None = None) -> ort.OrtValue:
            zeros = np.zeros(named_shape(meta, sizes), dtype=numpy_type(meta.type))
            if device == "cpu" and name is not None:
                self.host[name] = zeros
            return ort.OrtValue.ortvalue_from_numpy(zeros, device, 0)

        inputs = {i.name: i for i in session.get_inputs()}
        outputs = {o.name: o for o in session.get_outputs()}
        self.inputs = {n: allocate(m, n) for n, m in inputs.items() if n not in carried_in}
        self.outputs = {n: allocate(m) for n, m in outputs.items() if n not in carried_out}
        # the buffer sets of every carried state: two that the steps alternate between, or
        # one that an in-place step reads and writes
        self.sets = [
            {c.input: allocate(inputs[c.input]) for c in self.carried}
            for _ in range(1 if in_place else 2)
        ]
        self.bindings = []
        for source, target in ((0, 0),) if in_place else ((0, 1), (1, 0)):
            binding = session.io_binding()
            for name, value in self.inputs.items():
                binding.bind_ortvalue_input(name, value)
            for c in self.carried:
                binding.bind_ortvalue_input(c.input, self.sets[source][c.input])
                binding.bind_ortvalue_output(c.output, self.sets[target][c.input])
            for name, value in self.outputs.items():
                binding.bind_ortvalue_output(name, value)
            self.bindings.append(binding)
        self.in_place = in_place
        self.run_options = []
        for direction in range(len(self.bindings)):
            options = None  # none where nothing is captured (a missing graph id costs a run)
            if graph_ids is not None:
                options = ort.RunOptions()
                options.add_run_config_entry("gpu_graph_id", str(graph_ids[direction]))
            self.run_options.append(options)
        self.current = 0  # the set the next step reads

    def write(self, name: str, array: np.ndarray) -> None:
        """Copies `array` (the buffer's shape and dtype) into input `name` in place."""
        self.inputs[name].update_inplace(np.ascontiguousarray(array))

    def write_row(self, name: str, array: np.ndarray, row: int) -> None:
        """Input `name` takes `array` (the whole input, of which only row `row` changed): that
        row alone where the buffer is host memory, the whole array on a device."""
        host = self.host.get(name)
        if host is None:
            self.write(name, array)
        else:
            host[row] = array[row]

    def write_state(self, name: str, array: np.ndarray) -> None:
        """Copies `array` into the state the next step reads as `name`."""
        self.sets[self.current][name].update_inplace(np.ascontiguousarray(array))

    def state(self, name: str) -> ort.OrtValue:
        """The state the next step reads as `name`."""
        return self.sets[self.current][name]

    def run(self) -> dict[str, ort.OrtValue]:
        """One step over what the buffers hold; returns the output buffers (by name)."""
        direction = self.current
        self.session.run_with_iobinding(self.bindings[direction], self.run_options[direction])
        self.current = direction if self.in_place else 1 - direction
        return self.outputs


class FixedCacheDecoder:
    """The translator's fixed-capacity step over one batch of rows: their memory written into
    the bucket once, every row's self mask kept over the capacity (its newest positions real,
    right-aligned), one token per row a step. Rows beyond the batch pad the bucket (one
    memory position unmasked, so they stay finite) and are not read."""

    def __init__(self, step: StaticStep, capacity: int):
        self.step, self.capacity = step, capacity
        self.lengths = np.zeros(step.rows, dtype=np.int64)

    def start(self, memory: dict[str, np.ndarray], memory_mask: np.ndarray) -> None:
        """A new batch: its memory (encoder keys/values (B, H, S, D), mask (B, S)) padded to
        the bucket's rows and memory size, the cache emptied."""
        step = self.step
        size = step.inputs["memory_mask"].shape()[1]
        rows, length = memory_mask.shape
        if rows > step.rows or length > size:
            raise ValueError(
                f"{rows} rows of {length} positions: the bucket holds {step.rows} of {size}"
            )
        mask = np.zeros((step.rows, size), dtype=np.int64)
        mask[:rows, :length] = memory_mask
        mask[rows:, 0] = 1
        step.write("memory_mask", mask)
        for name, array in memory.items():
            shape = list(array.shape)
            shape[0], shape[2] = step.rows, size
            padded = np.zeros(shape, dtype=array.dtype)
            padded[:rows, :, :length] = array
            step.write(name, padded)
        for c in step.carried:
            state = step.state(c.input)
            step.write_state(c.input, np.zeros(state.shape(), numpy_type(state.data_type())))
        self.lengths[:] = 0

    def forward(self, tokens: np.ndarray) -> dict[str, ort.OrtValue]:
        """tokens (rows,) -> the step's outputs; every row one position further."""
        step, capacity = self.step, self.capacity
        if int(self.lengths.max()) >= capacity:
            raise ValueError(f"the cache holds {capacity} positions")
        ids = np.zeros((step.rows, 1), dtype=np.int64)
        ids[: len(tokens), 0] = tokens
        step.write("input_ids", ids)
        step.write("positions", self.lengths[:, None].copy())
        # the newest length + 1 positions of capacity + 1 are real, right-aligned
        columns = np.arange(capacity + 1)
        mask = (columns[None, :] >= capacity - self.lengths[:, None]).astype(np.int64)
        step.write("self_mask", mask)
        outputs = step.run()
        self.lengths += 1
        return outputs


class SlotCacheDecoder:
    """The translator's in-place step (`decoder_spec(in_place=True)`) over slots: every row
    has its own positions from 0 in its slot of the cache buffer, so a row can start in any
    slot between two steps while the others go on (its memory written into the slot, its
    length set to 0) and nothing is ever shifted, padded or rebuilt; what a slot held before
    lies beyond its length and is not read. A row that is not decoding is fed padding at
    position 0 (one memory position unmasked, so it stays finite)."""

    def __init__(self, step: StaticStep, capacity: int):
        if not step.in_place:
            raise ValueError("a slot cache needs a step that writes in place")
        self.step, self.capacity = step, capacity
        self.lengths = np.zeros(step.rows, dtype=np.int64)
        self.active = np.zeros(step.rows, dtype=bool)
        size = step.inputs["memory_mask"].shape()[1]
        self.memory_mask = np.zeros((step.rows, size), dtype=np.int64)
        self.memory_mask[:, 0] = 1
        self.memory = {
            name: np.zeros(value.shape(), numpy_type(value.data_type()))
            for name, value in step.inputs.items()
            if name.startswith("encoder.")
        }

    def start(self, slot: int, memory: dict[str, np.ndarray], memory_mask: np.ndarray) -> None:
        """A new row in `slot`: its memory (keys/values (H, S, Dh) each, mask (S,)), written
        into that slot alone where the buffers are host memory."""
        length = len(memory_mask)
        if length > self.memory_mask.shape[1]:
            raise ValueError(
                f"{length} memory positions: the slots hold {self.memory_mask.shape[1]}"
            )
        self.memory_mask[slot] = 0
        self.memory_mask[slot, :length] = memory_mask
        for name, array in memory.items():
            self.memory[name][slot] = 0
            self.memory[name][slot, :, :length] = array
            self.step.write_row(name, self.memory[name], slot)
        self.step.write_row("memory_mask", self.memory_mask, slot)
        self.lengths[slot], self.active[slot] = 0, True

    def stop(self, slot: int) -> None:
        self.active[slot] = False

    def forward(self, tokens: np.ndarray) -> dict[str, ort.OrtValue]:
        """tokens (rows,): the next token of every slot (ignored where none decodes) -> the
        step's outputs; every decoding row one position further."""
        if int(self.lengths[self.active].max(initial=0)) >= self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions")
        ids = np.where(self.active, tokens, 0)[:, None].astype(np.int64)
        self.step.write("input_ids", ids)
        self.step.write("positions", np.where(self.active, self.lengths, 0)[:, None])
        outputs = self.step.run()
        self.lengths[self.active] += 1
        return outputs
