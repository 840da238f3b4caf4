"""Graph-level parity cases of the captioner: both graphs on shapes other than the export's.

Encoder: batches of 1, 3 and 16 real-looking images (random pixels, and flat ones). Decoder:
random states and grids from the encoder of random images, at the same batches, with a memory
mask that hides the last locations of every row but the first (a padded memory must be
ignored exactly as in PyTorch).
"""

from __future__ import annotations

from itertools import product

import numpy as np
import torch

from export.comparison import BATCHES, Tolerance, compare
from export.graphs import CaptionEncoderGraph, CaptionStepGraph
from models.captioner import Captioner
from service.runtime.onnx_engine import OnnxEngine

MASKED_LOCATIONS = (0, 5)  # locations hidden at the end of rows after the first


def _pixels(config, batch: int, rng: np.random.Generator, flat: bool) -> np.ndarray:
    shape = (batch, 3, config.image_size, config.image_size)
    if flat:  # one colour per image: features with no edges at all
        return np.broadcast_to(rng.random((batch, 3, 1, 1)), shape).astype(np.float32)
    return rng.random(shape, dtype=np.float32)


def encoder_cases(model: Captioner, engine: OnnxEngine, tol: Tolerance, seed: int = 0):
    rng = np.random.default_rng(seed)
    for batch, flat in product(BATCHES, (False, True)):
        pixels = _pixels(model.config, batch, rng, flat)
        with torch.no_grad():
            expected = CaptionEncoderGraph(model)(torch.from_numpy(pixels).to(_dtype(model)))
        actual = engine.encoder.run(None, {"pixels": pixels.astype(engine.float_dtype)})
        case = f"batch={batch} flat={flat}"
        for name, e, a in zip(engine.encoder_spec.output_names, expected, actual, strict=True):
            yield compare("encoder", name, case, e.float().numpy(), a, tol)


def _dtype(model: Captioner) -> torch.dtype:
    return next(model.parameters()).dtype


def decoder_cases(model: Captioner, engine: OnnxEngine, tol: Tolerance, seed: int = 0):
    config, rng = model.config, np.random.default_rng(seed)
    dtype = engine.float_dtype
    for batch, masked in product(BATCHES, MASKED_LOCATIONS):
        pixels = torch.from_numpy(_pixels(config, batch, rng, False)).to(_dtype(model))
        with torch.no_grad():
            grid, projection, mask, _ = model.encode(pixels)
        mask = mask.numpy().copy()
        if masked:
            mask[1:, -masked:] = 0
        inputs = [
            rng.integers(4, config.vocab_size, size=(batch, 1)),
            rng.standard_normal((batch, config.hidden_dim)).astype(dtype),
            rng.standard_normal((batch, config.hidden_dim)).astype(dtype),
            grid.float().numpy().astype(dtype),
            projection.float().numpy().astype(dtype),
            mask,
        ]
        actual = engine.decoder.run(
            None, dict(zip(engine.decoder_spec.input_names, inputs, strict=True))
        )
        tensors = [torch.from_numpy(np.asarray(x)) for x in inputs]
        with torch.no_grad():
            expected = CaptionStepGraph(model)(*tensors)
        case = f"batch={batch} masked={masked}"
        for name, e, a in zip(engine.decoder_spec.output_names, expected, actual, strict=True):
            yield compare("decoder", name, case, e.float().numpy(), a, tol)
