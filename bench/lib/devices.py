"""The device's limits as the GPU benchmark's physical-limit column reads them: on CUDA its
name, memory bandwidth and matrix rates measured with torch in a process of its own; on the
CPU bench.machine's copy and one-thread matmul (fp16 takes the fp32 rate)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from bench import machine

MATMULS = (("fp32", "float32", False), ("tf32", "float32", True), ("fp16", "float16", False))


def _nvidia_smi() -> dict:
    fields = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": str(error)}
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    return dict(zip(fields.split(","), (v.strip() for v in first.split(",")), strict=False))


def _best_seconds(run, repeats: int) -> float:
    """The least seconds of `run` on the GPU (CUDA events), after one untimed run."""
    import torch

    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return min(times)


def _copy_seconds(size: int, repeats: int) -> float:
    """The best device-to-device copy of `size` bytes."""
    import torch

    source = torch.ones(size // 4, dtype=torch.float32, device=torch.device("cuda"))
    target = torch.empty_like(source)
    return _best_seconds(lambda: target.copy_(source), repeats)


def _matmul_rates(n: int) -> dict:
    """TFLOP/s of the best of ten (n, n) @ (n, n) matmuls in fp32, TF32 and fp16."""
    import torch

    device, rates = torch.device("cuda"), {}
    for name, dtype_name, tf32 in MATMULS:
        dtype = getattr(torch, dtype_name)
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = _best_seconds(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out), 10)
        rates[name] = 2 * n**3 / seconds / 1e12
        torch.backends.cuda.matmul.allow_tf32 = previous
        del a, b, out
    return rates


def measure_gpu(quick: bool) -> dict:
    """Name, bandwidth and matrix rates of CUDA device 0, with torch (run in a process of its
    own, so that its memory is given back)."""
    import torch

    properties = torch.cuda.get_device_properties(0)
    size = (64 if quick else 1024) * 2**20
    copy = _copy_seconds(size, 5 if quick else 30)
    n = 2048 if quick else 8192
    rates = _matmul_rates(n)
    torch.cuda.empty_cache()
    return {
        "device": "cuda",
        "name": torch.cuda.get_device_name(0),
        "memory_gib": properties.total_memory / 2**30,
        "multiprocessors": properties.multi_processor_count,
        "bandwidth_gb_s": 2 * size / copy / 1e9,
        "bandwidth_method": f"device-to-device copy of {size // 2**20} MiB, read + write",
        "matmul_tflop_s": rates,
        "matmul_method": f"{n}x{n} @ {n}x{n}, best of 10; fp32 with TF32 off",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "nvidia_smi": _nvidia_smi(),
        "cpu_count": os.cpu_count(),
    }


def _measure_cpu(quick: bool) -> dict:
    """bench.machine's figures, as the GPU's are reported."""
    cpu = machine.measure_in_subprocess(quick)
    rate = cpu["matmul_gflop_s"] / 1000
    return {
        "device": "cpu",
        "name": cpu["cpu"],
        "bandwidth_gb_s": cpu["copy_bandwidth_gb_s"],
        "bandwidth_method": "bench.machine: numpy copy, read + write",
        "matmul_tflop_s": {"fp32": rate, "fp16": rate},
        "matmul_method": "bench.machine: numpy fp32 matmul, one thread (fp16: the same)",
        "cpu": cpu,
    }


def measure_machine(device: str, quick: bool) -> dict:
    """The machine's limits, as the engine level's physical-limit column reads them."""
    if device == "cuda":
        with ProcessPoolExecutor(1, get_context("spawn")) as pool:
            measured = pool.submit(measure_gpu, quick).result()
    else:
        measured = _measure_cpu(quick)
    import onnxruntime

    measured["onnxruntime"] = onnxruntime.__version__
    build = getattr(onnxruntime, "get_build_info", None)
    measured["onnxruntime_build"] = build() if build else None
    measured["providers"] = onnxruntime.get_available_providers()
    measured["python"] = sys.version.split()[0]
    return measured
