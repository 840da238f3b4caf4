"""The captioner's artwork: emoji families that draw the same code points in their own styles.

Each family is one class that knows where its pictures come from (a Debian font or an npm
package, pinned by version and integrity) and turns a code point into an RGBA picture cropped
to its visible pixels. `FAMILIES` is the registry; `HELD_OUT` names the family that training
never sees, which the test split has a part of its own for; `DEFINING_FAMILIES` are the ones
that must all draw a code point for it to be an object (`models.glyphs`). Every other family
draws what it draws: a scene is drawn in it only when it draws every object of the scene.

SVG artwork is rendered by librsvg's `rsvg-convert` (Debian `librsvg2-bin`); raster artwork and
fonts are read by Pillow. npm packages are fetched with `npm pack` into a cache directory once,
and their SHA-512 is checked against the pinned one before a file is read. Iconify icon sets
(`@iconify-json/*`) hold every icon's SVG markup in one JSON file, named by the English name.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import unicodedata
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache, lru_cache
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

RENDER_SIZE = 64  # pixels of the longer side every family is drawn at (objects are 18-40)
MIN_ALPHA = 16  # a pixel is visible above this alpha
UNASSIGNED = 0x10FFFD  # a code point no font draws: its picture is the font's missing glyph
DEBIAN_PACKAGES = ("fonts-noto-color-emoji", "fonts-symbola", "unicode-cldr-core", "librsvg2-bin")
NPM_CACHE = Path(__file__).resolve().parents[1] / "data" / "npm"
_FETCHING = threading.Lock()  # one `npm pack` at a time in this process


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
        """The package's tarball in `cache`, fetched by `npm pack` when missing. Threads that
        ask at once fetch it once; the file appears whole or not at all (packed beside it,
        then renamed), so no reader sees a tarball still being written."""
        path = cache / f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"
        with _FETCHING:
            if not path.exists():
                if shutil.which("npm") is None:
                    raise RuntimeError(
                        f"npm is needed to fetch {self.spec} (./dev.sh setup installs it)"
                    )
                cache.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=cache, prefix=".packing-") as packing:
                    subprocess.run(
                        ["npm", "pack", self.spec, "--silent", "--pack-destination", packing],
                        check=True,
                        capture_output=True,
                    )
                    os.replace(Path(packing) / path.name, path)
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


VISIBLE = [255 if a > MIN_ALPHA else 0 for a in range(256)]  # alpha -> visible, a lookup table


def crop_visible(image: Image.Image) -> Image.Image | None:
    """The RGBA image cropped to its visible pixels; None when nothing is visible."""
    image = image.convert("RGBA")
    box = image.getchannel("A").point(VISIBLE).getbbox()
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


class FontArtwork(Artwork):
    """A Debian font drawn by Pillow, one glyph a code point."""

    FONT: Path
    FONT_SIZE: int
    MIN_SIZE = (40, 20)  # width and height below which a drawing is a missing glyph or a mark

    @abstractmethod
    def ink(self, draw: ImageDraw.ImageDraw, xy: int, text: str, font: ImageFont.FreeTypeFont):
        """Draws `text` at (xy, xy)."""

    def draw(self, codepoint: int, name: str) -> Image.Image | None:
        image = self._drawn(chr(codepoint))
        if image is None or image.width < self.MIN_SIZE[0] or image.height < self.MIN_SIZE[1]:
            return None
        if image == self._drawn(chr(UNASSIGNED)):
            return None  # the font's picture of a character it lacks
        return _fit(image)

    def _drawn(self, text: str) -> Image.Image | None:
        canvas = Image.new("RGBA", (self.FONT_SIZE * 2,) * 2, (0, 0, 0, 0))
        margin = self.FONT_SIZE // 4  # room for glyphs reaching left of or above their origin
        self.ink(ImageDraw.Draw(canvas), margin, text, _font(self.FONT, self.FONT_SIZE))
        return crop_visible(canvas)

    def edition(self) -> str:
        return hashlib.sha256(self.FONT.read_bytes()).hexdigest()[:16]


class NotoFont(FontArtwork):
    """Noto Color Emoji from its Debian font (the font's one bitmap size)."""

    name = "noto"
    description = "Noto Color Emoji (Google), colour bitmaps"
    FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
    FONT_SIZE = 109  # the one bitmap size of the colour font

    def ink(self, draw, xy, text, font):
        draw.text((xy, xy), text, font=font, embedded_color=True)

    def source(self) -> dict:
        return {"debian_package": "fonts-noto-color-emoji", "licence": "SIL OFL 1.1"}


class SymbolaFont(FontArtwork):
    """Symbola (George Douros) from its Debian font: black outline drawings."""

    name = "symbola"
    description = "Symbola (George Douros), black line drawings"
    colourless = True
    FONT = Path("/usr/share/fonts/truetype/ancient-scripts/Symbola_hint.ttf")
    FONT_SIZE = 96
    MIN_SIZE = (16, 16)  # a missing glyph is told by its picture; a baby bottle is narrow

    def ink(self, draw, xy, text, font):
        draw.text((xy, xy), text, font=font, fill=(0, 0, 0, 255))

    def source(self) -> dict:
        return {
            "debian_package": "fonts-symbola",
            "licence": "free for any use, modified or redistributed (its author's terms)",
        }


class PackageArtwork(Artwork):
    """Artwork read from one npm package."""

    package: NpmPackage
    suffix: str  # ".svg", ".webp": the format of the pictures

    @abstractmethod
    def data(self, codepoint: int, name: str) -> bytes | None:
        """The picture file of `codepoint`, None when the package has none."""

    def draw(self, codepoint: int, name: str) -> Image.Image | None:
        data = self.data(codepoint, name)
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


class PackageFiles(PackageArtwork):
    """A package with a file a picture, named by the code point or the name."""

    @abstractmethod
    def path(self, codepoint: int, name: str) -> str:
        """The file of `codepoint` inside the package's tarball."""

    def data(self, codepoint: int, name: str) -> bytes | None:
        return _package_files(self.package, self.suffix).get(self.path(codepoint, name))


class IconifySet(PackageArtwork):
    """An Iconify icon set: every icon's SVG markup in `package/icons.json`, named by the
    English name in lower case, words joined by `separator`.

    A code point's icon is looked up by its CLDR name, then by its Unicode character name
    ("bear" is BEAR FACE, "backpack" SCHOOL SATCHEL: the same code point, never another
    object), each as it is and with `numbered` appended (sets that number the variants of an
    icon, "cactus-1"). Aliases lead to their parent; an alias that flips or turns it is not
    used."""

    suffix = ".svg"
    separator = "-"
    numbered = ""

    def names(self, codepoint: int, name: str) -> list[str]:
        unicode_name = unicodedata.name(chr(codepoint), "").lower().replace("-", " ")
        spelled = [n.replace(" ", self.separator) for n in (name, unicode_name) if n]
        return [n + suffix for n in spelled for suffix in dict.fromkeys(("", self.numbered))]

    def data(self, codepoint: int, name: str) -> bytes | None:
        icons = _icon_set(self.package)
        found = next((icons[n] for n in self.names(codepoint, name) if n in icons), None)
        return None if found is None else found.encode()


@cache
def _icon_set(package: NpmPackage) -> dict[str, str]:
    """{icon or alias name: the icon as a whole SVG document} of an Iconify set."""
    data = json.loads(package.files("package/icons.json")["package/icons.json"])
    box = {key: data.get(key, default) for key, default in ICONIFY_BOX.items()}
    svgs = {name: _iconify_svg(icon, box) for name, icon in data["icons"].items()}
    for name in data.get("aliases", {}):
        parent = _alias_parent(data["aliases"], name)
        if parent in svgs:
            svgs.setdefault(name, svgs[parent])
    return svgs


ICONIFY_BOX = {"left": 0, "top": 0, "width": 16, "height": 16}  # Iconify's defaults


def _iconify_svg(icon: dict, box: dict) -> str:
    left, top, width, height = (icon.get(key, box[key]) for key in ICONIFY_BOX)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{left} {top} {width} {height}">'
        f"{icon['body']}</svg>"
    )


def _alias_parent(aliases: dict, name: str) -> str | None:
    """The icon an alias leads to, through aliases of aliases; None for an alias that
    transforms its parent (flips, turns, moves it)."""
    for _ in range(len(aliases) + 1):
        alias = aliases.get(name)
        if alias is None:
            return name
        if set(alias) != {"parent"}:
            return None
        name = alias["parent"]
    return None  # a cycle


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


class CodePointFiles(PackageFiles):
    """Artwork whose files are named by the code point in hex, in one folder."""

    folder: str

    def path(self, codepoint: int, name: str) -> str:
        return f"{self.folder}{codepoint:x}{self.suffix}"


class Twemoji(CodePointFiles):
    name = "twemoji"
    description = "Twemoji (Twitter), flat vector"
    package, suffix, folder = TWEMOJI, ".svg", "package/"


class FluentStyle(PackageFiles):
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


class NotoV1(IconifySet):
    name = "noto-v1"
    description = "Noto Emoji (Google), the earlier design, flat vector"
    package = NpmPackage(
        "@iconify-json/noto-v1",
        "1.2.5",
        "sha512-/DsVMius69Q0fRS53z7QK1TROSuar606jiIx+laXtdsYGMXpf6LtHBx6CGfoo3UHHb/XpBsw+1L1x3eyPqMuVA==",
        "Apache-2.0",
    )


class FxEmoji(IconifySet):
    name = "fxemoji"
    description = "Firefox OS Emoji (Mozilla), vector with shading"
    separator = ""  # "admissiontickets"
    package = NpmPackage(
        "@iconify-json/fxemoji",
        "1.2.2",
        "sha512-UAasRaxzFUKfIGSmLwnoarsssA4LX0VLLuEmplIqM6ZNQqIQRtav8tZ4H1neTlBreXuMQyAifr5jP4kn78DpiQ==",
        "Apache-2.0",
    )


class EmojiOne(IconifySet):
    name = "emojione"
    description = "EmojiOne 2 (Ranks.com), flat vector"
    package = NpmPackage(
        "@iconify-json/emojione",
        "1.2.3",
        "sha512-T9+T3HIbJNLKKsmxYKlaYhvnHYkz/HNYTV7SHCXVZPfeUi4FqskY70YeN8yYAZT8cCv7w5vJxS4Q1m8zb9CMMg==",
        "CC-BY-4.0",
    )


class EmojiOneMonotone(IconifySet):
    name = "emojione-monotone"
    description = "EmojiOne 2 (Ranks.com), one colour"
    colourless = True
    package = NpmPackage(
        "@iconify-json/emojione-monotone",
        "1.2.1",
        "sha512-cZSNcPsuiAD6HCzCh/2dYKGh3pNI0jJlxBxQWfC33cQsPtqYZqulGBvlkThXYNvDl8VxgVHT9u+izyX/yeEIkA==",
        "CC-BY-4.0",
    )


class Streamline(IconifySet):
    name = "streamline"
    description = "Streamline Emojis (Webalys), flat vector with outlines"
    numbered = "-1"  # "cactus-1", "cactus-2": two drawings, the first is taken
    package = NpmPackage(
        "@iconify-json/streamline-emojis",
        "1.2.4",
        "sha512-iNr9T9XuZVTyQPJO8ZlLxBzPkpi7qMl+z1l0C31vpEMqhPMelth3n7CeWQYtixdetDPdI81yeG4ROqjWpYJE6A==",
        "CC-BY-4.0",
    )


FAMILIES: dict[str, Artwork] = {
    family.name: family
    for family in (
        NotoFont(),
        Twemoji(),
        FluentFlat(),
        FluentColor(),
        FluentHighContrast(),
        Fluent3D(),
        NotoV1(),
        FxEmoji(),
        EmojiOne(),
        EmojiOneMonotone(),
        Streamline(),
        SymbolaFont(),
    )
}
HELD_OUT = "twemoji"  # never in training: the test split's `held_out_family` part
# A code point is an object only when every one of these draws it (`models.glyphs`).
DEFINING_FAMILIES = (
    "noto",
    "twemoji",
    "fluent-flat",
    "fluent-color",
    "fluent-high-contrast",
    "fluent-3d",
)
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
    later build reads them instead of drawing them again. Builds that keep the same family
    at once (test workers, two commands) each write a file of their own beside it and rename
    it into place: the file is always one build's whole."""
    path = _stored_file(family_name)
    arrays = {}
    for codepoint, name in codepoints:
        image = picture(family_name, codepoint, name)
        arrays[str(codepoint)] = np.zeros(0, np.uint8) if image is None else np.asarray(image)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".npz")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **arrays)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


@lru_cache(maxsize=1 << 16)
def sized(family_name: str, codepoint: int, name: str, size: int) -> Image.Image:
    """The picture with its longer side `size` pixels."""
    image = picture(family_name, codepoint, name)
    scale = size / max(image.size)
    width, height = (max(1, round(side * scale)) for side in image.size)
    return image.resize((width, height), Image.LANCZOS)
