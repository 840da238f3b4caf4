"""The translator's parity: its graph-level cases and its whole-decode claims.

Graph level: both graphs on shapes other than the export's example shapes (batch 2, memory 5,
past 3, new 2), masks carrying padding, the step as the engine runs it (its cache growing, or
written in place), and the lean steps' folded search. Whole decodes: ORT fp32 greedy and beam 4
equal PyTorch; cached equals uncached; a row alone equals the row in a padded batch; the cache
written in place (as served) equals the growing cache; int8 loses at most MAX_INT8_LOSS BLEU
and chrF, over all the sentences and on each test part, decoded in batches and, where the
variant has a one-row step, one sentence at a time.
"""

from __future__ import annotations

from functools import lru_cache, partial
from itertools import product

import numpy as np
import torch

from export.comparison import BATCHES, Tolerance, compare
from export.decode_parity import (
    BEAM,
    GREEDY,
    ParityInputs,
    compare_decodes,
    decode_all,
    quality_loss,
)
from export.graphs import DecoderStepGraph, EncoderGraph, flatten
from models.reference import reference_engine
from models.transformer import Transformer
from service.runtime.batch import joined
from service.runtime.graphs import IN_PLACE, LEAN_STEP, ONE_ROW_STEP, STATIC
from service.runtime.inference import UncachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.search import log_softmax, top_k

MAX_INT8_LOSS = 0.5  # BLEU and chrF points
MEMORY_LENGTHS = (1, 7, 33)  # and the model's maximum
PAST_LENGTHS = (0, 1, 17, 100)
NEW_TOKENS = (1, 4)


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


def _encoded(model: Transformer, dtype, batch: int, memory: int, seed: int):
    """(source mask, cross-attention K/V in `dtype`) of one random source of this shape,
    encoded by PyTorch: a step's cases of one shape share it (the encoder's own cases vary
    their sources), so that the encoder runs once a shape, not once a case (the cases of a
    shape come one after another: the last shape's is kept)."""
    rng = np.random.default_rng((seed, batch, memory))
    ids, mask = _source(model.config, batch, memory, rng)
    with torch.no_grad():
        _, cross = model.encode(torch.from_numpy(ids), torch.from_numpy(mask))
    return mask, [t.numpy().astype(dtype) for t in flatten(cross)]


def _decoder_inputs(model, encoded, past, new, rng):
    """A step's inputs over `encoded` (_encoded's): a random past of `past` positions, left
    padding in every row's but the first, and `new` random tokens."""
    config, (mask, cross_kv) = model.config, encoded
    batch, dtype = mask.shape[0], cross_kv[0].dtype
    kv_shape = (batch, config.n_heads, past, config.head_dim)
    past_kv = [
        rng.standard_normal(kv_shape).astype(dtype) for _ in range(2 * config.decoder_layers)
    ]
    self_mask = np.ones((batch, past + new), dtype=np.int64)
    self_mask[1:, : past // 2] = 0  # left padding in the cache of every row but the first
    positions = np.arange(past, past + new, dtype=np.int64)[None].repeat(batch, 0)
    tokens = rng.integers(4, config.vocab_size, size=(batch, new))
    return [tokens, positions, self_mask, *past_kv, *cross_kv, mask]


def decoder_cases(model: Transformer, engine: OnnxEngine, tol: Tolerance, seed: int = 0):
    config, rng = model.config, np.random.default_rng(seed)
    lengths = (*MEMORY_LENGTHS, config.max_length)
    encoded = lru_cache(maxsize=1)(partial(_encoded, model, engine.float_dtype, seed=seed))
    for batch, memory, past, new in product(BATCHES, lengths, PAST_LENGTHS, NEW_TOKENS):
        inputs = _decoder_inputs(model, encoded(batch, memory), past, new, rng)
        actual = engine.decoder.run(
            None, dict(zip(engine.decoder_spec.input_names, inputs, strict=True))
        )
        tensors = [torch.from_numpy(np.asarray(x)) for x in inputs]
        with torch.no_grad():
            expected = DecoderStepGraph(model)(*tensors)  # the declared output order
        case = f"batch={batch} memory={memory} past={past} new={new}"
        for name, e, a in zip(engine.decoder_spec.output_names, expected, actual, strict=True):
            yield compare("decoder", name, case, e.float().numpy(), a, tol)
        by_name = {
            n: e.float().numpy()
            for n, e in zip(engine.decoder_spec.output_names, expected, strict=True)
        }
        feeds = dict(zip(engine.decoder_spec.input_names, inputs, strict=True))
        leans = [(LEAN_STEP, engine.lean_decoder)]  # the same step less the attention output
        leans += [(ONE_ROW_STEP, engine.one_row_decoder)] if batch == 1 else []
        for graph, session in leans:
            if session is not None:
                run = partial(_run_plain, session)
                yield from _lean_cases(engine, graph, run, feeds, by_name, case, tol, rng)


def _run_plain(session, feeds: dict) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def run_in_place(
    session, feeds: dict, carried: dict[str, str], device: str = "cpu"
) -> dict[str, np.ndarray]:
    """Runs a step whose cache is written in place as it is served: every buffer of `carried`
    (output name: input name) bound as that input and that output, each copied first (`feeds`
    is left as it is); returns every output by name (the carried ones: the buffers as the
    step left them)."""
    import onnxruntime as ort

    binding, values, written = session.io_binding(), {}, set(carried.values())
    buffers = {n: np.array(feeds[n], copy=True) for n in written}  # the memory written on the CPU
    for name, array in feeds.items():
        array = buffers[name] if name in written else np.ascontiguousarray(array)
        values[name] = ort.OrtValue.ortvalue_from_numpy(array, device, 0)
        binding.bind_ortvalue_input(name, values[name])
    names = [o.name for o in session.get_outputs()]
    for name in names:
        if name in carried:
            binding.bind_ortvalue_output(name, values[carried[name]])
        else:
            binding.bind_output(name, device)
    session.run_with_iobinding(binding)
    outputs = dict(zip(names, binding.get_outputs(), strict=True))
    # (on the CPU an OrtValue made from an array is that array's memory: its numpy() is a
    # view of it, so the arrays themselves are returned)
    written_back = {
        n: buffers[i] if device == "cpu" else values[i].numpy() for n, i in carried.items()
    }
    return {n: written_back[n] if n in carried else v.numpy() for n, v in outputs.items()}


def in_place_cases(model: Transformer, engine: OnnxEngine, tol: Tolerance, seed: int = 0):
    """The steps whose cache is written in place (`OnnxEngine(cache="in_place")`), one new
    token per row, every row at its own position in a buffer holding more (the positions
    beyond a row's must come out as they went in): each row against PyTorch's growing step on
    that row's own past. The lean steps also as `_lean_cases` checks them."""
    config, rng = model.config, np.random.default_rng(seed)
    carried = {s.output: s.input for s in engine.states}
    lengths = (*MEMORY_LENGTHS, config.max_length)
    step = DecoderStepGraph(model)
    static = engine.static_step
    encoded = lru_cache(maxsize=1)(partial(_encoded, model, engine.float_dtype, seed=seed))
    for batch, memory, past in product(BATCHES, lengths, PAST_LENGTHS):
        # a static step's buffers have its capacity
        capacity = past + 5 if static is None else static.capacity
        inputs = _decoder_inputs(model, encoded(batch, memory), capacity, 1, rng)
        tokens, memory_mask = inputs[0], inputs[-1]
        buffers, cross = inputs[3 : 3 + len(carried)], inputs[3 + len(carried) : -1]
        pasts = past - (np.arange(batch) * 7) % (past + 1)  # every row its own length
        feeds = dict(
            zip(
                engine.decoder_spec.input_names,
                [tokens, pasts[:, None], *buffers, *cross, memory_mask],
                strict=True,
            )
        )
        expected = {n: [] for n in engine.decoder_spec.output_names if n not in carried}
        written = {n: feeds[i].copy() for n, i in carried.items()}  # positions beyond: kept
        for row, length in enumerate(pasts):
            one = slice(row, row + 1)
            own = [torch.from_numpy(np.ascontiguousarray(b[one, :, :length])) for b in buffers]
            with torch.no_grad():
                outputs = step(
                    torch.from_numpy(tokens[one]),
                    torch.tensor([[length]]),
                    torch.ones((1, length + 1), dtype=torch.int64),
                    *own,
                    *(torch.from_numpy(c[one]) for c in cross),
                    torch.from_numpy(memory_mask[one]),
                )
            named = dict(zip(engine.decoder_spec.output_names, outputs, strict=True))
            for name in expected:
                expected[name].append(named[name].float().numpy())
            for name in carried:
                written[name][row, :, : length + 1] = named[name][0].float().numpy()
        expected = {n: np.concatenate(v) for n, v in expected.items()} | written
        case = f"batch={batch} memory={memory} past={past} (rows {pasts.min()}-{pasts.max()})"
        actual = run_in_place(engine.decoder, feeds, carried, engine.device)
        for name, value in actual.items():
            yield compare(engine.decoder_spec.name, name, case, expected[name], value, tol)
        leans = [(engine.interface.lean_decoder.name, engine.lean_decoder)]
        leans += [(IN_PLACE + ONE_ROW_STEP, engine.one_row_decoder)] if batch == 1 else []
        for graph, session in leans:
            if session is not None:
                run = partial(run_in_place, session, carried=carried, device=engine.device)
                yield from _lean_cases(engine, graph, run, feeds, expected, case, tol, rng)


def _lean_cases(engine: OnnxEngine, graph, run, feeds, expected, case, tol, rng):
    """A lean step's outputs (`run`: feeds -> outputs by name): the step's against PyTorch's
    (`expected`, by name); its search's, with a few tokens
    banned, against the log-softmax of its own logits: the k best log-probabilities, and
    those of the ids it names (onnxruntime may keep a float16 step's logits in float32 up to
    its search, so a float16 search is not that of the rounded logits)."""
    vocab = engine.vocab
    bias = np.zeros((1, vocab), dtype=np.float32)
    bias[0, rng.choice(vocab, size=3, replace=False)] = -np.inf
    search = {"bias": bias, "k": np.array([4], dtype=np.int64)}
    named = run({**feeds, **search})
    if list(named) != engine.interface.lean_decoder.output_names:
        raise ValueError(f"{graph} outputs {list(named)}")
    for name, value in named.items():
        if name in expected:
            yield compare(graph, name, case, expected[name], value, tol)
    every = log_softmax(named["logits"].astype(np.float32) + bias)
    best = np.take_along_axis(every, top_k(every, 4), 1)
    yield compare(graph, "log_probs", case, best, named["log_probs"], tol)
    chosen = np.take_along_axis(every, named["ids"], 1)
    yield compare(graph, "ids", case, chosen, named["log_probs"], tol)


def graph_cases(model: Transformer, engine: OnnxEngine, tol: Tolerance, encoder: bool = True):
    """Every comparison of the encoder (unless `encoder` is off) and of the step the engine
    runs: the growing one, or the one whose cache is written in place (also at a fixed
    capacity: static)."""
    steps = in_place_cases if engine.cache in ("in_place", "static") else decoder_cases
    return [*(encoder_cases(model, engine, tol) if encoder else ()), *steps(model, engine, tol)]


def decode_certificate(model, tokenizer, model_version, inputs: ParityInputs) -> dict:
    """Every whole-decode claim on the inputs' sources (token ids) with their reference
    texts. ORT fp32 greedy is decoded once and serves every claim that compares against it.
    int8 must keep within the loss bound over all its inputs and, on these sources, on each
    of `inputs.parts`."""
    sources = inputs.sources
    max_source = model.config.max_length
    # as served: the cache written in place where the version ships that step
    torch_engine, fp32 = reference_engine(model), OnnxEngine(model_version, "fp32")
    growing = (
        fp32 if fp32.cache == "growing" else OnnxEngine(model_version, "fp32", cache="growing")
    )
    fp32_greedy = decode_all(fp32, sources, GREEDY, max_source)

    def self_check(setting: str, candidate=fp32, **candidate_args):  # fp32 greedy another way
        return compare_decodes(
            fp32,
            candidate,
            sources,
            GREEDY,
            max_source,
            setting,
            expected=fp32_greedy,
            **candidate_args,
        )

    reports = [
        compare_decodes(
            torch_engine,
            fp32,
            sources,
            GREEDY,
            max_source,
            "onnxruntime fp32 greedy vs pytorch",
            actual=fp32_greedy,
        ),
        compare_decodes(
            torch_engine, fp32, sources, BEAM, max_source, "onnxruntime fp32 beam4 vs pytorch"
        ),
        # only the growing step takes every position at once
        self_check("onnxruntime cached vs uncached", growing, inference_type=UncachedInference),
        self_check("onnxruntime padded batch vs alone", batch=1),
    ]
    if growing is not fp32:
        reports.append(self_check("onnxruntime cache in place vs growing", growing))
    if model_version.has_graph("fp32", STATIC + "decoder"):  # buckets of the continuous batch
        static = OnnxEngine(model_version, "fp32", cache="static")
        reports.append(
            self_check("onnxruntime static step vs cache in place", static, inference_type=joined)
        )
    certificate = {"decodes": [r.to_dict() for r in reports]}
    if "int8" in model_version.manifest["graphs"]:
        int8 = OnnxEngine(model_version, "int8")
        claimed, references, baseline = inputs.int8_claim(fp32, fp32_greedy, GREEDY, max_source)
        parts = inputs.parts if inputs.int8 is None else None
        # int8 as served to requests that keep no alignment: the lean step, in batches
        decoded = decode_all(int8, claimed, GREEDY, max_source, attention=False)
        certificate["int8_vs_fp32"] = _int8_loss(tokenizer, references, baseline, decoded, parts)
        if int8.one_row_decoder is not None:  # every step of one row: the one-row graph
            decoded = decode_all(int8, claimed, GREEDY, max_source, batch=1, attention=False)
            certificate["int8_one_row_vs_fp32"] = _int8_loss(
                tokenizer, references, baseline, decoded, parts
            )
    return certificate


def _int8_loss(tokenizer, references, fp32_greedy, int8_greedy, parts: dict | None) -> dict:
    """int8's BLEU and chrF loss against fp32 over all the sentences and on every part;
    passed if each is within MAX_INT8_LOSS."""
    loss = quality_loss(tokenizer, references, fp32_greedy, int8_greedy)
    checked = [loss]
    if parts and len(parts) > 1:
        loss["parts"], start = {}, 0
        for name, count in parts.items():
            window = slice(start, start + count)
            loss["parts"][name] = quality_loss(
                tokenizer, references[window], fp32_greedy[window], int8_greedy[window]
            )
            checked.append(loss["parts"][name])
            start += count
    loss["passed"] = all(
        part["bleu_loss"] <= MAX_INT8_LOSS and part["chrf_loss"] <= MAX_INT8_LOSS
        for part in checked
    )
    return loss
