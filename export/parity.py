"""Graph-level parity: every output of every graph against the PyTorch model it came from.

Each kind's cases (export.kinds: the translator's in export.translator_parity, the captioner's
in export.caption_parity) use shapes other than the export's example shapes, with masks that
carry padding; every mismatch is collected before one ParityError reports them all.
"""

from __future__ import annotations

import copy
from dataclasses import asdict

import torch

from export.comparison import TOLERANCES, Comparison, ParityError
from export.kinds import export_kind_named
from service.runtime.onnx_engine import OnnxEngine


def graph_parity(model, engine: OnnxEngine, *others: OnnxEngine) -> dict:
    """Compares both graphs on every shape case: per output, the largest differences seen,
    and every failure (`passed` is False when there is any). `others`: engines of the same
    variant running other steps (the cache written in place), whose steps are compared too."""
    tol = TOLERANCES[(engine.kind, engine.variant)]
    if engine.variant == "fp16":  # a copy: the caller's weights keep their precision
        model = copy.deepcopy(model).to(torch.float16)
    model, kind = model.eval(), export_kind_named(engine.kind)
    comparisons = kind.graph_cases(model, engine, tol)
    for other in others:
        comparisons += kind.graph_cases(model, other, tol, encoder=False)
    failures = [c for c in comparisons if not c.passed]
    summary = {
        "variant": engine.variant,
        "tolerance": asdict(tol),
        "comparisons": len(comparisons),
        "max_abs": {},
        "max_rel": {},
        "failures": [asdict(f) for f in failures],
        "passed": not failures,
    }
    for c in comparisons:
        key = f"{c.graph}.{c.output.split('.')[0]}"  # layers of past/present/encoder folded
        summary["max_abs"][key] = max(summary["max_abs"].get(key, 0.0), c.max_abs)
        summary["max_rel"][key] = max(summary["max_rel"].get(key, 0.0), c.max_rel)
    model.float()
    return summary


def assert_graph_parity(model, engine: OnnxEngine, *others: OnnxEngine) -> dict:
    """graph_parity that raises one ParityError listing every failed output."""
    summary = graph_parity(model, engine, *others)
    if not summary["passed"]:
        raise ParityError([Comparison(**f) for f in summary["failures"]])
    return summary
