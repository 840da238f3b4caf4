"""The torch modules the graphs are traced from: each forward is one graph of the decode-step
contract, its inputs and outputs flat and in the declared order, computing what the model's
own encode and decode step compute."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_transformer

from export.graphs import (
    CaptionEncoderGraph,
    CaptionStepGraph,
    DecoderStepGraph,
    EncoderGraph,
    flatten,
    pairs,
)
from export.kinds import export_kind
from export.onnx_export import example_inputs, interface_of
from models.captioner import Captioner
from models.config import CAPTIONER_PRESETS


def test_pairs_and_flatten_undo_each_other():
    tensors = tuple(torch.full((1,), float(i)) for i in range(6))
    grouped = pairs(tensors)
    assert [(int(k), int(v)) for k, v in grouped] == [(0, 1), (2, 3), (4, 5)]
    assert all(a is b for a, b in zip(flatten(grouped), tensors, strict=True))


@pytest.fixture(scope="module")
def translator():
    return tiny_transformer(seed=1, decoder_layers=3, cross_attention_layer=1)


@pytest.fixture(scope="module")
def captioner():
    torch.manual_seed(3)
    return Captioner(CAPTIONER_PRESETS["tiny"]).eval()


def _inputs(model, graph: str) -> tuple:
    """Example inputs of one graph, built from the declaration."""
    spec = getattr(interface_of(model), graph)
    fixed = export_kind(model).fixed_sizes(model)
    return example_inputs(fixed, spec, model.config.vocab_size, torch.float32)


def test_the_encoder_graph_returns_the_mask_then_each_layer_s_cross_keys_and_values(translator):
    src_ids, src_mask = _inputs(translator, "encoder")
    with torch.no_grad():
        outputs = EncoderGraph(translator)(src_ids, src_mask)
        _, cross = translator.encode(src_ids, src_mask)
    assert len(outputs) == len(interface_of(translator).encoder.output_names) == 1 + 2 * 3
    assert outputs[0] is src_mask
    for got, expected in zip(outputs[1:], flatten(cross), strict=True):
        torch.testing.assert_close(got, expected)


def test_the_step_graph_reads_past_cross_and_mask_in_the_declared_order(translator):
    spec = interface_of(translator).decoder
    args = _inputs(translator, "decoder")
    with torch.no_grad():
        outputs = DecoderStepGraph(translator)(*args)
        n = 2 * 3
        rest = args[3:]
        logits, present, attention = translator.decode_step(
            *args[:3], pairs(rest[:n]), pairs(rest[n : 2 * n]), rest[2 * n]
        )
    assert len(args) == len(spec.input_names) and len(outputs) == len(spec.output_names)
    assert spec.output_names[0] == "logits" and spec.output_names[-1] == "cross_attention"
    torch.testing.assert_close(outputs[0], logits)
    for got, expected in zip(outputs[1:-1], flatten(present), strict=True):
        torch.testing.assert_close(got, expected)
    torch.testing.assert_close(outputs[-1], attention)
    # the present keys grew by the new positions on the past
    past, new = args[3].shape[2], args[0].shape[1]
    assert outputs[1].shape[2] == past + new


def test_the_caption_graphs_chain_into_one_step_as_the_model_decodes(captioner):
    (pixels,) = _inputs(captioner, "encoder")
    with torch.no_grad():
        mask, grid, projection, h, c = CaptionEncoderGraph(captioner)(pixels)
        expected_grid, expected_projection, expected_mask, (h0, c0) = captioner.encode(pixels)
        torch.testing.assert_close(grid, expected_grid)
        torch.testing.assert_close(projection, expected_projection)
        assert torch.equal(mask, expected_mask) and mask.dtype == torch.long
        torch.testing.assert_close((h, c), (h0, c0))
        ids = torch.tensor([[1], [5]])
        outputs = CaptionStepGraph(captioner)(ids, h, c, grid, projection, mask)
        logits, (h1, c1), weights = captioner.decode_step(ids, (h, c), grid, projection, mask)
    names = interface_of(captioner).decoder.output_names
    assert len(outputs) == len(names) == 4
    torch.testing.assert_close(outputs, (logits, h1, c1, weights))
    assert outputs[0].shape == (2, captioner.config.vocab_size)
    assert outputs[3].shape == (2, captioner.config.grid**2)
    assert not torch.equal(outputs[1], h)  # the state moved
