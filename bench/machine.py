"""The machine's limits, and what one decode step of the translator asks of them.

    python -m bench.machine [--json] [--quick]

Memory bandwidth: the best of a few numpy copies of a large array, counting the bytes read
and the bytes written. Matmul peak: the best of a few numpy float32 matmuls (2 n³ FLOPs each)
on one BLAS thread; `measure_in_subprocess` runs this module with every thread-count variable
set to 1, since BLAS reads them once at import. OPENBLAS_CORETYPE, which picks the BLAS
kernels, is recorded as found and never set here.

A decode step reads every decoder weight once (shared by all rows of the batch) and, per row,
the self-attention cache and the encoder's keys and values; per row it does 2 FLOPs per
multiply-add of the projections, the feed-forward network, the output projection and the
attention over both caches. A step cannot take less than max(bytes / bandwidth, FLOPs / peak),
though weights that fit in the last-level cache (recorded) are read faster than from memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
RECORDED_VARIABLES = (*THREAD_VARIABLES, "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
ACTIVATION_BYTES = 4  # caches and activations stay float32 in every engine measured


def one_thread_environment() -> dict[str, str]:
    """The current environment with every compute-thread count set to 1."""
    return {**os.environ, **dict.fromkeys(THREAD_VARIABLES, "1")}


def _best_seconds(run, repeats: int) -> float:
    run()  # first touch of the pages, kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def copy_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """GB/s of `np.copyto` between two arrays of `megabytes` each (read + write counted)."""
    source = np.ones(megabytes * 2**20 // 8, dtype=np.float64)
    target = np.empty_like(source)
    seconds = _best_seconds(lambda: np.copyto(target, source), repeats)
    return 2 * source.nbytes / seconds / 1e9


def matmul_peak(n: int = 1536, repeats: int = 5) -> float:
    """GFLOP/s of an (n, n) @ (n, n) float32 matmul."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    out = np.empty((n, n), dtype=np.float32)
    seconds = _best_seconds(lambda: np.matmul(a, b, out=out), repeats)
    return 2 * n**3 / seconds / 1e9


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _caches() -> dict[str, str]:
    """Cache sizes of CPU 0 by level and type, e.g. {"L3 Unified": "32768K"}."""
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / n).read_text().strip() for n in ("level", "type", "size"))
        except OSError:
            continue
        caches[f"L{level} {kind}"] = size
    return caches


def _blas() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (KeyError, TypeError):
        return "unknown"
    return f"{blas.get('name')} {blas.get('version')}"


def measure(quick: bool = False) -> dict:
    """Bandwidth, matmul peak and what the machine and its environment are."""
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "caches": _caches(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": _blas(),
        "environment": {name: os.environ.get(name) for name in RECORDED_VARIABLES},
        "copy_bandwidth_gb_s": copy_bandwidth(32 if quick else 512, 2 if quick else 5),
        "matmul_gflop_s": matmul_peak(256 if quick else 1536, 2 if quick else 5),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def measure_in_subprocess(quick: bool = False) -> dict:
    """`measure` in a fresh interpreter whose BLAS runs one thread."""
    command = [sys.executable, "-m", "bench.machine", "--json", *(["--quick"] if quick else [])]
    done = subprocess.run(
        command, env=one_thread_environment(), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def decoder_weights(config: dict) -> tuple[int, int]:
    """(matrix, vector) parameters one decode step reads: every decoder layer's self-attention
    (Q, K, V, out), cross-attention (Q, out; its K, V come from the encoder once), feed-forward
    network and norms, the final norm and the output projection (V, D)."""
    d, f, v = config["d_model"], config["d_ff"], config["vocab_size"]
    layers = config["decoder_layers"]
    matrices = layers * (6 * d * d + 2 * d * f) + v * d
    vectors = layers * (6 * d + f + d + 3 * 2 * d) + 2 * d
    return matrices, vectors


def step_cost(
    config: dict, rows: int, past: int, source: int, weight_bytes: float
) -> tuple[float, float]:
    """(bytes, FLOPs) of one decode step over `rows` rows after `past` tokens, attending over
    `source` encoder positions, with matrices of `weight_bytes` bytes a parameter."""
    d, layers = config["d_model"], config["decoder_layers"]
    matrices, vectors = decoder_weights(config)
    positions = past + 1 + source  # self-attention keys (the new one included) + cross keys
    weights = matrices * weight_bytes + vectors * ACTIVATION_BYTES + rows * d * ACTIVATION_BYTES
    caches = rows * layers * 2 * positions * d * ACTIVATION_BYTES
    multiply_adds = rows * (matrices + layers * 2 * positions * d)
    return weights + caches, 2.0 * multiply_adds


def step_bound_seconds(
    config: dict,
    rows: int,
    length: int,
    source: int,
    weight_bytes: float,
    machine: dict,
) -> float:
    """The least time of a decode step, averaged over the `length` steps of a decode."""
    bandwidth = machine["copy_bandwidth_gb_s"] * 1e9
    peak = machine["matmul_gflop_s"] * 1e9
    total = 0.0
    for past in range(length):
        moved, flops = step_cost(config, rows, past, source, weight_bytes)
        total += max(moved / bandwidth, flops / peak)
    return total / length


def model_summary(config: dict, source: int) -> dict:
    """What a batch-1 step of the model costs at the first position, per weight precision."""
    matrices, vectors = decoder_weights(config)
    summary = {"decoder_step_parameters": matrices + vectors, "source_positions": source}
    for name, weight_bytes in (("fp32", 4), ("int8", 1)):
        moved, flops = step_cost(config, 1, 0, source, weight_bytes)
        summary[f"step_bytes_{name}"] = moved
    summary["step_flops"] = flops
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Measures memory bandwidth and matmul peak.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small arrays, few repeats")
    args = parser.parse_args(argv)
    limits = measure(args.quick)
    if args.json:
        print(json.dumps(limits))
        return
    for key, value in limits.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
