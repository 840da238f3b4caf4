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

from service.runtime import requests
from service.runtime.controls import InputControls
from service.runtime.decoding import DecodingOptions, Hypothesis, decode
from service.runtime.errors import InvalidArgument
from service.runtime.images import ImageLimits, decode_image, decode_images, resize_square
from service.runtime.inference import CachedInference, Engine, Inference
from service.runtime.kinds import Prepared, ServedModel
from service.runtime.tokenizer import Tokenizer

MAX_IMAGES = 64  # images in one Caption request
DECODE_THREADS = 2  # image decoding threads of the front (Pillow releases the GIL)


def pixels(images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """uint8 RGB images (B, H, W, 3) -> float32 pixels (B, 3, H, W) in [0, 1]."""
    batch = np.asarray(images, dtype=np.uint8)
    if batch.ndim != 4 or batch.shape[-1] != 3:
        raise ValueError(f"images must be (B, H, W, 3) RGB, got shape {batch.shape}")
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255)


def resize(image, size: int) -> np.ndarray:
    """A PIL image -> (size, size, 3) uint8 RGB, the whole image squeezed to the square."""
    return resize_square(np.asarray(image.convert("RGB"), dtype=np.uint8), size)


# -- in process -------------------------------------------------------------------------------


def caption_images(
    engine: Engine,
    images: np.ndarray,
    options: DecodingOptions,
    inference_type: type[Inference] = CachedInference,
) -> list[list[Hypothesis]]:
    """Decodes one batch of uint8 images (B, H, W, 3), n-best per image."""
    inference = inference_type(engine, engine.encode(pixels=pixels(images)), len(images))
    tokens = engine.special_tokens
    return decode(inference, len(images), options, tokens.bos, tokens.eos)


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
    service = "attnserve.v1.CaptionService"

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
        """(pixels (B, 3, side, side), [(width, height)]) of checked images (thread pool)."""
        decoded = decode_images(items, self.limits)
        squares = [resize_square(d.pixels, self.side) for d in decoded]
        return pixels(squares), [(d.width, d.height) for d in decoded]

    async def prepare(self, request, stream: bool) -> Prepared:
        if stream:
            items = [("image", request.image)]
        else:
            items = [(f"images[{i}]", data) for i, data in enumerate(request.images)]
        problems = []
        if not items:
            problems.append("images: at least one image is needed")
        if len(items) > MAX_IMAGES:
            problems.append(f"images: {len(items)} images, at most {MAX_IMAGES} in one request")
        prefix: tuple[int, ...] = ()
        try:
            options = requests.decoding_options(
                request.options,
                self.max_output_length,
                self.default_max_length,
                self.tokenizer.encode,
            )
            prefix = requests.target_prefix(
                request.options, self.tokenizer.encode, options.max_length
            )
        except InvalidArgument as error:
            problems.append(str(error))
        if problems:
            raise InvalidArgument("; ".join(problems))
        loop = asyncio.get_running_loop()
        pixel_batch, sizes = await loop.run_in_executor(_decoder_pool(), self._images, items)
        return Prepared(
            {"pixels": pixel_batch},
            options,
            [field for field, _ in items],
            keep_alignment=request.return_attention,
            keep_log_probs=request.options.return_log_probs,
            sources=sizes,
            keys=[hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in pixel_batch],
            controls=InputControls(prefixes=(prefix,) * len(items)) if prefix else None,
        )

    def attended(self, h: Hypothesis, size: tuple[int, int], request):
        """The hypothesis message, with its attention maps when asked for."""
        message = self.hypothesis(h, request.options.return_log_probs)
        if request.return_attention and h.alignment is not None:
            eos = self.special_tokens.eos
            target = h.tokens + ([eos] if h.finished else [])
            cells = self.grid[0] * self.grid[1]
            weights = np.asarray(h.alignment, dtype=np.float64)[: len(target), :cells]
            maps = message.attention
            maps.grid_height, maps.grid_width = self.grid
            maps.image_width, maps.image_height = size
            for piece, row in zip(self.tokenizer.pieces(target), weights, strict=True):
                maps.tokens.add(token=piece, weights=row.tolist())
        return message

    def response(self, prepared: Prepared, results, request):
        from attnserve.v1 import caption_pb2

        response = caption_pb2.CaptionResponse(
            model=self.version.name, version=self.version.version
        )
        for size, hypotheses in zip(prepared.sources, results, strict=True):
            caption = response.captions.add(image_width=size[0], image_height=size[1])
            caption.hypotheses.extend(self.attended(h, size, request) for h in hypotheses)
            caption.token_counts.input_tokens = self.grid[0] * self.grid[1]
            caption.token_counts.output_tokens = sum(len(h.tokens) for h in hypotheses)
            response.token_counts.input_tokens += caption.token_counts.input_tokens
            response.token_counts.output_tokens += caption.token_counts.output_tokens
        return response

    def partial(self, prepared: Prepared, tokens: list[int], steps: int):
        from attnserve.v1 import caption_pb2

        partial = caption_pb2.PartialCaption(
            text=self.tokenizer.decode(tokens), tokens=self.tokenizer.pieces(tokens), steps=steps
        )
        return caption_pb2.CaptionStreamResponse(partial=partial)

    def final(self, response):
        from attnserve.v1 import caption_pb2

        return caption_pb2.CaptionStreamResponse(result=response)

    @staticmethod
    def golden_inputs(version, entry: dict) -> dict[str, np.ndarray]:
        side = version.manifest["preprocessor"]["size"][0]
        data = (version.directory / entry["image"]).read_bytes()
        image = decode_image(data, entry["image"])
        return {"pixels": pixels([resize_square(image.pixels, side)])}


MODEL = CaptionModel
