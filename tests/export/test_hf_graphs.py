"""Hugging Face models as the runtime's two ONNX graphs (export.hf.graphs): architectures
taken and refused, and greedy decodes through onnxruntime equal to `generate`'s for a small
random Marian and M2M100."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import OrtModule, tiny_hf_families

from export.hf import graphs
from export.hf.layers import greedy_decode

pytest.importorskip("transformers")  # the hf extra, installed by ./dev.sh


def test_architectures_are_recognised_or_refused_with_the_reason():
    assert graphs.architecture(SimpleNamespace(model_type="marian")) == "marian"
    assert graphs.architecture(SimpleNamespace(model_type="m2m_100")) == "m2m_100"
    with pytest.raises(ValueError, match=r"t5.*relative position buckets.*taken: m2m_100, marian"):
        graphs.architecture(SimpleNamespace(model_type="t5"))
    with pytest.raises(ValueError, match="'gpt2': not an encoder-decoder"):
        graphs.architecture(SimpleNamespace(model_type="gpt2"))


FAMILIES = tiny_hf_families()
WAYS = {"built": graphs.build_graphs, "traced": graphs.export_graphs}


@pytest.mark.parametrize("way", ["built", pytest.param("traced", marks=pytest.mark.slow)])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_through_onnxruntime_is_generates_greedy(family, way, tmp_path):
    """Each family's layout (post-norm Marian with GELU or swish, pre-norm M2M100, mBART
    with its embedding norm and logits bias), its graphs built op by op or traced."""
    build, pad, eos, first = FAMILIES[family]
    model = build()
    src_ids = torch.tensor([[5, 17, 33, 8, 61, eos], [44, 9, eos, pad, pad, pad]])
    src_mask = (src_ids != pad).long()
    with torch.no_grad():
        extra = {"forced_bos_token_id": first[0]} if first else {}
        generated = model.generate(
            input_ids=src_ids, attention_mask=src_mask, num_beams=1, do_sample=False,
            max_new_tokens=16, **extra,
        )  # fmt: skip
    paths = WAYS[way](model, tmp_path)
    spec = graphs.interface(model.config)
    encoder = OrtModule(paths["encoder"], spec.encoder.input_names)
    step = OrtModule(paths["decoder"], spec.decoder.input_names)
    ours = greedy_decode(encoder, step, model.config, src_ids, src_mask, 16, first)
    for row, tokens in enumerate(ours):
        theirs = generated[row, 1:].tolist()
        if eos in theirs:
            theirs = theirs[: theirs.index(eos) + 1]
        assert tokens == theirs, row
    assert all(len(set(tokens)) >= 3 for tokens in ours)
    if way == "built":  # every step our own translator ships
        assert {"lean_decoder", "in_place_lean_decoder", "static_lean_decoder"} <= set(paths)
