"""The captioner's objects: code points the defining artwork families draw, named by CLDR.

A glyph is kept when it is one code point of a block of concrete, drawable things (animals,
plants, food, vehicles, household objects), its English CLDR name is 1-3 plain words, the
name names a thing rather than a sign, a face or a person, and every family of
`models.artwork.DEFINING_FAMILIES` draws it; the other families draw what they draw. The rule
is fixed here; the list it gives is written beside the data (glyphs.json) with the Spanish
name of every glyph.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from models.artwork import DEFINING_FAMILIES, FAMILIES, keep_pictures, picture

CLDR_ANNOTATIONS = Path("/usr/share/unicode/cldr/common/annotations")
COLOURS = {"red", "green", "blue", "yellow", "orange", "purple", "brown", "black", "white", "pink"}

# Code point blocks of concrete things (inclusive ranges).
BLOCKS = (
    (0x1F330, 0x1F37F),  # plants, fruit, vegetables, food, drink
    (0x1F380, 0x1F393),  # gifts, balloons, decorations
    (0x1F3A8, 0x1F3BA),  # art, music and game objects
    (0x1F400, 0x1F43F),  # animals
    (0x1F451, 0x1F462),  # clothes
    (0x1F4A1, 0x1F4A1),  # light bulb
    (0x1F4BB, 0x1F4FA),  # computers, office objects
    (0x1F680, 0x1F6A4),  # vehicles
    (0x1F95D, 0x1F9AE),  # food and animals of later Unicode versions
    (0x1F9C0, 0x1F9CB),  # cheese, drinks
)
# A name containing one of these words is a sign, a symbol, a body part or a person.
EXCLUDED_WORDS = {
    "sign", "symbol", "button", "mark", "face", "hand", "person", "man", "woman", "flag",
    "arrow", "station", "light", "prohibited", "no", "tab", "tabs", "up", "down", "left",
    "right", "top", "bottom", "middle", "two", "a", "an", "above", "of", "with", "and", "from",
    "to", "the", "at", "on", "in", "row", "oncoming", "ninja", "mode", "off", "bars",
    "increasing", "decreasing", "ceremony", "cooking", "santa", "without",
}  # fmt: skip
_WORD = re.compile(r"^[a-z]+$")
IRREGULAR_PLURALS = {
    "mouse": "mice", "goose": "geese", "sheep": "sheep", "fish": "fish", "ox": "oxen",
    "knife": "knives", "leaf": "leaves", "loaf": "loaves", "deer": "deer", "bison": "bison",
    "shrimp": "shrimp", "squid": "squid", "blowfish": "blowfish", "sushi": "sushi",
    "rice": "rice", "tea": "teas",
    "bacon": "bacon", "popcorn": "popcorn", "butter": "butter", "honey": "honey",
}  # fmt: skip


@dataclass(frozen=True)
class Glyph:
    codepoint: int
    name: str  # English CLDR name, e.g. "red apple"
    plural: str  # "red apples"
    name_es: str  # Spanish CLDR name, e.g. "manzana roja"

    @property
    def char(self) -> str:
        return chr(self.codepoint)

    @property
    def article(self) -> str:
        return "an" if self.name[0] in "aeio" or self.name.startswith("um") else "a"


def plural(name: str) -> str:
    """English plural of a name's last word ("red apple" -> "red apples")."""
    *head, last = name.split()
    if last in IRREGULAR_PLURALS:
        last = IRREGULAR_PLURALS[last]
    elif re.search(r"[^aeiou]y$", last):
        last = last[:-1] + "ies"
    elif re.search(r"(s|x|z|ch|sh)$", last) or last in ("potato", "tomato", "mango"):
        last += "es"
    else:
        last += "s"
    return " ".join([*head, last])


def cldr_names(language: str) -> dict[str, str]:
    """Character -> the CLDR text-to-speech name in `language`."""
    root = ET.parse(CLDR_ANNOTATIONS / f"{language}.xml").getroot()
    return {
        a.get("cp"): a.text.strip()
        for a in root.iter("annotation")
        if a.get("type") == "tts" and a.text
    }


def _drawable(name: str) -> bool:
    words = name.split()
    already_plural = re.search(r"[^su]s$", words[-1] if words else "") is not None
    return (
        1 <= len(words) <= 3
        and not already_plural
        and all(_WORD.match(w) for w in words)
        and not EXCLUDED_WORDS.intersection(words)
    )


def _candidates() -> list[tuple[int, str, str]]:
    """(code point, English name, Spanish name) of every code point the naming rule keeps."""
    english, spanish = cldr_names("en"), cldr_names("es")
    candidates, seen = [], set()
    for first, last in BLOCKS:
        for codepoint in range(first, last + 1):
            name = english.get(chr(codepoint), "").lower()
            if not _drawable(name) or name in seen or chr(codepoint) not in spanish:
                continue
            seen.add(name)
            candidates.append((codepoint, name, spanish[chr(codepoint)]))
    return candidates


def select_glyphs() -> list[Glyph]:
    """Every glyph the rule keeps and every defining family draws, in code point order; names
    are unique. Every family's pictures of the candidates are drawn on the way (rendering runs
    on threads) and kept on disk."""
    candidates = _candidates()
    jobs = [(f, codepoint, name) for codepoint, name, _ in candidates for f in FAMILIES]
    with ThreadPoolExecutor(max_workers=4) as pool:
        drawn = dict(zip(jobs, pool.map(lambda job: picture(*job) is not None, jobs), strict=True))
    for f in FAMILIES:
        keep_pictures(f, [(codepoint, name) for codepoint, name, _ in candidates])
    return [
        Glyph(codepoint, name, plural(name), name_es)
        for codepoint, name, name_es in candidates
        if all(drawn[(f, codepoint, name)] for f in DEFINING_FAMILIES)
    ]


def coverage(glyphs: list[Glyph]) -> dict[str, frozenset[int]]:
    """{family: indices of the glyphs it draws} for every family."""
    return {
        f: frozenset(i for i, g in enumerate(glyphs) if picture(f, g.codepoint, g.name) is not None)
        for f in FAMILIES
    }


def needs_colour(glyphs: list[Glyph]) -> set[int]:
    """Indices of the glyphs told apart from another only by a colour word ("red apple",
    "green apple"): a picture without colour cannot show which one it is."""
    rests: dict[tuple[str, ...], list[int]] = {}
    for index, glyph in enumerate(glyphs):
        words = glyph.name.split()
        if COLOURS.intersection(words):
            rests.setdefault(tuple(w for w in words if w not in COLOURS), []).append(index)
    other = {tuple(g.name.split()) for g in glyphs}
    return {
        index
        for rest, indices in rests.items()
        for index in indices
        if len(indices) > 1 or rest in other
    }
