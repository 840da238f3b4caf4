"""The captioner's artwork: emoji families that draw the same code points in their own styles.

Each family is one class that knows where its pictures come from (a Debian font or an npm
package, pinned by version and integrity) and turns a code point into an RGBA picture cropped
to its visible pixels. `FAMILIES` is the registry; `HELD_OUT` names the family that training
never sees, which the test split has a part of its own for.

SVG artwork is rendered by librsvg's `rsvg-convert` (Debian `librsvg2-bin`); raster artwork is
read by Pillow. npm packages are fetched with `npm pack` into a cache directory once, and their
SHA-512 is checked against the pinned one before a file is read.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import tarfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache, lru_cache
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

RENDER_SIZE = 64  # pixels of the longer side every family is drawn at (objects are 18-40)
MIN_ALPHA = 16  # a pixel is visible above this alpha
DEBIAN_PACKAGES = ("fonts-noto-color-emoji", "unicode-cldr-core", "librsvg2-bin")
NPM_CACHE = Path(__file__).resolve().parents[1] / "data" / "npm"


@dataclass(frozen=True)
class NpmPackage:
    """One npm package at a pinned version, checked by its registry integrity (SHA-512)."""

    name: str
    version: str
    integrity: str  # "sha512-<base64>", as `npm view NAME@VERSION dist.integrity` prints it
    licence: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    def tarball(self, cache: Path = NPM_CACHE) -> Path:
        """The package's tarball in `cache`, fetched by `npm pack` when missing."""
        path = cache / f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"
        if not path.exists():
            if shutil.which("npm") is None:
                raise RuntimeError(
                    f"npm is needed to fetch {self.spec} (./dev.sh setup installs it)"
                )
            cache.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["npm", "pack", self.spec, "--silent", "--pack-destination", str(cache)],
                check=True,
                capture_output=True,
            )
        digest = base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()
        if f"sha512-{digest}" != self.integrity:
            raise RuntimeError(f"{path}: not the pinned {self.spec} (integrity differs)")
        return path

    def files(self, suffix: str) -> dict[str, bytes]:
        """{path inside the package: bytes} of every file whose name ends with `suffix`."""
        with tarfile.open(self.tarball(), "r:gz") as archive:
            return {
                member.name: archive.extractfile(member).read()
                for member in archive.getmembers()
                if member.isfile() and member.name.endswith(suffix)
            }

    def record(self) -> dict:
        return {"version": self.version, "licence": self.licence, "integrity": self.integrity}


def crop_visible(image: Image.Image) -> Image.Image | None:
    """The RGBA image cropped to its visible pixels; None when nothing is visible."""
    image = image.convert("RGBA")
    box = image.getchannel("A").point(lambda a: 255 if a > MIN_ALPHA else 0).getbbox()
    return None if box is None else image.crop(box)


def _fit(image: Image.Image) -> Image.Image:
    """The image scaled so that its longer side is RENDER_SIZE."""
    scale = RENDER_SIZE / max(image.size)
    size = tuple(max(1, round(side * scale)) for side in image.size)
    return image if size == image.size else image.resize(size, Image.LANCZOS)


class Artwork(ABC):
    """One family (or style) of emoji artwork."""

    name: str
    description: str
    colourless = False  # drawn in one colour: no object told apart by its colour alone

    @abstractmethod
    def draw(self, codepoint: int, name: str) -> Image.Image | None:
        """The picture of `codepoint` (CLDR name `name`), RGBA cropped to its visible pixels,
        its longer side RENDER_SIZE; None when the family does not draw it."""

    @abstractmethod
    def source(self) -> dict:
        """Where the artwork comes from, for meta.json and DATA.md."""

    @abstractmethod
    def edition(self) -> str:
        """What names this family's files exactly (a version or a digest): the key of its
        pictures kept on disk."""


class NotoFont(Artwork):
    """Noto Color Emoji from its Debian font, drawn by Pillow (the font's one bitmap size)."""

    name = "noto"
    description = "Noto Color Emoji (Google), colour bitmaps"
    FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
    FONT_SIZE = 109  # the one bitmap size of the colour font

    def draw(self, codepoint: int, name: str) -> Image.Image | None:
        canvas = Image.new("RGBA", (160, 160), (0, 0, 0, 0))
        font = _font(self.FONT, self.FONT_SIZE)
        ImageDraw.Draw(canvas).text((0, 0), chr(codepoint), font=font, embedded_color=True)
        image = crop_visible(canvas)
        if image is None or image.width < 40 or image.height < 20:
            return None  # missing glyph or a thin mark
        return _fit(image)

    def source(self) -> dict:
        return {"debian_package": "fonts-noto-color-emoji", "licence": "SIL OFL 1.1"}

    def edition(self) -> str:
        return hashlib.sha256(self.FONT.read_bytes()).hexdigest()[:16]


class PackageArtwork(Artwork):
    """Artwork read from the files of one npm package, a file a code point or a name."""

    package: NpmPackage
    suffix: str  # ".svg", ".webp"

    @abstractmethod
    def path(self, codepoint: int, name: str) -> str:
        """The file of `codepoint` inside the package's tarball."""

    def draw(self, codepoint: int, name: str) -> Image.Image | None:
        data = _package_files(self.package, self.suffix).get(self.path(codepoint, name))
        if data is None:
            return None
        image = crop_visible(
            render_svg(data) if self.suffix == ".svg" else Image.open(BytesIO(data))
        )
        return None if image is None else _fit(image)

    def source(self) -> dict:
        return {"npm_package": self.package.name, **self.package.record()}

    def edition(self) -> str:
        return base64.b64decode(self.package.integrity.removeprefix("sha512-")).hex()[:16]


@cache
def _font(path: Path, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), size)


@cache
def _package_files(package: NpmPackage, suffix: str) -> dict[str, bytes]:
    return package.files(suffix)


def render_svg(data: bytes) -> Image.Image:
    """An SVG rendered by librsvg at 1.25 x RENDER_SIZE on its longer side (cropped after)."""
    size = str(RENDER_SIZE * 5 // 4)
    png = subprocess.run(
        ["rsvg-convert", "--keep-aspect-ratio", "-w", size, "-h", size, "-f", "png"],
        input=data,
        capture_output=True,
        check=True,
    ).stdout
    return Image.open(BytesIO(png))


TWEMOJI = NpmPackage(
    "@twemoji/svg",
    "15.0.0",
    "sha512-ZSPef2B6nBaYnfgdTbAy4jgW95o7pi2xPGwGCU+WMTxo7J6B1lMPTWwSq/wTuiMq+N0khQ90CcvYp1wFoQpo/w==",
    "CC-BY-4.0 artwork, MIT code",
)
FLUENT = NpmPackage(
    "fluentui-emoji",
    "1.3.0",
    "sha512-JTXXwqIie2rWTgOkIJDJxr0WtwTz2WU4kdOq8buLVThYwQ264aFR2jdTyuon2oEbLqqGMT64zI4btyn1saB2xw==",
    "MIT",
)
FLUENT_3D = NpmPackage(
    "@lobehub/fluent-emoji-3d",
    "1.1.0",
    "sha512-Wlq2lVStTnr8BDpIJ0pEnTKO4LuDxxqTEhTvRtD1DLRF0me7ogeRQjKoehDHXuVJ2Qaecgl5wRBv60lUAG3h7g==",
    "MIT",
)


class CodePointFiles(PackageArtwork):
    """Artwork whose files are named by the code point in hex, in one folder."""

    folder: str

    def path(self, codepoint: int, name: str) -> str:
        return f"{self.folder}{codepoint:x}{self.suffix}"


class Twemoji(CodePointFiles):
    name = "twemoji"
    description = "Twemoji (Twitter), flat vector"
    package, suffix, folder = TWEMOJI, ".svg", "package/"


class FluentStyle(PackageArtwork):
    """One style of Microsoft's Fluent Emoji, its files named by the CLDR name."""

    package, suffix = FLUENT, ".svg"
    folder: str

    def path(self, codepoint: int, name: str) -> str:
        return f"package/icons/{self.folder}/{name.replace(' ', '-')}.svg"


class FluentFlat(FluentStyle):
    name, folder = "fluent-flat", "flat"
    description = "Fluent Emoji (Microsoft), flat"


class FluentColor(FluentStyle):
    name, folder = "fluent-color", "modern"
    description = "Fluent Emoji (Microsoft), colour with gradients"


class FluentHighContrast(FluentStyle):
    name, folder = "fluent-high-contrast", "high-contrast"
    description = "Fluent Emoji (Microsoft), high contrast (one dark colour)"
    colourless = True


class Fluent3D(CodePointFiles):
    name = "fluent-3d"
    description = "Fluent Emoji (Microsoft), 3D renders"
    package, suffix, folder = FLUENT_3D, ".webp", "package/assets/"


FAMILIES: dict[str, Artwork] = {
    family.name: family
    for family in (
        NotoFont(),
        Twemoji(),
        FluentFlat(),
        FluentColor(),
        FluentHighContrast(),
        Fluent3D(),
    )
}
HELD_OUT = "twemoji"  # never in training: the test split's `held_out_family` part
TRAINING_FAMILIES = tuple(name for name in FAMILIES if name != HELD_OUT)


def family(name: str) -> Artwork:
    if name not in FAMILIES:
        raise ValueError(f"unknown artwork family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def _stored_file(family_name: str) -> Path:
    edition = family(family_name).edition()
    return NPM_CACHE / "pictures" / f"{family_name}-{RENDER_SIZE}-{edition}.npz"


@cache
def _stored(family_name: str) -> dict[int, np.ndarray]:
    """The family's pictures kept on disk by `keep_pictures`, {code point: RGBA array, empty
    where the family does not draw it}."""
    path = _stored_file(family_name)
    if not path.exists():
        return {}
    with np.load(path) as stored:
        return {int(key): stored[key] for key in stored.files}


@cache
def picture(family_name: str, codepoint: int, name: str) -> Image.Image | None:
    """`family(family_name).draw(codepoint, name)`, drawn once (kept on disk by
    `keep_pictures`)."""
    stored = _stored(family_name).get(codepoint)
    if stored is not None:
        return Image.fromarray(stored, "RGBA") if stored.size else None
    return family(family_name).draw(codepoint, name)


def keep_pictures(family_name: str, codepoints: list[tuple[int, str]]) -> None:
    """Writes the family's pictures of these (code point, name) pairs to disk, so that a
    later build reads them instead of drawing them again."""
    path = _stored_file(family_name)
    arrays = {}
    for codepoint, name in codepoints:
        image = picture(family_name, codepoint, name)
        arrays[str(codepoint)] = np.zeros(0, np.uint8) if image is None else np.asarray(image)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez(partial, **arrays)
    partial.replace(path)


@lru_cache(maxsize=1 << 16)
def sized(family_name: str, codepoint: int, name: str, size: int) -> Image.Image:
    """The picture with its longer side `size` pixels."""
    image = picture(family_name, codepoint, name)
    scale = size / max(image.size)
    width, height = (max(1, round(side * scale)) for side in image.size)
    return image.resize((width, height), Image.LANCZOS)
