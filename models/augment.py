"""What varies in a scene besides its objects and layout, so that a caption survives it.

An object's `Look` (mirrored, turned a little, its colours shifted a little, grey, outlined
like a sticker) is drawn with the scene and kept in its record: the look changes the object's
extent, so the layout uses the styled picture, and rendering the record again gives the same
pixels. Mirroring an object never changes a caption (the caption's left and right are where
objects are, not where they face); the hue moves too little to turn a red apple green, and
no object told apart by its colour alone is made grey.

A scene's background (plain, gradient, noise, stripes, checks, dots, smooth and blotched
textures) and its last touches (grey, blur, noise) are drawn when it is rendered.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np
from PIL import Image, ImageFilter

from models.artwork import crop_visible

BACKGROUNDS = 8


@dataclass(frozen=True)
class Look:
    """How one object is drawn: all defaults, the artwork as it is."""

    flip: bool = False  # mirrored left to right
    angle: float = 0.0  # degrees, counter-clockwise
    hue: float = 0.0  # shift, a fraction of the colour circle
    saturation: float = 1.0
    brightness: float = 1.0
    grey: bool = False
    outline: int = 0  # pixels of a sticker-like border, 0 for none
    outline_light: bool = True  # white border, else black

    @classmethod
    def sample(cls, rng: np.random.Generator, colour_free: bool) -> Look:
        """A random look; `colour_free` when the object's name needs no colour to be true."""
        jitter = rng.random() < 0.5
        outline = int(rng.integers(1, 3)) if rng.random() < 0.15 else 0
        return cls(
            flip=bool(rng.random() < 0.5),
            angle=float(np.clip(rng.normal(0, 8), -20, 20)) if rng.random() < 0.5 else 0.0,
            hue=float(rng.uniform(-0.04, 0.04)) if jitter else 0.0,
            saturation=float(rng.uniform(0.6, 1.3)) if jitter else 1.0,
            brightness=float(rng.uniform(0.75, 1.2)) if jitter else 1.0,
            grey=bool(colour_free and rng.random() < 0.1),
            outline=outline,
            outline_light=bool(rng.random() < 0.6),
        )

    def to_list(self) -> list:
        return list(astuple(self))

    @classmethod
    def from_list(cls, values: list | None) -> Look:
        return cls() if not values else cls(*values)


def _colours(rgb: np.ndarray, look: Look) -> np.ndarray:
    """(H, W, 3) float in [0, 255] with the look's hue, saturation, brightness and grey."""
    if look.hue:
        hsv = np.asarray(Image.fromarray(rgb.astype(np.uint8)).convert("HSV"), np.float32)
        hsv[..., 0] = (hsv[..., 0] + 255 * look.hue) % 255
        rgb = np.asarray(Image.fromarray(hsv.astype(np.uint8), "HSV").convert("RGB"), np.float32)
    grey = rgb @ np.array([0.299, 0.587, 0.114], np.float32)
    saturation = 0.0 if look.grey else look.saturation
    rgb = grey[..., None] + saturation * (rgb - grey[..., None])
    return np.clip(rgb * look.brightness, 0, 255)


def styled(image: Image.Image, look: Look) -> Image.Image:
    """The RGBA picture drawn with `look`, cropped to its visible pixels."""
    if look == Look():
        return image
    if look.flip:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    pixels = np.asarray(image, np.float32)
    rgb = _colours(pixels[..., :3], look)
    image = Image.fromarray(np.dstack([rgb, pixels[..., 3]]).astype(np.uint8), "RGBA")
    if look.angle:
        image = image.rotate(look.angle, Image.BICUBIC, expand=True)
    if look.outline:
        pad = look.outline + 1
        framed = Image.new("RGBA", (image.width + 2 * pad, image.height + 2 * pad))
        framed.paste(image, (pad, pad))
        alpha = framed.getchannel("A").filter(ImageFilter.MaxFilter(2 * look.outline + 1))
        colour = (255, 255, 255) if look.outline_light else (20, 20, 20)
        border = Image.new("RGBA", framed.size, (*colour, 255))
        border.putalpha(alpha)
        border.alpha_composite(framed)
        image = border
    return crop_visible(image) or image


def background(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random (n, n, 3) uint8 background in two random colours: plain, gradient, noise,
    stripes, checks, dots, a smooth field or blotches."""
    a, b = rng.integers(0, 256, size=(2, 3)).astype(np.float32)
    y, x = np.mgrid[0:n, 0:n].astype(np.float32) / (n - 1)
    kind = rng.integers(0, BACKGROUNDS)
    if kind == 0:
        t = np.zeros((n, n), np.float32)
    elif kind == 1:
        angle = rng.uniform(0, 2 * np.pi)
        t = (np.cos(angle) * x + np.sin(angle) * y) / 2 + 0.5
    elif kind == 2:
        t = rng.uniform(0, 0.35, size=(n, n)).astype(np.float32)
    elif kind == 3:
        period = rng.integers(6, 20)
        t = ((x * n + (y * n if rng.random() < 0.5 else 0)) // period % 2).astype(np.float32)
    elif kind == 4:
        period = rng.integers(8, 24)
        t = ((x * n // period + y * n // period) % 2).astype(np.float32)
    elif kind == 5:
        period = rng.integers(8, 16)
        dx, dy = (x * n % period) - period / 2, (y * n % period) - period / 2
        t = (dx**2 + dy**2 < (period / 4) ** 2).astype(np.float32)
    elif kind == 6:  # a smooth field, like paper or cloth
        cells = int(rng.integers(3, 9))
        coarse = rng.uniform(0, 1, size=(cells, cells)).astype(np.float32)
        t = np.asarray(Image.fromarray(coarse, "F").resize((n, n), Image.BICUBIC))
        t = t + rng.normal(0, 0.04, size=(n, n)).astype(np.float32)
    else:  # blotches of a third colour
        c = rng.integers(0, 256, size=3).astype(np.float32)
        field = np.zeros((n, n), np.float32)
        for _ in range(int(rng.integers(4, 12))):
            cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.2)
            field = np.maximum(field, ((x - cx) ** 2 + (y - cy) ** 2 < r**2).astype(np.float32))
        blurred = Image.fromarray(field * 255).convert("L").filter(ImageFilter.GaussianBlur(2))
        t = np.asarray(blurred, np.float32) / 255
        image = a + (b - a) * (x[..., None] * 0.5) + (c - a) * t[..., None]
        return np.clip(image, 0, 255).astype(np.uint8)
    image = a + (b - a) * np.clip(t, 0, 1)[..., None]
    return np.clip(image, 0, 255).astype(np.uint8)


def finish(image: np.ndarray, rng: np.random.Generator, colour_free: bool) -> np.ndarray:
    """The rendered scene (H, W, 3) uint8 with its last touches: grey (only when no object
    needs its colour), blur, noise; each now and then."""
    if colour_free and rng.random() < 0.08:
        grey = image.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
        image = np.repeat(grey[..., None], 3, axis=2).astype(np.uint8)
    if rng.random() < 0.2:
        radius = float(rng.uniform(0.3, 1.0))
        image = np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(radius)))
    if rng.random() < 0.2:
        noise = rng.normal(0, rng.uniform(2, 10), size=image.shape)
        image = np.clip(image + noise, 0, 255).astype(np.uint8)
    return image
