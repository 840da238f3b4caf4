"""The captioner's data set: scenes drawn by `models.scenes`, split by rule, written to disk.

<out>/glyphs.json                 the glyphs (code point, English and Spanish names, plural)
<out>/<split>.jsonl               one scene a line (caption, boxes, which words name what, part)
<out>/<split>-images.npy          (N, 96, 96, 3) uint8, the scenes in the same order
<out>/meta.json                   counts, seed, split rule, the artwork families and the
                                  Debian and npm package versions read

Every scene is drawn in one artwork family (`models.artwork`): training and every part but
the last in the training families, chosen at random; the held-out family only in its part.

Splits: `train`; `dev` with the parts `seen` and `held_out_family`; `test` with four parts:
    seen             object sets that occur together in training (in its first SEEN_SOURCE
                     scenes, so that a smaller build has the same dev and test), laid out anew
    novel_pairs      scenes holding a pair of objects never seen together in training
    novel_sizes      object sets of training, at sizes training never sees
    held_out_family  object sets of training, drawn in the family training never sees
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from models.artwork import DEBIAN_PACKAGES, FAMILIES, HELD_OUT, TRAINING_FAMILIES
from models.glyphs import Glyph, select_glyphs
from models.packages import ensure_debian_packages
from models.scenes import KIND_WEIGHTS, KINDS, Scene, SceneSampler, SplitRule

SPLITS = ("train", "dev", "test")
# Seen object sets are taken from the first training scenes only, so that dev and test are the
# same whatever the size of the training split beyond it (CI builds a small one).
SEEN_SOURCE = 5000
TEST_PARTS = ("seen", "novel_pairs", "novel_sizes", "held_out_family")
DEV_PARTS = ("seen", "held_out_family")
OBJECTS = {"single": 1, "same": 1, "pair": 2, "triple": 3}  # distinct glyphs per kind
PLACED = {"single": 1, "same": 2, "pair": 2, "triple": 3}  # objects drawn per kind


@dataclass(frozen=True)
class DataOptions:
    train: int = 100000
    dev: int = 500  # seen; the held-out family's dev part has half as many
    test_per_part: int = 400
    seed: int = 1
    rule: SplitRule = field(default_factory=SplitRule)


class _Drawer:
    """Draws scenes of one split (or test part) with its own seed."""

    def __init__(self, glyphs: list[Glyph], rule: SplitRule, seed: int):
        self.sampler = SceneSampler(glyphs, rule, seed)
        self.rng, self.rule, self.glyph_count = self.sampler.rng, rule, len(glyphs)

    def kind(self, kinds=KINDS, weights=KIND_WEIGHTS) -> str:
        weights = np.asarray(weights, dtype=np.float64)
        return str(self.rng.choice(kinds, p=weights / weights.sum()))

    def glyph_set(self, kind: str) -> list[int]:
        chosen = self.rng.choice(self.glyph_count, size=OBJECTS[kind], replace=False)
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
        """The held-out family, or a training family that can show these glyphs (a family
        without colour only when none of them needs its colour)."""
        if held_out:
            return HELD_OUT
        names = [
            n
            for n in TRAINING_FAMILIES
            if not FAMILIES[n].colourless or self.sampler.colour_free(glyphs)
        ]
        return names[int(self.rng.integers(len(names)))]

    def scene(
        self, kind: str, glyphs: list[int], novel_sizes: bool = False, held_out: bool = False
    ) -> Scene | None:
        family = self.family(glyphs, held_out)
        return self.sampler.draw(kind, glyphs, self.sizes(kind, novel_sizes), family)


def _draw_until(count: int, propose) -> list[Scene]:
    scenes = []
    while len(scenes) < count:
        scene = propose()
        if scene is not None:
            scenes.append(scene)
    return scenes


def training_scenes(drawer: _Drawer, count: int) -> list[Scene]:
    def propose():
        kind = drawer.kind()
        glyphs = drawer.glyph_set(kind)
        return None if drawer.held_out(glyphs) else drawer.scene(kind, glyphs)

    return _draw_until(count, propose)


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


def draw_splits(glyphs: list[Glyph], options: DataOptions) -> dict[str, list[Scene]]:
    """Every split's scenes (test parts in order), each split or part from its own seed."""
    rule, seed = options.rule, options.seed

    def drawer(offset: int) -> _Drawer:
        return _Drawer(glyphs, rule, seed * 1000 + offset)

    train = training_scenes(drawer(0), options.train)
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
    splits = draw_splits(glyphs, options)
    for offset, (split, scenes) in enumerate(splits.items()):
        renderer = SceneSampler(glyphs, options.rule, options.seed * 1000 + 100 + offset)
        images = np.stack([renderer.render(scene) for scene in scenes])
        np.save(out / f"{split}-images.npy", images)
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for scene in scenes:
                f.write(json.dumps(scene.to_dict(), ensure_ascii=False) + "\n")
    meta = {
        "glyphs": len(glyphs),
        "counts": {split: len(scenes) for split, scenes in splits.items()},
        "test_parts": {p: sum(s.part == p for s in splits["test"]) for p in TEST_PARTS},
        "dev_parts": {p: sum(s.part == p for s in splits["dev"]) for p in DEV_PARTS},
        "families": {
            name: {"description": f.description, **f.source()} for name, f in FAMILIES.items()
        },
        "held_out_family": HELD_OUT,
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
