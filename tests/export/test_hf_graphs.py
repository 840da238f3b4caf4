"""Hugging Face models as the runtime's two ONNX graphs (export.hf.graphs): architectures
taken and refused, and greedy decodes through onnxruntime equal to `generate`'s for a small
random Marian and M2M100."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import tiny_m2m100, tiny_marian

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


class Session:
    """An onnxruntime session called as the graph's module is: torch tensors in and out."""

    def __init__(self, path, names):
        self.session, self.names = ort.InferenceSession(str(path)), names

    def __call__(self, *tensors):
        feeds = {n: t.numpy() for n, t in zip(self.names, tensors, strict=True)}
        return tuple(torch.from_numpy(np.asarray(o)) for o in self.session.run(None, feeds))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("build", "pad", "eos", "first"),
    [(tiny_marian, 95, 0, ()), (tiny_m2m100, 1, 2, (120,))],
    ids=["marian", "m2m100"],
)
def test_greedy_through_onnxruntime_is_generates_greedy(build, pad, eos, first, tmp_path):
    model = build()
    src_ids = torch.tensor([[5, 17, 33, 8, 61, eos], [44, 9, eos, pad, pad, pad]])
    src_mask = (src_ids != pad).long()
    with torch.no_grad():
        extra = {"forced_bos_token_id": first[0]} if first else {}
        generated = model.generate(
            input_ids=src_ids, attention_mask=src_mask, num_beams=1, do_sample=False,
            max_new_tokens=16, **extra,
        )  # fmt: skip
    paths = graphs.export_graphs(model, tmp_path)
    spec = graphs.interface(model.config)
    encoder = Session(paths["encoder"], spec.encoder.input_names)
    step = Session(paths["decoder"], spec.decoder.input_names)
    ours = greedy_decode(encoder, step, model.config, src_ids, src_mask, 16, first)
    for row, tokens in enumerate(ours):
        theirs = generated[row, 1:].tolist()
        if eos in theirs:
            theirs = theirs[: theirs.index(eos) + 1]
        assert tokens == theirs, row
    assert all(len(set(tokens)) >= 3 for tokens in ours)
