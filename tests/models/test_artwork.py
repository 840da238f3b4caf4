"""The captioner's artwork families and the looks objects are drawn with."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

import models.artwork as artwork
from models.artwork import (
    DEFINING_FAMILIES,
    FAMILIES,
    RENDER_SIZE,
    TWEMOJI,
    NpmPackage,
    _alias_parent,
    keep_pictures,
    picture,
)
from models.augment import CHANNELS, LINE_COLOUR, STYLES, Look, background, styled
from models.glyphs import select_glyphs
from models.scenes import Scene, SceneObject

APPLE = 0x1F34E  # red apple
# A few glyphs each family beyond the defining ones draws, some found by a variant of the name:
# Unicode's "BEAR FACE", "SLICE OF PIZZA", "PERSONAL COMPUTER"; Streamline's "cactus-1".
KNOWN = {
    "noto-v1": [(0x1F408, "cat"), (0x1F68C, "bus"), (0x1F418, "elephant")],
    "fxemoji": [(0x1F355, "pizza"), (0x1F4BB, "laptop"), (0x1F3B8, "guitar")],
    "emojione": [(0x1F408, "cat"), (0x1F981, "lion"), (0x1F33B, "sunflower")],
    "emojione-monotone": [(0x1F408, "cat"), (0x1F68C, "bus"), (0x1F3B8, "guitar")],
    "streamline": [(0x1F335, "cactus"), (0x1F43B, "bear"), (0x1F981, "lion")],
    "symbola": [(0x1F408, "cat"), (0x1F37C, "baby bottle"), (0x1F418, "elephant")],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_draws_an_apple_its_own_way(family):
    image = picture(family, APPLE, "red apple")
    assert image.mode == "RGBA" and max(image.size) == RENDER_SIZE
    alpha = np.asarray(image)[..., 3]
    assert alpha[0].any() or alpha[:, 0].any()  # cropped to the visible pixels
    others = [picture(f, APPLE, "red apple") for f in FAMILIES if f != family]
    pixels = np.asarray(image.resize((32, 32)), np.float32)
    for other in others:  # no two families give the same picture
        assert np.abs(pixels - np.asarray(other.resize((32, 32)), np.float32)).mean() > 2


def test_a_family_without_the_code_point_draws_nothing():
    assert picture("twemoji", 0x10FFFD, "nothing") is None


@pytest.mark.parametrize("family", sorted(KNOWN))
def test_the_other_families_draw_known_glyphs_whole(family):
    assert family not in DEFINING_FAMILIES
    for codepoint, name in KNOWN[family]:
        image = picture(family, codepoint, name)
        assert image is not None, name
        alpha = np.asarray(image)[..., 3] > artwork.MIN_ALPHA
        assert max(image.size) == RENDER_SIZE and alpha.mean() > 0.15, name  # not blank
        assert alpha[0].any() and alpha[-1].any() and alpha[:, 0].any() and alpha[:, -1].any()
        if FAMILIES[family].colourless:  # one dark colour
            rgb = np.asarray(image)[..., :3][alpha].astype(int)
            assert np.percentile(rgb.max(1) - rgb.min(1), 95) < 20 and rgb.mean() < 80, name


@pytest.mark.parametrize(
    ("family", "codepoint", "name"),
    [
        ("streamline", 0x1F368, "ice cream"),  # it has "soft-ice-cream-1", another object
        ("streamline", 0x1F95F, "dumpling"),
        ("symbola", 0x1F96D, "mango"),  # later than the font
        ("fxemoji", 0x1F98A, "fox"),  # it has fox faces ("foxsmiling"), not the fox
    ],
)
def test_a_family_never_draws_another_object_for_one_it_lacks(family, codepoint, name):
    assert picture(family, codepoint, name) is None


def test_the_defining_families_alone_choose_the_objects():
    glyphs = select_glyphs()
    names = {g.name for g in glyphs}
    assert len(glyphs) == 299 and {"dumpling", "mango"} <= names  # drawn by few new families
    for family in DEFINING_FAMILIES:
        assert all(picture(family, g.codepoint, g.name) is not None for g in glyphs), family


def test_a_second_build_draws_no_picture(monkeypatch):
    select_glyphs()  # every family's pictures kept on disk

    def refuse(codepoint, name):
        raise AssertionError(f"drew U+{codepoint:X} again")

    for family in FAMILIES.values():
        monkeypatch.setattr(family, "draw", refuse)
    artwork.picture.cache_clear()
    artwork._stored.cache_clear()
    try:
        assert len(select_glyphs()) == 299
        assert picture("symbola", 0x1F408, "cat") is not None
    finally:
        artwork.picture.cache_clear()


def test_builds_that_keep_a_family_at_once_leave_one_whole_file(tmp_path, monkeypatch):
    # Test workers building captioner data at once each keep every family's pictures: with
    # one shared scratch name, one writer renamed the other's file away under it.
    monkeypatch.setattr(artwork, "NPM_CACHE", tmp_path)
    kept = [(0x1F408, "cat"), (0x1F34E, "red apple"), (0x41, "letter a")]

    def keep(_):
        for _ in range(10):
            keep_pictures("symbola", kept)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(keep, range(8)))
    files = list((tmp_path / "pictures").iterdir())
    assert [f.name for f in files] == [artwork._stored_file("symbola").name]
    with np.load(files[0]) as stored:
        assert sorted(stored.files) == sorted(str(c) for c, _ in kept)
        assert stored[str(0x1F408)].shape == np.asarray(picture("symbola", 0x1F408, "cat")).shape


def test_aliases_lead_to_their_parent_unless_they_transform_it():
    aliases = {"bear": {"parent": "bear-face"}, "teddy": {"parent": "bear"}}
    aliases["flipped"] = {"parent": "bear-face", "hFlip": True}
    assert _alias_parent(aliases, "teddy") == "bear-face"
    assert _alias_parent(aliases, "bear-face") == "bear-face"
    assert _alias_parent(aliases, "flipped") is None
    assert _alias_parent({"a": {"parent": "b"}, "b": {"parent": "a"}}, "a") is None


def test_a_package_that_is_not_the_pinned_one_is_refused(tmp_path):
    fake = replace(TWEMOJI, integrity="sha512-" + "A" * 86 + "==")
    path = tmp_path / "twemoji-svg-15.0.0.tgz"
    path.write_bytes(TWEMOJI.tarball().read_bytes())
    with pytest.raises(RuntimeError, match="integrity differs"):
        NpmPackage.tarball(fake, tmp_path)


def test_threads_that_ask_for_a_missing_tarball_at_once_fetch_it_once_and_whole(
    tmp_path, monkeypatch
):
    # A stand-in `npm` that writes the tarball in two halves with a pause between them and
    # counts its runs: a reader that saw the half-written file, or a second pack that
    # truncated it under a reader, would fail the integrity check or the read.
    whole = tmp_path / "whole.tgz"
    whole.write_bytes(TWEMOJI.tarball().read_bytes())
    runs = tmp_path / "runs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(
        "#!/usr/bin/env python3\n"
        "import sys, time\n"
        f"open({str(runs)!r}, 'a').write('pack\\n')\n"
        f"data = open({str(whole)!r}, 'rb').read()\n"
        "out = open(sys.argv[-1] + '/twemoji-svg-15.0.0.tgz', 'wb')\n"
        "out.write(data[: len(data) // 2]); out.flush(); time.sleep(0.5)\n"
        "out.write(data[len(data) // 2 :]); out.close()\n"
    )
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(max_workers=4) as pool:
        paths = list(pool.map(lambda _: TWEMOJI.tarball(cache), range(4)))
    assert {p.read_bytes() for p in paths} == {whole.read_bytes()}
    assert runs.read_text() == "pack\n"
    assert [p.name for p in cache.iterdir()] == ["twemoji-svg-15.0.0.tgz"]


def test_looks_keep_the_picture_recognisable_and_are_reproducible():
    image = picture("noto", APPLE, "red apple").resize((40, 40))
    plain = np.asarray(image)
    assert styled(image, Look()) is image
    flipped = np.asarray(styled(image, Look(flip=True)))
    assert np.array_equal(flipped, plain[:, ::-1])
    grey = np.asarray(styled(image, Look(grey=True))).astype(int)
    visible = grey[..., 3] > 0
    assert np.abs(grey[..., 0] - grey[..., 1])[visible].max() <= 1
    turned = styled(image, Look(angle=15.0))
    assert turned.width > 40 and turned.height > 40  # a turned square is wider
    outlined = styled(image, Look(outline=2))
    assert outlined.width >= 43 and np.asarray(outlined)[..., 3].astype(bool).sum() > visible.sum()
    rng = np.random.default_rng(3)
    look = Look.sample(rng, colour_free=True)
    assert np.array_equal(np.asarray(styled(image, look)), np.asarray(styled(image, look)))


def _visible(image):
    return np.asarray(image)[..., 3] > 127


def test_styles_keep_the_shape_and_change_the_drawing():
    image = picture("fluent-3d", 0x1F408, "cat").resize((36, 34))
    pixels = np.asarray(image).astype(int)
    shape = _visible(image)
    swapped = np.asarray(styled(image, Look(channels=3))).astype(int)
    assert np.array_equal(swapped[..., :3], pixels[..., list(CHANNELS[3])])
    for look in (Look(channels=3), Look(posterise=2), Look(flat=5)):
        drawn = styled(image, look)
        assert drawn.size == image.size and np.array_equal(_visible(drawn), shape), look
    posterised = np.asarray(styled(image, Look(posterise=2)))[..., :3]
    assert not (posterised & 0b00111111).any()
    flat = np.asarray(styled(image, Look(flat=5)))
    assert len(np.unique(flat[shape][:, :3], axis=0)) <= 5 < len(np.unique(pixels[shape], axis=0))
    filled = np.asarray(styled(image, Look(lines=1)))
    assert np.array_equal(filled[..., 3] > 0, shape)  # the whole shape, white inside its lines
    assert {tuple(c) for c in filled[shape][:, :3]} == {LINE_COLOUR, (255, 255, 255)}
    bare = np.asarray(styled(image, Look(lines=2)))
    lines = bare[..., 3] > 0
    assert not (lines & ~shape).any() and shape.sum() // 5 < lines.sum() < shape.sum()
    assert {tuple(c) for c in bare[lines][:, :3]} == {LINE_COLOUR}


def test_styles_are_drawn_at_their_rates_and_never_blur_a_colour():
    rng = np.random.default_rng(5)
    looks = [Look.sample(rng, colour_free=True, styles=True) for _ in range(4000)]
    own = np.mean([not (lk.channels or lk.posterise or lk.flat or lk.lines) for lk in looks])
    assert abs(own - np.prod([1 - rate for rate in STYLES.values()])) < 0.03  # about half
    assert abs(np.mean([lk.lines > 0 for lk in looks]) - STYLES["lines"]) < 0.02
    coloured = [Look.sample(rng, colour_free=False, styles=True) for _ in range(500)]
    assert not any(lk.channels or lk.lines or lk.grey for lk in coloured)
    assert any(lk.flat for lk in coloured) and any(lk.posterise for lk in coloured)


def test_styles_are_drawn_after_the_rest_of_a_look():
    with_styles, without = np.random.default_rng(9), np.random.default_rng(9)
    for _ in range(200):
        styled_look = Look.sample(with_styles, colour_free=True, styles=True)
        plain = Look.sample(without, colour_free=True)
        assert plain.channels == plain.posterise == plain.flat == plain.lines == 0
        assert styled_look.flip == plain.flip and styled_look.angle == plain.angle
        assert styled_look.outline == plain.outline and styled_look.grey == plain.grey
        without.bit_generator.state = with_styles.bit_generator.state  # styles drawn last


def test_a_scene_record_keeps_its_looks():
    look = Look(flip=True, angle=-7.5, hue=0.41, outline=1, outline_light=False, channels=2)
    looks = [look, Look(posterise=3, flat=6), Look(lines=2, angle=4.0)]
    objects = [SceneObject(0, "cat", (1, 2, 3, 4), 30, lk) for lk in looks]
    scene = Scene("triple", "a cat and a cat and a cat from left to right", objects)
    again = Scene.from_dict(json.loads(json.dumps(scene.to_dict())))
    assert [o.look for o in again.objects] == looks and again.objects[0].size == 30
    image = picture("emojione", 0x1F408, "cat").resize((30, 30))
    for lk, obj in zip(looks, again.objects, strict=True):
        assert np.array_equal(np.asarray(styled(image, lk)), np.asarray(styled(image, obj.look)))
    old = scene.to_dict()
    for name in ("channels", "posterise", "flat", "lines"):  # a record of older looks
        for o in old["objects"]:
            del o["look"][name]
    assert Scene.from_dict(old).objects[1].look == Look()
    assert Look.from_list([True, 3.0]) == Look(flip=True, angle=3.0)


@pytest.mark.parametrize("seed", range(8))
def test_backgrounds_are_images_of_the_asked_size(seed):
    image = background(np.random.default_rng(seed), 96)
    assert image.shape == (96, 96, 3) and image.dtype == np.uint8
