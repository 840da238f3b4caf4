"""The static step (`cache="static"`): the in-place step at a fixed capacity, every shape fixed
but the rows and the memory, so that CUDA graphs can replay it.

`StaticStep` is everything the static step's row store (service.runtime.rows.static) runs it
with, made once per engine (`static_step`) and shared by every batch over that engine: the
forms of the step, the helper graphs that move rows into slots, the sizes its buffers are
allocated at, and the ids of the CUDA graphs its bindings record.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import onnxruntime as ort

from service.runtime.errors import ModelRepositoryError
from service.runtime.graphs import LEAN_STEP, ModelInterface
from service.runtime.repository import ModelVersion
from service.runtime.tensor_ops import TensorOps


class StepGraph(Enum):
    """A form of the static step, by its graph's name (after the STATIC prefix)."""

    FULL = "decoder"  # with the cross-attention output
    LEAN = LEAN_STEP  # without it, the search folded in (ids, log_probs of k candidates)


@dataclass(frozen=True)
class StaticStep:
    """The static step's graphs and what its buffers are allocated by."""

    graphs: Mapping[StepGraph, ort.InferenceSession]  # LEAN where the variant ships it
    interface: ModelInterface  # the in-place step's: states, memory tensors, attention
    device: str  # where the buffers live
    float_dtype: np.dtype  # of the memory and the state
    capacity: int  # positions every slot's cache holds
    memory_limit: int  # the longest source's positions
    vocab: int
    tensors: TensorOps  # take, narrow and pad where the rows live
    gather: Mapping[str, ort.InferenceSession]  # by dtype name: rows into slots, in place
    # every memory tensor's rows into slots in one run, where the version ships it (else the
    # gather graph a tensor at a time): `place` a run of consecutive slots, `scatter` any slots
    place: ort.InferenceSession | None
    scatter: ort.InferenceSession | None
    capture: bool  # a binding's first run on a thread records a CUDA graph, replayed after
    # ids of the recorded graphs, unique within a session: shared by every store
    graph_ids: Iterator[int] = field(default_factory=itertools.count)

    def graph_of(self, lean: bool) -> StepGraph:
        """The form a step runs: the lean one where asked for and shipped."""
        return StepGraph.LEAN if lean and StepGraph.LEAN in self.graphs else StepGraph.FULL

    def inputs(self) -> dict[str, ort.NodeArg]:
        """The step's inputs by name (their shapes name the axes buffers are sized by)."""
        return {i.name: i for i in self.graphs[StepGraph.FULL].get_inputs()}

    def run_options(self) -> ort.RunOptions | None:
        """A new binding's run options: where it is captured, a graph id of its own. None
        where nothing is captured: onnxruntime looks up a graph id in options given, and a
        missing one costs it a raised exception a run."""
        if not self.capture:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(next(self.graph_ids)))
        return options

    @staticmethod
    def unsynced(options: ort.RunOptions | None) -> ort.RunOptions | None:
        """Run options replaying the graph of `options` without waiting for the device at
        the end of the run (a step followed at once by another on the same stream, which
        waits in its place); None where nothing is captured."""
        if options is None:
            return None
        unsynced = ort.RunOptions()
        unsynced.add_run_config_entry("gpu_graph_id", options.get_run_config_entry("gpu_graph_id"))
        unsynced.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return unsynced


def static_step(
    model: ModelVersion,
    variant: str,
    float_dtype: np.dtype,
    interface: ModelInterface,
    graphs: Mapping[StepGraph, ort.InferenceSession | None],
    tensors: TensorOps,
    session,
    capture: bool,
) -> StaticStep:
    """The static step of `model`'s `variant` over its sessions `graphs` (a form not shipped:
    None), `interface` its in-place form; `session`: path -> a session on the device, for
    the place and scatter ops."""
    limits = model.manifest.get("limits", {})
    full = graphs[StepGraph.FULL]
    return StaticStep(
        graphs={form: g for form, g in graphs.items() if g is not None},
        interface=interface,
        device=tensors.runner.device,
        float_dtype=float_dtype,
        capacity=_fixed_capacity(full, interface, variant),
        memory_limit=int(limits.get("max_source_tokens", 0)) or int(model.config["max_length"]),
        vocab=int(model.config.get("vocab_size", 0)),
        tensors=tensors,
        gather=tensors.graphs["gather"],
        place=_memory_op(model, "place", float_dtype.name, interface, session),
        scatter=_memory_op(model, "scatter", float_dtype.name, interface, session),
        capture=capture,
    )


def _fixed_capacity(step: ort.InferenceSession, interface: ModelInterface, variant: str) -> int:
    """The static step's cache capacity (positions), fixed in its graph."""
    inputs = {i.name: i for i in step.get_inputs()}
    first = interface.states[0]
    capacity = inputs[first.input].shape[first.time_axis]
    if not isinstance(capacity, int):
        raise ModelRepositoryError(f"{variant} static step: its capacity is not fixed")
    return capacity


def _memory_op(model: ModelVersion, op: str, dtype: str, interface: ModelInterface, session):
    """The version's `op` (`place` or `scatter`: every memory tensor's rows into slots in one
    run), where it ships one; None where not."""
    if not model.has_op(op, dtype):
        return None
    made, memory_tensors = session(model.op(op, dtype)), len(interface.memory_tensors)
    if len(made.get_outputs()) != memory_tensors:
        raise ModelRepositoryError(
            f"{model.directory}: its {dtype} {op} op writes {len(made.get_outputs())} "
            f"tensors, the model has {memory_tensors} memory tensors"
        )
    return made
