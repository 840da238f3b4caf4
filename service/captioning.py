"""Images in, hypotheses out, over any `Engine`: the captioning pipeline without transport.

The image preprocessing is the model's (its manifest's `preprocessor`): RGB, resized to the
model's square side, scaled to [0, 1], channels first. Normalisation is inside the encoder
graph, so every engine is fed the same pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.decoding import DecodingOptions, Hypothesis, decode
from service.inference import CachedInference, Engine, Inference
from service.tokenizer import BOS_ID, EOS_ID


def pixels(images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """uint8 RGB images (B, H, W, 3) -> float32 pixels (B, 3, H, W) in [0, 1]."""
    batch = np.asarray(images, dtype=np.uint8)
    if batch.ndim != 4 or batch.shape[-1] != 3:
        raise ValueError(f"images must be (B, H, W, 3) RGB, got shape {batch.shape}")
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255)


def resize(image, size: int) -> np.ndarray:
    """A PIL image -> (size, size, 3) uint8 RGB, the whole image squeezed to the square."""
    from PIL import Image

    return np.asarray(image.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.uint8)


def caption_images(
    engine: Engine,
    images: np.ndarray,
    options: DecodingOptions,
    inference_type: type[Inference] = CachedInference,
) -> list[list[Hypothesis]]:
    """Decodes one batch of uint8 images (B, H, W, 3), n-best per image."""
    inference = inference_type(engine, engine.encode(pixels(images)), len(images))
    return decode(inference, len(images), options, BOS_ID, EOS_ID)


def caption_batches(
    engine: Engine,
    images: np.ndarray,
    options: DecodingOptions,
    batch_size: int = 32,
    inference_type: type[Inference] = CachedInference,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every image, in input order, `batch_size` at a time."""
    results: list[list[Hypothesis]] = []
    for start in range(0, len(images), batch_size):
        chunk = np.asarray(images[start : start + batch_size])
        results += caption_images(engine, chunk, options, inference_type)
    return results
