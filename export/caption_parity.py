"""The captioner's parity: its graph-level cases and its whole-decode claims.

Graph level, both graphs on shapes other than the export's. Encoder: batches of 1, 3 and 16
real-looking images (random pixels, and flat ones). Decoder: random states and grids from the
encoder of random images, at the same batches, with a memory mask that hides the last
locations of every row but the first (a padded memory must be ignored exactly as in PyTorch).
Whole decodes: ORT fp32 greedy and beam 4 equal PyTorch; a row alone equals the row in a
padded batch; the attention maps of identical decodes are within MAX_ATTENTION_DIFFERENCE;
int8 loses at most MAX_CAPTION_INT8_LOSS exact-match and CIDEr points over the whole test
split (export.kinds.CaptionerExport.parity_inputs; an LSTM's state is its own recurrence: there
is no uncached form).

Why the whole split: one caption is about 4 CIDEr points of 200 images, so on the
certificate's 200 a single changed caption breaks a 1-point bound, and whether one changes is
chance (every int8 form tried changes 0.2-3% of captions, at fp32 margins of 0.01-0.6 logits,
about as often for the better as for the worse). Over the split's 1,600 a caption is 0.5
points and the claim measures int8's loss, not one image's luck.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import torch

from export.comparison import BATCHES, Tolerance, compare
from export.decode_parity import (
    ParityInputs,
    attention_difference,
    caption_quality_loss,
    compare_decodes,
    decode_all,
)
from export.graphs import CaptionEncoderGraph, CaptionStepGraph
from models.captioner import Captioner
from models.reference import reference_engine
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine

MASKED_LOCATIONS = (0, 5)  # locations hidden at the end of rows after the first
MAX_CAPTION_INT8_LOSS = 1.0  # exact-match and CIDEr points, over the whole test split
MAX_ATTENTION_DIFFERENCE = 1e-4  # fp32, any weight of any step


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


def graph_cases(model: Captioner, engine: OnnxEngine, tol: Tolerance, encoder: bool = True):
    """Every comparison of the encoder (unless `encoder` is off) and of the decoder step."""
    return [
        *(encoder_cases(model, engine, tol) if encoder else ()),
        *decoder_cases(model, engine, tol),
    ]


def decode_certificate(model, tokenizer, model_version, inputs: ParityInputs) -> dict:
    """The captioner's whole-decode claims on the inputs' uint8 images with their reference
    captions (parts are not used: int8's bound holds over all the images), the int8 claim on
    `inputs.int8` where given (MAX_CAPTION_INT8_LOSS)."""
    images = inputs.sources
    fp32 = OnnxEngine(model_version, "fp32")
    torch_engine = reference_engine(model, grammar=fp32.grammar)  # the version's, if any
    greedy = DecodingOptions(beam_size=1, max_length=model.config.max_length)
    beam = DecodingOptions(beam_size=4, max_length=model.config.max_length)
    torch_greedy = decode_all(torch_engine, images, greedy, 0)
    fp32_greedy = decode_all(fp32, images, greedy, 0)
    reports = [
        compare_decodes(
            torch_engine,
            fp32,
            images,
            greedy,
            0,
            "onnxruntime fp32 greedy vs pytorch",
            expected=torch_greedy,
            actual=fp32_greedy,
        ),
        compare_decodes(torch_engine, fp32, images, beam, 0, "onnxruntime fp32 beam4 vs pytorch"),
        compare_decodes(
            fp32,
            fp32,
            images,
            greedy,
            0,
            "onnxruntime batch vs alone",
            expected=fp32_greedy,
            batch=1,
        ),
    ]
    certificate = {
        "decodes": [r.to_dict() for r in reports],
        "attention": _attention(torch_greedy, fp32_greedy),
    }
    if "int8" in model_version.manifest["graphs"]:
        int8_images, int8_references, baseline = inputs.int8_claim(fp32, fp32_greedy, greedy, 0)
        int8 = decode_all(OnnxEngine(model_version, "int8"), int8_images, greedy, 0)
        certificate["int8_vs_fp32"] = _int8_loss(tokenizer, int8_references, baseline, int8)
    return certificate


def _attention(torch_greedy, fp32_greedy) -> dict:
    """The attention difference of identical decodes; passed if within the bound."""
    attention = attention_difference(torch_greedy, fp32_greedy)
    attention["bound"] = MAX_ATTENTION_DIFFERENCE
    attention["passed"] = attention["max_abs"] <= MAX_ATTENTION_DIFFERENCE
    return attention


def _int8_loss(tokenizer, references, fp32_greedy, int8_greedy) -> dict:
    """int8's exact-match and CIDEr loss against fp32; passed if each is within
    MAX_CAPTION_INT8_LOSS."""
    loss = caption_quality_loss(tokenizer, references, fp32_greedy, int8_greedy)
    loss["passed"] = (
        loss["exact_match_loss"] <= MAX_CAPTION_INT8_LOSS
        and loss["cider_loss"] <= MAX_CAPTION_INT8_LOSS
    )
    return loss
