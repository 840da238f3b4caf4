"""Rows and positions of an engine's tensors, moved where they live: numpy arrays on the host,
OrtValues on their device by the repository's helper graphs (export.ops: gather, join,
narrow), run through IO binding."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from service.runtime.batching import concat_padded
from service.runtime.onnx_runtime import ORT_TYPES
from service.runtime.session_runner import SessionRunner
from service.runtime.tensors import shape_of

HELPER_OPS = ("gather", "join", "narrow")  # the helper graphs rows move by on a device


class TensorOps:
    """take, join, narrow and pad over numpy arrays or OrtValues."""

    def __init__(self, runner: SessionRunner, graphs: dict[str, dict[str, ort.InferenceSession]]):
        """`graphs`: the helper graphs by op (HELPER_OPS) and dtype name; empty where every
        tensor is a numpy array (no IO binding)."""
        self.runner, self.graphs = runner, graphs

    def graph(self, op: str, tensor: ort.OrtValue) -> ort.InferenceSession:
        """The helper graph `op` of `tensor`'s dtype."""
        return self.graphs[op][ORT_TYPES[tensor.data_type()]]

    def take(self, tensor, index: np.ndarray):
        """Rows `index` of `tensor`; on the device where it lives."""
        index = np.asarray(index, dtype=np.int64)
        if isinstance(tensor, np.ndarray):
            return np.take(tensor, index, axis=0)
        feeds = {"data": tensor, "indices": index}
        return self.runner.run(self.graph("gather", tensor), feeds)[0]

    def join(self, a, b):
        """Rows of `a`, then rows of `b`, every other axis of the shorter right-padded with
        zeros."""
        if isinstance(a, np.ndarray):
            return concat_padded([a, b])
        a_pads, b_pads = join_pads(shape_of(a), shape_of(b))
        feeds = {"a": a, "b": b, "a_pads": a_pads, "b_pads": b_pads}
        return self.runner.run(self.graph("join", a), feeds)[0]

    def narrow(self, tensor, axis: int, start: int, end: int):
        """Positions start..end of `axis`."""
        if isinstance(tensor, np.ndarray):
            index = [slice(None)] * tensor.ndim
            index[axis] = slice(start, end)
            return np.ascontiguousarray(tensor[tuple(index)])
        feeds = {
            "data": tensor,
            "start": np.array([start]),
            "end": np.array([end]),
            "axis": np.array([axis]),
        }
        return self.runner.run(self.graph("narrow", tensor), feeds)[0]

    def pad(self, tensor, shape):
        """`tensor` right-padded with zeros to `shape` (rows on axis 0 unchanged), where it
        lives."""
        if tuple(shape_of(tensor)) == tuple(shape):
            return tensor
        if isinstance(tensor, np.ndarray):
            padded = np.zeros(shape, dtype=tensor.dtype)
            padded[tuple(map(slice, tensor.shape))] = tensor
            return padded
        # joined with no rows of the larger size: padded to it, on the device
        empty = np.zeros([0, *shape[1:]], dtype=ORT_TYPES[tensor.data_type()])
        return self.join(tensor, ort.OrtValue.ortvalue_from_numpy(empty, self.runner.device, 0))


def join_pads(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The join graph's pads (2 x rank,) int64 for tensors of shapes `a` and `b`: nothing
    before, and after every axis but the first up to the longer of the two."""
    if len(a) != len(b):
        raise ValueError(f"joined tensors have one rank, got shapes {a} and {b}")
    longest = np.maximum(a, b)
    longest[0] = 0  # rows are concatenated, not padded

    def pads(shape) -> np.ndarray:
        ends = np.maximum(longest - np.asarray(shape, np.int64), 0)
        return np.concatenate([np.zeros(len(shape), np.int64), ends])

    return pads(a), pads(b)
