"""The fixed-capacity decoder step over buffers bound once (bench.static_buffers): the same
logits and greedy tokens as the growing cache, on the CPU here and with CUDA graphs on a GPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import built_tiny_translator

from bench.static_buffers import (
    FixedCacheDecoder,
    SlotCacheDecoder,
    StaticStep,
    bucket,
    cuda_graph_session,
)
from export.builder import build_decoder
from export.layout import translator_layout
from service.runtime.batching import source_batch
from service.runtime.graphs import transformer_interface
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine

CAPACITY = 24


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shipped_translator):
    """A tiny random translator built op by op (fp32, fp16), and its fixed-capacity steps."""
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    model, version = built_tiny_translator(directory, shipped_translator[1], 11, ("fp32", "fp16"))
    fixed = {}
    for variant, dtype in (("fp32", np.float32), ("fp16", np.float16)):
        fixed[variant] = directory / f"fixed-{variant}.onnx"
        fixed_step = build_decoder(translator_layout(model), dtype, capacity=CAPACITY)
        onnx.save_model(fixed_step, str(fixed[variant]))
        fixed[f"{variant}-in-place"] = directory / f"in-place-{variant}.onnx"
        in_place = build_decoder(translator_layout(model), dtype, capacity=CAPACITY, in_place=True)
        onnx.save_model(in_place, str(fixed[f"{variant}-in-place"]))
    return model, version, fixed


def carried(layers: int):
    return transformer_interface(layers).states


def compare(version, path, variant, device, graph_ids=None, steps=20, rows=3):
    """Greedy from the growing step's logits; the fixed step fed the same tokens. Returns
    the largest logit difference and the steps' argmax agreement."""
    engine = OnnxEngine(version, variant, device)
    rng = np.random.default_rng(0)
    vocab = int(version.config["vocab_size"])
    ids = [list(rng.integers(4, vocab, size=n)) for n in (3, 7, 11, 5, 9)[:rows]]
    encoder = engine.encode(*source_batch(ids, 512))
    inference = CachedInference(engine, encoder, rows)
    layers = int(version.config["decoder_layers"])
    session = cuda_graph_session(path, device, capture=graph_ids is not None)
    step = StaticStep(session, bucket(rows, 8), {"memory": 16}, carried(layers), device, graph_ids)
    decoder = FixedCacheDecoder(step, CAPACITY)
    memory = {n: t if isinstance(t, np.ndarray) else t.numpy() for n, t in encoder.memory.items()}
    decoder.start(memory, encoder.memory_mask)
    tokens = np.full(rows, engine.special_tokens.bos)
    worst, agree = 0.0, 0
    for _ in range(steps):
        logits, _ = inference.step(tokens[:, None])
        fixed = decoder.forward(tokens)["logits"].numpy()[:rows].astype(np.float32)
        worst = max(worst, float(np.abs(fixed - logits).max()))
        agree += int((fixed.argmax(1) == logits.argmax(1)).all())
        tokens = logits.argmax(1)
    return worst, agree


def test_buckets_are_powers_of_two_up_to_the_largest():
    assert [bucket(n, 12) for n in (1, 2, 3, 5, 8, 9, 12)] == [1, 2, 4, 8, 8, 12, 12]
    with pytest.raises(ValueError):
        bucket(13, 12)
    with pytest.raises(ValueError):
        bucket(0, 12)


def test_the_fixed_step_has_static_shapes(tiny):
    _, _, fixed = tiny
    graph = onnx.load(str(fixed["fp32"])).graph

    def dims(values):
        return {
            v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in values
        }

    inputs, outputs = dims(graph.input), dims(graph.output)
    assert inputs["past_key_values.0.key"] == ["batch", 4, CAPACITY, 8]
    assert outputs["present.2.value"] == ["batch", 4, CAPACITY, 8]
    assert inputs["self_mask"] == ["batch", CAPACITY + 1]
    assert inputs["input_ids"] == ["batch", 1]
    graph = onnx.load(str(fixed["fp32-in-place"])).graph
    inputs, outputs = dims(graph.input), dims(graph.output)
    assert "self_mask" not in inputs  # each row's position is its length
    assert inputs["past_key_values.0.key"] == outputs["present.0.key"] == ["batch", 4, CAPACITY, 8]
    assert sum(n.op_type == "GroupQueryAttention" for n in graph.node) == 3


@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_the_fixed_step_equals_the_growing_cache_on_the_cpu(tiny, variant):
    _, version, fixed = tiny
    worst, agree = compare(version, fixed[variant], variant, "cpu")
    assert worst < (1e-4 if variant == "fp32" else 2e-2)
    assert agree == 20


def test_the_fixed_step_refuses_what_its_buffers_cannot_hold(tiny):
    _, version, fixed = tiny
    layers = int(version.config["decoder_layers"])
    step = StaticStep(cuda_graph_session(fixed["fp32"], "cpu"), 2, {"memory": 4}, carried(layers))
    decoder = FixedCacheDecoder(step, CAPACITY)
    keys = np.zeros((2, 4, 6, 8), np.float32)
    with pytest.raises(ValueError, match="holds 2 of 4"):
        decoder.start({"encoder.0.key": keys}, np.ones((2, 6), np.int64))
    memory = {
        f"encoder.{i}.{p}": np.zeros((2, 4, 3, 8), np.float32)
        for i in range(layers)
        for p in ("key", "value")
    }
    decoder.start(memory, np.ones((2, 3), np.int64))
    for _ in range(CAPACITY):
        decoder.forward(np.array([5, 6]))
    with pytest.raises(ValueError, match=f"holds {CAPACITY} positions"):
        decoder.forward(np.array([5, 6]))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_the_fixed_step_with_cuda_graphs_equals_the_growing_cache(tiny, variant):
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider")
    _, version, fixed = tiny
    worst, agree = compare(version, fixed[variant], variant, "cuda", graph_ids=(0, 1))
    assert worst < 5e-2  # onnxruntime's CUDA matmuls take TF32 for fp32 by default
    assert agree >= 19


def alone(engine, ids: list[int], steps: int):
    """The growing step's greedy decode of one row: (logits of every step, tokens fed)."""
    encoder = engine.encode(*source_batch([ids], 512))
    inference = CachedInference(engine, encoder, 1)
    token, logits, fed = engine.special_tokens.bos, [], []
    for _ in range(steps):
        fed.append(token)
        out, _ = inference.step(np.array([[token]]))
        logits.append(out[0])
        token = int(out[0].argmax())
    return encoder, logits, fed


@pytest.mark.parametrize("variant", ["fp32", "fp16"])
@pytest.mark.parametrize("rows_written", ["one row", "whole buffer"])
def test_the_slot_cache_lets_rows_start_in_any_slot_at_any_step(tiny, variant, rows_written):
    """Rows start at different steps in slots in any order, one in a slot another row left
    (its old keys and values still there): every row's logits are its own decode's alone.
    A start writes its slot alone into host buffers, the whole buffer into device ones (here
    the CPU's buffers taken as a device's)."""
    _, version, fixed = tiny
    engine = OnnxEngine(version, variant, "cpu")
    layers = int(version.config["decoder_layers"])
    session = cuda_graph_session(fixed[f"{variant}-in-place"], "cpu", capture=False)
    step = StaticStep(session, 4, {"memory": 16}, carried(layers), in_place=True)
    assert len(step.sets) == 1  # one cache, read and written: no second set to alternate to
    assert "memory_mask" in step.host and any(n.startswith("encoder.") for n in step.host)
    if rows_written == "whole buffer":
        step.host.clear()
    decoder = SlotCacheDecoder(step, CAPACITY)
    rng = np.random.default_rng(1)
    vocab = int(version.config["vocab_size"])
    # (slot, first step, steps): the last row takes the slot the first leaves at step 6
    plan = [(2, 0, 6), (0, 2, 12), (3, 5, 9), (2, 7, 10)]
    rows = []
    for slot, first, steps in plan:
        ids = list(rng.integers(4, vocab, size=int(rng.integers(3, 12))))
        encoder, logits, fed = alone(engine, ids, steps)
        memory = {n: np.asarray(t)[0] for n, t in encoder.memory.items()}
        rows.append((slot, first, steps, memory, np.asarray(encoder.memory_mask)[0], logits, fed))
    worst, agree, compared = 0.0, 0, 0
    for t in range(max(first + steps for _, first, steps in plan)):
        for slot, first, steps, memory, mask, _, _ in rows:
            if t == first:
                decoder.start(slot, memory, mask)
            if t == first + steps:
                decoder.stop(slot)
        tokens = np.zeros(4, dtype=np.int64)
        live = [r for r in rows if r[1] <= t < r[1] + r[2]]
        for slot, first, _, _, _, _, fed in live:
            tokens[slot] = fed[t - first]
        if not live:
            continue
        out = decoder.forward(tokens)["logits"].numpy().astype(np.float32)
        for slot, first, _, _, _, logits, _ in live:
            expected = logits[t - first]
            worst = max(worst, float(np.abs(out[slot] - expected).max()))
            agree += int(out[slot].argmax() == expected.argmax())
            compared += 1
    assert compared == sum(steps for _, _, steps, *_ in rows) == 37
    assert worst < (1e-4 if variant == "fp32" else 2e-2)
    assert agree == compared


def test_the_slot_cache_refuses_a_step_that_shifts_its_cache(tiny):
    _, version, fixed = tiny
    layers = int(version.config["decoder_layers"])
    step = StaticStep(cuda_graph_session(fixed["fp32"], "cpu"), 2, {"memory": 4}, carried(layers))
    with pytest.raises(ValueError, match="writes in place"):
        SlotCacheDecoder(step, CAPACITY)
