"""The translator's graphs built op by op (export.builder) against PyTorch: the same
declaration, the same graph parity and the same whole decodes as the traced export."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import numpy as np
import onnx
import pytest
import torch
from helpers import built_tiny_translator, random_sources

from export.graph_files import SHARED, weight_bytes
from export.ops import TOP_K_BLOCK
from export.parity import assert_graph_parity
from export.repository import write_version
from models.config import PRESETS
from models.reference import TorchEngine, reference_engine
from models.transformer import Transformer
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions, decode
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.translation import translate_ids


@pytest.fixture(scope="module")
def built(tmp_path_factory, shipped_translator):
    """A tiny random translator (3 decoder layers, the cross-attention of the middle one
    returned) written with the builder: fp32, int8 and fp16."""
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    variants = ("fp32", "int8", "fp16")
    model, version = built_tiny_translator(directory, shipped_translator[1], 3, variants)
    return model, version


def test_the_built_graphs_are_fused_and_declared_as_the_traced_ones(built):
    _, version = built
    assert version.manifest["graphs_made"] == {"fp32": "built", "int8": "built", "fp16": "built"}
    for variant, graphs in version.manifest["graphs"].items():  # one file of weights each
        shared = version.directory / variant / SHARED
        assert f"{variant}/{SHARED}" in version.manifest["files"]
        steps = [version.directory / g for g in graphs.values()]
        assert shared.stat().st_size < 0.5 * sum(weight_bytes(onnx.load(str(g))) for g in steps)
    decoder = onnx.load(str(version.graph("fp32", "decoder")))
    ops = [n.op_type for n in decoder.graph.node]
    assert ops.count("MultiHeadAttention") == 3 + 2  # self in every layer, cross but one
    # residual Adds and LayerNormalization, which onnxruntime fuses on CUDA alone
    assert ops.count("SkipLayerNormalization") == 0
    assert ops.count("LayerNormalization") == 3 * 3 + 1
    assert len(ops) < 100
    dims = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in decoder.graph.input
    }
    assert dims["past_key_values.0.key"] == ["batch", 4, "past", 8]
    growing = OnnxEngine(version, "fp32", cache="growing")
    assert [i.name for i in decoder.graph.input] == growing.decoder_spec.input_names
    # the same step with its cache written in place: GQA for self-attention, no self mask
    in_place = onnx.load(str(version.graph("fp32", "in_place_decoder")))
    ops = [n.op_type for n in in_place.graph.node]
    assert ops.count("GroupQueryAttention") == 3 and ops.count("MultiHeadAttention") == 2
    dims = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in in_place.graph.input
    }
    assert dims["past_key_values.0.key"] == ["batch", 4, "capacity", 8]
    assert "self_mask" not in dims
    # GQA's total length is the buffer's size, read from its shape (on the host under CUDA),
    # never computed from the positions on the device
    producers = {o: n for n in in_place.graph.node for o in n.output}
    totals = {n.input[6] for n in in_place.graph.node if n.op_type == "GroupQueryAttention"}
    (total,) = totals
    assert producers[total].op_type == "Cast"
    shape = producers[producers[total].input[0]]
    assert shape.op_type == "Shape" and shape.input[0] == "past_key_values.0.key"
    assert "ReduceMax" not in ops
    engine = OnnxEngine(version, "fp32")
    assert engine.cache == "in_place"  # the default where the variant ships it
    assert [i.name for i in in_place.graph.input] == engine.decoder_spec.input_names


@pytest.mark.slow
def test_the_built_graphs_match_pytorch_and_decode_the_same(built):
    model, version = built
    engines = [OnnxEngine(version, "fp32", cache=cache) for cache in ("growing", "in_place")]
    summary = assert_graph_parity(model, *engines)
    assert summary["comparisons"] > 100
    assert summary["max_abs"]["decoder.logits"] < 1e-4
    assert summary["max_abs"]["in_place_decoder.logits"] < 1e-4
    assert summary["max_abs"]["in_place_decoder.present"] < 1e-4
    sources = random_sources(model.config.vocab_size, [1, 4, 9, 30])
    for beam, engine in product((1, 3), engines):
        options = DecodingOptions(beam_size=beam, max_length=20)
        expected = translate_ids(TorchEngine(model), sources, options, 512)
        actual = translate_ids(engine, sources, options, 512)
        for e, a in zip(expected, actual, strict=True):
            assert e[0].tokens == a[0].tokens
            assert e[0].score == pytest.approx(a[0].score, abs=1e-4)
            if e[0].alignment is not None:  # the middle layer's cross-attention, as traced
                assert a[0].alignment == pytest.approx(e[0].alignment, abs=1e-5)


class _Counted:
    """A session that counts its runs (plain or IO-bound)."""

    def __init__(self, session):
        self.session, self.runs = session, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self.session.run(*args, **kwargs)

    def run_with_iobinding(self, *args, **kwargs):
        self.runs += 1
        return self.session.run_with_iobinding(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


def test_a_decode_without_alignment_runs_the_steps_the_server_runs(built):
    """How the certificate's int8 claims and the golden set decode (export.decode_parity
    decode_all without attention): one row at a time by the one-row step alone, in batches
    by the lean step, never by the full step, whose int8 output differs; so a server's
    start-up check, which keeps no alignment, reproduces the golden tokens."""
    from export.decode_parity import decode_all

    model, version = built
    engine = OnnxEngine(version, "int8")
    assert engine.one_row_decoder is not None and engine.lean_decoder is not None
    engine.decoder, engine.lean_decoder, engine.one_row_decoder = (
        _Counted(s) for s in (engine.decoder, engine.lean_decoder, engine.one_row_decoder)
    )
    sources = random_sources(model.config.vocab_size, [2, 9, 30])
    options = DecodingOptions(max_length=8, max_length_ratio=0.0)
    decode_all(engine, sources, options, 512, batch=1, attention=False)
    assert engine.one_row_decoder.runs >= len(sources) and engine.lean_decoder.runs == 0
    decode_all(engine, sources, options, 512, attention=False)
    assert engine.lean_decoder.runs > 0 and engine.decoder.runs == 0
    decode_all(engine, sources, options, 512)  # alignments kept: the full step
    assert engine.decoder.runs > 0


@pytest.mark.parametrize("cache", ["growing", "in_place"])
@pytest.mark.parametrize("variant", ["fp32", "int8", "fp16"])
def test_the_lean_step_runs_when_no_alignment_is_kept_and_decodes_the_same(built, variant, cache):
    """Every variant ships the step without its cross-attention output (every cross-attention
    fused) and with the search folded in, with either cache; a decode without alignment runs
    it alone, no search graph beside it, and gives the full step's tokens."""
    model, version = built
    prefix = "in_place_" if cache == "in_place" else ""
    full = onnx.load(str(version.graph(variant, prefix + "decoder")))
    lean = onnx.load(str(version.graph(variant, prefix + "lean_decoder")))
    assert [o.name for o in lean.graph.output] == [
        *(o.name for o in full.graph.output if o.name != "cross_attention"),
        "ids",
        "log_probs",
    ]
    assert [i.name for i in lean.graph.input] == [i.name for i in full.graph.input] + [
        "bias",
        "k",
    ]
    ops = [n.op_type for n in lean.graph.node]
    attentions = ops.count("MultiHeadAttention") + ops.count("GroupQueryAttention")
    assert attentions == 3 + 3 and "Softmax" not in ops
    # the top k in two levels (export.ops.block_top_k_nodes) over a vocabulary of 4 blocks up,
    # in the float32 steps the CPU runs (float16 is CUDA's)
    two_levels = model.config.vocab_size >= 4 * TOP_K_BLOCK and variant != "fp16"
    assert ops.count("LogSoftmax") == 1 and ops.count("TopK") == (3 if two_levels else 1)
    if variant == "fp32":
        summary = assert_graph_parity(model, OnnxEngine(version, "fp32", cache=cache))
        assert summary["max_abs"][prefix + "lean_decoder.logits"] < 1e-4
        assert summary["max_abs"][prefix + "lean_decoder.ids"] < 1e-4  # the best, best first
        assert summary["max_abs"][prefix + "lean_decoder.log_probs"] < 1e-4
    sources = random_sources(model.config.vocab_size, [2, 9, 30])
    for beam in (1, 3):
        options = DecodingOptions(beam_size=beam, max_length=16, max_length_ratio=0.0)
        engine = OnnxEngine(version, variant, io_binding=beam == 3, cache=cache)
        aligned = translate_ids(engine, sources, options, 512)
        engine.decoder, engine.lean_decoder = (
            _Counted(engine.decoder),
            _Counted(engine.lean_decoder),
        )
        engine.search_ops["search"] = _Counted(engine.search_ops["search"])
        batch = source_batch(sources, 512)
        inference = CachedInference(engine, engine.encode(*batch), len(sources))
        bos, eos = engine.special_tokens.bos, engine.special_tokens.eos
        unaligned = decode(inference, len(sources), options, bos, eos, attention=False)
        assert engine.decoder.runs == 0 and engine.lean_decoder.runs >= 15
        assert engine.search_ops["search"].runs == 0  # each step's search came with it
        for a, u in zip(aligned, unaligned, strict=True):
            assert a[0].alignment is not None and u[0].alignment is None
            assert [h.tokens for h in a] == [h.tokens for h in u]
            assert [h.score for h in u] == pytest.approx([h.score for h in a], abs=1e-3)


@pytest.mark.parametrize("cache", ["growing", "in_place"])
def test_int8_ships_a_one_row_step_that_runs_for_single_rows(built, cache):
    """int8's lean step has a one-row form (MatMulNBits, a matrix-vector kernel), with either
    cache: proven against PyTorch at batch 1 by the graph parity, run for every step of one
    row and for no step of more."""
    model, version = built
    prefix = "in_place_" if cache == "in_place" else ""
    one_row = onnx.load(str(version.graph("int8", prefix + "lean_decoder_one_row")))
    ops = [n.op_type for n in one_row.graph.node]
    assert ops.count("MatMulNBits") == 3 * 6 + 1 and "MatMul" not in ops
    assert not version.has_graph("fp32", prefix + "lean_decoder_one_row")
    summary = assert_graph_parity(model, OnnxEngine(version, "int8", cache=cache))
    assert summary["max_abs"][prefix + "lean_decoder_one_row.logits"] > 0
    sources = random_sources(model.config.vocab_size, [2, 9, 30])
    options = DecodingOptions(beam_size=1, max_length=16)
    engine = OnnxEngine(version, "int8", cache=cache)
    for name in ("decoder", "lean_decoder", "one_row_decoder"):
        setattr(engine, name, _Counted(getattr(engine, name)))
    bos, eos = engine.special_tokens.bos, engine.special_tokens.eos
    for rows in (sources[:1], sources):
        inference = CachedInference(engine, engine.encode(*source_batch(rows, 512)), len(rows))
        decode(inference, len(rows), options, bos, eos, attention=False)
        if len(rows) == 1:
            assert engine.one_row_decoder.runs >= 2 and engine.lean_decoder.runs == 0
    assert engine.lean_decoder.runs >= 2 and engine.decoder.runs == 0


def test_the_fp16_built_graphs_are_float16_throughout_and_match_pytorch(built):
    """Weights, inputs and outputs in float16, no float Cast anywhere (the traced fp16 graphs
    cast around their layer norms and softmaxes); onnxruntime's CPU kernels run them, so the
    parity bound of fp16 is checked here too."""
    model, version = built
    for name in ("encoder", "decoder"):
        graph = onnx.load(str(version.graph("fp16", name))).graph
        floats = {i.data_type for i in graph.initializer if i.data_type != onnx.TensorProto.INT64}
        assert floats == {onnx.TensorProto.FLOAT16}
        declared = [*graph.input, *graph.output]
        types = {v.type.tensor_type.elem_type for v in declared}
        assert onnx.TensorProto.FLOAT not in types and onnx.TensorProto.FLOAT16 in types
        casts = [n for n in graph.node if n.op_type == "Cast"]
        targets = {a.i for n in casts for a in n.attribute if a.name == "to"}
        assert targets <= {onnx.TensorProto.INT32, onnx.TensorProto.BOOL}
    engines = [OnnxEngine(version, "fp16", cache=cache) for cache in ("growing", "in_place")]
    summary = assert_graph_parity(model, *engines)
    assert summary["passed"] and summary["max_abs"]["decoder.logits"] > 0
    assert summary["max_abs"]["in_place_decoder.logits"] > 0
    sources = random_sources(model.config.vocab_size, [3, 12])
    options = DecodingOptions(beam_size=1, max_length=12)
    expected = translate_ids(TorchEngine(model), sources, options, 512)
    actual = translate_ids(OnnxEngine(version, "fp16"), sources, options, 512)
    agree = sum(e[0].tokens == a[0].tokens for e, a in zip(expected, actual, strict=True))
    assert agree >= 1  # random weights leave near ties; the certificate bounds real models


def test_int8_of_the_built_graphs_quantises_every_matmul(built):
    _, version = built
    for name in ("decoder", "in_place_decoder"):
        decoder = onnx.load(str(version.graph("int8", name)))
        ops = {n.op_type for n in decoder.graph.node}
        assert "MatMul" not in ops or all(
            not n.input[1].startswith("weight") for n in decoder.graph.node if n.op_type == "MatMul"
        )
        assert ops & {"DynamicQuantizeMatMul", "MatMulInteger"}


@pytest.mark.parametrize("strides", [(2, 2, 2, 2), (2, 2, 2, 1)], ids=["grid6", "grid12"])
@pytest.mark.slow
def test_the_built_caption_step_matches_pytorch_and_captions_the_same(tmp_path, strides):
    from helpers import SHIPPED_CAPTIONER

    from models.captioner import Captioner
    from models.config import CAPTIONER_PRESETS
    from service.runtime.captioning import caption_images
    from service.runtime.tokenizer import Tokenizer

    tokenizer = Tokenizer(SHIPPED_CAPTIONER / "tokenizer.model")
    tiny = CAPTIONER_PRESETS["tiny"]
    config = replace(tiny, vocab_size=tokenizer.vocab_size, strides=strides)
    torch.manual_seed(5)
    model = Captioner(config).eval()
    directory = tmp_path / "tiny" / "1"
    version = write_version(
        model, tokenizer.model_file, directory, "tiny", "1", ("fp32", "fp16"), method="built"
    )
    step = onnx.load(str(version.graph("fp32", "decoder")))
    matmuls = [n.op_type for n in step.graph.node].count("MatMul")
    assert matmuls == 6  # previous state, score, context, LSTM gates, deep output, logits
    assert_graph_parity(model, OnnxEngine(version, "fp32"))
    assert assert_graph_parity(model, OnnxEngine(version, "fp16"))["passed"]
    grid = config.image_size // (16 if strides[-1] == 2 else 8)
    assert version.manifest["preprocessor"]["grid"] == [grid, grid]  # the server reads it
    size = (3, config.image_size, config.image_size, 3)
    images = np.random.default_rng(0).integers(0, 256, size=size, dtype=np.uint8)
    for beam in (1, 3):
        options = DecodingOptions(beam_size=beam, max_length=12)
        expected = caption_images(reference_engine(model), images, options)
        actual = caption_images(OnnxEngine(version, "fp32"), images, options)
        for e, a in zip(expected, actual, strict=True):
            assert e[0].tokens == a[0].tokens
            assert a[0].alignment == pytest.approx(e[0].alignment, abs=1e-5)


def test_per_tensor_int8_is_one_scale_a_weight_and_recorded(tmp_path, shipped_translator):
    tokenizer = shipped_translator[1]
    config = replace(PRESETS["tiny"], vocab_size=tokenizer.vocab_size, decoder_layers=2)
    torch.manual_seed(7)
    model = Transformer(config).eval()
    written = {}
    for scales in ("per-channel", "per-tensor"):
        version = write_version(
            model,
            tokenizer.model_file,
            tmp_path / scales / "1",
            "tiny",
            "1",
            ("fp32", "int8"),
            int8_scales=scales,
        )
        assert version.manifest["int8_scales"] == scales
        graph = onnx.load(str(version.graph("int8", "decoder"))).graph
        scale_sizes = {int(np.prod(i.dims)) for i in graph.initializer if i.name.endswith("_scale")}
        written[scales] = scale_sizes
        sources = random_sources(config.vocab_size, [4, 9])
        options = DecodingOptions(beam_size=1, max_length=8)
        assert all(
            h[0].tokens for h in translate_ids(OnnxEngine(version, "int8"), sources, options, 512)
        )
    assert written["per-tensor"] == {1} and max(written["per-channel"]) > 1
    with pytest.raises(ValueError, match="int8_scales"):
        write_version(
            model,
            tokenizer.model_file,
            tmp_path / "x" / "1",
            "tiny",
            "1",
            ("fp32", "int8"),
            int8_scales="per-row",
        )


def test_the_command_line_exports_int8_with_the_repository_s_default_scales():
    from attnserve.cli import build_parser
    from export.repository import INT8_SCALES

    args = build_parser().parse_args(["export", "translator", "--out", "repository"])
    assert args.int8_scales == INT8_SCALES[0] == "per-channel"
