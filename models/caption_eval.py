"""Scoring captions: exact match, BLEU-4 and CIDEr (pycocoevalcap), the objects a caption
names, and where attention looked.

Objects named: an object of the scene counts when the caption names it, by its name or its
plural; the share of the scene's distinct objects counted is the recall of object names (what
a caption gets right about what is there, whatever it says of where). A caption is read as the
objects it names, each the longest name of any object at that place: "a guide dog" names a
guide dog, not a dog.

Localisation: for every generated word that names an object of the scene (a word of its
name, or of its plural for "two ..."), the share of that step's attention mass that falls
inside the object's box (the union of both boxes for a pair of the same kind), beside the
uniform baseline, the box's share of the image. A grid cell's weight counts in proportion to
the part of the cell the box covers. Beside it, the mass on the grid cells the box touches at
all: what the grid's attention can point at.

Relations: of the two-object scenes ("a bus to the left of a tree") whose caption names both
objects, the share that says the scene's relation with the objects in the scene's order
(what a caption gets right about where, given what).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider

from models.glyphs import Glyph
from models.scenes import IMAGE_SIZE, RELATIONS, Scene

# goals: (part, measure) -> the least value; EVERY_PART_GOALS hold on every part
GOALS = {
    ("held_out_family", "objects_named"): 0.80,
    ("held_out_family", "exact_match"): 0.60,
    ("seen", "exact_match"): 0.90,
    ("novel_pairs", "exact_match"): 0.80,
}
EVERY_PART_GOALS = {
    "attention_in_box": 0.50,
    "attention_over_baseline": 4.0,
    "relation_right": 0.95,
}


def text_scores(hypotheses: list[str], references: list[str]) -> dict:
    """Exact-match rate, BLEU-4 and CIDEr (one reference per image), on lower-case words."""
    if not hypotheses:
        return {"images": 0}
    gts = {i: [r] for i, r in enumerate(references)}
    res = {i: [h if h.strip() else "<empty>"] for i, h in enumerate(hypotheses)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    cider, _ = Cider().compute_score(gts, res)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True))
    return {
        "images": len(hypotheses),
        "exact_match": round(exact / len(hypotheses), 4),
        "bleu4": round(100 * bleu[3], 2),
        "cider": round(100 * float(cider), 2),
    }


def objects_named(caption: str, scene: Scene, glyphs: list[Glyph]) -> tuple[int, int]:
    """(distinct objects of the scene that `caption` names, distinct objects)."""
    said = set().union(*mentions(caption.split(), glyphs).values())
    kinds = {o.glyph for o in scene.objects}
    return len(kinds & said), len(kinds)


@lru_cache(maxsize=4)
def _phrases(names: tuple[tuple[str, str], ...]) -> dict[str, dict[tuple[str, ...], set[int]]]:
    """First word -> every name or plural (words) beginning with it -> the glyphs it names;
    `names` the glyphs' (name, plural) in order."""
    phrases: dict[str, dict[tuple[str, ...], set[int]]] = {}
    for glyph, pair in enumerate(names):
        for phrase in pair:
            words = tuple(phrase.split())
            phrases.setdefault(words[0], {}).setdefault(words, set()).add(glyph)
    return phrases


def mentions(words: list[str], glyphs: list[Glyph]) -> dict[int, set[int]]:
    """Word index -> the glyphs named by the object name that word is part of: from the
    first word on, the longest name or plural of any glyph that begins at a word names it,
    and reading goes on after it."""
    phrases = _phrases(tuple((g.name, g.plural) for g in glyphs))
    named, i = {}, 0
    while i < len(words):
        found = phrases.get(words[i], {})
        match = max((p for p in found if tuple(words[i : i + len(p)]) == p), key=len, default=None)
        if match is None:
            i += 1
            continue
        named.update({i + k: found[match] for k in range(len(match))})
        i += len(match)
    return named


def relation_right(caption: str, scene: Scene, glyphs: list[Glyph]) -> bool | None:
    """Whether `caption` says the relation of a two-object scene with its objects in the
    scene's order; None for other scenes and where the caption does not name both objects."""
    if scene.kind != "pair":
        return None
    words = caption.split()
    named = named_objects(words, scene, glyphs)
    first = [min((i for i, o in named.items() if o == [k]), default=None) for k in (0, 1)]
    if None in first:
        return None
    said = [r for r in RELATIONS if f" {r} " in f" {caption} "]
    meant = [r for r in RELATIONS if f" {r} " in f" {scene.caption} "]
    return said == meant and first[0] < first[1]


def cell_coverage(boxes: list[tuple[int, int, int, int]], grid: int) -> np.ndarray:
    """(grid * grid,) share of each grid cell covered by the union of `boxes`."""
    mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    for x0, y0, x1, y1 in boxes:
        mask[y0:y1, x0:x1] = True
    cell = IMAGE_SIZE // grid
    return mask.reshape(grid, cell, grid, cell).mean(axis=(1, 3)).reshape(-1)


def named_objects(words: list[str], scene: Scene, glyphs: list[Glyph]) -> dict[int, list[int]]:
    """Word index -> the scene objects that word names, for generated `words` (`mentions`):
    a name names every object of its glyph; a word of another object's name names none."""
    named = {}
    for index, said in mentions(words, glyphs).items():
        objects = [i for i, o in enumerate(scene.objects) if o.glyph in said]
        if objects:
            named[index] = objects
    return named


def localisation(words, attention: np.ndarray, scene: Scene, glyphs, grid: int) -> list:
    """For every naming word: (mass inside the box, the box's share of the image, mass on
    the grid cells the box touches, those cells' share of the grid, 1 if the word begins the
    name else 0); attention (steps, grid * grid)."""
    rows = []
    named = named_objects(words, scene, glyphs)
    for index, objects in named.items():
        if index >= len(attention):
            continue
        coverage = cell_coverage([scene.objects[o].box for o in objects], grid)
        touched = coverage > 0
        rows.append(
            (
                float(attention[index] @ coverage),
                float(coverage.mean()),
                float(attention[index][touched].sum()),
                float(touched.mean()),
                float(named.get(index - 1) != objects),
            )
        )
    return rows


def part_report(hypotheses, attentions, scenes: list[Scene], glyphs, grid: int) -> dict:
    """Text scores and localisation of one part of a split; a hypothesis' words are its
    tokens (the captioner's vocabulary is one piece a word)."""
    report = text_scores(hypotheses, [s.caption for s in scenes])
    counts = [objects_named(h, s, glyphs) for h, s in zip(hypotheses, scenes, strict=True)]
    if counts:
        named, objects = np.sum(counts, axis=0)
        report["objects_named"] = round(float(named / objects), 4)
        report["objects"] = int(objects)
    relations = [relation_right(h, s, glyphs) for h, s in zip(hypotheses, scenes, strict=True)]
    relations = [r for r in relations if r is not None]
    if relations:
        report["relation_right"] = round(float(np.mean(relations)), 4)
        report["relations"] = len(relations)  # pair scenes whose caption names both objects
    pairs = [
        p
        for h, a, s in zip(hypotheses, attentions, scenes, strict=True)
        for p in localisation(h.split(), a, s, glyphs, grid)
    ]
    if pairs:
        inside, baseline, on_cells, cells, _ = np.mean(pairs, axis=0)
        first = [p[0] for p in pairs if p[4]]
        report["attention_in_box"] = round(float(inside), 4)
        report["uniform_baseline"] = round(float(baseline), 4)
        report["attention_over_baseline"] = round(float(inside / baseline), 2)
        # the grid's own resolution: the mass on the cells the box touches, and their share
        report["attention_on_box_cells"] = round(float(on_cells), 4)
        report["box_cells_share"] = round(float(cells), 4)
        # the word that begins a name; a later word ("chocolate *bar*") follows from it
        report["attention_in_box_first_words"] = round(float(np.mean(first)), 4)
        report["naming_words"] = len(pairs)
    return report


def goals(parts: dict) -> dict:
    """Each goal ("part measure": target, measured, met) that the parts scored can show; the
    attention goals on every part."""
    wanted = dict(GOALS)
    for part in parts:
        wanted |= {(part, measure): target for measure, target in EVERY_PART_GOALS.items()}
    report = {}
    for (part, measure), target in wanted.items():
        if part not in parts:
            continue
        value = parts[part].get(measure)
        report[f"{part} {measure}"] = {
            "target": target,
            "measured": value,
            "met": value is not None and value >= target,
        }
    return report
