"""The captioner's data: glyphs, scenes true to their captions, the split rule, rebuilds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.artwork import FAMILIES, HELD_OUT, TRAINING_FAMILIES, picture
from models.augment import STYLES
from models.caption_data import DataOptions, build_captioner_data, read_glyphs, read_scenes
from models.glyphs import needs_colour, plural, select_glyphs
from models.scenes import IMAGE_SIZE, REGIONS, SplitRule, region_of


@pytest.fixture(scope="module")
def small_data(small_captioner_data):
    return small_captioner_data


def test_a_few_hundred_named_drawable_glyphs():
    glyphs = select_glyphs()
    assert 200 <= len(glyphs) <= 400
    names = [g.name for g in glyphs]
    assert len(set(names)) == len(names)
    assert {"red apple", "bus", "cat face"} & set(names) == {"red apple", "bus"}
    assert all(g.name_es and g.plural for g in glyphs)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("red apple", "red apples"),
        ("bus", "buses"),
        ("mouse", "mice"),
        ("strawberry", "strawberries"),
        ("fallen leaf", "fallen leaves"),
        ("tomato", "tomatoes"),
    ],
)
def test_plurals(name, expected):
    assert plural(name) == expected


def test_regions_refuse_centres_near_a_border():
    third = IMAGE_SIZE / 3
    assert region_of(10, 10) == (0, 0)
    assert region_of(third * 1.5, third * 2.5) == (2, 1)
    assert region_of(third + 1, 50) is None  # too close to the first column border


def test_counts_and_package_versions_are_recorded(small_data):
    out, meta = small_data
    assert meta["counts"] == {"train": 400, "dev": 45, "test": 280}
    parts = {"seen": 70, "novel_pairs": 70, "novel_sizes": 70, "held_out_family": 70}
    assert meta["test_parts"] == parts
    assert meta["dev_parts"] == {"seen": 30, "held_out_family": 15}
    assert set(meta["debian_packages"]) == {
        "fonts-noto-color-emoji",
        "fonts-symbola",
        "unicode-cldr-core",
        "librsvg2-bin",
    }
    assert all(v != "unknown" for v in meta["debian_packages"].values())
    assert meta["held_out_family"] == HELD_OUT and set(meta["families"]) == set(FAMILIES)
    assert meta["training_families"] == list(TRAINING_FAMILIES) and meta["styles"] == STYLES
    for family in meta["families"].values():  # each with its source, version and licence
        assert family["licence"] and family.get("npm_package", family.get("debian_package"))
        assert 299 // 3 <= family["glyphs"] <= 299
        if "npm_package" in family:
            assert family["version"] and family["integrity"].startswith("sha512-")
    assert json.loads((out / "meta.json").read_text()) == json.loads(json.dumps(meta))


def test_colour_names_are_told_apart():
    glyphs = select_glyphs()
    coloured = {glyphs[i].name for i in needs_colour(glyphs)}
    assert {"red apple", "green apple", "blue book"} <= coloured
    assert not {"leafy green", "bus"} & coloured  # "green" as a noun; no colour at all


def _styled(look) -> bool:
    return bool(look.channels or look.posterise or look.flat or look.lines)


def test_families_and_colour_hold_in_every_split(small_data):
    out, _ = small_data
    glyphs = read_glyphs(out)
    coloured = needs_colour(glyphs)
    for split in ("train", "dev", "test"):
        scenes, _ = read_scenes(out, split)
        for scene in scenes:
            held_out = scene.part == "held_out_family"
            assert (scene.family == HELD_OUT) == held_out
            assert held_out or scene.family in TRAINING_FAMILIES
            if FAMILIES[scene.family].colourless:
                assert not coloured & {o.glyph for o in scene.objects}
            for obj in scene.objects:  # the family draws every object of its scene
                glyph = glyphs[obj.glyph]
                assert picture(scene.family, glyph.codepoint, glyph.name) is not None
                assert not (obj.look.grey and obj.glyph in coloured)
                assert not (obj.look.channels or obj.look.lines) or obj.glyph not in coloured
                assert split == "train" or not _styled(obj.look)  # styles: training only
    train, _ = read_scenes(out, "train")
    assert {s.family for s in train} == set(TRAINING_FAMILIES)  # every one, at 400 scenes
    looks = [o.look for s in train for o in s.objects]
    assert any(lk.flip for lk in looks) and any(lk.angle for lk in looks)
    assert any(lk.outline for lk in looks) and any(lk.grey for lk in looks)
    for style in ("channels", "posterise", "flat", "lines"):
        assert any(getattr(lk, style) for lk in looks), style
    assert 0.4 < np.mean([not _styled(lk) for lk in looks]) < 0.75


def _centre(box):
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def test_boxes_lie_inside_the_image_and_never_overlap(small_data):
    out, _ = small_data
    for split in ("train", "test"):
        scenes, images = read_scenes(out, split)
        assert images.shape == (len(scenes), IMAGE_SIZE, IMAGE_SIZE, 3)
        for scene in scenes:
            boxes = [o.box for o in scene.objects]
            for x0, y0, x1, y1 in boxes:
                assert 0 <= x0 < x1 <= IMAGE_SIZE and 0 <= y0 < y1 <= IMAGE_SIZE
            for i, a in enumerate(boxes):
                for b in boxes[i + 1 :]:
                    assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_captions_are_true_to_the_scene(small_data):
    out, _ = small_data
    glyphs = read_glyphs(out)
    scenes, images = read_scenes(out, "train")
    for scene, image in zip(scenes, images, strict=True):
        words = scene.caption.split()
        names = [glyphs[o.glyph].name for o in scene.objects]
        centres = [_centre(o.box) for o in scene.objects]
        if scene.kind == "single":
            row, column = region_of(*centres[0])
            assert (
                scene.caption
                == f"{glyphs[scene.objects[0].glyph].article} {names[0]} " + (REGIONS[row][column])
            )
        elif scene.kind == "same":
            assert names[0] == names[1] and words[0] == "two"
            assert scene.caption.startswith(f"two {glyphs[scene.objects[0].glyph].plural} ")
            row, column = region_of(*np.mean(centres, axis=0))
            assert scene.caption.endswith(REGIONS[row][column])
        else:
            for name in names:
                assert name in scene.caption
            first, second = scene.objects[0].box, scene.objects[1].box
            horizontal = "to the left of" in scene.caption or "left to right" in scene.caption
            assert first[2] <= second[0] if horizontal else first[3] <= second[1]
        for index, objects in scene.name_words.items():  # the naming words are the names
            glyph = glyphs[scene.objects[objects[0]].glyph]
            assert words[index] in glyph.name.split() + glyph.plural.split()
        for obj in scene.objects:  # the glyph is drawn where its box says
            x0, y0, x1, y1 = obj.box
            inside = image[y0:y1, x0:x1].astype(int)
            assert inside.std() > 6  # artwork (least contrast: grey scenes), not background


def test_the_split_rule_holds(small_data):
    out, _ = small_data
    rule, glyphs = SplitRule(), read_glyphs(out)
    train, _ = read_scenes(out, "train")
    test, _ = read_scenes(out, "test")

    def names(scene):
        return sorted({glyphs[o.glyph].name for o in scene.objects})

    def held_out(scene):
        n = names(scene)
        return any(rule.held_out_pair(a, b) for i, a in enumerate(n) for b in n[i + 1 :])

    train_sets = {tuple(names(s)) for s in train}
    band = range(rule.held_out_sizes[0], rule.held_out_sizes[1] + 1)
    assert not any(held_out(s) for s in train)
    assert not any(o.size in band for s in train for o in s.objects)
    parts = {p: [s for s in test if s.part == p] for p in ("seen", "novel_pairs", "novel_sizes")}
    parts["family"] = [s for s in test if s.part == "held_out_family"]
    assert all(held_out(s) for s in parts["novel_pairs"])
    for part in ("seen", "novel_sizes", "family"):
        assert all(tuple(names(s)) in train_sets for s in parts[part])
    assert all(o.size in band for s in parts["novel_sizes"] for o in s.objects)
    assert not any(o.size in band for s in parts["family"] for o in s.objects)


def test_the_same_options_rebuild_the_same_images(small_data, tmp_path):
    out, _ = small_data
    options = DataOptions(train=50, dev=5, test_per_part=5)
    again = tmp_path / "again"
    build_captioner_data(tmp_path / "once", options)
    build_captioner_data(again, options)
    for name in ("train-images.npy", "test-images.npy", "train.jsonl", "test.jsonl", "meta.json"):
        assert (tmp_path / "once" / name).read_bytes() == (again / name).read_bytes(), name
    first, _ = read_scenes(out, "train")
    fewer, _ = read_scenes(again, "train")
    assert [s.caption for s in first[:50]] == [s.caption for s in fewer]  # a prefix of more
