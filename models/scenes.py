"""Captioned scenes: emoji glyphs composed on a background, with a caption true to the scene.

A scene has 1 to 3 objects; its caption says what and where:

    single     "a red apple at the top left"          (the 3x3 region of the object's centre)
    same       "two bananas on the right"             (the region of the pair's midpoint)
    pair       "a bus above a tree", "a cat to the left of a dog"
    triple     "a cat and a dog and a bus from left to right" (or "from top to bottom")

Objects never overlap, a region is never chosen within REGION_MARGIN pixels of its border
and a relation holds with a clear gap, so every caption is unambiguous. Every object's box is
kept: it is where attention should look when the caption names that object.

Every scene is drawn in one artwork family (`models.artwork`) that draws all of its objects,
each object with its own `Look` (`models.augment`). The split is a rule with a seed (see
`SplitRule`): unordered pairs of glyphs are held out of training by a hash, and so is a band
of object sizes and one whole family; the test split has a part for each.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
from PIL import Image

from models.artwork import sized
from models.augment import Look, background, finish, styled
from models.glyphs import Glyph, needs_colour

IMAGE_SIZE = 96
REGION_MARGIN = 6  # pixels a centre keeps from the border of its 3x3 region
GAP = 3  # pixels between two objects in a relation
ROW_TRIES = 200  # random rows drawn for a relation's layout
KINDS = ("single", "same", "pair", "triple")
KIND_WEIGHTS = (0.25, 0.15, 0.4, 0.2)
REGIONS = (
    ("at the top left", "at the top", "at the top right"),
    ("on the left", "in the middle", "on the right"),
    ("at the bottom left", "at the bottom", "at the bottom right"),
)
RELATIONS = ("to the left of", "above")  # of a pair along x, along y
ORDERS = ("from left to right", "from top to bottom")  # of a triple along x, along y


@dataclass(frozen=True)
class SplitRule:
    """Which glyph pairs and object sizes training never sees."""

    held_out_pair_modulus: int = 7  # a pair is held out when its hash % modulus == 0
    sizes: tuple[int, int] = (18, 40)  # object sizes in pixels (longer side), inclusive
    held_out_sizes: tuple[int, int] = (26, 29)  # a band inside `sizes`, inclusive

    def held_out_pair(self, a: str, b: str) -> bool:
        key = "|".join(sorted((a, b))).encode()
        return int(hashlib.sha256(key).hexdigest(), 16) % self.held_out_pair_modulus == 0

    def training_sizes(self) -> list[int]:
        low, high = self.held_out_sizes
        return [s for s in range(self.sizes[0], self.sizes[1] + 1) if not low <= s <= high]

    def novel_sizes(self) -> list[int]:
        return list(range(self.held_out_sizes[0], self.held_out_sizes[1] + 1))


@dataclass
class SceneObject:
    glyph: int  # index into the glyph list
    name: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels, x1 and y1 exclusive
    size: int = 0  # the picture's longer side before its look, pixels
    look: Look = field(default_factory=Look)


@dataclass
class Scene:
    kind: str
    caption: str
    objects: list[SceneObject]
    # caption word index -> the objects that word names (both of "two bananas")
    name_words: dict[int, list[int]] = field(default_factory=dict)
    part: str = ""
    family: str = "noto"  # the artwork family every object is drawn in

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Scene:
        objects = [
            SceneObject(
                o["glyph"], o["name"], tuple(o["box"]), o.get("size", 0), Look(**o.get("look", {}))
            )
            for o in values["objects"]
        ]
        words = {int(k): list(v) for k, v in values["name_words"].items()}
        part, family = values.get("part", ""), values.get("family", "noto")
        return cls(values["kind"], values["caption"], objects, words, part, family)


class _Caption:
    """Builds a caption word by word, remembering which words name which object."""

    def __init__(self):
        self.words: list[str] = []
        self.name_words: dict[int, list[int]] = {}

    def add(self, text: str, objects: tuple[int, ...] = ()) -> _Caption:
        for word in text.split():
            if objects:
                self.name_words[len(self.words)] = list(objects)
            self.words.append(word)
        return self

    def thing(self, glyph: Glyph, obj: int) -> _Caption:
        return self.add(glyph.article).add(glyph.name, (obj,))

    @property
    def text(self) -> str:
        return " ".join(self.words)


def caption_grammar(glyphs: list[Glyph]) -> dict:
    """Every caption a scene of these glyphs can have, as an output grammar in words
    (models.checkpoint.save_grammar; service.runtime.grammar enforces it while decoding):
    the four kinds' patterns, a slot's phrases each a whole part of a caption."""
    return {
        "patterns": [
            ["thing", "region"],
            ["two things", "region"],
            ["thing", "relation", "thing"],
            ["thing", "and", "thing", "and", "thing", "order"],
        ],
        "slots": {
            "thing": [_Caption().thing(g, 0).text for g in glyphs],
            "two things": [_Caption().add("two").add(g.plural).text for g in glyphs],
            "region": [phrase for row in REGIONS for phrase in row],
            "relation": list(RELATIONS),
            "and": ["and"],
            "order": list(ORDERS),
        },
    }


def region_of(x: float, y: float) -> tuple[int, int] | None:
    """(row, column) of the 3x3 region holding (x, y); None within REGION_MARGIN of a border
    between regions."""
    third = IMAGE_SIZE / 3
    if any(abs(v - third) < REGION_MARGIN or abs(v - 2 * third) < REGION_MARGIN for v in (x, y)):
        return None
    return min(int(y // third), 2), min(int(x // third), 2)


class SceneSampler:
    """Draws scenes and renders them; the same seed gives the same scenes and pixels."""

    def __init__(self, glyphs: list[Glyph], rule: SplitRule, seed: int):
        self.glyphs, self.rule = glyphs, rule
        self.coloured = needs_colour(glyphs)
        self.rng = np.random.default_rng(seed)

    def colour_free(self, glyphs) -> bool:
        """Whether none of these glyphs needs its colour to be named."""
        return not self.coloured.intersection(glyphs)

    # -- layout ---------------------------------------------------------------------------

    @staticmethod
    def _place(extent: tuple[int, int], x: float, y: float) -> tuple[int, int, int, int]:
        width, height = extent
        x0, y0 = round(x - width / 2), round(y - height / 2)
        return x0, y0, x0 + width, y0 + height

    @staticmethod
    def _inside(box) -> bool:
        return box[0] >= 0 and box[1] >= 0 and box[2] <= IMAGE_SIZE and box[3] <= IMAGE_SIZE

    def _row(self, extents: list[tuple[int, int]], axis: int):
        """Boxes of objects in a row along `axis` (0: left to right, 1: top to bottom), each
        after the other with at least GAP pixels between, roughly aligned on the other axis;
        None when they do not fit. ROW_TRIES random rows are drawn at once (arrays over the
        tries) and the first that fits is taken."""
        if sum(e[axis] + GAP - 1 for e in extents) > IMAGE_SIZE:  # never fits (1: rounding)
            return None
        count = len(extents)
        cursor = self.rng.uniform(0, 12, size=ROW_TRIES)  # (T,)
        across = self.rng.uniform(20, IMAGE_SIZE - 20, size=ROW_TRIES)  # (T,)
        gaps = self.rng.uniform(GAP, GAP + 14, size=(count, ROW_TRIES))
        shifts = self.rng.uniform(-4, 4, size=(count, ROW_TRIES))
        starts, fits = [], np.ones(ROW_TRIES, bool)
        for extent, gap, shift in zip(extents, gaps, shifts, strict=True):
            along = np.round(cursor + gap)  # (T,) the box's first pixel along the row
            side = np.round(across + shift - extent[1 - axis] / 2)  # (T,) and across it
            fits &= (along >= 0) & (side >= 0) & (side + extent[1 - axis] <= IMAGE_SIZE)
            starts.append((along, side))
            cursor = along + extent[axis]
        fits &= cursor <= IMAGE_SIZE
        if not fits.any():
            return None
        first = int(np.argmax(fits))
        boxes = []
        for (along, side), extent in zip(starts, extents, strict=True):
            corner = [int(along[first]), int(side[first])][:: 1 if axis == 0 else -1]
            boxes.append((*corner, corner[0] + extent[0], corner[1] + extent[1]))
        return boxes

    # -- scene kinds ------------------------------------------------------------------------

    def _single(self, glyphs: list[int], extents):
        for _ in range(200):
            third = IMAGE_SIZE / 3
            row, column = self.rng.integers(0, 3, size=2)
            x = (column + self.rng.uniform(0.2, 0.8)) * third
            y = (row + self.rng.uniform(0.2, 0.8)) * third
            box = self._place(extents[0], x, y)
            if not self._inside(box):
                continue
            centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
            region = region_of(*centre)
            if region is None:
                continue
            caption = _Caption().thing(self.glyphs[glyphs[0]], 0).add(REGIONS[region[0]][region[1]])
            return [box], caption
        return None

    def _same(self, glyphs: list[int], extents):
        boxes = self._row(extents, int(self.rng.integers(0, 2)))
        if boxes is None:
            return None
        xs = [(b[0] + b[2]) / 2 for b in boxes]
        ys = [(b[1] + b[3]) / 2 for b in boxes]
        region = region_of(sum(xs) / 2, sum(ys) / 2)
        if region is None:
            return None
        glyph = self.glyphs[glyphs[0]]
        caption = _Caption().add("two").add(glyph.plural, (0, 1))
        caption.add(REGIONS[region[0]][region[1]])
        return boxes, caption

    def _relation(self, glyphs: list[int], extents):
        axis = int(self.rng.integers(0, 2))
        boxes = self._row(extents, axis)
        if boxes is None:
            return None
        caption = _Caption()
        for i, glyph in enumerate(glyphs):
            if i and len(glyphs) == 2:
                caption.add(RELATIONS[axis])
            elif i:
                caption.add("and")
            caption.thing(self.glyphs[glyph], i)
        if len(glyphs) == 3:
            caption.add(ORDERS[axis])
        return boxes, caption

    def picture(self, family: str, glyph: int, size: int, look: Look) -> Image.Image:
        """The glyph's picture in `family`, `size` pixels on its longer side, with `look`."""
        g = self.glyphs[glyph]
        return _styled(family, g.codepoint, g.name, size, look)

    def draw(
        self, kind: str, glyphs: list[int], sizes: list[int], family: str, styles: bool = False
    ) -> Scene | None:
        """A scene of `kind` with these glyphs and sizes drawn in `family`, or None when they
        do not fit; `styles` draws the objects' looks with the training styles."""
        placed = [glyphs[0]] * 2 if kind == "same" else glyphs
        looks = [Look.sample(self.rng, self.colour_free([g]), styles) for g in placed]
        extents = [
            self.picture(family, g, size, look).size
            for g, size, look in zip(placed, sizes, looks, strict=True)
        ]
        make = {"single": self._single, "same": self._same}.get(kind, self._relation)
        layout = make(glyphs, extents)
        if layout is None:
            return None
        boxes, caption = layout
        objects = [
            SceneObject(g, self.glyphs[g].name, box, size, look)
            for g, box, size, look in zip(placed, boxes, sizes, looks, strict=True)
        ]
        return Scene(kind, caption.text, objects, caption.name_words, family=family)

    def render(self, scene: Scene) -> np.ndarray:
        """(IMAGE_SIZE, IMAGE_SIZE, 3) uint8."""
        canvas = Image.fromarray(background(self.rng, IMAGE_SIZE)).convert("RGBA")
        for obj in scene.objects:
            picture = self.picture(scene.family, obj.glyph, obj.size, obj.look)
            canvas.alpha_composite(picture, obj.box[:2])
        image = np.asarray(canvas.convert("RGB"))
        return finish(image, self.rng, self.colour_free([o.glyph for o in scene.objects]))


@lru_cache(maxsize=1 << 16)
def _styled(family: str, codepoint: int, name: str, size: int, look: Look) -> Image.Image:
    """A drawn object's picture, kept from its scene's layout to its rendering."""
    return styled(sized(family, codepoint, name, size), look)
