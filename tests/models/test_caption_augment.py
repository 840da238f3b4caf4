"""Augmentation inside training steps (models.caption_augment): random convolutions restyle
the chosen images only and keep them in range; MixStyle changes features in training only and
leaves the model's weights and its eval-mode outputs as they are."""

from __future__ import annotations

import torch

from models.caption_augment import add_mixstyle, rand_conv
from models.captioner import Captioner
from models.config import CAPTIONER_PRESETS


def test_rand_conv_restyles_the_chosen_share_within_range():
    pixels = torch.rand(64, 3, 24, 24)
    out = rand_conv(pixels, 0.5, torch.Generator().manual_seed(0))
    changed = (out - pixels).abs().flatten(1).amax(1) > 1e-4
    assert 16 <= int(changed.sum()) <= 48  # about half
    assert torch.equal(out[~changed], pixels[~changed])
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    assert torch.equal(rand_conv(pixels, 0.0, torch.Generator()), pixels)
    again = rand_conv(pixels, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)  # the generator decides


def test_mixstyle_acts_in_training_only_and_adds_no_weights():
    torch.manual_seed(0)
    model = Captioner(CAPTIONER_PRESETS["tiny"])
    keys = set(model.state_dict())
    pixels = torch.rand(8, 3, model.config.image_size, model.config.image_size)
    model.eval()
    before = model.encoder(pixels)
    handles = add_mixstyle(model.encoder.layers, 2, 1.0, torch.Generator().manual_seed(0))
    assert set(model.state_dict()) == keys
    assert torch.equal(model.encoder(pixels), before)  # eval: untouched
    model.train()
    trained = model.encoder(pixels)
    for handle in handles:
        handle.remove()
    plain = model.encoder(pixels)  # batch norm in training mode on both sides
    assert not torch.allclose(trained, plain, atol=1e-4)
