"""Model kinds on the exporter's side: found by a model's class or a manifest's kind name, each
with its manifest entries (preprocessor, limits), the axes it fixes, the modules its graphs are
traced from, its golden sources as written, the nodes int8 quantises and its test inputs (the
translator's: tests/export/test_export.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import tiny_transformer
from PIL import Image

from export import caption_parity, translator_parity
from export.builder import build_caption_step
from export.graphs import CaptionEncoderGraph, CaptionStepGraph, DecoderStepGraph, EncoderGraph
from export.kinds import CaptionerExport, TranslatorExport, export_kind, export_kind_named
from models.captioner import Captioner
from models.config import CAPTIONER_PRESETS
from models.kinds import CaptionerKind, TranslatorKind
from service.runtime.repository import TOKENIZER, ModelVersion


@pytest.fixture(scope="module")
def captioner():
    torch.manual_seed(0)
    return Captioner(CAPTIONER_PRESETS["tiny"]).eval()


def test_each_model_s_kind_is_found_by_its_class_and_by_its_name(captioner):
    translator = export_kind(tiny_transformer())
    assert isinstance(translator, TranslatorExport) and isinstance(translator, TranslatorKind)
    assert translator is export_kind_named("transformer")
    assert isinstance(export_kind(captioner), CaptionerExport)
    assert isinstance(export_kind(captioner), CaptionerKind)
    assert export_kind(captioner) is export_kind_named("captioner")
    with pytest.raises(ValueError, match=r"unknown model kind 'rnn' \(exported kinds: \['capt"):
        export_kind_named("rnn")


def test_each_kind_declares_its_data_and_int8_bound():
    assert TranslatorExport.data == "translator" and CaptionerExport.data == "captioner"
    assert TranslatorExport.max_int8_loss == translator_parity.MAX_INT8_LOSS
    assert CaptionerExport.max_int8_loss == caption_parity.MAX_CAPTION_INT8_LOSS


def test_the_translator_s_manifest_entries_and_graph_modules():
    model = tiny_transformer()
    kind = export_kind(model)
    assert kind.preprocessor(model) == {
        "type": "sentencepiece",
        "file": TOKENIZER,
        "appends": "</s>",
    }
    assert kind.limits(model) == {"max_source_tokens": 512, "max_output_tokens": 512}
    assert kind.fixed_sizes(model) == {"heads": 4, "head_dim": 8}
    encoder, step = kind.graph_modules(model)
    assert isinstance(encoder, EncoderGraph) and isinstance(step, DecoderStepGraph)
    assert encoder.model is model and step.layers == 2
    assert kind.int8_nodes("decoder", None) is None  # every MatMul and Gemm


def test_the_captioner_s_manifest_entries_and_graph_modules(captioner):
    kind = export_kind(captioner)
    c = captioner.config
    preprocessor = kind.preprocessor(captioner)
    assert preprocessor["type"] == "image" and preprocessor["size"] == [96, 96]
    assert preprocessor["grid"] == [c.grid, c.grid] == [6, 6]
    assert preprocessor["normalisation"]["mean"] == [0.5, 0.5, 0.5]
    assert kind.limits(captioner) == {"max_output_tokens": 24}
    fixed = kind.fixed_sizes(captioner)
    assert fixed["memory"] == 36 and fixed["hidden"] == c.hidden_dim and fixed["channels"] == 3
    encoder, step = kind.graph_modules(captioner)
    assert isinstance(encoder, CaptionEncoderGraph) and isinstance(step, CaptionStepGraph)


def test_int8_quantises_the_lstm_gates_alone(captioner):
    kind = export_kind(captioner)
    step = build_caption_step(captioner, np.float32)
    chosen = kind.int8_nodes("decoder", step)
    assert chosen and kind.int8_nodes("encoder", step) == []
    weights = {i.name: list(i.dims) for i in step.graph.initializer}
    nodes = {n.name: n for n in step.graph.node}
    gates = 4 * captioner.config.hidden_dim
    for name in chosen:
        assert nodes[name].op_type == "MatMul"
        assert weights[nodes[name].input[1]][-1] == gates
    others = [
        n.name
        for n in step.graph.node
        if n.op_type == "MatMul" and n.input[1] in weights and n.name not in chosen
    ]
    assert others  # the other weighted MatMuls stay in float


def test_golden_sources_are_token_ids_inline_or_lossless_pngs(tmp_path, captioner):
    version = ModelVersion(tmp_path, {})
    assert export_kind_named("transformer").golden_sources(version, [[5, 6], [7]]) == [
        {"source_ids": [5, 6]},
        {"source_ids": [7]},
    ]
    images = np.random.default_rng(0).integers(0, 256, size=(2, 96, 96, 3), dtype=np.uint8)
    written = export_kind(captioner).golden_sources(version, images)
    assert written == [{"image": "golden/0.png"}, {"image": "golden/1.png"}]
    for entry, image in zip(written, images, strict=True):
        back = np.asarray(Image.open(tmp_path / entry["image"]))
        np.testing.assert_array_equal(back, image)  # the very same pixels


def test_captioner_parity_inputs_spread_over_the_test_split(captioner_data):
    from models.caption_data import read_scenes

    scenes, images = read_scenes(captioner_data, "test")
    inputs = export_kind_named("captioner").parity_inputs(captioner_data, None, 5)
    last = len(scenes) - 1
    chosen = [round(i * last / 4) for i in range(5)]
    assert inputs.parts == {"test": 5}
    assert inputs.references == [scenes[i].caption for i in chosen]
    np.testing.assert_array_equal(inputs.sources, images[chosen])
    int8_images, int8_captions = inputs.int8  # the int8 claim on the whole split
    assert len(int8_images) == len(scenes) and int8_captions == [s.caption for s in scenes]
