"""Augmentation inside the captioner's training steps: styles scrambled, shapes kept.

Two methods from the literature on generalising to unseen styles, both in training only (the
shipped model and its graphs are the same with or without them):

- random convolutions (RandConv, Xu et al. 2021): a share of a batch's images passed through a
  convolution of random weights (a kernel of 1, 3 or 5 pixels), rescaled to the image's own
  mean and spread per channel and blended with the image by a random weight. A small kernel
  keeps edges where they are and changes colours and local texture: the object's shape is all
  that stays the same.
- MixStyle (Zhou et al. 2021): after the encoder's first stages, each image's per-channel
  feature mean and spread are blended with those of another image of the batch (weights from
  Beta(0.1, 0.1)). A batch mixes scenes of many artwork families, so the style statistics of
  one family are put on the content of another.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

RAND_CONV_KERNELS = (1, 3, 5)
MIXSTYLE_ALPHA = 0.1  # Beta(alpha, alpha): most mixes near one end, some halfway
EPS = 1e-6


def rand_conv(pixels: Tensor, share: float, generator: torch.Generator) -> Tensor:
    """pixels (B, 3, H, W) in [0, 1] with `share` of the images (chosen at random) restyled
    by a random convolution; the others untouched."""
    if share <= 0:
        return pixels
    chosen = torch.rand(len(pixels), generator=generator) < share
    if not chosen.any():
        return pixels
    out = pixels.clone()
    for i in torch.nonzero(chosen).flatten().tolist():
        k = RAND_CONV_KERNELS[int(torch.randint(len(RAND_CONV_KERNELS), (1,), generator=generator))]
        weight = torch.randn(3, 3, k, k, generator=generator) / (3 * k * k) ** 0.5
        image = pixels[i : i + 1]
        styled = F.conv2d(image - 0.5, weight.to(image), padding=k // 2)
        mean, std = image.mean((2, 3), keepdim=True), image.std((2, 3), keepdim=True)
        spread = styled.std((2, 3), keepdim=True) + EPS
        styled = (styled - styled.mean((2, 3), keepdim=True)) / spread * (std + 0.1) + mean
        blend = float(torch.rand((), generator=generator))
        out[i : i + 1] = (blend * image + (1 - blend) * styled).clamp(0, 1)
    return out


class MixStyle(nn.Module):
    """Feature statistics mixed across a batch's images, with probability `p` a batch, in
    training only."""

    def __init__(self, p: float, generator: torch.Generator):
        super().__init__()
        self.p, self.generator = p, generator
        self.beta = torch.distributions.Beta(MIXSTYLE_ALPHA, MIXSTYLE_ALPHA)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, C, H, W)."""
        if (
            not self.training
            or len(x) < 2
            or float(torch.rand((), generator=self.generator)) > self.p
        ):
            return x
        mean = x.mean((2, 3), keepdim=True)
        std = (x.var((2, 3), keepdim=True) + EPS).sqrt()
        mean, std = mean.detach(), std.detach()
        normed = (x - mean) / std
        order = torch.randperm(len(x), generator=self.generator)
        weight = self.beta.sample((len(x), 1, 1, 1)).to(x)
        mixed_mean = weight * mean + (1 - weight) * mean[order]
        mixed_std = weight * std + (1 - weight) * std[order]
        return normed * mixed_std + mixed_mean


def add_mixstyle(
    encoder_layers: nn.Sequential, stages: int, p: float, generator: torch.Generator
) -> list:
    """MixStyle after each of the encoder's first `stages` stages (six modules a stage:
    convolution, norm, ReLU, twice), as forward hooks drawing from `generator`; returns the
    hooks' handles."""
    handles = []
    for stage in range(stages):
        mix = MixStyle(p, generator)
        last = encoder_layers[6 * stage + 5]

        def hook(module, inputs, output, mix=mix):
            mix.train(module.training)
            return mix(output)

        handles.append(last.register_forward_hook(hook))
    return handles
