"""What varies in a scene besides its objects and layout, so that a caption survives it.

An object's `Look` (mirrored, turned a little, its colours shifted a little, grey, outlined
like a sticker) is drawn with the scene and kept in its record: the look changes the object's
extent, so the layout uses the styled picture, and rendering the record again gives the same
pixels. Mirroring an object never changes a caption (the caption's left and right are where
objects are, not where they face); the hue moves too little to turn a red apple green, and
no object told apart by its colour alone is made grey.

Training scenes also draw styles that keep an object's shape and change how it is drawn, so
that a model learns the object rather than one family's way of drawing it (`STYLES`): its
colours swapped for others, posterised, reduced to a few flat colours, or the object drawn as
its dark lines alone. A swap or lines only come to an object that needs no colour to be named.

A scene's background (plain, gradient, noise, stripes, checks, dots, smooth and blotched
textures) and its last touches (grey, blur, noise) are drawn when it is rendered.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace
from itertools import permutations

import numpy as np
from PIL import Image, ImageFilter, ImageOps

from models.artwork import crop_visible

BACKGROUNDS = 8
CHANNELS = tuple(permutations(range(3)))  # orders of (R, G, B); the first keeps them
LINE_COLOUR = (20, 20, 20)
LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # brightness of (R, G, B)
# How often a training object gets each style (independent draws, so they combine now and
# then): about half of the objects keep their family's own look.
STYLES = {"palette": 0.15, "posterise": 0.1, "flat": 0.15, "lines": 0.1}


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
    # The styles of training scenes (`STYLES`); records without them read as their defaults.
    channels: int = 0  # the order of the colour channels, an index into CHANNELS
    posterise: int = 0  # bits kept of each channel, 0 for all
    flat: int = 0  # flat colours the object is reduced to, 0 for its own
    lines: int = 0  # drawn as its dark lines: 1 on a white fill, 2 on nothing; 0 not

    @classmethod
    def sample(cls, rng: np.random.Generator, colour_free: bool, styles: bool = False) -> Look:
        """A random look; `colour_free` when the object's name needs no colour to be true;
        `styles` (training scenes) adds the shape-keeping styles, drawn after the rest."""
        jitter = rng.random() < 0.5
        outline = int(rng.integers(1, 3)) if rng.random() < 0.15 else 0
        look = cls(
            flip=bool(rng.random() < 0.5),
            angle=float(np.clip(rng.normal(0, 8), -20, 20)) if rng.random() < 0.5 else 0.0,
            hue=float(rng.uniform(-0.04, 0.04)) if jitter else 0.0,
            saturation=float(rng.uniform(0.6, 1.3)) if jitter else 1.0,
            brightness=float(rng.uniform(0.75, 1.2)) if jitter else 1.0,
            grey=bool(colour_free and rng.random() < 0.1),
            outline=outline,
            outline_light=bool(rng.random() < 0.6),
        )
        return look.with_styles(rng, colour_free) if styles else look

    def with_styles(self, rng: np.random.Generator, colour_free: bool) -> Look:
        """This look with random styles drawn at the rates of `STYLES`: a palette swap (its
        channels reordered, half of the time its hue turned far) and lines only when
        `colour_free`."""
        drawn = {name: bool(rng.random() < rate) for name, rate in STYLES.items()}
        look = self
        if drawn["palette"] and colour_free:
            channels = int(rng.integers(1, len(CHANNELS)))
            hue = float(rng.uniform(0.2, 0.8)) if rng.random() < 0.5 else self.hue
            look = replace(look, channels=channels, hue=hue)
        if drawn["posterise"]:
            look = replace(look, posterise=int(rng.integers(2, 4)))
        if drawn["flat"]:
            look = replace(look, flat=int(rng.integers(4, 9)))
        if drawn["lines"] and colour_free:
            look = replace(look, lines=int(rng.integers(1, 3)))
        return look

    def to_list(self) -> list:
        return list(astuple(self))

    @classmethod
    def from_list(cls, values: list | None) -> Look:
        return cls() if not values else cls(*values)


def _colours(rgb: np.ndarray, look: Look) -> np.ndarray:
    """(H, W, 3) float in [0, 255] with the look's channel order, hue, saturation, brightness
    and grey."""
    if look.channels:
        rgb = rgb[..., list(CHANNELS[look.channels])]
    if look.hue:
        hsv = np.asarray(Image.fromarray(rgb.astype(np.uint8)).convert("HSV"), np.float32)
        hsv[..., 0] = (hsv[..., 0] + 255 * look.hue) % 255
        rgb = np.asarray(Image.fromarray(hsv.astype(np.uint8), "HSV").convert("RGB"), np.float32)
    grey = rgb @ LUMA
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
    if look.flat:
        image = _flat(image, look.flat)
    if look.posterise:
        posterised = ImageOps.posterize(image.convert("RGB"), look.posterise)
        posterised.putalpha(image.getchannel("A"))
        image = posterised
    if look.lines:
        image = _lines(image, filled=look.lines == 1)
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


def _flat(image: Image.Image, colours: int) -> Image.Image:
    """The RGBA picture in `colours` flat colours (`_clusters`)."""
    pixels = np.asarray(image)
    found = _clusters(pixels, colours)
    if found is None:
        return image
    labels, centres = found
    flat = np.dstack([np.round(centres[labels]), pixels[..., 3]]).astype(np.uint8)
    return Image.fromarray(flat, "RGBA")


def _clusters(pixels: np.ndarray, colours: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(H, W) the cluster of each pixel of `pixels` (H, W, 4) and (K, 3) the clusters' colours:
    the visible pixels' colours clustered by a few rounds of k-means, started from colours
    spread over their brightness. None when fewer pixels than colours are visible."""
    rgb = pixels[..., :3].reshape(-1, 3).astype(np.float32)  # (H*W, 3)
    seen = rgb[pixels[..., 3].reshape(-1) > 127]  # (N, 3)
    if len(seen) < colours:
        return None
    order = np.argsort(seen @ LUMA, kind="stable")
    centres = seen[order[np.linspace(0, len(seen) - 1, colours).astype(int)]]  # (K, 3)
    for _ in range(3):
        nearest = _nearest(seen, centres)  # (N,)
        counts = np.bincount(nearest, minlength=colours)[:, None]
        sums = np.stack([np.bincount(nearest, seen[:, c], colours) for c in range(3)], 1)
        centres = np.where(counts > 0, sums / np.maximum(counts, 1), centres)
    return _nearest(rgb, centres).reshape(pixels.shape[:2]), centres


def _nearest(rgb: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(N,) index of the nearest of `centres` (K, 3) to each colour of `rgb` (N, 3)."""
    return ((centres**2).sum(1) - 2 * rgb @ centres.T).argmin(1)  # |rgb|^2 left out: the same


def _lines(image: Image.Image, filled: bool) -> Image.Image:
    """The RGBA picture as line art: its outer edge and the borders between its colour regions
    (of the picture smoothed and in 5 flat colours, so that shading gives few lines) in
    LINE_COLOUR, one pixel wide, over white or over nothing."""
    alpha = np.asarray(image.getchannel("A"))
    solid = alpha > 127  # (H, W)
    smooth = np.dstack([image.convert("RGB").filter(ImageFilter.MedianFilter(3)), alpha])
    found = _clusters(smooth, 5)
    regions = np.zeros(solid.shape, np.int64) if found is None else found[0]
    around = np.pad(solid, 1)
    edge = solid & ~(around[:-2, 1:-1] & around[2:, 1:-1] & around[1:-1, :-2] & around[1:-1, 2:])
    across = (regions[:, 1:] != regions[:, :-1]) & solid[:, 1:] & solid[:, :-1]
    down = (regions[1:] != regions[:-1]) & solid[1:] & solid[:-1]
    edge[:, :-1] |= across
    edge[:-1] |= down
    out = np.zeros((*solid.shape, 4), np.uint8)
    if filled:
        out[solid] = (255, 255, 255, 255)
    out[edge] = (*LINE_COLOUR, 255)
    return Image.fromarray(out, "RGBA")


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
