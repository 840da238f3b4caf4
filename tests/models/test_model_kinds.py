"""Model kinds on the PyTorch side: a model's kind found by its class (or a base class), a kind
by its name, and each kind's declared interface, batch decode and one-source encode on small
random models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import random_sources, tiny_transformer
from torch import nn

from models.captioner import Captioner
from models.config import CAPTIONER_PRESETS, PRESETS
from models.kinds import (
    CaptionerKind,
    TranslatorKind,
    kind_named,
    kind_names,
    model_kind,
)
from models.reference import reference_engine
from service.runtime.decoding import DecodingOptions
from service.runtime.graphs import interface_for
from service.runtime.inference import CachedInference


@pytest.fixture(scope="module")
def captioner():
    torch.manual_seed(0)
    return Captioner(CAPTIONER_PRESETS["tiny"]).eval()


def test_each_kind_is_found_by_its_name_and_by_its_model_class(captioner):
    assert kind_names() == ["captioner", "transformer"]
    translator = model_kind(tiny_transformer())
    assert isinstance(translator, TranslatorKind) and translator is kind_named("transformer")
    assert isinstance(model_kind(captioner), CaptionerKind)
    assert kind_named("captioner") is model_kind(captioner)
    assert translator.config_class is type(PRESETS["tiny"])


def test_a_subclass_takes_its_base_s_kind_and_anything_else_is_refused():
    from models.transformer import Transformer

    class Fine(Transformer):
        pass

    assert model_kind(Fine(PRESETS["tiny"])) is kind_named("transformer")
    with pytest.raises(
        ValueError, match=r"Linear: not a model of any kind \(\['captioner', 'transformer'\]\)"
    ):
        model_kind(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown model kind 'rnn'"):
        kind_named("rnn")


def test_the_interface_is_the_declared_one_of_the_config(captioner):
    config = PRESETS["tiny"]
    interface = kind_named("transformer").interface(config)
    assert interface == interface_for("transformer", config.to_dict())
    assert interface.kind == "transformer"
    caption = kind_named("captioner").interface(captioner.config)
    assert caption.kind == "captioner"
    assert "pixels" in caption.encoder.input_names


def test_translator_batches_decode_in_input_order_as_each_source_alone():
    engine = reference_engine(tiny_transformer(seed=4))
    kind = kind_named("transformer")
    sources = random_sources(512, [3, 12, 1], seed=2)
    options = DecodingOptions(max_length=8)
    together = kind.decode(engine, sources, options, 512, 2, CachedInference)
    alone = [kind.decode(engine, [s], options, 512, 1, CachedInference)[0] for s in sources]
    assert len(together) == len(sources)
    assert [n[0].tokens for n in together] == [n[0].tokens for n in alone]
    # sources are cut to max_source: a long source decodes as its cut
    (cut,), (short,) = (
        kind.decode(engine, [source], options, max_source, 1, CachedInference)
        for source, max_source in ((sources[1], 5), (sources[1][:4], 512))
    )
    assert cut[0].tokens == short[0].tokens


def test_translator_encodes_one_source_with_its_end_of_sequence():
    engine = reference_engine(tiny_transformer(seed=4))
    encoder = kind_named("transformer").encode_one(engine, [7, 8, 9], 512)
    assert encoder.memory_mask.tolist() == [[1, 1, 1, 1]]  # the source and </s>
    encoder = kind_named("transformer").encode_one(engine, list(range(4, 20)), 6)
    assert encoder.memory_mask.shape == (1, 6)


def test_captioner_decodes_uint8_images_and_encodes_one(captioner):
    engine = reference_engine(captioner)
    kind = kind_named("captioner")
    rng = np.random.default_rng(0)
    side = captioner.config.image_size
    images = rng.integers(0, 256, size=(3, side, side, 3), dtype=np.uint8)
    options = DecodingOptions(max_length=6)
    nbest = kind.decode(engine, images, options, 0, 2, CachedInference)
    assert len(nbest) == 3 and all(len(n) == 1 for n in nbest)
    alone = kind.decode(engine, images[1:2], options, 0, 1, CachedInference)
    assert nbest[1][0].tokens == alone[0][0].tokens
    encoder = kind.encode_one(engine, images[2], max_source=0)
    cells = (side // 16) ** 2  # strides 2, 2, 2, 2
    assert encoder.memory_mask.shape == (1, cells)
    assert set(encoder.init) == {"past.h", "past.c"}
