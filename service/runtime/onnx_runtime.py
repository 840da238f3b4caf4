"""What every user of onnxruntime in the runtime shares: providers, session options, the
numpy types of its tensor types, buffers allocated where a device keeps them, and outputs
bound at an address.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort

PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}
ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64"}


# fusions whose fused kernel is slower on the CPU than the nodes it replaces
# (docs/benchmarks.md, `python -m bench.profile_step`): SkipLayerNormalization takes 2.3 to
# 4.7 times as long as Add and LayerNormalization from 16 rows of 256 (the same at one row)
CPU_UNFUSED = ("SkipLayerNormFusion",)


def session_options(threads: int, device: str = "cpu") -> ort.SessionOptions:
    """One compute thread per session is the fastest setting on small CPUs
    (docs/benchmarks.md): a server scales by running more workers. On the CPU the fusions
    of CPU_UNFUSED are off."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if device == "cpu":
        options.add_session_config_entry(
            "optimization.disable_specified_optimizers", ",".join(CPU_UNFUSED)
        )
    return options


def providers(device: str, capture: bool = False) -> list:
    """The execution providers of `device`; with `capture`, onnxruntime's CUDA graphs."""
    if capture:
        return [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}), *PROVIDERS[device][1:]]
    return PROVIDERS[device]


def numpy_type(ort_type: str) -> np.dtype:
    """The numpy dtype of an onnxruntime tensor type ("tensor(float)", ...)."""
    return np.dtype(ORT_TYPES[ort_type])


def allocate(device: str, shape, dtype, fill=None) -> ort.OrtValue:
    """Zeros of `shape` on `device` (`fill`, when given, writes into them first)."""
    array = np.zeros(shape, dtype=dtype)
    if fill is not None:
        fill(array)
    return ort.OrtValue.ortvalue_from_numpy(array, device, 0)


def named_shape(meta, sizes: dict[str, int]) -> list[int]:
    """A graph input's or output's shape, its named axes taken from `sizes`."""
    return [d if isinstance(d, int) else sizes[d] for d in meta.shape]


def bind_output(binding: ort.IOBinding, name: str, tensor) -> None:
    """Binds output `name` to a numpy array's memory (on the CPU), or to an OrtValue."""
    if isinstance(tensor, np.ndarray):
        binding.bind_output(name, "cpu", 0, tensor.dtype, tensor.shape, tensor.ctypes.data)
    else:
        binding.bind_ortvalue_output(name, tensor)


def banned_bias(banned, vocab: int) -> np.ndarray:
    """(1, vocab) float32: -inf at the banned tokens, 0 elsewhere (the search graphs' bias)."""
    bias = np.zeros((1, vocab), dtype=np.float32)
    bias[0, list(banned)] = -np.inf
    return bias


def power_of_two(n: int) -> int:
    """The smallest power of two at least `n` (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def consecutive_runs(slots: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every run of consecutive slots, in the order given."""
    breaks = np.flatnonzero(np.diff(slots) != 1) + 1
    return list(itertools.pairwise([0, *breaks.tolist(), len(slots)]))
