"""The captioner's data set: scenes drawn by `models.scenes`, split by rule, written to disk.

<out>/glyphs.json                 the glyphs (code point, English and Spanish names, plural)
<out>/<split>.jsonl               one scene a line (caption, boxes, which words name what, part)
<out>/<split>-images.npy          (N, 96, 96, 3) uint8, the scenes in the same order
<out>/meta.json                   counts, seed, split rule, the artwork families (with how
                                  many glyphs each draws), those training drew from, the
                                  styles' rates, the Debian and npm package versions read

Every scene is drawn in one artwork family (`models.artwork`): training and every part but
the held-out family's in one of `DataOptions.families` that draws all of its objects, chosen
at random; the held-out family only in its part. Training objects alone get the styles of
`models.augment.STYLES` (`DataOptions.styles`): dev and test measure the task, not them.

Splits: `train`; `dev` with the parts `seen` and `held_out_family`; `test` with four parts:
    seen             object sets that occur together in training (in its first SEEN_SOURCE
                     scenes, so that a smaller build has the same dev and test), laid out anew
    novel_pairs      scenes holding a pair of objects never seen together in training
    novel_sizes      object sets of training, at sizes training never sees
    held_out_family  object sets of training, drawn in the family training never sees

A training scene's kind and object set come from a random stream of their own, so the object
sets of the first SEEN_SOURCE scenes, and with them the held-out family's parts (drawn without
styles, each part rendered from its own seed), are the same whatever families and styles are
chosen.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import groupby
from pathlib import Path

import numpy as np

from models.artwork import (
    DEBIAN_PACKAGES,
    DEFINING_FAMILIES,
    FAMILIES,
    HELD_OUT,
    TRAINING_FAMILIES,
)
from models.augment import STYLES
from models.glyphs import Glyph, coverage, select_glyphs
from models.packages import ensure_debian_packages
from models.scenes import IMAGE_SIZE, KIND_WEIGHTS, KINDS, Scene, SceneSampler, SplitRule

Keep = Callable[[int, Scene], None]  # given each training scene, with its index, once drawn

SPLITS = ("train", "dev", "test")
# Seen object sets are taken from the first training scenes only, so that dev and test are the
# same whatever the size of the training split beyond it (CI builds a small one).
SEEN_SOURCE = 5000
TEST_PARTS = ("seen", "novel_pairs", "novel_sizes", "held_out_family")
DEV_PARTS = ("seen", "held_out_family")
OBJECTS = {"single": 1, "same": 1, "pair": 2, "triple": 3}  # distinct glyphs per kind
PLACED = {"single": 1, "same": 2, "pair": 2, "triple": 3}  # objects drawn per kind
PARTS = ("", *TEST_PARTS)  # "" for training; a part's renderer seed is its index
MAX_TRIES = 1000  # layouts tried for one object set before giving up
# Families that draw every glyph in colour: the options name one, so every scene has a family.
FULL_COLOUR = tuple(n for n in DEFINING_FAMILIES if n != HELD_OUT and not FAMILIES[n].colourless)


@dataclass(frozen=True)
class DataOptions:
    train: int = 100000
    dev: int = 500  # seen; the held-out family's dev part has half as many
    test_per_part: int = 400
    seed: int = 1
    rule: SplitRule = field(default_factory=SplitRule)
    families: tuple[str, ...] = TRAINING_FAMILIES  # the families training scenes are drawn in
    styles: bool = True  # training objects get the styles of `models.augment.STYLES`

    def __post_init__(self):
        check_families(self.families)


def check_families(families: tuple[str, ...]) -> tuple[str, ...]:
    """`families` when they can be training families; else ValueError naming every problem."""
    problems = []
    unknown = [n for n in families if n not in FAMILIES]
    if unknown:
        problems.append(f"unknown {', '.join(unknown)} (known: {', '.join(TRAINING_FAMILIES)})")
    if HELD_OUT in families:
        problems.append(f"{HELD_OUT} is held out of training")
    if len(set(families)) < len(families):
        problems.append("a family is named twice")
    if not set(FULL_COLOUR) & set(families):
        problems.append(f"none draws every object in colour ({', '.join(FULL_COLOUR)})")
    if problems:
        raise ValueError("training families: " + "; ".join(problems))
    return families


class _Drawer:
    """Draws scenes of one split (or test part) with its own seed: kinds and object sets from
    one stream (`objects`), sizes, families, looks and layouts from another (`rng`)."""

    def __init__(
        self,
        glyphs: list[Glyph],
        options: DataOptions,
        drawn: dict[str, frozenset[int]],
        seed: int,
        styles: bool = False,
    ):
        self.sampler = SceneSampler(glyphs, options.rule, seed)
        self.rng, self.rule, self.glyph_count = self.sampler.rng, options.rule, len(glyphs)
        self.objects = np.random.default_rng((seed, 1))
        self.families, self.drawn, self.styles = options.families, drawn, styles

    def kind(self, kinds=KINDS, weights=KIND_WEIGHTS) -> str:
        weights = np.asarray(weights, dtype=np.float64)
        return str(self.objects.choice(kinds, p=weights / weights.sum()))

    def glyph_set(self, kind: str) -> list[int]:
        chosen = self.objects.choice(self.glyph_count, size=OBJECTS[kind], replace=False)
        return [int(g) for g in chosen]

    def held_out(self, glyphs: list[int]) -> bool:
        names = [self.sampler.glyphs[g].name for g in glyphs]
        return any(
            self.rule.held_out_pair(a, b) for i, a in enumerate(names) for b in names[i + 1 :]
        )

    def sizes(self, kind: str, novel: bool = False) -> list[int]:
        pool = self.rule.novel_sizes() if novel else self.rule.training_sizes()
        return [int(s) for s in self.rng.choice(pool, size=PLACED[kind])]

    def family(self, glyphs: list[int], held_out: bool = False) -> str:
        """The held-out family, or a training family that draws every one of these glyphs (a
        family without colour only when none of them needs its colour)."""
        if held_out:
            return HELD_OUT
        colour_free = self.sampler.colour_free(glyphs)
        names = [
            n
            for n in self.families
            if self.drawn[n].issuperset(glyphs) and (colour_free or not FAMILIES[n].colourless)
        ]
        return names[int(self.rng.integers(len(names)))]

    def scene(
        self, kind: str, glyphs: list[int], novel_sizes: bool = False, held_out: bool = False
    ) -> Scene:
        """A scene of these glyphs: sizes, family, looks and layout drawn again until they
        fit."""
        for _ in range(MAX_TRIES):
            family = self.family(glyphs, held_out)
            sizes = self.sizes(kind, novel_sizes)
            scene = self.sampler.draw(kind, glyphs, sizes, family, self.styles)
            if scene is not None:
                return scene
        raise RuntimeError(f"no layout of a {kind} scene of glyphs {glyphs} fits")


def _draw_until(count: int, propose, keep: Keep | None = None) -> list[Scene]:
    scenes = []
    while len(scenes) < count:
        scene = propose()
        if scene is not None:
            if keep is not None:
                keep(len(scenes), scene)
            scenes.append(scene)
    return scenes


def training_scenes(drawer: _Drawer, count: int, keep: Keep | None = None) -> list[Scene]:
    def propose():
        kind = drawer.kind()
        glyphs = drawer.glyph_set(kind)
        return None if drawer.held_out(glyphs) else drawer.scene(kind, glyphs)

    return _draw_until(count, propose, keep)


def seen_scenes(
    drawer: _Drawer, train: list[Scene], count: int, novel_sizes=False, held_out=False
) -> list[Scene]:
    """Object sets of random training scenes, drawn again (new layout, sizes, looks,
    background; the held-out family when `held_out`)."""

    def propose():
        source = train[int(drawer.rng.integers(len(train)))]
        glyphs = list(dict.fromkeys(o.glyph for o in source.objects))
        if source.kind == "pair" and drawer.rng.random() < 0.5:
            glyphs.reverse()  # the same pair; the relation is drawn anew
        return drawer.scene(source.kind, glyphs, novel_sizes, held_out)

    return _draw_until(count, propose)


def novel_pair_scenes(drawer: _Drawer, count: int) -> list[Scene]:
    def propose():
        kind = drawer.kind(("pair", "triple"), (2, 1))
        glyphs = drawer.glyph_set(kind)
        return drawer.scene(kind, glyphs) if drawer.held_out(glyphs) else None

    return _draw_until(count, propose)


def draw_splits(
    glyphs: list[Glyph], options: DataOptions, keep: Keep | None = None
) -> dict[str, list[Scene]]:
    """Every split's scenes (test parts in order), each split or part from its own seed;
    `keep(index, scene)` is given each training scene as it is drawn."""
    drawn = coverage(glyphs)

    def drawer(offset: int, styles: bool = False) -> _Drawer:
        return _Drawer(glyphs, options, drawn, options.seed * 1000 + offset, styles)

    train = training_scenes(drawer(0, options.styles), options.train, keep)
    source = train[:SEEN_SOURCE]
    count = options.test_per_part
    test = {
        "seen": seen_scenes(drawer(2), source, count),
        "novel_pairs": novel_pair_scenes(drawer(3), count),
        "novel_sizes": seen_scenes(drawer(4), source, count, novel_sizes=True),
        "held_out_family": seen_scenes(drawer(5), source, count, held_out=True),
    }
    dev = {
        "seen": seen_scenes(drawer(1), source, options.dev),
        "held_out_family": seen_scenes(drawer(6), source, options.dev // 2, held_out=True),
    }
    return {"train": train, "dev": _parts(dev), "test": _parts(test)}


def _parts(parts: dict[str, list[Scene]]) -> list[Scene]:
    """The parts' scenes in order, each labelled with its part."""
    scenes = []
    for part, members in parts.items():
        for scene in members:
            scene.part = part
        scenes += members
    return scenes


def renderer(glyphs: list[Glyph], options: DataOptions, split: int, part: str) -> SceneSampler:
    """What renders one part of split number `split`: backgrounds and last touches from a seed
    of the part's own, so that no part's pixels hang on another's."""
    seed = options.seed * 1000 + 100 + 10 * split + PARTS.index(part)
    return SceneSampler(glyphs, options.rule, seed)


def render(
    glyphs: list[Glyph], options: DataOptions, split: int, scenes: list[Scene]
) -> np.ndarray:
    """(N, 96, 96, 3) uint8: the scenes of split number `split`, each part by its renderer."""
    images = []
    for part, members in groupby(scenes, key=lambda scene: scene.part):
        painter = renderer(glyphs, options, split, part)
        images += [painter.render(scene) for scene in members]
    return np.stack(images)


def package_versions() -> dict[str, str]:
    versions = {}
    for package in DEBIAN_PACKAGES:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True
        )
        versions[package] = result.stdout.strip() or "unknown"
    return versions


def build_captioner_data(out: Path, options: DataOptions = DataOptions()) -> dict:
    """Draws, renders and writes every split; returns the counts written to meta.json."""
    ensure_debian_packages(DEBIAN_PACKAGES)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    glyphs = select_glyphs()
    (out / "glyphs.json").write_text(
        json.dumps([asdict(g) for g in glyphs], ensure_ascii=False, indent=0) + "\n"
    )
    drawn = coverage(glyphs)
    # Training scenes are rendered as they are drawn, while their objects' pictures are
    # cached, into their file in place.
    shape = (options.train, IMAGE_SIZE, IMAGE_SIZE, 3)
    train_images = np.lib.format.open_memmap(out / "train-images.npy", "w+", np.uint8, shape)
    painter = renderer(glyphs, options, 0, "")

    def keep(index: int, scene: Scene) -> None:
        train_images[index] = painter.render(scene)

    splits = draw_splits(glyphs, options, keep)
    train_images.flush()
    for offset, (split, scenes) in enumerate(splits.items()):
        if split != "train":
            np.save(out / f"{split}-images.npy", render(glyphs, options, offset, scenes))
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for scene in scenes:
                f.write(json.dumps(scene.to_dict(), ensure_ascii=False) + "\n")
    meta = {
        "glyphs": len(glyphs),
        "counts": {split: len(scenes) for split, scenes in splits.items()},
        "test_parts": {p: sum(s.part == p for s in splits["test"]) for p in TEST_PARTS},
        "dev_parts": {p: sum(s.part == p for s in splits["dev"]) for p in DEV_PARTS},
        "families": {
            name: {"description": f.description, "glyphs": len(drawn[name]), **f.source()}
            for name, f in FAMILIES.items()
        },
        "held_out_family": HELD_OUT,
        "training_families": list(options.families),
        "styles": STYLES if options.styles else {},
        "seed": options.seed,
        "rule": asdict(options.rule),
        "debian_packages": package_versions(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def read_scenes(data: Path, split: str) -> tuple[list[Scene], np.ndarray]:
    """The scenes of a split and their images (N, H, W, 3) uint8, memory-mapped."""
    data = Path(data)
    with open(data / f"{split}.jsonl", encoding="utf-8") as f:
        scenes = [Scene.from_dict(json.loads(line)) for line in f]
    images = np.load(data / f"{split}-images.npy", mmap_mode="r")
    if len(images) != len(scenes):
        raise ValueError(f"{data}: {len(scenes)} {split} scenes but {len(images)} images")
    return scenes, images


def read_glyphs(data: Path) -> list[Glyph]:
    return [Glyph(**g) for g in json.loads((Path(data) / "glyphs.json").read_text())]
