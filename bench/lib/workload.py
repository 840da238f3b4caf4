"""The load benchmark's workload: translation requests (a source and a target output length)
and test images, each with its answer decoded in this process one at a time: the reference
the server's answers are checked against."""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from service.runtime.decoding import DecodingOptions
from service.runtime.tokenizer import Tokenizer

SOURCE_PER_TARGET = 1.0  # source tokens wanted per target output token, at least
NEAR, ATTEMPTS = 0.9, 10  # a request's output reaches NEAR x its target; sources tried for it


@dataclass(frozen=True)
class Request:
    text: str
    source_tokens: int
    max_length: int  # the target output length


class Local:
    """A model in this process, answering one request at a time (`answer`)."""

    tokenizer: Tokenizer

    def answer(self, request):
        """The best hypothesis of one request, detokenized as the server does."""
        raise NotImplementedError

    def references(self, pool: list) -> list[dict]:
        """Each request decoded alone, one after the other: seconds, pieces, finished."""
        for request in pool[:4]:  # warm-up: first runs, allocator growth
            self.answer(request)
        results = []
        for request in pool:
            start = time.perf_counter()
            best = self.answer(request)
            seconds = time.perf_counter() - start
            pieces = self.tokenizer.pieces(best.tokens)
            results.append({"seconds": seconds, "pieces": pieces, "finished": best.finished})
        return results


class InProcess(Local):
    """The translator in this process: `OnnxEngine` fp32, one thread, CPU, `translate_ids`."""

    def __init__(self, version):
        from service.runtime.onnx_engine import OnnxEngine

        self.version = version
        self.engine = OnnxEngine(version, "fp32", "cpu", 1)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        self.limit = version.config["max_length"]

    def translate(self, text: str, max_length: int):
        """The best hypothesis of one text, tokenized, decoded greedily and detokenized."""
        from service.runtime.translation import translate_ids

        ids = self.tokenizer.encode(text)
        options = DecodingOptions(max_length=max_length)
        best = translate_ids(self.engine, [ids], options, self.limit)[0][0]
        self.tokenizer.decode(best.tokens)
        return best

    def answer(self, request: Request):
        return self.translate(request.text, request.max_length)


@dataclass(frozen=True)
class Picture:
    png: bytes  # the image as sent
    scene: int  # its index in the test split
    max_length: int  # the model's own: captions end where the model ends them


class InProcessCaptioner(Local):
    """The captioner in this process: the PNG decoded and squeezed to the model's side as the
    server does, then `OnnxEngine` fp32, one thread, CPU, `caption_images`."""

    def __init__(self, version):
        from service.runtime.onnx_engine import OnnxEngine

        self.engine = OnnxEngine(version, "fp32", "cpu", 1)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        self.directory = version.directory
        self.side = version.manifest["preprocessor"]["size"][0]
        self.limit = version.config["max_length"]

    def answer(self, request: Picture):
        from service.runtime.captioning import caption_images
        from service.runtime.images import decode_image, resize_square

        square = resize_square(decode_image(request.png, "image").pixels, self.side)
        options = DecodingOptions(max_length=request.max_length)
        best = caption_images(self.engine, square[None], options)[0][0]
        self.tokenizer.decode(best.tokens)
        return best


def make_pictures(data: Path, count: int, max_length: int, seed: int) -> list[Picture]:
    """`count` distinct test images of the captioner's data (seeded), each encoded as PNG."""
    from PIL import Image

    from models.caption_data import read_scenes

    _, images = read_scenes(data, "test")
    if len(images) < count:
        raise SystemExit(f"{data}: {len(images)} test images, {count} needed")
    pictures = []
    for scene in np.random.default_rng(seed).choice(len(images), count, replace=False):
        encoded = io.BytesIO()
        Image.fromarray(np.asarray(images[scene])).save(encoded, format="PNG")
        pictures.append(Picture(encoded.getvalue(), int(scene), max_length))
    return pictures


def make_pool(lines: list[str], local: InProcess, count: int, targets, seed: int) -> list:
    """`count` requests, each a target length drawn from `targets` (inclusive) and a source
    that reaches it: consecutive verses from a random start, enough of them for the target;
    a source whose greedy output stops before NEAR x target is replaced by another (ATTEMPTS
    at most, then the longest-running one is kept)."""
    rng = np.random.default_rng(seed)
    limit, pool = local.limit - 1, []  # `</s>` is added to the source
    for _ in range(count):
        target = int(rng.integers(targets[0], targets[1] + 1))
        wanted = math.ceil(target * SOURCE_PER_TARGET) + 4
        best = None
        for _attempt in range(ATTEMPTS):
            start, verses = int(rng.integers(len(lines))), []
            while True:
                verses.append(lines[(start + len(verses)) % len(lines)])
                tokens = len(local.tokenizer.encode(" ".join(verses)))
                if tokens >= wanted or len(verses) == len(lines):
                    break
            if tokens > limit:
                continue
            text = " ".join(verses)
            output = len(local.translate(text, target).tokens)
            if best is None or output > best[2]:
                best = (text, tokens, output)
            if output >= NEAR * target:
                break
        if best is None:
            raise ValueError(f"no source of at most {limit} tokens for {target} output tokens")
        pool.append(Request(best[0], best[1], target))
    return pool
