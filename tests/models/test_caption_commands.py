"""The captioner's torch-side commands with the shipped checkpoint: `caption --engine torch`
(images of any size squeezed to the model's square, n-best with their attention over the grid)
and `evaluate` (each test part's scores and the goals, as JSON or text)."""

from __future__ import annotations

import json
import re
from argparse import Namespace
from dataclasses import fields

import numpy as np
import pytest
from helpers import SHIPPED_CAPTIONER
from PIL import Image

from models import caption_commands
from service.runtime.decoding import DecodingOptions


def _args(**given) -> Namespace:
    defaults = {
        ("n_best" if f.name == "num_hypotheses" else f.name): f.default
        for f in fields(DecodingOptions)
        if f.name != "suppress"
    }
    return Namespace(**{**defaults, "max_length": None, "checkpoint": SHIPPED_CAPTIONER, **given})


@pytest.fixture(scope="module")
def scenes(captioner_data):
    from models.caption_data import read_scenes

    return read_scenes(captioner_data, "test")


def test_caption_gives_each_image_its_n_best_with_attention_over_the_grid(scenes, captioner_data):
    from models.caption_data import read_glyphs
    from models.caption_eval import objects_named
    from models.checkpoint import checkpoint_grammar
    from service.runtime.grammar import Grammar

    described, images = scenes
    first = Image.fromarray(images[0])
    wide = first.resize((150, 100), Image.BILINEAR)  # any size: squeezed to the square
    tokenizer, grid, nbest = caption_commands.caption(_args(beam_size=2, n_best=2), [first, wide])
    assert grid == 12  # 96 pixels over strides 2, 2, 2, 1
    assert [len(n) for n in nbest] == [2, 2]
    best = nbest[0][0]
    glyphs = read_glyphs(captioner_data)
    named, _ = objects_named(tokenizer.decode(best.tokens), described[0], glyphs)
    assert named >= 1  # the shipped captioner sees what is there
    grammar = Grammar.from_manifest(checkpoint_grammar(SHIPPED_CAPTIONER, tokenizer))
    assert all(grammar.accepts(h.tokens) for hypotheses in nbest for h in hypotheses)
    for hypotheses in nbest:
        assert hypotheses[0].score >= hypotheses[1].score
        for h in hypotheses:
            steps = len(h.tokens) + h.finished
            assert h.alignment.shape == (steps, grid * grid)
            np.testing.assert_allclose(h.alignment.sum(axis=1), 1.0, atol=1e-4)


def test_caption_refuses_options_beyond_the_model_s_length():
    from service.runtime.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="max_length"):
        caption_commands.caption(_args(max_length=25), [Image.new("RGB", (96, 96))])


def test_evaluate_reports_every_part_and_the_goals(captioner_data, capsys):
    args = _args(split="test", data=captioner_data, limit=4, json=True)
    assert caption_commands.evaluate(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "torch" and report["split"] == "test"
    assert str(SHIPPED_CAPTIONER) in report["system"]
    assert report["decoding"]["max_length"] == 24  # the model's own
    parts = report["parts"]
    assert parts["all"]["images"] == 4
    assert sum(p["images"] for name, p in parts.items() if name != "all") == 4
    assert 0 <= parts["all"]["exact_match"] <= 1 and parts["all"]["objects"] > 0
    assert report["goals"]
    for goal in report["goals"].values():
        assert goal["met"] == (goal["measured"] >= goal["target"])


def test_evaluate_all_scores_the_test_split_and_refuses_the_translator_s_parts(
    captioner_data, capsys
):
    args = _args(split="all", data=captioner_data, limit=2, json=True)
    assert caption_commands.evaluate(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["split"] == "test" and report["parts"]["all"]["images"] == 2
    for split in ("test-modern", "test-everyday"):
        args = _args(split=split, data=captioner_data, limit=2, json=True)
        with pytest.raises(SystemExit, match=f"no {split} split"):
            caption_commands.evaluate(args)


def test_evaluate_prints_each_part_then_each_goal(captioner_data, capsys):
    args = _args(split="test", data=captioner_data, limit=2, json=False)
    assert caption_commands.evaluate(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("test/all: images 2, exact_match ")
    goals = [line for line in lines if line.startswith("goal ")]
    assert goals and all(
        re.fullmatch(r"goal .+: [\d.]+ \(target [\d.]+\) (met|missed)", g) for g in goals
    )
