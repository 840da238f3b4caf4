"""The captioner's artwork families and the looks objects are drawn with."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from models.artwork import FAMILIES, RENDER_SIZE, TWEMOJI, NpmPackage, picture
from models.augment import Look, background, styled
from models.scenes import Scene, SceneObject

APPLE = 0x1F34E  # red apple


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


def test_a_package_that_is_not_the_pinned_one_is_refused(tmp_path):
    fake = replace(TWEMOJI, integrity="sha512-" + "A" * 86 + "==")
    path = tmp_path / "twemoji-svg-15.0.0.tgz"
    path.write_bytes(TWEMOJI.tarball().read_bytes())
    with pytest.raises(RuntimeError, match="integrity differs"):
        NpmPackage.tarball(fake, tmp_path)


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


def test_a_scene_record_keeps_its_looks():
    look = Look(flip=True, angle=-7.5, hue=0.01, outline=1, outline_light=False)
    scene = Scene(
        "single", "a red apple in the middle", [SceneObject(0, "red apple", (1, 2, 3, 4), 30, look)]
    )
    again = Scene.from_dict(scene.to_dict())
    assert again.objects[0].look == look and again.objects[0].size == 30


@pytest.mark.parametrize("seed", range(8))
def test_backgrounds_are_images_of_the_asked_size(seed):
    image = background(np.random.default_rng(seed), 96)
    assert image.shape == (96, 96, 3) and image.dtype == np.uint8
