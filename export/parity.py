"""Graph-level parity: every output of every graph against the PyTorch model it came from.

Shapes are other than the export's example shapes (batch 2, memory 5, past 3, new 2), masks
carry padding, and every mismatch is collected before one ParityError reports them all.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from itertools import product

import numpy as np
import torch

from export.graphs import DecoderStepGraph, EncoderGraph, flatten
from models.transformer import Transformer
from service.graphs import LEAN_STEP, ONE_ROW_STEP
from service.onnx_engine import OnnxEngine
from service.search import log_softmax, top_k

BATCHES = (1, 3, 16)
MEMORY_LENGTHS = (1, 7, 33)  # and the model's maximum
PAST_LENGTHS = (0, 1, 17, 100)
NEW_TOKENS = (1, 4)


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


def _source(config, batch: int, length: int, rng: np.random.Generator):
    """Random ids with every row but the first padded at its end (row lengths differ)."""
    ids = rng.integers(4, config.vocab_size, size=(batch, length))
    mask = np.ones((batch, length), dtype=np.int64)
    for row in range(1, batch):
        mask[row, max(1, length - row) :] = 0
    return ids * mask, mask


def encoder_cases(model: Transformer, engine: OnnxEngine, tol: Tolerance, seed: int = 0):
    config, rng = model.config, np.random.default_rng(seed)
    for batch, length in product(BATCHES, (*MEMORY_LENGTHS, config.max_length)):
        ids, mask = _source(config, batch, length, rng)
        with torch.no_grad():
            expected = EncoderGraph(model)(torch.from_numpy(ids), torch.from_numpy(mask))
        actual = engine.encoder.run(None, {"src_ids": ids, "src_mask": mask})
        case = f"batch={batch} memory={length}"
        for name, e, a in zip(engine.encoder_spec.output_names, expected, actual, strict=True):
            yield compare("encoder", name, case, e.float().numpy(), a, tol)


def _decoder_inputs(model, engine, batch, memory, past, new, rng):
    config = model.config
    ids, mask = _source(config, batch, memory, rng)
    dtype = engine.float_dtype
    kv_shape = (batch, config.n_heads, past, config.head_dim)
    past_kv = [
        rng.standard_normal(kv_shape).astype(dtype) for _ in range(2 * config.decoder_layers)
    ]
    with torch.no_grad():
        _, cross = model.encode(torch.from_numpy(ids), torch.from_numpy(mask))
    cross_kv = [t.numpy().astype(dtype) for t in flatten(cross)]
    self_mask = np.ones((batch, past + new), dtype=np.int64)
    self_mask[1:, : past // 2] = 0  # left padding in the cache of every row but the first
    positions = np.arange(past, past + new, dtype=np.int64)[None].repeat(batch, 0)
    tokens = rng.integers(4, config.vocab_size, size=(batch, new))
    return [tokens, positions, self_mask, *past_kv, *cross_kv, mask]


def decoder_cases(model: Transformer, engine: OnnxEngine, tol: Tolerance, seed: int = 0):
    config, rng = model.config, np.random.default_rng(seed)
    lengths = (*MEMORY_LENGTHS, config.max_length)
    for batch, memory, past, new in product(BATCHES, lengths, PAST_LENGTHS, NEW_TOKENS):
        inputs = _decoder_inputs(model, engine, batch, memory, past, new, rng)
        actual = engine.decoder.run(
            None, dict(zip(engine.decoder_spec.input_names, inputs, strict=True))
        )
        tensors = [torch.from_numpy(np.asarray(x)) for x in inputs]
        with torch.no_grad():
            expected = DecoderStepGraph(model)(*tensors)  # the declared output order
        case = f"batch={batch} memory={memory} past={past} new={new}"
        for name, e, a in zip(engine.decoder_spec.output_names, expected, actual, strict=True):
            yield compare("decoder", name, case, e.float().numpy(), a, tol)
        by_name = dict(zip(engine.decoder_spec.output_names, expected, strict=True))
        feeds = dict(zip(engine.decoder_spec.input_names, inputs, strict=True))
        leans = [(LEAN_STEP, engine.lean_decoder)]  # the same step less the attention output
        leans += [(ONE_ROW_STEP, engine.one_row_decoder)] if batch == 1 else []
        for graph, session in leans:
            if session is not None:
                yield from _lean_cases(engine, graph, session, feeds, by_name, case, tol, rng)


def _lean_cases(engine: OnnxEngine, graph, session, feeds, expected, case, tol, rng):
    """A lean step's outputs: the step's against PyTorch's; its search's, with a few tokens
    banned, against the log-softmax of its own logits: the k best log-probabilities, and
    those of the ids it names (onnxruntime may keep a float16 step's logits in float32 up to
    its search, so a float16 search is not that of the rounded logits)."""
    vocab = engine.vocab
    bias = np.zeros((1, vocab), dtype=np.float32)
    bias[0, rng.choice(vocab, size=3, replace=False)] = -np.inf
    search = {"bias": bias, "k": np.array([4], dtype=np.int64)}
    named = dict(zip(engine.interface.lean_decoder.output_names,
                     session.run(None, {**feeds, **search}), strict=True))  # fmt: skip
    for name, value in named.items():
        if name in expected:
            yield compare(graph, name, case, expected[name].float().numpy(), value, tol)
    every = log_softmax(named["logits"].astype(np.float32) + bias)
    best = np.take_along_axis(every, top_k(every, 4), 1)
    yield compare(graph, "log_probs", case, best, named["log_probs"], tol)
    chosen = np.take_along_axis(every, named["ids"], 1)
    yield compare(graph, "ids", case, chosen, named["log_probs"], tol)


def cases(model, engine: OnnxEngine, tol: Tolerance):
    """Every comparison of both graphs, for the model's kind."""
    if engine.kind == "captioner":
        from export import caption_parity

        return [
            *caption_parity.encoder_cases(model, engine, tol),
            *caption_parity.decoder_cases(model, engine, tol),
        ]
    return [*encoder_cases(model, engine, tol), *decoder_cases(model, engine, tol)]


def graph_parity(model, engine: OnnxEngine) -> dict:
    """Compares both graphs on every shape case: per output, the largest differences seen,
    and every failure (`passed` is False when there is any)."""
    tol = TOLERANCES[(engine.kind, engine.variant)]
    if engine.variant == "fp16":  # a copy: the caller's weights keep their precision
        model = copy.deepcopy(model).to(torch.float16)
    model = model.eval()
    comparisons = cases(model, engine, tol)
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


def assert_graph_parity(model, engine: OnnxEngine) -> dict:
    """graph_parity that raises one ParityError listing every failed output."""
    summary = graph_parity(model, engine)
    if not summary["passed"]:
        raise ParityError([Comparison(**f) for f in summary["failures"]])
    return summary
