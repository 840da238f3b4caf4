"""The captioner's data options: the training families and styles, and what they leave alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnserve.cli import build_parser
from models.artwork import TRAINING_FAMILIES
from models.caption_data import DataOptions, build_captioner_data, read_scenes

BASE = ("noto", "fluent-flat", "fluent-color", "fluent-high-contrast", "fluent-3d")


def _held_out_family(out, split) -> tuple[list[str], np.ndarray]:
    """The held-out family's part of a split: its jsonl lines and its images."""
    lines = (out / f"{split}.jsonl").read_text().splitlines()
    chosen = [i for i, line in enumerate(lines) if json.loads(line)["part"] == "held_out_family"]
    images = np.load(out / f"{split}-images.npy")
    return [lines[i] for i in chosen], images[chosen]


def test_the_held_out_family_parts_hang_on_no_family_or_style(tmp_path):
    tiny = {"train": 40, "dev": 8, "test_per_part": 6}
    builds = {
        "all": DataOptions(**tiny),
        "base": DataOptions(**tiny, families=BASE, styles=False),
        "plain": DataOptions(**tiny, styles=False),
    }
    for name, options in builds.items():
        build_captioner_data(tmp_path / name, options)
    for split in ("dev", "test"):
        lines, images = _held_out_family(tmp_path / "all", split)
        assert len(lines) == {"dev": 4, "test": 6}[split]
        for name in ("base", "plain"):
            other_lines, other_images = _held_out_family(tmp_path / name, split)
            assert other_lines == lines and np.array_equal(other_images, images), (name, split)
    trains = {name: read_scenes(tmp_path / name, "train")[0] for name in builds}
    assert {s.family for s in trains["base"]} <= set(BASE)
    assert [s.kind for s in trains["base"]] == [s.kind for s in trains["all"]]
    assert [s.family for s in trains["base"]] != [s.family for s in trains["all"]]
    assert any(o.look.flat or o.look.lines for s in trains["all"] for o in s.objects)
    assert not any(o.look.flat or o.look.lines for s in trains["plain"] for o in s.objects)


@pytest.mark.parametrize(
    ("families", "message"),
    [
        (("noto", "bogus"), "unknown bogus"),
        (("noto", "twemoji"), "twemoji is held out of training"),
        (("noto", "noto"), "named twice"),
        (("symbola", "streamline"), "none draws every object in colour"),
        ((), "none draws every object in colour"),
    ],
)
def test_training_families_are_checked(families, message):
    with pytest.raises(ValueError, match=message):
        DataOptions(families=families)


def test_the_data_command_reads_families_and_styles(capsys):
    parser = build_parser()
    args = parser.parse_args(["data", "captioner", "--families", "noto,fluent-3d", "--no-styles"])
    assert args.families == ("noto", "fluent-3d") and args.styles is False
    args = parser.parse_args(["data", "captioner"])
    assert args.families == TRAINING_FAMILIES and args.styles is True
    with pytest.raises(SystemExit):
        parser.parse_args(["data", "captioner", "--families", "noto,twemoji,bogus"])
    error = capsys.readouterr().err
    assert "unknown bogus" in error and "twemoji is held out of training" in error
