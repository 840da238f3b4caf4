"""The captioning kind: images in, captions out (CaptionService), and the same pipeline in
process over any `Engine`.

The image preprocessing is the model's (its manifest's `preprocessor`): decoded and checked
(service.runtime.images), RGB, squeezed to the model's square side with a bilinear filter, scaled to
[0, 1], channels first. Normalisation is inside the encoder graph, so every engine is fed the
same pixels. Decoding runs on the front's thread pool, never on its event loop: a worker only
ever receives the small (side x side) pixels, and a bad image fails alone at the edge.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from service.runtime.controls import InputControls, with_grammar
from service.runtime.decoding import DecodingOptions, Hypothesis, decode
from service.runtime.images import (
    DecodedImage,
    ImageLimits,
    decode_image,
    decode_images,
    resize_square,
)
from service.runtime.inference import CachedInference, Engine, Inference
from service.runtime.kinds import Prepared, ServedModel
from service.runtime.requests import CaptionRequest
from service.runtime.results import (
    AttentionMaps,
    Caption,
    CaptionResult,
    PartialText,
    TokenAttention,
    TokenCounts,
    total,
)
from service.runtime.tokenizer import Tokenizer

MAX_IMAGES = 64  # images in one Caption request
DECODE_THREADS = 2  # image decoding threads of the front (Pillow releases the GIL)


def pixels(images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """uint8 RGB images (B, H, W, 3) -> float32 pixels (B, 3, H, W) in [0, 1]."""
    batch = np.asarray(images, dtype=np.uint8)
    if batch.ndim != 4 or batch.shape[-1] != 3:
        raise ValueError(f"images must be (B, H, W, 3) RGB, got shape {batch.shape}")
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255)


def check_images(images: Sequence[bytes], problems: list[str]) -> None:
    """Appends the problems of a request's count of images (each image is checked when it is
    decoded)."""
    if not images:
        problems.append("images: at least one image is needed")
    if len(images) > MAX_IMAGES:
        problems.append(f"images: {len(images)} images, at most {MAX_IMAGES} in one request")


def resize(image, size: int) -> np.ndarray:
    """A PIL image -> (size, size, 3) uint8 RGB, the whole image squeezed to the square."""
    return resize_square(np.asarray(image.convert("RGB"), dtype=np.uint8), size)


# -- in process -------------------------------------------------------------------------------


def caption_images(
    engine: Engine,
    images: np.ndarray,
    options: DecodingOptions,
    inference_type: type[Inference] = CachedInference,
    attention: bool = True,
) -> list[list[Hypothesis]]:
    """Decodes one batch of uint8 images (B, H, W, 3), n-best per image (with each step's
    attention unless `attention` is off)."""
    inference = inference_type(engine, engine.encode(pixels=pixels(images)), len(images))
    tokens = engine.special_tokens
    inputs = with_grammar(None, getattr(engine, "grammar", None))
    return decode(inference, len(images), options, tokens.bos, tokens.eos, attention, inputs=inputs)


def caption_batches(
    engine: Engine,
    images: np.ndarray,
    options: DecodingOptions,
    batch_size: int = 32,
    inference_type: type[Inference] = CachedInference,
    attention: bool = True,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every image, in input order, `batch_size` at a time."""
    results: list[list[Hypothesis]] = []
    for start in range(0, len(images), batch_size):
        chunk = np.asarray(images[start : start + batch_size])
        results += caption_images(engine, chunk, options, inference_type, attention)
    return results


# -- served -----------------------------------------------------------------------------------

_executor: ThreadPoolExecutor | None = None


def _decoder_pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="attnserve-image")
    return _executor


class CaptionModel(ServedModel):
    """A captioner behind CaptionService: encoded images in."""

    kind = "captioner"

    def __init__(self, version, config):
        super().__init__(version, config)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        preprocessor = version.manifest["preprocessor"]
        self.side = preprocessor["size"][0]
        self.grid = tuple(preprocessor["grid"])
        self.limits = ImageLimits(
            max_bytes=config.max_image_bytes, max_pixels=config.max_image_pixels
        )

    def _images(self, items: list[tuple[str, bytes]]):
        """(pixels (B, 3, side, side), [(width, height)]) of checked images (thread pool).
        Each image is squeezed as soon as it is decoded: 64 small PNGs of 4096 x 4096 pixels
        would otherwise hold 3 GB at once."""

        def squeezed(image: DecodedImage) -> tuple[np.ndarray, tuple[int, int]]:
            return resize_square(image.pixels, self.side), (image.width, image.height)

        images = decode_images(items, self.limits, squeezed)
        return pixels([square for square, _ in images]), [size for _, size in images]

    async def prepare(self, request: CaptionRequest) -> Prepared:
        """The images decoded and checked on the front's thread pool (one InvalidArgument
        naming every bad image)."""
        items = list(zip(request.fields, request.images, strict=True))
        loop = asyncio.get_running_loop()
        pixel_batch, sizes = await loop.run_in_executor(_decoder_pool(), self._images, items)
        prefix = request.prefix
        return Prepared(
            {"pixels": pixel_batch},
            request.options,
            list(request.fields),
            keep_alignment=request.return_attention,
            keep_log_probs=request.return_log_probs,
            sources=sizes,
            keys=[hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in pixel_batch],
            controls=InputControls(prefixes=(prefix,) * len(items)) if prefix else None,
        )

    def attention(self, h: Hypothesis, size: tuple[int, int]) -> AttentionMaps:
        """The hypothesis' attention over the grid, a map per output token (`</s>` too)."""
        eos = self.special_tokens.eos
        target = h.tokens + ([eos] if h.finished else [])
        cells = self.grid[0] * self.grid[1]
        weights = np.asarray(h.alignment, dtype=np.float64)[: len(target), :cells]
        tokens = zip(self.tokenizer.pieces(target), weights, strict=True)
        return AttentionMaps(
            grid_height=self.grid[0],
            grid_width=self.grid[1],
            image_width=size[0],
            image_height=size[1],
            tokens=tuple(TokenAttention(piece, tuple(row.tolist())) for piece, row in tokens),
        )

    def attended(self, h: Hypothesis, size: tuple[int, int], prepared: Prepared):
        """The hypothesis, with its attention maps when asked for."""
        keep = prepared.keep_alignment and h.alignment is not None
        attention = self.attention(h, size) if keep else None
        return self.hypothesis(h, prepared.keep_log_probs, attention=attention)

    def response(self, prepared: Prepared, results) -> CaptionResult:
        captions = []
        for size, hypotheses in zip(prepared.sources, results, strict=True):
            counts = TokenCounts(
                input_tokens=self.grid[0] * self.grid[1],
                output_tokens=sum(len(h.tokens) for h in hypotheses),
            )
            captions.append(
                Caption(
                    hypotheses=tuple(self.attended(h, size, prepared) for h in hypotheses),
                    token_counts=counts,
                    image_width=size[0],
                    image_height=size[1],
                )
            )
        counts = total([c.token_counts for c in captions])
        return CaptionResult(self.version.name, self.version.version, tuple(captions), counts)

    def partial(self, prepared: Prepared, tokens: list[int], steps: int) -> PartialText:
        pieces = tuple(self.tokenizer.pieces(tokens))
        return PartialText(self.tokenizer.decode(tokens), pieces, steps)

    @staticmethod
    def golden_inputs(version, entry: dict) -> dict[str, np.ndarray]:
        side = version.manifest["preprocessor"]["size"][0]
        data = (version.directory / entry["image"]).read_bytes()
        image = decode_image(data, entry["image"])
        return {"pixels": pixels([resize_square(image.pixels, side)])}


MODEL = CaptionModel
