"""Encoded image bytes from a request -> uint8 RGB pixels, refused with a clear message if bad.

Documented behaviour of `decode_image(data, field, limits)`; every refusal is an InvalidArgument
whose message starts with the field name and a colon, checked in this order:

- empty data: "<field>: empty (no image bytes)".
- more than `limits.max_bytes` bytes: "<field>: N bytes, at most M", before anything is parsed.
- not recognised by Pillow: "<field>: not an image (PNG, JPEG or WebP expected)". This includes a
  header that says width or height 0, which Pillow does not identify: zero-size images are refused.
- a format Pillow reads but not in `limits.formats` (GIF, BMP, TIFF...):
  "<field>: unsupported format GIF (PNG, JPEG or WebP expected)".
- width * height over `limits.max_pixels`, read from the header, before any pixel is decoded:
  "<field>: W x H pixels, at most N (refused before decoding)". Pillow's own limit
  (`Image.MAX_IMAGE_PIXELS`, left untouched) neither warns nor decides: when it refuses a
  header, the image is opened with the plugin that matched to read its size.
- more than one frame (APNG, animated WebP):
  "<field>: animated or multi-frame image (N frames); send one frame". A JPEG that carries
  more images after its own (Pillow's "MPO": a camera's preview or a stereo pair) is a JPEG:
  its first image, the one every viewer shows, is read.
- data that fails to decode: "<field>: truncated or corrupt PNG data (Pillow's reason)" ("image"
  in place of the format when even the header is unreadable). Truncated images are never padded.

Pixel modes, to (height, width, 3) uint8 RGB at the image's own size (a read-only array):

- "RGB" as is. A 16-bit-per-channel PNG (RGB, RGBA, gray + alpha) already reads as 8-bit
  "RGB"/"RGBA"/"LA": Pillow keeps the high byte of each sample (0x80FF -> 0x80).
- "RGBA", "LA", "PA", and any image with a transparency key ("P", "L", "1", "RGB" with tRNS):
  composited over a white background.
- "P", "L", "1", "CMYK", "YCbCr": Pillow's conversion to RGB (CMYK is Pillow's naive formula).
- 16-bit grayscale "I;16", "I;16B", "I;16L": the high byte, value >> 8 (65535 -> 255,
  32768 -> 128, 511 -> 1), as Pillow does for 16-bit RGB; a transparency key there is ignored.
  "I" (32-bit): clipped to 0..65535 first, then the same. No supported format reads as "I" today.
- "F" and any other mode: "<field>: unsupported pixel mode F". No supported format carries "F"
  (PNG and JPEG cannot store it, WebP stores it as RGB), so this is a guard, not a path.

JPEG and WebP: the EXIF orientation is applied (`ImageOps.exif_transpose`), so the pixels are
the image as it is displayed, rotated or mirrored; the other formats' pixels are as stored.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from service.runtime.errors import InvalidArgument

T = TypeVar("T")
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError)
_WIDE_GRAY = ("I;16", "I;16B", "I;16L", "I")
_CONVERTIBLE = ("RGB", "P", "L", "1", "CMYK", "YCbCr")


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 8 * 1024 * 1024  # encoded size
    max_pixels: int = 4096 * 4096  # width * height, checked from the header before decoding
    formats: tuple[str, ...] = ("PNG", "JPEG", "WEBP")


@dataclass(frozen=True)
class DecodedImage:
    pixels: np.ndarray  # (height, width, 3) uint8 RGB, the image at its own size
    width: int
    height: int
    format: str  # "PNG", "JPEG", "WEBP"
    mode: str  # the mode before conversion, e.g. "RGB", "CMYK", "P", "I;16"


def _expected(formats: tuple[str, ...]) -> str:
    names = [{"WEBP": "WebP"}.get(name, name) for name in formats]
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _open(data: bytes) -> Image.Image:
    """Image.open (lazy: the header only), without Pillow's pixel limit or its warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data))
        except Image.DecompressionBombError:
            pass
    for name in Image.ID:  # as Image.open does, less its size check: ours is the caller's
        factory, accept = Image.OPEN[name]
        matched = not accept or accept(data[:16])
        if matched and not isinstance(matched, str):
            try:
                return factory(io.BytesIO(data), "")
            except SyntaxError:
                continue
    raise UnidentifiedImageError("no plugin opens it")


def _to_rgb(im: Image.Image, field: str) -> np.ndarray:
    if im.mode in _WIDE_GRAY:
        values = np.asarray(im).astype(np.int64)
        gray = (np.clip(values, 0, 65535) >> 8).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if im.mode in ("RGBA", "LA", "PA") or (im.mode in _CONVERTIBLE and "transparency" in im.info):
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(white, im.convert("RGBA")).convert("RGB"))
    if im.mode in _CONVERTIBLE:
        return np.asarray(im.convert("RGB"))
    raise InvalidArgument(f"{field}: unsupported pixel mode {im.mode}")


def decode_image(data: bytes, field: str, limits: ImageLimits = ImageLimits()) -> DecodedImage:
    """Encoded bytes -> DecodedImage, or InvalidArgument("<field>: ..."); see the module doc."""
    if not data:
        raise InvalidArgument(f"{field}: empty (no image bytes)")
    if len(data) > limits.max_bytes:
        raise InvalidArgument(f"{field}: {len(data)} bytes, at most {limits.max_bytes}")
    expected = _expected(limits.formats)
    try:
        opened = _open(data)
    except UnidentifiedImageError:
        raise InvalidArgument(f"{field}: not an image ({expected} expected)") from None
    except Image.DecompressionBombError as error:  # a plugin's own header check (WebP)
        raise InvalidArgument(
            f"{field}: too many pixels, refused before decoding ({error})"
        ) from None
    except _DECODE_ERRORS as error:
        raise InvalidArgument(f"{field}: truncated or corrupt image data ({error})") from None
    with opened as im:
        form = "JPEG" if im.format == "MPO" else im.format  # a JPEG, more images after it
        if form not in limits.formats:
            raise InvalidArgument(f"{field}: unsupported format {im.format} ({expected} expected)")
        width, height = im.size
        if width * height > limits.max_pixels:
            raise InvalidArgument(
                f"{field}: {width} x {height} pixels, at most {limits.max_pixels}"
                " (refused before decoding)"
            )
        frames = getattr(im, "n_frames", 1)
        if im.format != "MPO" and (frames > 1 or getattr(im, "is_animated", False)):
            raise InvalidArgument(
                f"{field}: animated or multi-frame image ({frames} frames); send one frame"
            )
        try:
            im.load()
            shown = ImageOps.exif_transpose(im) if form in ("JPEG", "WEBP") else im
            pixels = _to_rgb(shown, field)
        except _DECODE_ERRORS as error:
            raise InvalidArgument(f"{field}: truncated or corrupt {form} data ({error})") from None
        pixels.setflags(write=False)
        return DecodedImage(pixels, pixels.shape[1], pixels.shape[0], form, im.mode)


def resize_square(image: np.ndarray, side: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (side, side, 3) uint8: the whole image squeezed to the square with
    Pillow's bilinear filter (Image.BILINEAR), no crop — the same as
    `np.asarray(Image.fromarray(image).resize((side, side), Image.BILINEAR))`."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or side < 1:
        raise ValueError(f"expected (H, W, 3) uint8 and side >= 1, got {image.shape} {image.dtype}")
    return np.asarray(Image.fromarray(image).resize((side, side), Image.BILINEAR))


def decode_images(
    items: list[tuple[str, bytes]],
    limits: ImageLimits = ImageLimits(),
    each: Callable[[DecodedImage], T] | None = None,
) -> list[T] | list[DecodedImage]:
    """Decodes every (field, data), in order; collects every problem and raises ONE
    InvalidArgument whose message joins them with '; ' (so a client learns every bad image at
    once). `each`, when given, takes every image as soon as it is decoded and its result is
    kept in place of the image: a caller that shrinks the pixels there holds one full-size
    image at a time, not a request's every one."""
    kept: list = []
    problems: list[str] = []
    for field, data in items:
        try:
            decoded = decode_image(data, field, limits)
        except InvalidArgument as error:
            problems.append(str(error))
            continue
        kept.append(decoded if each is None else each(decoded))
    if problems:
        raise InvalidArgument("; ".join(problems))
    return kept
