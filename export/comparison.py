"""How a graph's output is compared with PyTorch's: tolerances by model and precision, one
comparison's figures, and the error that lists every failed one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BATCHES = (1, 3, 16)  # the batch sizes every graph is compared at


@dataclass(frozen=True)
class Tolerance:
    """Bounds on max |onnx - torch| (atol) and on that divided by max |torch| (rtol)."""

    atol: float
    rtol: float


# One place for every model and precision. int8 is bounded loosely here; its real bound is
# the BLEU and chrF loss of whole decodes (export.decode_parity).
TOLERANCES = {
    ("transformer", "fp32"): Tolerance(atol=1e-4, rtol=1e-5),
    ("transformer", "fp16"): Tolerance(atol=5e-2, rtol=1e-2),
    ("transformer", "int8"): Tolerance(atol=3.0, rtol=0.25),
    ("captioner", "fp32"): Tolerance(atol=1e-4, rtol=1e-5),
    ("captioner", "fp16"): Tolerance(atol=5e-2, rtol=1e-2),
    ("captioner", "int8"): Tolerance(atol=3.0, rtol=0.25),
}


@dataclass
class Comparison:
    graph: str
    output: str
    case: str  # e.g. "batch=3 memory=7 past=17 new=4"
    max_abs: float
    max_rel: float
    passed: bool


class ParityError(AssertionError):
    """Raised with every failed comparison listed."""

    def __init__(self, failures: list[Comparison]):
        self.failures = failures
        lines = [
            f"{f.graph}.{f.output} [{f.case}]: max abs {f.max_abs:.3g}, rel {f.max_rel:.3g}"
            for f in failures
        ]
        super().__init__(f"{len(failures)} outputs out of tolerance:\n" + "\n".join(lines))


def compare(graph, output, case, expected: np.ndarray, actual: np.ndarray, tol: Tolerance):
    if expected.shape != actual.shape:
        return Comparison(graph, output, f"{case} shape {actual.shape}", np.inf, np.inf, False)
    expected, actual = expected.astype(np.float64), actual.astype(np.float64)
    max_abs = float(np.abs(expected - actual).max()) if expected.size else 0.0
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    return Comparison(
        graph, output, case, max_abs, max_rel, max_abs <= tol.atol or max_rel <= tol.rtol
    )
